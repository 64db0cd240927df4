//! Before `start`, and for what was allocated before it, the system allocator serves: a
//! block made before the switch is freed (and grown) by the system after it.

use wharf_heap::BumpHeap;

#[global_allocator]
static HEAP: BumpHeap = BumpHeap;

#[test]
fn blocks_from_before_the_switch_stay_the_systems() {
    let mut early: Vec<u32> = (0..1000).collect();
    assert!(!BumpHeap::is_on());
    assert!(!BumpHeap::holds(early.as_ptr().cast()));
    assert!(BumpHeap::start());
    assert!(
        BumpHeap::start(),
        "a second start is a no-op that reports the heap on"
    );
    let late: Vec<u32> = (0..1000).collect();
    assert!(BumpHeap::holds(late.as_ptr().cast()));
    // Grown after the switch, the system's block stays the system's.
    early.extend(1000..200_000);
    assert!(!BumpHeap::holds(early.as_ptr().cast()));
    assert!(early.iter().enumerate().all(|(i, x)| *x == i as u32));
    drop(early);
    assert_eq!(late.iter().sum::<u32>(), 499_500);
}
