//! The `wharf` binary's heap: the system's allocator, until a command that reads a lot,
//! prints it and exits (`ps`, `pod ls`) calls [`BumpHeap::start`]. From then on, what
//! the process allocates comes from one reserved region, handed out in order and never
//! given back: the kernel takes the whole region back when the process exits a few
//! milliseconds later.
//!
//! Why: with 1000 pods, `wharf ps` touches about 6 MB of fresh heap (every row's specs,
//! parsed). On the 2-CPU VM these numbers come from, a first touch of a 4 kB page costs
//! about 3 µs (a test program: 2000 pages in 5.6-6.2 ms), so the listing spent 4-6 ms of
//! its 22 in page faults (2078 of them, three quarters in malloc's fresh memory). The
//! region asks for transparent huge pages (`MADV_HUGEPAGE`; the machine's THP setting is
//! `madvise`), so that its memory comes 2 MB at a time, a fault each: the same program
//! touched 8 MB of such pages in 0.8 ms. glibc's own allocator does this only when told
//! by an environment variable at start (`glibc.malloc.hugetlb`), which a command cannot
//! set for itself. Allocating is a pointer bump, freeing nothing: the listing's 47,000
//! allocations and frees cost 12 M of its 66 M instructions in glibc.
//!
//! What stays with the system allocator: everything allocated before `start` (and freed
//! back to it, by address), every allocation once the region is used up, and whatever C
//! code (SQLite) allocates with `malloc` itself. Nothing long-running may call `start`:
//! memory in the region is never reused.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Address space reserved for the region (not memory: pages are only taken on first
/// touch). `ps` with 1000 pods uses about 20 MB of it.
const RESERVE: usize = 1 << 30;

/// What a thread takes from the region at a time: one huge page, so that two threads
/// never share one and each bumps its own pointer without an atomic operation.
const CHUNK: usize = 2 << 20;

/// Allocations larger than this are taken from the region on their own rather than from
/// the thread's chunk (which would waste the chunk's rest).
const LARGE: usize = CHUNK / 4;

/// The region's first byte; 0 while the heap is off (the system allocator serves all).
static BASE: AtomicUsize = AtomicUsize::new(0);
/// One past its last byte.
static END: AtomicUsize = AtomicUsize::new(0);
/// Its first byte not handed out yet, to a thread's chunk or a large allocation.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Where [`BumpHeap::start`] is: [`IDLE`], [`STARTING`], [`ON`] or [`FAILED`].
static STATE: AtomicUsize = AtomicUsize::new(IDLE);
const IDLE: usize = 0;
const STARTING: usize = 1;
const ON: usize = 2;
const FAILED: usize = 3;

thread_local! {
    /// This thread's chunk: its next free byte and its end (0, 0 before its first one).
    /// Const-initialised and without a destructor, so an allocation may use it at any
    /// point of the thread's life, including while other thread-locals are torn down.
    static SPAN: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The global allocator of the `wharf` binary: see the [module docs](self).
pub struct BumpHeap;

impl BumpHeap {
    /// Switch this process to the bump heap; `false` where the region cannot be reserved
    /// (the system allocator then goes on serving everything). Only a command that exits
    /// soon after may call it; calling it again does nothing.
    pub fn start() -> bool {
        if let Err(mut now) =
            STATE.compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Acquire)
        {
            // Another thread is reserving the region: its answer is this one's.
            while now == STARTING {
                std::thread::yield_now();
                now = STATE.load(Ordering::Acquire);
            }
            return now == ON;
        }
        // SAFETY: a new private anonymous mapping, at an address the kernel chooses; it
        // overlaps nothing, and nothing else refers to it until BASE is published below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RESERVE + CHUNK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            STATE.store(FAILED, Ordering::Release);
            return false;
        }
        // Huge pages are 2 MB aligned: the region starts at the first such boundary.
        let base = align_up(p as usize, CHUNK);
        // SAFETY: advice on the mapping just made; a kernel without THP refuses it, which
        // leaves ordinary pages (no harm: the return value is ignored for that reason).
        unsafe { libc::madvise(base as *mut libc::c_void, RESERVE, libc::MADV_HUGEPAGE) };
        END.store(base + RESERVE, Ordering::Relaxed);
        NEXT.store(base, Ordering::Relaxed);
        BASE.store(base, Ordering::Release);
        STATE.store(ON, Ordering::Release);
        true
    }

    /// Whether `p` is in the region (so freeing it is for the region, not the system).
    pub fn holds(p: *const u8) -> bool {
        let base = BASE.load(Ordering::Acquire);
        base != 0 && (p as usize) >= base && (p as usize) < END.load(Ordering::Relaxed)
    }

    /// Whether [`BumpHeap::start`] switched the heap on.
    pub fn is_on() -> bool {
        BASE.load(Ordering::Acquire) != 0
    }

    /// `size` bytes aligned to `align` from the region, in one piece of its own; `None`
    /// once it is used up.
    fn take(size: usize, align: usize) -> Option<usize> {
        let end = END.load(Ordering::Relaxed);
        let mut next = NEXT.load(Ordering::Relaxed);
        loop {
            let start = align_up(next, align);
            let after = start.checked_add(size)?;
            if after > end {
                return None;
            }
            match NEXT.compare_exchange_weak(next, after, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(start),
                Err(now) => next = now,
            }
        }
    }

    /// A block for `layout` from the region: from this thread's chunk, from a new chunk
    /// when it has no room left, or on its own when large.
    fn bump(layout: Layout) -> Option<usize> {
        let (size, align) = (layout.size().max(1), layout.align());
        if size > LARGE || align > LARGE {
            return Self::take(size, align.max(4096));
        }
        SPAN.try_with(|span| {
            let (next, end) = span.get();
            let start = align_up(next, align);
            if next != 0 && start + size <= end {
                span.set((start + size, end));
                return Some(start);
            }
            let chunk = Self::take(CHUNK, CHUNK)?;
            let start = align_up(chunk, align);
            span.set((start + size, chunk + CHUNK));
            Some(start)
        })
        .ok()
        .flatten()
    }

    /// Grow the block at `p` (`old` bytes) to `new` bytes where it stands: possible when it
    /// is this thread's last allocation and its chunk has the room.
    fn grow_in_place(p: usize, old: usize, new: usize) -> bool {
        SPAN.try_with(|span| {
            let (next, end) = span.get();
            let fits = p + old == next && p + new <= end;
            if fits {
                span.set((p + new, end));
            }
            fits
        })
        .unwrap_or(false)
    }
}

fn align_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

// SAFETY: every block handed out is `layout.size()` bytes aligned to `layout.align()`,
// either from the system allocator or from the region, whose bytes are handed out once
// (NEXT and each thread's chunk only move forward, and a chunk belongs to one thread);
// blocks are given back to the allocator that made them, found by address.
//
// Not inlined: fat LTO inlines the allocator into every call site that allocates or
// frees, and with the region's code there, or only the address test of `dealloc`, the
// binary's text grew by 2.0 or 1.4 MB (10 or 7%). A call each, like glibc's own.
unsafe impl GlobalAlloc for BumpHeap {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::is_on() {
            return region_alloc(layout);
        }
        // SAFETY: the caller's layout, as GlobalAlloc requires it.
        unsafe { System.alloc(layout) }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if Self::is_on() {
            // Bytes of the region are handed out once, and a fresh anonymous mapping reads
            // as zeros: a block from it needs no clearing.
            return region_alloc_zeroed(layout);
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if !Self::holds(p) {
            // SAFETY: not the region's, so the system allocator made it, with this layout.
            unsafe { System.dealloc(p, layout) }
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if Self::holds(p) {
            // SAFETY: the region's block, with the caller's layout and a larger or smaller
            // valid size.
            return unsafe { region_realloc(p, layout, new_size) };
        }
        // SAFETY: the system allocator's block, with the caller's layout and size.
        unsafe { System.realloc(p, layout, new_size) }
    }
}

/// A block from the region, or from the system once the region is used up.
fn region_alloc(layout: Layout) -> *mut u8 {
    match BumpHeap::bump(layout) {
        Some(p) => p as *mut u8,
        // SAFETY: the caller's (GlobalAlloc's) layout.
        None => unsafe { System.alloc(layout) },
    }
}

/// [`region_alloc`], zeroed: the region's blocks are zero already.
fn region_alloc_zeroed(layout: Layout) -> *mut u8 {
    match BumpHeap::bump(layout) {
        Some(p) => p as *mut u8,
        // SAFETY: the caller's (GlobalAlloc's) layout.
        None => unsafe { System.alloc_zeroed(layout) },
    }
}

/// The region's block `p` resized: where it stands when it shrinks or can grow in place,
/// else copied to a new block.
///
/// # Safety
/// As for [`GlobalAlloc::realloc`], with `p` in the region.
unsafe fn region_realloc(p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    let old = layout.size();
    if new_size <= old || BumpHeap::grow_in_place(p as usize, old, new_size) {
        return p;
    }
    // SAFETY: GlobalAlloc::realloc promises a valid size for this alignment.
    let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
    let q = region_alloc(new_layout);
    if !q.is_null() {
        // SAFETY: `p` holds `old` bytes, `q` at least `new_size > old`, and they are
        // different blocks (the region hands bytes out once).
        unsafe { std::ptr::copy_nonoverlapping(p, q, old) };
    }
    q
}
