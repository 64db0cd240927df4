//! Hostile layers, built by hand: whatever their entries say, nothing is created or changed
//! outside the snapshot directory. Each case either confines the entry (containerd's rule:
//! `..`, absolute names and symlinks resolve inside the rootfs) or rejects the layer.
//!
//! Every test sets up `<tmp>/outside/` (a sentinel file, a directory) next to the store and
//! aims at it by absolute path, by `..` climbing and through symlinks, plus at
//! `/tmp/wharf-hostile-<pid>` on the host; afterwards `outside/` must be byte-for-byte the
//! same and the host paths must not exist.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use wharf_image::unpack::apply_layer;
use wharf_testbed::layer_tar::{Entry, layer};

struct World {
    tmp: tempfile::TempDir,
    layers: Vec<PathBuf>,
    host: String,
    before: BTreeMap<String, String>,
}

fn tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let ft = md.file_type();
            let desc = if ft.is_symlink() {
                format!("l {}", fs::read_link(&p).unwrap().display())
            } else if ft.is_dir() {
                format!("d {:o}", md.mode())
            } else if ft.is_file() {
                format!(
                    "f {:o} {} n{} {:?}",
                    md.mode(),
                    md.uid(),
                    md.nlink(),
                    fs::read(&p).unwrap()
                )
            } else {
                format!("other {:o} {}", md.mode(), md.rdev())
            };
            out.insert(rel, desc);
            if ft.is_dir() {
                walk(base, &p, out);
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

impl World {
    fn new() -> World {
        let tmp = tempfile::Builder::new()
            .prefix("wharf-hostile-")
            .tempdir()
            .unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir_all(outside.join("dir")).unwrap();
        fs::write(outside.join("sentinel"), "untouched").unwrap();
        fs::write(outside.join("dir/inner"), "inner").unwrap();
        fs::create_dir_all(tmp.path().join("root/layers")).unwrap();
        let host = format!("/tmp/wharf-hostile-{}", std::process::id());
        let _ = fs::remove_dir_all(&host);
        let mut w = World {
            tmp,
            layers: Vec::new(),
            host,
            before: BTreeMap::new(),
        };
        w.before = w.snapshot();
        w
    }

    /// Absolute path of the `outside` directory (what hostile entries aim at).
    fn outside(&self) -> String {
        self.tmp.path().join("outside").display().to_string()
    }

    /// `outside`'s path without the leading `/`: where a confined entry lands in the rootfs.
    fn outside_rel(&self) -> String {
        self.outside().trim_start_matches('/').to_string()
    }

    /// Everything in the temp dir except the store, plus /etc/passwd's identity.
    fn snapshot(&self) -> BTreeMap<String, String> {
        let mut t = tree(&self.tmp.path().join("outside"));
        let md = fs::metadata("/etc/passwd").unwrap();
        t.insert(
            "/etc/passwd".into(),
            format!("{} n{} {}", md.ino(), md.nlink(), md.len()),
        );
        let top: Vec<String> = fs::read_dir(self.tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        t.insert(
            "<top>".into(),
            format!("{:?}", {
                let mut v = top;
                v.sort();
                v
            }),
        );
        t
    }

    /// Apply a layer on top of the previous ones; returns its directory or the error.
    fn apply(&mut self, bytes: Vec<u8>) -> Result<PathBuf, String> {
        let dir = self
            .tmp
            .path()
            .join(format!("root/layers/{}", self.layers.len() + 1));
        fs::create_dir(&dir).unwrap();
        let lowers: Vec<&Path> = self.layers.iter().rev().map(|p| p.as_path()).collect();
        match apply_layer(&bytes[..], &dir, &lowers) {
            Ok(_) => {
                self.layers.push(dir.clone());
                Ok(dir)
            }
            Err(e) => {
                // As a failed pull does: the half-applied layer goes.
                fs::remove_dir_all(&dir).unwrap();
                Err(e.to_string())
            }
        }
    }

    fn assert_nothing_outside(&self) {
        assert_eq!(
            self.before,
            self.snapshot(),
            "something outside the store changed"
        );
        assert!(
            !Path::new(&self.host).exists(),
            "{} was created on the host",
            self.host
        );
    }
}

fn read(p: impl AsRef<Path>) -> String {
    fs::read_to_string(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
}

#[test]
fn dotdot_names_are_confined_to_the_layer() {
    let mut w = World::new();
    let deep = format!("../../../../../../../..{}/a", w.host);
    let rel_out = "../../../outside/sentinel".to_string();
    let l = w
        .apply(layer(vec![
            Entry::file(&deep, b"pwned"),
            Entry::file(&rel_out, b"pwned"),
            Entry::file("x/../../../y", b"y"),
            Entry::dir(".."),
        ]))
        .unwrap();
    let host_rel = w.host.trim_start_matches('/');
    assert_eq!(read(l.join(host_rel).join("a")), "pwned");
    assert_eq!(read(l.join("outside/sentinel")), "pwned");
    assert_eq!(read(l.join("y")), "y");
    w.assert_nothing_outside();
}

#[test]
fn absolute_names_are_confined_to_the_layer() {
    let mut w = World::new();
    let a = format!("{}/abs", w.host);
    let b = format!("{}/sentinel", w.outside());
    let l = w
        .apply(layer(vec![
            Entry::file(&a, b"pwned"),
            Entry::file(&b, b"pwned"),
        ]))
        .unwrap();
    assert_eq!(read(l.join(w.outside_rel()).join("sentinel")), "pwned");
    assert_eq!(
        read(l.join(w.host.trim_start_matches('/')).join("abs")),
        "pwned"
    );
    w.assert_nothing_outside();
}

#[test]
fn symlinks_in_the_same_layer_resolve_inside_the_rootfs() {
    let mut w = World::new();
    let out = w.outside();
    let l = w
        .apply(layer(vec![
            Entry::symlink("esc", &out),
            Entry::file("esc/sentinel", b"pwned"),
            Entry::symlink("up", "../../../../../../../../.."),
            Entry::file("up/escaped-by-dotdot", b"x"),
            Entry::symlink("hostlink", &w.host),
            Entry::dir("hostlink/"),
            Entry::file("hostlink/f", b"x"),
        ]))
        .unwrap();
    // esc -> /<outside> resolves to <layer>/<outside>, not the host's.
    assert_eq!(read(l.join(w.outside_rel()).join("sentinel")), "pwned");
    assert_eq!(read(l.join("escaped-by-dotdot")), "x");
    // The symlink entry named "hostlink/" was replaced by a directory (final component).
    assert!(fs::symlink_metadata(l.join("hostlink")).unwrap().is_dir());
    assert_eq!(read(l.join("hostlink/f")), "x");
    w.assert_nothing_outside();
}

#[test]
fn symlinks_in_a_lower_layer_resolve_inside_the_rootfs() {
    let mut w = World::new();
    let out = w.outside();
    let host = w.host.clone();
    w.apply(layer(vec![
        Entry::symlink("esc", &out),
        Entry::symlink("up", "../../../../../../.."),
        Entry::symlink("hostdir", &host),
        Entry::symlink("rel-chain", "up/up/up"),
    ]))
    .unwrap();
    let l2 = w
        .apply(layer(vec![
            Entry::file("esc/sentinel", b"pwned"),
            Entry::file("esc/dir/inner", b"pwned"),
            Entry::file("up/top", b"t"),
            Entry::file("hostdir/created", b"h"),
            Entry::file("rel-chain/chained", b"c"),
        ]))
        .unwrap();
    assert_eq!(read(l2.join(w.outside_rel()).join("sentinel")), "pwned");
    assert_eq!(read(l2.join(w.outside_rel()).join("dir/inner")), "pwned");
    assert_eq!(read(l2.join("top")), "t");
    assert_eq!(
        read(l2.join(w.host.trim_start_matches('/')).join("created")),
        "h"
    );
    assert_eq!(read(l2.join("chained")), "c");
    w.assert_nothing_outside();
}

#[test]
fn an_entry_replaces_a_symlink_instead_of_writing_through_it() {
    let mut w = World::new();
    let target = format!("{}/sentinel", w.outside());
    let target2 = format!("{}/dir/inner", w.outside());
    w.apply(layer(vec![Entry::symlink("lowerlink", &target)]))
        .unwrap();
    let l = w
        .apply(layer(vec![
            Entry::file("lowerlink", b"replaced"),
            Entry::symlink("samelink", &target2),
            Entry::file("samelink", b"replaced too"),
            Entry::symlink("devlink", &target),
            Entry::chardev("devlink", 1, 3),
        ]))
        .unwrap();
    let md = fs::symlink_metadata(l.join("lowerlink")).unwrap();
    assert!(md.is_file());
    assert_eq!(read(l.join("lowerlink")), "replaced");
    assert_eq!(read(l.join("samelink")), "replaced too");
    assert!(
        fs::symlink_metadata(l.join("devlink"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
    w.assert_nothing_outside();
}

#[test]
fn hard_links_cannot_reach_outside_the_rootfs() {
    let mut w = World::new();
    let abs = format!("{}/sentinel", w.outside());
    // A target that exists only outside: rejected (it does not exist in the rootfs).
    for target in [
        abs.as_str(),
        "../../../../../../../etc/passwd",
        "/etc/passwd",
    ] {
        let e = w
            .apply(layer(vec![Entry::hardlink("h", target)]))
            .expect_err("a hard link to a path missing from the rootfs must fail");
        assert!(e.contains("does not exist"), "{e}");
    }
    // Through a symlink out of the rootfs: resolved inside, so it links the rootfs' file.
    w.apply(layer(vec![
        Entry::dir("etc"),
        Entry::file("etc/passwd", b"rootfs passwd"),
        Entry::symlink("sl", "/etc"),
    ]))
    .unwrap();
    let l = w
        .apply(layer(vec![
            Entry::hardlink("h1", "sl/passwd"),
            Entry::hardlink("h2", "../../../../etc/passwd"),
            Entry::hardlink("h3", "/etc/passwd"),
        ]))
        .unwrap();
    let host = fs::metadata("/etc/passwd").unwrap();
    for h in ["h1", "h2", "h3"] {
        let md = fs::metadata(l.join(h)).unwrap();
        assert_ne!(md.ino(), host.ino());
        assert_eq!(read(l.join(h)), "rootfs passwd");
        // Copied up into this layer, linked there: never a link to another layer's inode.
        assert_eq!(md.ino(), fs::metadata(l.join("etc/passwd")).unwrap().ino());
    }
    w.assert_nothing_outside();
}

#[test]
fn whiteouts_cannot_remove_anything_outside() {
    let mut w = World::new();
    let out = w.outside();
    w.apply(layer(vec![
        Entry::symlink("esc", &out),
        Entry::file("keep", b"k"),
    ]))
    .unwrap();
    let l = w
        .apply(layer(vec![
            Entry::file("esc/.wh.sentinel", b""),
            Entry::file("esc/.wh..wh..opq", b""),
            Entry::file("../../../outside/.wh.dir", b""),
            Entry::file(&format!("{out}/.wh.sentinel"), b""),
        ]))
        .unwrap();
    let wh = fs::symlink_metadata(l.join(w.outside_rel()).join("sentinel")).unwrap();
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0);
    for bad in ["a/.wh...", ".wh..", "x/.wh."] {
        let e = w
            .apply(layer(vec![Entry::file(bad, b"")]))
            .expect_err("whiteout of . or .. must be rejected");
        assert!(e.contains("invalid whiteout"), "{bad}: {e}");
    }
    w.assert_nothing_outside();
}

#[test]
fn device_nodes_and_fifos_stay_inside() {
    let mut w = World::new();
    let name = format!("../../../../dev/wharf-hostile-{}", std::process::id());
    let l = w
        .apply(layer(vec![
            Entry::blockdev(&name, 8, 0),
            Entry::chardev("/dev/wharf-null", 1, 3),
            Entry::fifo("../fifo"),
        ]))
        .unwrap();
    let host_dev = format!("/dev/wharf-hostile-{}", std::process::id());
    assert!(!Path::new(&host_dev).exists());
    assert!(!Path::new("/dev/wharf-null").exists());
    let md = fs::symlink_metadata(l.join(name.trim_start_matches("../../../../"))).unwrap();
    assert!(md.file_type().is_block_device());
    assert!(
        fs::symlink_metadata(l.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    w.assert_nothing_outside();
}

#[test]
fn symlink_loops_paths_through_files_and_links_to_dirs_are_rejected() {
    let mut w = World::new();
    let e = w
        .apply(layer(vec![
            Entry::symlink("a", "b"),
            Entry::symlink("b", "a"),
            Entry::file("a/x", b"x"),
        ]))
        .unwrap_err();
    assert!(e.contains("too many levels"), "{e}");
    let e = w
        .apply(layer(vec![
            Entry::file("f", b"f"),
            Entry::file("f/x", b"x"),
        ]))
        .unwrap_err();
    assert!(e.contains("not a directory"), "{e}");
    let e = w
        .apply(layer(vec![Entry::dir("d"), Entry::hardlink("hd", "d")]))
        .unwrap_err();
    assert!(e.contains("directory"), "{e}");
    w.assert_nothing_outside();
}

#[test]
fn proc_magic_links_and_link_chains_are_confined() {
    let mut w = World::new();
    let l = w
        .apply(layer(vec![
            Entry::symlink("p", "/proc/self/root"),
            Entry::file("p/etc/wharf-hostile", b"x"),
            Entry::symlink("c", "/"),
            Entry::symlink("b", "c"),
            Entry::symlink("a", "b/../../.."),
            Entry::file("a/chain-end", b"x"),
        ]))
        .unwrap();
    assert_eq!(read(l.join("proc/self/root/etc/wharf-hostile")), "x");
    assert!(!Path::new("/etc/wharf-hostile").exists());
    assert_eq!(read(l.join("chain-end")), "x");
    w.assert_nothing_outside();
}

#[test]
fn overlay_xattrs_from_a_layer_are_dropped() {
    let mut w = World::new();
    let mut d = Entry::dir("d");
    d.xattrs = vec![("trusted.overlay.opaque", b"y"), ("user.ok", b"1")];
    let mut f = Entry::file("f", b"f");
    f.xattrs = vec![("trusted.overlay.redirect", b"/etc")];
    let l = w.apply(layer(vec![d, f])).unwrap();
    let get = |p: &Path, n: &str| {
        let mut buf = [0u8; 16];
        rustix::fs::lgetxattr(p, n, &mut buf[..]).ok()
    };
    assert_eq!(get(&l.join("d"), "trusted.overlay.opaque"), None);
    assert_eq!(get(&l.join("d"), "user.ok"), Some(1));
    assert_eq!(get(&l.join("f"), "trusted.overlay.redirect"), None);
    w.assert_nothing_outside();
}
