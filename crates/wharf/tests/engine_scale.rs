//! What keeps a listing's cost from growing with the pods on the node: each shim holds its
//! pod's lock in the node's registry of live shims and marks its pod changed after each
//! record it writes; a listing reads the records of marked pods (and of pods whose shim it
//! does not find alive) only, and takes the marks once the store has what they said.
//!
//! The tests forge a live pod's records (which no listing may read while the pod is not
//! marked) and watch marks come and go, so a listing that reads every pod's records, or
//! one that trusts a dead shim's pod, fails them.

mod engine_support;

use std::path::PathBuf;
use std::time::Duration;

use engine_support::{Wharf, busybox};
use wharf_testbed::wait_until;

/// The record directory of container `name`: `<run>/pods/<pod>/shim/containers/<id>`.
fn records(w: &Wharf, name: &str) -> PathBuf {
    let c = w.inspect(name);
    let pod = c["PodId"].as_str().unwrap().to_string();
    let id = c["Id"].as_str().unwrap().to_string();
    w.run_dir()
        .join("pods")
        .join(pod)
        .join("shim/containers")
        .join(id)
}

fn pod_of(w: &Wharf, name: &str) -> String {
    w.inspect(name)["PodId"].as_str().unwrap().to_string()
}

/// The change marks, unclaimed and claimed.
fn marks(w: &Wharf) -> Vec<String> {
    ["shims.changed", "shims.claimed"]
        .iter()
        .flat_map(|d| std::fs::read_dir(w.run_dir().join(d)).into_iter().flatten())
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn state_of(w: &Wharf, name: &str) -> String {
    let out = w.ok(&["ps", "-a", "--format", "{{.Names}} {{.State}} {{.Status}}"]);
    out.lines()
        .find(|l| l.split(' ').next() == Some(name))
        .unwrap_or_else(|| panic!("{name} not listed: {out}"))
        .to_string()
}

/// Give container `to` the records of container `from` (its status and exit).
fn forge_records(w: &Wharf, to: &str, from: &str) {
    let (to, from) = (records(w, to), records(w, from));
    for f in ["status.json", "exit.json"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// Mark container `name`'s pod changed: a listing reads its (forged) records, which say it
/// exited with code 9, and takes the mark.
fn marked_records_are_read(w: &Wharf, name: &str) {
    let pod = pod_of(w, name);
    std::fs::write(w.run_dir().join("shims.changed").join(&pod), "").unwrap();
    let shown = state_of(w, name);
    assert!(
        shown.contains("Exited (9)"),
        "the marked records were not read: {shown}"
    );
    assert!(!marks(w).iter().any(|m| m.starts_with(&pod)));
}

#[test]
fn listings_read_only_the_records_of_pods_whose_shim_marked_a_change() {
    let w = Wharf::new("scale-marks");
    w.pull_busybox();
    let bb = busybox();
    w.ok(&["run", "-d", "--name", "steady", &bb, "sleep", "1000"]);
    w.ok(&["run", "-d", "--name", "model", &bb, "sh", "-c", "exit 9"]);
    let model_pod = pod_of(&w, "model");
    // The model's exit is marked by its shim, read by a listing, and the mark taken.
    assert!(wait_until(Duration::from_secs(10), || {
        state_of(&w, "model").contains("exited")
    }));
    assert!(state_of(&w, "model").contains("Exited (9)"));
    assert!(
        !marks(&w).iter().any(|m| m.starts_with(&model_pod)),
        "{:?}",
        marks(&w)
    );
    // Every mark of the steady pod (its start) is taken by a listing too.
    w.ok(&["ps"]);
    let steady_pod = pod_of(&w, "steady");
    assert!(!marks(&w).iter().any(|m| m.starts_with(&steady_pod)));

    // Forge the steady container's records: exited with code 9, as the model's say.
    forge_records(&w, "steady", "model");
    // Its shim lives and marked nothing: the listing does not read them.
    let shown = state_of(&w, "steady");
    assert!(
        shown.contains("running"),
        "the forged records were read: {shown}"
    );
    // Once marked changed, they are read (and the mark taken).
    marked_records_are_read(&w, "steady");
    w.ok(&["rm", "-f", "steady", "model"]);
    // Removed pods leave no marks (a run --rm would leave one per pod ever made).
    w.ok(&["run", "--rm", &bb, "true"]);
    assert_eq!(marks(&w), Vec::<String>::new());
}

/// A shim killed with SIGKILL marks nothing and leaves its lock: the listing finds it
/// dead through the registry and reaps its pod, marks or not.
#[test]
fn a_killed_shim_is_found_by_listings_without_a_mark() {
    let w = Wharf::new("scale-dead");
    w.pull_busybox();
    w.ok(&["run", "-d", "--name", "c", &busybox(), "sleep", "1000"]);
    w.ok(&["ps"]);
    let pod = pod_of(&w, "c");
    assert!(!marks(&w).iter().any(|m| m.starts_with(&pod)));
    let shim = w.shim_pid(&pod);
    // SAFETY: killing this test's own pod's shim.
    unsafe { libc::kill(shim, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || {
        !std::path::Path::new(&format!("/proc/{shim}")).exists()
    }));
    let shown = state_of(&w, "c");
    assert!(
        shown.contains("exited"),
        "a dead shim's pod shown as {shown}"
    );
    assert!(
        w.ok(&["pod", "ls"]).lines().count() >= 2,
        "pod ls lost the pod"
    );
    w.ok(&["rm", "-f", "c"]);
}

/// `listing` with the ages in its status texts ("Less than a second", "2 seconds") as
/// `<age>`. Both are written from the same stored times by the same code, but two listings
/// taken a moment apart can fall on either side of a second. CI once had the second
/// listing two seconds after the first.
fn without_ages(listing: &str) -> String {
    let listing = listing.replace("Less than a second", "<age>");
    let mut out = Vec::new();
    for line in listing.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let mut kept = Vec::new();
        let mut i = 0;
        while i < words.len() {
            if words[i].parse::<u64>().is_ok() && words.get(i + 1) == Some(&"seconds") {
                kept.push("<age>");
                i += 2;
            } else {
                kept.push(words[i]);
                i += 1;
            }
        }
        out.push(kept.join(" "));
    }
    out.join("\n") + "\n"
}

/// With many pods, a listing reads them on a second thread while it reads the containers
/// (from 128 pods; the test build lowers that through `WHARF_LISTING_SPREAD_FROM`). Both
/// ways show the same: a running container, an exited one, a pod of two, a pod whose shim
/// was killed; and both read the records of a marked pod and take its mark.
#[test]
fn listings_read_on_two_threads_show_what_one_thread_shows() {
    let mut w = Wharf::new("scale-spread");
    w.pull_busybox();
    let bb = busybox();
    w.ok(&["run", "-d", "--name", "up", &bb, "sleep", "1000"]);
    w.ok(&["run", "-d", "--name", "done", &bb, "sh", "-c", "exit 9"]);
    w.ok(&["pod", "create", "--name", "duo"]);
    w.ok(&[
        "run", "-d", "--pod", "duo", "--name", "duo-a", &bb, "sleep", "1000",
    ]);
    w.ok(&[
        "run", "-d", "--pod", "duo", "--name", "duo-b", &bb, "sleep", "1000",
    ]);
    w.ok(&["run", "-d", "--name", "orphan", &bb, "sleep", "1000"]);
    assert!(wait_until(Duration::from_secs(10), || {
        state_of(&w, "done").contains("Exited (9)")
    }));
    let shim = w.shim_pid(&pod_of(&w, "orphan"));
    // SAFETY: killing this test's own pod's shim.
    unsafe { libc::kill(shim, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || {
        !std::path::Path::new(&format!("/proc/{shim}")).exists()
    }));
    let listings = |w: &Wharf| {
        [
            without_ages(&w.ok(&[
                "ps",
                "-a",
                "--format",
                "{{.Names}} {{.State}} {{.Status}} {{.Pod}}",
            ])),
            w.ok(&["ps", "--format", "{{.Names}}"]),
            w.ok(&[
                "pod",
                "ls",
                "--format",
                "{{.Name}} {{.Status}} {{.Containers}}",
            ]),
        ]
    };
    // The first listing reaps the killed shim's pod; the rest see the store as it left it.
    let one = listings(&w);
    assert!(one[0].contains("orphan exited"), "{}", one[0]);
    assert!(one[0].contains("done exited Exited (9)"), "{}", one[0]);
    assert_eq!(one[1].lines().count(), 3, "{}", one[1]);
    w.set_var("WHARF_LISTING_SPREAD_FROM", "0");
    assert_eq!(listings(&w), one);

    // A marked pod's records are read by the two-thread listing too, and the mark taken.
    forge_records(&w, "up", "done");
    marked_records_are_read(&w, "up");
    w.ok(&["pod", "rm", "-f", "duo"]);
    w.ok(&["rm", "-f", "up", "done", "orphan"]);
}
