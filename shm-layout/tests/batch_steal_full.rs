//! A batch steal into a destination deque with no room says so (`Full`) and takes nothing,
//! instead of answering `Empty` while the source still holds work.

use xtcq_shm::deque::{DequeOwner, Full, HeapDeque, Steal};
use xtcq_shm::Flavor;

#[test]
fn a_batch_steal_into_a_full_deque_is_full_not_empty() {
    let source = HeapDeque::new(8);
    let src = DequeOwner::adopt(source.view(Flavor::Fifo).expect("view"));
    for v in 1..=4 {
        src.push(v).expect("push");
    }
    let dest = HeapDeque::new(4);
    let mine = DequeOwner::adopt(dest.view(Flavor::Fifo).expect("view"));
    for v in 10..14 {
        mine.push(v).expect("push");
    }
    let victim = source.view(Flavor::Fifo).expect("view");
    assert_eq!(victim.steal_batch(&mine, 8), Err(Full), "no room in the destination");
    assert_eq!(victim.len(), 4, "nothing was taken from the source");
    // With room again, the same call moves jobs.
    assert!(mine.pop().is_some(), "room for one");
    assert_eq!(victim.steal_batch(&mine, 8), Ok(Steal::Success(1)));
    assert_eq!(victim.len(), 3);
    assert_eq!(victim.steal_batch(&mine, 0), Ok(Steal::Empty), "nothing asked for");
}
