//! Unit names and the cgroup paths systemd gives them.

use crate::{Error, Result};

/// Check a slice name as systemd reads it: `NAME.slice`, where each `-` in NAME steps one
/// level down the tree (`kubepods-burstable.slice` is inside `kubepods.slice`), so NAME may
/// neither start nor end with one nor hold two in a row; `-.slice` is the root slice.
pub fn check_slice(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::Invalid(format!(
            "invalid cgroup parent {name:?} for the systemd cgroup driver: {why} (a slice \
             such as \"wharf.slice\" or kubelet's \"kubepods-burstable-pod<uid>.slice\")"
        )))
    };
    if name == "-.slice" {
        return Ok(());
    }
    let Some(stem) = name.strip_suffix(".slice") else {
        return bad("it must name a slice, ending in \".slice\"");
    };
    if stem.is_empty() || name.len() > 255 {
        return bad("the name is empty or too long");
    }
    if stem.starts_with('-') || stem.ends_with('-') || stem.contains("--") {
        return bad("a '-' may not start or end it, nor follow another");
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || ":-_.\\".contains(c);
    if !stem.chars().all(allowed) {
        return bad("it may hold only letters, digits and \":-_.\\\"");
    }
    Ok(())
}

/// The cgroup path (from the hierarchy's root) of slice `name`, which systemd nests by its
/// dashes: `kubepods-burstable-pod1.slice` is
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice`.
pub fn slice_path(name: &str) -> Result<String> {
    check_slice(name)?;
    if name == "-.slice" {
        return Ok(String::new());
    }
    let stem = &name[..name.len() - ".slice".len()];
    let mut path = String::new();
    let mut end = 0;
    for part in stem.split('-') {
        end += part.len();
        path.push('/');
        path.push_str(&stem[..end]);
        path.push_str(".slice");
        end += 1;
    }
    Ok(path)
}

/// The scope of pod `id` in slice `slice`: its unit name and its cgroup path.
pub fn pod_scope(slice: &str, id: &str) -> Result<(String, String)> {
    let unit = format!("wharf-pod-{id}.scope");
    Ok((unit.clone(), format!("{}/{unit}", slice_path(slice)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_nest_by_their_dashes_as_systemd_nests_them() {
        assert_eq!(slice_path("wharf.slice").unwrap(), "/wharf.slice");
        assert_eq!(
            slice_path("kubepods-burstable-pod12_ab.slice").unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_ab.slice"
        );
        assert_eq!(slice_path("-.slice").unwrap(), "");
        let (unit, path) = pod_scope("machine.slice", "abc").unwrap();
        assert_eq!(unit, "wharf-pod-abc.scope");
        assert_eq!(path, "/machine.slice/wharf-pod-abc.scope");
    }

    #[test]
    fn names_systemd_would_refuse_are_refused_with_the_reason() {
        for bad in [
            "/kubepods/burstable",
            "wharf",
            ".slice",
            "-a.slice",
            "a-.slice",
            "a--b.slice",
            "a/b.slice",
            "a b.slice",
        ] {
            let e = check_slice(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("systemd cgroup driver"), "{e}");
        }
    }
}
