//! `wharf build`: a two-stage Dockerfile with the common instructions becomes an image
//! that runs as written; a rebuild comes from the cache; a failing step fails with its
//! code and leaves no container, image name or mount; a path out of the context is
//! refused naming it.

mod engine_support;

use std::path::Path;

use engine_support::{Wharf, busybox};

/// `wharf image inspect NAME`: the one JSON object.
fn image(w: &Wharf, name: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(&w.ok(&["image", "inspect", name])).unwrap();
    v[0].clone()
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A test's engine with the fixture busybox pulled, and a build context holding
/// `dockerfile` as its Dockerfile.
fn world(name: &str, dockerfile: &str) -> (Wharf, std::path::PathBuf) {
    let w = Wharf::new(name);
    w.pull_busybox();
    let ctx = w.path("ctx");
    write(&ctx, "Dockerfile", dockerfile);
    (w, ctx)
}

/// Start `wharf ARGS` (a build), wait until its step's container runs, send it SIGINT
/// (Ctrl-C); how it ended and how long it took from the signal.
fn interrupt_build(
    w: &Wharf,
    args: &[&str],
    what: &str,
) -> (std::process::ExitStatus, std::time::Duration) {
    let mut child = w
        .cmd(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        engine_support::wait_until(std::time::Duration::from_secs(20), || {
            w.ok(&["ps", "--format", "{{.Status}}"]).contains("Up")
        }),
        "{what}: the step never ran"
    );
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t = std::time::Instant::now();
    let status = child.wait().unwrap();
    (status, t.elapsed())
}

#[test]
fn a_dockerfile_builds_runs_caches_and_fails_cleanly() {
    let (w, ctx) = world(
        "build",
        &format!(
            r#"# a comment
ARG BASE={}
FROM $BASE AS base
ENV GREETING=hello DIR=/app
WORKDIR $DIR
COPY hello.txt ./
COPY sub/ ./sub/
RUN echo "$GREETING from run, arg=$FLAVOUR" > run.txt && \
    chmod 600 run.txt
ARG FLAVOUR=plain
RUN <<EOF
echo "flavour $FLAVOUR" > flavour.txt
EOF
COPY <<EOF /app/note.txt
a note for $GREETING
EOF
LABEL org.example.kind="a test" other=yes
ADD arch.tar /unpacked/
HEALTHCHECK --interval=5s --retries=2 CMD ["true"]
VOLUME /data
STOPSIGNAL SIGINT
EXPOSE 8080 53/udp
USER 1000:1000
CMD ["cat", "/app/run.txt"]

FROM $BASE
COPY --from=base /app/run.txt /app/flavour.txt /out/
COPY --chmod=700 --chown=7:8 hello.txt /out/hello
COPY --chown=nobody hello.txt /out/nobodys
WORKDIR /made/here
RUN pwd > where.txt
ENTRYPOINT ["cat"]
CMD ["/out/run.txt"]
"#,
            busybox()
        ),
    );
    write(&ctx, "hello.txt", "hello file\n");
    write(&ctx, "sub/a.txt", "a\n");
    write(&ctx, "sub/secret.key", "not for the image\n");
    write(&ctx, ".dockerignore", "**/*.key\n");
    // A local archive, which ADD extracts.
    write(&ctx, "arch/inside.txt", "from the archive\n");
    let tar = std::process::Command::new("tar")
        .arg("-C")
        .arg(ctx.join("arch"))
        .args(["-cf"])
        .arg(ctx.join("arch.tar"))
        .arg("inside.txt")
        .status()
        .unwrap();
    assert!(tar.success());

    let out = w.ok(&[
        "build",
        "-t",
        "built:1",
        "--build-arg",
        "FLAVOUR=spicy",
        ctx.to_str().unwrap(),
    ]);
    assert!(out.contains("Step 1/"), "{out}");
    assert!(out.contains("Successfully tagged"), "{out}");
    assert_eq!(w.ok(&["run", "--rm", "built:1"]), "hello from run, arg=\n");
    assert_eq!(
        w.ok(&["run", "--rm", "built:1", "/out/flavour.txt"]),
        "flavour spicy\n"
    );
    assert_eq!(
        w.ok(&["run", "--rm", "built:1", "/made/here/where.txt"]),
        "/made/here\n"
    );
    let hello = w.ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "stat",
        "built:1",
        "-c",
        "%a %u %g",
        "/out/hello",
    ]);
    assert_eq!(hello, "700 7 8\n");
    let nobodys = w.ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "stat",
        "built:1",
        "-c",
        "%u %g",
        "/out/nobodys",
    ]);
    assert_eq!(nobodys, "65534 65534\n");

    // The first stage, by --target: its config as the instructions left it.
    w.ok(&[
        "build",
        "-q",
        "-t",
        "base:1",
        "--target",
        "base",
        ctx.to_str().unwrap(),
    ]);
    let img = &image(&w, "base:1");
    let cfg = &img["Config"];
    let env = cfg["Env"].to_string();
    assert!(
        env.contains("GREETING=hello") && env.contains("DIR=/app"),
        "{env}"
    );
    assert_eq!(cfg["WorkingDir"], "/app");
    assert_eq!(cfg["User"], "1000:1000");
    assert_eq!(cfg["Labels"]["org.example.kind"], "a test");
    assert!(cfg["ExposedPorts"]["8080/tcp"].is_object(), "{cfg}");
    assert!(cfg["ExposedPorts"]["53/udp"].is_object(), "{cfg}");
    assert_eq!(
        cfg["Healthcheck"]["Test"],
        serde_json::json!(["CMD", "true"])
    );
    assert_eq!(cfg["Healthcheck"]["Interval"], 5_000_000_000u64);
    assert_eq!(cfg["Healthcheck"]["Retries"], 2);
    assert!(cfg["Volumes"]["/data"].is_object(), "{cfg}");
    assert_eq!(cfg["StopSignal"], "SIGINT");
    // A container of the image runs its HEALTHCHECK, as docker's do.
    w.ok(&["run", "-d", "--name", "checked", "base:1", "sleep", "60"]);
    assert!(
        engine_support::wait_until(std::time::Duration::from_secs(20), || {
            w.inspect("checked")["State"]["Health"]["Status"] == "healthy"
        }),
        "{}",
        w.inspect("checked")["State"]
    );
    w.ok(&["rm", "-f", "checked"]);
    let cat_as_root = |path: &str| w.ok(&["run", "--rm", "--user", "0", "base:1", "cat", path]);
    assert_eq!(cat_as_root("/unpacked/inside.txt"), "from the archive\n");
    let listing = w.ok(&["run", "--rm", "--user", "0", "base:1", "ls", "-R", "/app"]);
    assert!(
        listing.contains("a.txt") && !listing.contains("secret.key"),
        "{listing}"
    );
    assert!(listing.contains("hello.txt"), "{listing}");
    assert_eq!(cat_as_root("/app/note.txt"), "a note for hello\n");

    // Again: every step from the cache, the same image.
    let id1 = image(&w, "built:1")["Id"].as_str().unwrap().to_string();
    let again = w.ok(&[
        "build",
        "-t",
        "built:2",
        "--build-arg",
        "FLAVOUR=spicy",
        ctx.to_str().unwrap(),
    ]);
    assert!(again.contains("Using cache"), "{again}");
    assert_eq!(image(&w, "built:2")["Id"], id1.as_str());
    // A changed file is copied again.
    write(&ctx, "hello.txt", "changed\n");
    w.ok(&[
        "build",
        "-q",
        "-t",
        "built:3",
        "--build-arg",
        "FLAVOUR=spicy",
        ctx.to_str().unwrap(),
    ]);
    assert_ne!(image(&w, "built:3")["Id"], id1.as_str());

    // system df counts the cache; pruned, the next build runs every step again.
    let cache_entries = |w: &Wharf| -> usize {
        let df = w.ok(&["system", "df"]);
        let line = df
            .lines()
            .find(|l| l.starts_with("Build Cache"))
            .unwrap_or_else(|| panic!("{df}"))
            .to_string();
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    assert!(cache_entries(&w) > 10);
    let pruned = w.ok(&["builder", "prune", "-f"]);
    assert_eq!(cache_entries(&w), 0);
    assert!(pruned.contains("Total reclaimed space"), "{pruned}");
    let rebuilt = w.ok(&[
        "build",
        "-t",
        "built:4",
        "--build-arg",
        "FLAVOUR=spicy",
        ctx.to_str().unwrap(),
    ]);
    assert!(!rebuilt.contains("Using cache"), "{rebuilt}");

    // FROM scratch: an image of only what is copied into it.
    let scratch = w.path("scratch");
    write(
        &scratch,
        "Dockerfile",
        &format!(
            "FROM scratch\nCOPY --from={} /bin/busybox /busybox\nCOPY hello.txt /\n\
             CMD [\"/busybox\", \"cat\", \"/hello.txt\"]\n",
            busybox()
        ),
    );
    write(&scratch, "hello.txt", "from scratch\n");
    w.ok(&["build", "-q", "-t", "scratch:1", scratch.to_str().unwrap()]);
    assert_eq!(w.ok(&["run", "--rm", "scratch:1"]), "from scratch\n");
    assert_eq!(
        image(&w, "scratch:1")["RootFS"]["Layers"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // A failing step: its code, its output shown, no image named, nothing left running.
    let bad = w.path("bad");
    write(
        &bad,
        "Dockerfile",
        &format!("FROM {}\nRUN echo about to fail && exit 3\n", busybox()),
    );
    let failed = w.fails(3, &["build", "-t", "never:1", bad.to_str().unwrap()]);
    assert!(failed.contains("returned a non-zero code: 3"), "{failed}");
    assert!(w.run(&["image", "inspect", "never:1"]).code != 0);
    assert_eq!(w.ok(&["ps", "-aq"]), "");

    // A context escape and a syntax error, named.
    write(
        &bad,
        "Dockerfile",
        &format!("FROM {}\nCOPY ../outside /x\n", busybox()),
    );
    let out = w.run(&["build", bad.to_str().unwrap()]);
    assert!(out.code != 0 && out.stderr.contains("outside"), "{out:?}");
    write(
        &bad,
        "Dockerfile",
        &format!("FROM {}\nFROBNICATE x\n", busybox()),
    );
    let out = w.run(&["build", bad.to_str().unwrap()]);
    assert!(
        out.code != 0 && out.stderr.contains("Dockerfile:2"),
        "{out:?}"
    );
    assert_eq!(w.ok(&["ps", "-aq"]), "");
    w.assert_clean();
}

/// Ctrl-C during a RUN step: the step's process is killed, its container and pod removed,
/// the build exits 130 and names no image; again and again, nothing piles up.
#[test]
fn an_interrupted_build_leaves_nothing_behind() {
    let (w, ctx) = world(
        "build-int",
        &format!("FROM {}\nRUN echo started && sleep 60\n", busybox()),
    );
    for round in 0..3 {
        let (status, took) = interrupt_build(
            &w,
            &["build", "-t", "never:1", ctx.to_str().unwrap()],
            &format!("round {round}"),
        );
        assert!(took < std::time::Duration::from_secs(10), "round {round}");
        assert_eq!(status.code(), Some(130), "round {round}");
        assert_eq!(w.ok(&["ps", "-aq"]), "", "round {round}");
        assert_eq!(w.ok(&["pod", "ls", "-q"]), "", "round {round}");
        assert!(w.run(&["image", "inspect", "never:1"]).code != 0);
    }
    w.assert_clean();
}

/// With SOURCE_DATE_EPOCH, two builds of the same context, a second apart and without the
/// cache, give the same image: times in the config, the history and the layers are the
/// epoch (later ones clamped). Without it they differ.
#[test]
fn source_date_epoch_makes_builds_reproducible() {
    let (mut w, ctx) = world(
        "build-sde",
        &format!(
            "FROM {}\nWORKDIR /app\nCOPY f.txt ./\nRUN echo made > made.txt && mkdir -p d/e\nENV X=1\n",
            busybox()
        ),
    );
    write(&ctx, "f.txt", "file\n");
    let id = |w: &Wharf| {
        w.ok(&["build", "-q", "--no-cache", ctx.to_str().unwrap()])
            .trim()
            .to_string()
    };
    let plain = id(&w);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_ne!(id(&w), plain, "without SOURCE_DATE_EPOCH the times differ");
    w.set_var("SOURCE_DATE_EPOCH", "1700000000");
    let first = id(&w);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(id(&w), first);
    let created = image(&w, &first)["Created"].to_string();
    assert!(created.contains("2023-11-14T22:13:20"), "{created}");
}

/// Fifty builds, every fifth failing and every fifth interrupted, with secrets, cache and
/// bind mounts and COPYs: nothing of them is left (no container, pod, mount, cgroup,
/// process, temp file or context, and no secret in the state root); `image prune` keeps
/// the build cache, which a rebuild then uses; `builder prune` and removing the images
/// take every snapshot and blob.
#[test]
fn fifty_builds_failing_and_interrupted_leave_nothing() {
    let (w, ctx) = world(
        "build-fifty",
        &format!(
            "FROM {}\nCOPY data.txt /data.txt\nARG N\n\
             RUN --mount=type=secret,id=tok --mount=type=cache,target=/c \
               --mount=type=bind,source=data.txt,target=/b \
               cat /run/secrets/tok /b > /dev/null && echo $N >> /c/log && echo $N > /n\n\
             RUN if [ $((N % 5)) = 1 ]; then exit 7; fi\n\
             RUN if [ $((N % 5)) = 2 ]; then echo sleeping; sleep 60; fi\n\
             COPY data.txt /again.txt\n",
            busybox()
        ),
    );
    write(&ctx, "data.txt", "data\n");
    let secret = w.path("secret.txt");
    std::fs::write(&secret, "fifty-builds-secret").unwrap();
    let secret_arg = format!("id=tok,src={}", secret.display());
    let (mut ok, mut failed, mut interrupted) = (0, 0, 0);
    for n in 0..50 {
        let tag = format!("fifty:{n}");
        let arg = format!("N={n}");
        let args = [
            "build",
            "-t",
            &tag,
            "--build-arg",
            &arg,
            "--secret",
            &secret_arg,
            ctx.to_str().unwrap(),
        ];
        match n % 5 {
            1 => {
                let err = w.fails(7, &args);
                assert!(err.contains("returned a non-zero code: 7"), "{err}");
                failed += 1;
            }
            2 => {
                let (status, _) = interrupt_build(&w, &args, &format!("build {n}"));
                assert_eq!(status.code(), Some(130), "build {n}");
                interrupted += 1;
            }
            _ => {
                w.ok(&args);
                ok += 1;
            }
        }
    }
    assert_eq!((ok, failed, interrupted), (30, 10, 10));
    w.assert_clean();
    // No build context, secret copy, download or spool left in the state root, and the
    // secret nowhere in it (cache mounts included).
    let leftovers: Vec<String> = engine_support::entries(&w.root())
        .into_iter()
        .filter(|e| e.starts_with("build-") && e != "build-cache" && e != "build-cache-mounts")
        .chain(
            engine_support::entries(&w.root())
                .into_iter()
                .filter(|e| e.starts_with(".tmp")),
        )
        .collect();
    assert!(
        leftovers.is_empty(),
        "left in the state root: {leftovers:?}"
    );
    let grep = std::process::Command::new("grep")
        .args(["-r", "-l", "fifty-builds-secret"])
        .arg(w.root())
        .output()
        .unwrap();
    assert!(
        grep.stdout.is_empty(),
        "the secret is in {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    // The cache mount saw every build that got that far.
    let hist = w.ok(&["run", "--rm", "fifty:0", "cat", "/n"]);
    assert_eq!(hist, "0\n");

    // image prune keeps the build cache: a rebuild of a finished one is all cached.
    w.ok(&["image", "prune", "-f"]);
    let again = w.ok(&[
        "build",
        "-t",
        "fifty:again",
        "--build-arg",
        "N=0",
        "--secret",
        &secret_arg,
        ctx.to_str().unwrap(),
    ]);
    assert_eq!(
        again.matches("Using cache").count(),
        6,
        "every step after FROM comes from the cache: {again}"
    );
    // builder prune, then the images: no snapshot, blob or cache mount is left.
    w.ok(&["builder", "prune", "-f"]);
    let tags: Vec<String> = w
        .ok(&["images", "--format", "{{.Repository}}:{{.Tag}}"])
        .lines()
        .map(str::to_string)
        .collect();
    for t in &tags {
        w.ok(&["rmi", t]);
    }
    w.ok(&["image", "prune", "-a", "-f"]);
    assert_eq!(w.ok(&["images", "-a", "-q"]), "");
    let snapshots = engine_support::entries(&w.root().join("image/snapshots"))
        .into_iter()
        .filter(|e| e.parse::<u64>().is_ok())
        .collect::<Vec<_>>();
    assert!(snapshots.is_empty(), "snapshots left: {snapshots:?}");
    let blobs = engine_support::entries(&w.root().join("image/content/blobs/sha256"));
    assert!(blobs.is_empty(), "blobs left: {blobs:?}");
    assert!(!w.root().join("build-cache-mounts").exists());
    w.assert_clean();
}

/// Stages that do not use one another build at once (two of 2 s each take well under 4 s
/// together), and a stage the target does not use is not built at all (it would fail).
#[test]
fn independent_stages_build_in_parallel_and_unused_ones_not_at_all() {
    let (w, ctx) = world(
        "build-par",
        &format!(
            "FROM {b} AS one\nRUN sleep 2 && echo one > /one\n\
             FROM {b} AS two\nRUN sleep 2 && echo two > /two\n\
             FROM {b} AS broken\nRUN exit 9\n\
             FROM {b}\nCOPY --from=one /one /one\nCOPY --from=two /two /two\n\
             CMD [\"cat\", \"/one\", \"/two\"]\n",
            b = busybox()
        ),
    );
    let t = std::time::Instant::now();
    let out = w.ok(&["build", "-t", "par:1", ctx.to_str().unwrap()]);
    let took = t.elapsed();
    assert!(
        took < std::time::Duration::from_millis(3800),
        "two 2 s stages took {took:?}: not built at once\n{out}"
    );
    assert!(!out.contains("exit 9"), "the unused stage was built: {out}");
    assert_eq!(w.ok(&["run", "--rm", "par:1"]), "one\ntwo\n");
    // The steps are numbered by their place in the file (the unused stage's left out).
    assert!(out.contains("Step 1/8 : FROM"), "{out}");
    assert!(out.contains("Step 8/8 : CMD"), "{out}");
    w.ok(&["rmi", "par:1"]);
    w.ok(&["builder", "prune", "-f"]);
    w.assert_clean();
}

/// Bad input found before anything runs: a base image that cannot be pulled in a later
/// stage fails the build before the first stage's RUN (which would leave a mark), naming
/// the file, the line and the image; an unknown --target names the stage. A build-arg no
/// ARG takes is warned of; `RUN --network=none` has no network but loopback.
#[test]
fn bad_input_fails_before_anything_runs() {
    let (w, ctx) = world(
        "build-bad",
        &format!(
            "FROM {b} AS first\nRUN touch /ran\nFROM 127.0.0.1:9/nothing/here:1\nCOPY --from=first /ran /ran\n",
            b = busybox()
        ),
    );
    let err = w.fails(1, &["build", "-t", "bad:1", ctx.to_str().unwrap()]);
    assert!(
        err.contains("Dockerfile:3: 127.0.0.1:9/nothing/here:1: the image could not be pulled"),
        "{err}"
    );
    assert_eq!(
        w.ok(&["images", "-a", "-q"]).lines().count(),
        1,
        "only busybox"
    );
    let err = w.fails(1, &["build", "--target", "nope", ctx.to_str().unwrap()]);
    assert!(
        err.contains("target stage \"nope\" could not be found"),
        "{err}"
    );

    write(
        &ctx,
        "Dockerfile",
        &format!(
            "FROM {}\nARG USED\nRUN --network=none ls /sys/class/net > /nets\nCMD [\"cat\", \"/nets\"]\n",
            busybox()
        ),
    );
    let out = w.ok(&[
        "build",
        "-t",
        "good:1",
        "--build-arg",
        "USED=1",
        "--build-arg",
        "SPARE=2",
        ctx.to_str().unwrap(),
    ]);
    assert!(
        out.contains("[Warning] One or more build-args [SPARE] were not consumed"),
        "{out}"
    );
    assert_eq!(
        w.ok(&["run", "--rm", "--network", "none", "good:1"]),
        "lo\n"
    );
    w.ok(&["rmi", "good:1"]);
    w.ok(&["builder", "prune", "-f"]);
    w.assert_clean();
}

/// `--progress`: BuildKit's plain lines (each step numbered, its output with its time,
/// DONE with the time or CACHED), the live view (one line per step with its time or
/// CACHED, FINISHED; a failed step's output after it), and `auto` giving the live view on
/// a terminal and the classic lines off one.
#[test]
fn progress_shows_each_step_with_its_time_or_that_the_cache_served_it() {
    let (w, ctx) = world(
        "build-progress",
        &format!(
            "FROM {}\nRUN echo made-$((40+2))\nCOPY a /a\nCMD [\"cat\", \"/a\"]\n",
            busybox()
        ),
    );
    write(&ctx, "a", "content\n");
    let c = ctx.to_str().unwrap();
    let first = w.run(&["build", "--progress", "plain", "-t", "prog:1", c]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let e = &first.stderr;
    assert!(e.contains("#2 [2/4] RUN echo made-$((40+2))\n"), "{e}");
    assert!(
        e.lines()
            .any(|l| l.starts_with("#2 0.") && l.ends_with(" made-42")),
        "the RUN's output, numbered and timed: {e}"
    );
    for n in 2..=4 {
        assert!(e.contains(&format!("\n#{n} DONE ")), "step {n}: {e}");
    }
    assert!(e.contains("naming to prog:1 done"), "{e}");
    assert!(!first.stdout.contains("Successfully"), "{}", first.stdout);
    let again = w.run(&["build", "--progress", "plain", "-t", "prog:1", c]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    for n in 2..=4 {
        assert!(
            again.stderr.contains(&format!("\n#{n} CACHED\n")),
            "{}",
            again.stderr
        );
    }
    assert!(!again.stderr.contains("made-42"), "{}", again.stderr);

    // The live view, asked for off a terminal: its last frame.
    let live = w.run(&["build", "--progress", "tty", "-t", "prog:1", c]);
    assert_eq!(live.code, 0, "{}", live.stderr);
    let last = live.stderr.rsplit("[+] Building").next().unwrap();
    assert!(last.contains("(4/4) FINISHED"), "{}", live.stderr);
    assert!(
        last.lines()
            .any(|l| l.contains(" => CACHED [2/4] RUN echo made") && l.ends_with('s')),
        "{last}"
    );

    // On a terminal, `auto` is the live view (script(1) gives the build one).
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok()
    {
        let cmdline = format!("{} build -t prog:1 {c}", env!("CARGO_BIN_EXE_wharf"),);
        let mut script = std::process::Command::new("script");
        script.args(["-qec", &cmdline, "/dev/null"]);
        for (k, v) in w.cmd(&[]).get_envs() {
            match v {
                Some(v) => script.env(k, v),
                None => script.env_remove(k),
            };
        }
        let out = script.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("[+] Building") && text.contains("FINISHED"),
            "{text}"
        );
        assert!(!text.contains("Step 2/4"), "{text}");
    } else {
        eprintln!("script(1) is missing: the terminal case is skipped");
    }
    // Off one, `auto` is the classic builder's lines.
    let classic = w.ok(&["build", "-t", "prog:1", c]);
    assert!(classic.contains("Step 2/4 : RUN echo") && classic.contains(" ---> Using cache"));

    // A failed step: the view marks it and prints its output after the frame.
    write(
        &ctx,
        "Dockerfile",
        &format!("FROM {}\nRUN echo bad-out && exit 3\n", busybox()),
    );
    let failed = w.run(&["build", "--progress", "tty", "-t", "prog:2", c]);
    assert_eq!(failed.code, 3, "{}", failed.stderr);
    let last = failed.stderr.rsplit("[+] Building").next().unwrap();
    assert!(last.contains(") ERROR"), "{last}");
    assert!(last.contains(" => ERROR [2/2] RUN echo bad-out"), "{last}");
    assert!(
        last.contains("------\n > [2/2] RUN echo bad-out && exit 3:\nbad-out\n------"),
        "{last}"
    );
    w.ok(&["rmi", "prog:1"]);
    w.ok(&["builder", "prune", "-f"]);
    w.assert_clean();
}
