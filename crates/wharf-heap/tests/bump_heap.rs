//! The bump heap as the global allocator of a process, as `wharf` uses it: every test
//! switches it on first (the switch is for the whole process, and idempotent).

use std::alloc::{GlobalAlloc, Layout};

use wharf_heap::BumpHeap;

#[global_allocator]
static HEAP: BumpHeap = BumpHeap;

fn on() {
    assert!(BumpHeap::start(), "the region could not be reserved");
    assert!(BumpHeap::is_on());
}

#[test]
fn blocks_come_from_the_region_aligned_and_keep_what_is_written() {
    on();
    let mut rows: Vec<String> = Vec::new();
    for i in 0..100_000 {
        rows.push(format!("row {i}"));
    }
    assert!(BumpHeap::holds(rows.as_ptr().cast()));
    assert!(rows.iter().all(|r| BumpHeap::holds(r.as_ptr())));
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r, &format!("row {i}"));
    }
    for align in [1, 2, 8, 16, 64, 4096, 1 << 16, 4 << 20] {
        let layout = Layout::from_size_align(24, align).unwrap();
        // SAFETY: a non-zero size; the block is given back with the same layout.
        let p = unsafe { HEAP.alloc(layout) };
        assert!(!p.is_null());
        assert_eq!(p as usize % align, 0, "alignment {align}");
        assert!(BumpHeap::holds(p));
        // SAFETY: as above.
        unsafe { HEAP.dealloc(p, layout) };
    }
}

#[test]
fn growing_the_last_block_keeps_it_in_place_and_a_moved_one_keeps_its_bytes() {
    on();
    let mut v: Vec<u8> = Vec::with_capacity(64);
    v.extend(0..64u8);
    let at = v.as_ptr();
    v.reserve_exact(1000);
    assert_eq!(v.as_ptr(), at, "the thread's last block grows where it is");
    let mut w: Vec<u64> = Vec::new();
    for i in 0..300_000u64 {
        w.push(i * 3);
        if i == 10 {
            // Another block after `w`'s: its next growth must move it, bytes and all.
            std::hint::black_box(Box::new(7u64));
        }
    }
    assert!(w.iter().enumerate().all(|(i, x)| *x == i as u64 * 3));
    assert!(v.iter().enumerate().all(|(i, x)| *x == i as u8));
}

#[test]
fn zeroed_blocks_are_zero_even_where_freed_blocks_held_bytes() {
    on();
    for round in 0..4 {
        let mut dirty = vec![0xa5u8; 3 << 20];
        dirty[round] = 1;
        drop(std::hint::black_box(dirty));
        let small = vec![0u64; 1000];
        let large = vec![0u8; 5 << 20];
        assert!(small.iter().all(|x| *x == 0));
        assert!(large.iter().all(|x| *x == 0));
        assert!(BumpHeap::holds(large.as_ptr()));
    }
}

#[test]
fn threads_allocating_at_once_never_share_a_byte() {
    on();
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                let boxes: Vec<Box<[u8; 48]>> = (0..50_000).map(|_| Box::new([t; 48])).collect();
                boxes
            })
        })
        .collect();
    let all: Vec<Vec<Box<[u8; 48]>>> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    for (t, boxes) in all.iter().enumerate() {
        assert!(
            boxes.iter().all(|b| b.iter().all(|x| *x == t as u8)),
            "thread {t}"
        );
        assert!(boxes.iter().all(|b| BumpHeap::holds(b.as_ptr())));
    }
}

#[test]
fn the_region_asks_for_huge_pages() {
    on();
    let v = vec![1u8; 4 << 20];
    let at = v.as_ptr() as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut flags = None;
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((lo, hi)) = range.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            inside = (lo..hi).contains(&at);
        } else if inside && let Some(f) = line.strip_prefix("VmFlags:") {
            flags = Some(f.split_whitespace().map(str::to_string).collect::<Vec<_>>());
        }
    }
    let flags = flags.expect("the block's mapping is in smaps");
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.contains("[never]") || thp.is_empty() {
        eprintln!("transparent huge pages are off here: nothing to check");
        return;
    }
    assert!(flags.iter().any(|f| f == "hg"), "VmFlags {flags:?}");
}
