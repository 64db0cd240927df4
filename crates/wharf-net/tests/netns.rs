//! Network namespaces: create, pin, lo up, remove (as root, inside a temp dir).

mod common;

use std::os::unix::fs::MetadataExt;

use common::{World, own_netns_inode};
use wharf_net::{Error, netns};

fn mounted(path: &std::path::Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = path.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(p))
}

#[test]
fn create_pins_a_new_namespace_with_only_lo_up() {
    let mut w = World::new("netns-create");
    let before = own_netns_inode();
    let ns = w.netns("pod-a");
    assert_eq!(ns.path, w.run_dir.join("netns/pod-a"));
    assert!(mounted(&ns.path), "the namespace file is a bind mount");
    assert_ne!(
        std::fs::metadata(&ns.path).unwrap().ino(),
        before,
        "a new namespace, not ours"
    );
    assert_eq!(
        own_netns_inode(),
        before,
        "the caller's namespace is unchanged"
    );
    let links = World::netlink(&ns.path).links().unwrap();
    assert_eq!(links.len(), 1, "only lo: {links:?}");
    assert_eq!(links[0].name, "lo");
    assert!(links[0].is_up(), "lo is up");
    // Joinable by path: a process in it sees the same thing.
    let out = w.exec_ok(&ns.path, &["ip", "-o", "link", "show", "up"]);
    assert!(out.contains("lo:") && out.lines().count() == 1, "{out}");
    // Two namespaces are distinct.
    let other = w.netns("pod-b");
    assert_ne!(
        std::fs::metadata(&ns.path).unwrap().ino(),
        std::fs::metadata(&other.path).unwrap().ino()
    );
    let listed: Vec<_> = netns::list(&w.run_dir)
        .unwrap()
        .into_iter()
        .map(|n| n.path)
        .collect();
    assert_eq!(listed, vec![ns.path.clone(), other.path.clone()]);
}

#[test]
fn create_refuses_an_existing_name_and_bad_names() {
    let mut w = World::new("netns-names");
    let ns = w.netns("dup");
    let err = netns::create(&w.run_dir, "dup").unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert!(mounted(&ns.path), "the existing pin is untouched");
    for bad in ["", ".", "..", "a/b", "../x", ".hidden", "sp ace"] {
        let err = netns::create(&w.run_dir, bad).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{bad:?}: {err}");
    }
    assert_eq!(netns::list(&w.run_dir).unwrap().len(), 1);
}

#[test]
fn remove_unpins_and_is_idempotent() {
    let mut w = World::new("netns-remove");
    let ns = w.netns("gone");
    netns::remove(&w.run_dir, "gone").unwrap();
    assert!(!ns.path.exists());
    assert!(!mounted(&ns.path));
    netns::remove(&w.run_dir, "gone").unwrap();
    netns::remove_path(&ns.path).unwrap();
    // A crash between creating the file and mounting it leaves a plain file: removable.
    std::fs::write(w.run_dir.join("netns/half"), "").unwrap();
    netns::remove(&w.run_dir, "half").unwrap();
    assert!(!w.run_dir.join("netns/half").exists());
    // The name is free again.
    let again = w.netns("gone");
    assert!(mounted(&again.path));
}

#[test]
fn open_rejects_files_that_are_not_network_namespaces() {
    let w = World::new("netns-open");
    let plain = w.path().join("plain");
    std::fs::write(&plain, "").unwrap();
    let err = netns::open(&plain).unwrap_err();
    assert!(err.to_string().contains("not a namespace file"), "{err}");
    let err = netns::open(std::path::Path::new("/proc/self/ns/uts")).unwrap_err();
    assert!(
        err.to_string().contains("not of a network namespace"),
        "{err}"
    );
    let err = netns::open(&w.path().join("missing")).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
    netns::open(std::path::Path::new("/proc/self/ns/net")).unwrap();
}
