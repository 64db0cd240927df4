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

/// The optional fields (propagation) of the mount at `path` in `/proc/<pid>/mountinfo`,
/// None where nothing is mounted there.
fn propagation(pid: &str, path: &std::path::Path) -> Option<String> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let p = path.to_str().unwrap();
    info.lines()
        .rfind(|l| l.split(' ').nth(4) == Some(p))
        .map(|l| {
            l.split(' ')
                .skip(6)
                .take_while(|f| *f != "-")
                .collect::<Vec<_>>()
                .join(" ")
        })
}

#[test]
fn pins_are_shared_so_removing_one_reaches_namespaces_that_copied_it() {
    let mut w = World::new("netns-shared");
    let dir = w.run_dir.join("netns");
    let a = w.netns("a");
    for p in [&dir, &a.path] {
        let prop = propagation("self", p).expect("mounted");
        assert!(prop.contains("shared:"), "{}: {prop:?}", p.display());
    }
    // A crash between binding the directory and sharing it leaves a private mount: the
    // next pin shares it again.
    rustix::mount::mount_change(&dir, rustix::mount::MountPropagationFlags::PRIVATE).unwrap();
    assert_eq!(propagation("self", &dir).as_deref(), Some(""));
    let b = w.netns("b");
    for p in [&dir, &b.path] {
        let prop = propagation("self", p).expect("mounted");
        assert!(prop.contains("shared:"), "{}: {prop:?}", p.display());
    }
    // A mount namespace copied from this one (as a daemon started later would be) holds
    // pin b; removing the pin unmounts its copy there too.
    let mut copy = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "unchanged", "sleep", "30"])
        .spawn()
        .unwrap();
    let pid = copy.id().to_string();
    let own = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .as_ref()
        == Some(&own)
        || propagation(&pid, &b.path).is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the copy never held pin b"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    netns::remove(&w.run_dir, "b").unwrap();
    let gone = propagation(&pid, &b.path).is_none();
    let _ = copy.kill();
    let _ = copy.wait();
    assert!(gone, "pin b is still mounted in the copied namespace");
}
