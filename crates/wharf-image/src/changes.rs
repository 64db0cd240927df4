//! Dockerfile instructions applied to an image's config, as `docker import --change` and
//! `docker commit --change` take them: CMD, ENTRYPOINT, ENV, EXPOSE, LABEL, USER, WORKDIR,
//! VOLUME, STOPSIGNAL. Exec form (a JSON array) and shell form (`/bin/sh -c`) both work.

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};

/// Apply one instruction to `config` (the image config's `config` object).
pub fn apply(config: &mut Map<String, Value>, change: &str) -> Result<()> {
    let bad = |why: &str| Error::Invalid(format!("invalid --change {change:?}: {why}"));
    let change = change.trim();
    let (word, rest) = change
        .split_once(char::is_whitespace)
        .map(|(w, r)| (w, r.trim()))
        .unwrap_or((change, ""));
    if rest.is_empty() {
        return Err(bad("no value"));
    }
    // Exec form, else the shell form docker builds.
    let command = || -> Value {
        match serde_json::from_str::<Vec<String>>(rest) {
            Ok(v) => json!(v),
            Err(_) => json!(["/bin/sh", "-c", rest]),
        }
    };
    // `K=V K2="V 2"` or `K V`.
    let pairs = |allow_space_form: bool| -> Result<Vec<(String, String)>> {
        if !rest.contains('=') {
            return match (allow_space_form, rest.split_once(char::is_whitespace)) {
                (true, Some((k, v))) => Ok(vec![(k.to_string(), v.trim().to_string())]),
                _ => Err(bad("use KEY=VALUE")),
            };
        }
        split_words(rest)
            .into_iter()
            .map(|w| {
                w.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(|| bad("use KEY=VALUE"))
            })
            .collect()
    };
    match word.to_ascii_uppercase().as_str() {
        "CMD" => {
            config.insert("Cmd".into(), command());
        }
        "ENTRYPOINT" => {
            config.insert("Entrypoint".into(), command());
        }
        "ENV" => {
            let env = config
                .entry("Env")
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .ok_or_else(|| bad("the config's Env is not a list"))?;
            for (k, v) in pairs(true)? {
                env.retain(|e| e.as_str().and_then(|e| e.split_once('=')).map(|x| x.0) != Some(&k));
                env.push(json!(format!("{k}={v}")));
            }
        }
        "LABEL" => {
            let labels = config
                .entry("Labels")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .ok_or_else(|| bad("the config's Labels is not a map"))?;
            for (k, v) in pairs(false)? {
                labels.insert(k, json!(v));
            }
        }
        "EXPOSE" => {
            let ports = config
                .entry("ExposedPorts")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .ok_or_else(|| bad("the config's ExposedPorts is not a map"))?;
            for p in rest.split_whitespace() {
                let (n, proto) = p.split_once('/').unwrap_or((p, "tcp"));
                let proto = proto.to_ascii_lowercase();
                if n.parse::<u16>().map_or(true, |n| n == 0)
                    || !matches!(proto.as_str(), "tcp" | "udp" | "sctp")
                {
                    return Err(bad(&format!("{p:?} is not PORT[/tcp|udp|sctp]")));
                }
                ports.insert(format!("{n}/{proto}"), json!({}));
            }
        }
        "VOLUME" => {
            let paths: Vec<String> = serde_json::from_str(rest)
                .unwrap_or_else(|_| rest.split_whitespace().map(String::from).collect());
            let volumes = config
                .entry("Volumes")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .ok_or_else(|| bad("the config's Volumes is not a map"))?;
            for p in paths {
                volumes.insert(p, json!({}));
            }
        }
        "USER" => {
            config.insert("User".into(), json!(rest));
        }
        "WORKDIR" => {
            config.insert("WorkingDir".into(), json!(rest));
        }
        "STOPSIGNAL" => {
            config.insert("StopSignal".into(), json!(rest));
        }
        other => {
            return Err(bad(&format!(
                "{other} is not one of CMD, ENTRYPOINT, ENV, EXPOSE, LABEL, USER, WORKDIR, \
                 VOLUME, STOPSIGNAL"
            )));
        }
    }
    Ok(())
}

/// Words separated by spaces, double quotes grouping (and removed).
fn split_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(changes: &[&str]) -> Value {
        let mut c = Map::new();
        c.insert("Env".into(), json!(["PATH=/bin", "A=0"]));
        for ch in changes {
            apply(&mut c, ch).unwrap_or_else(|e| panic!("{ch}: {e}"));
        }
        Value::Object(c)
    }

    #[test]
    fn dockerfile_instructions_change_the_config() {
        let c = applied(&[
            "CMD [\"sleep\", \"10\"]",
            "ENTRYPOINT echo hi",
            "ENV A=1 B=\"two words\"",
            "ENV C three",
            "EXPOSE 80 53/udp",
            "LABEL tier=web",
            "USER 1000:1000",
            "WORKDIR /srv",
            "VOLUME [\"/data\"]",
            "STOPSIGNAL SIGRTMIN+3",
        ]);
        assert_eq!(c["Cmd"], json!(["sleep", "10"]));
        assert_eq!(c["Entrypoint"], json!(["/bin/sh", "-c", "echo hi"]));
        assert_eq!(
            c["Env"],
            json!(["PATH=/bin", "A=1", "B=two words", "C=three"])
        );
        assert_eq!(c["ExposedPorts"], json!({"80/tcp": {}, "53/udp": {}}));
        assert_eq!(c["Labels"]["tier"], "web");
        assert_eq!(c["User"], "1000:1000");
        assert_eq!(c["WorkingDir"], "/srv");
        assert_eq!(c["Volumes"], json!({"/data": {}}));
        assert_eq!(c["StopSignal"], "SIGRTMIN+3");
    }

    #[test]
    fn bad_instructions_are_named() {
        let mut c = Map::new();
        for (ch, why) in [
            ("RUN make", "RUN is not one of"),
            ("EXPOSE http", "\"http\" is not PORT"),
            ("LABEL lonely", "use KEY=VALUE"),
            ("CMD", "no value"),
        ] {
            let e = apply(&mut c, ch).unwrap_err().to_string();
            assert!(e.contains(ch) && e.contains(why), "{ch}: {e}");
        }
    }
}
