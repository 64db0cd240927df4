//! `load` of untrusted archives (docker save and OCI layouts, compressed or not): whatever
//! the archive holds, the loader's memory stays within a bound (its metadata, at most
//! `archive::METADATA_TOTAL`, plus a margin), measured by a counting allocator, and it
//! never panics.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use wharf_image::archive;

/// The system allocator, counting the bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        IN_USE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Beyond the metadata the loader may keep: buffers, the store's handles, parsed JSON.
const MARGIN: usize = 16 << 20;

fn store() -> &'static wharf_image::ImageStore {
    static STORE: OnceLock<(tempfile::TempDir, wharf_image::ImageStore)> = OnceLock::new();
    &STORE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let store = wharf_image::ImageStore::open(dir.path()).unwrap();
            (dir, store)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let store = store();
    let base = IN_USE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let _ = store.load(data);
    let grew = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    assert!(
        grew <= archive::METADATA_TOTAL as usize + MARGIN,
        "load of {} bytes used {grew} bytes of memory",
        data.len()
    );
});
