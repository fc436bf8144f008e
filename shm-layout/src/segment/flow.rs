//! A queue's flow word: pause and resume (layout version 7).
//!
//! Rules kept:
//! - only the daemon writes the word: cleared by every create before the entry becomes
//!   active, set and cleared by pause and resume;
//! - a consumer reads it before it takes a handle off a deque or the overflow ring, so a
//!   paused queue loses no job to a consumer that would then have to put it back; a steal
//!   that read the word just before a pause may still take one job;
//! - a push to a paused queue wakes nobody (`wait::notify` reads the word only when someone
//!   sleeps); a resume wakes every sleeper after it cleared the bit, and a sleeper looks at
//!   the word after it counted itself in `sleepers`, so either it sees the resume or the
//!   resume's wake reaches it;
//! - the word read back is only tested for a bit: garbage can pause or unpause its own
//!   queue, nothing else.

use std::sync::atomic::AtomicU32;

use super::*;

impl Segment {
    /// Queue-table entry `index`'s flow word, `None` out of range.
    pub fn flow_word(&self, index: u32) -> Option<&AtomicU32> {
        let off = self.queue_entry_offset(index)?
            + core::mem::offset_of!(QueueEntry, control) as u64
            + core::mem::offset_of!(QueueControl, flow) as u64;
        // SAFETY: index < queues, so the entry (and its control line) lies inside the queue
        // table, which validation placed in the mapping; offset 4 of a 128-aligned line is
        // 4-aligned, and the line holds atomics only.
        Some(unsafe { self.at(off) })
    }

    /// Whether entry `index` is paused (false out of range).
    pub fn is_paused(&self, index: u32) -> bool {
        self.flow_word(index).is_some_and(|w| w.load(Ordering::Relaxed) & FLOW_PAUSED != 0)
    }

    /// Pauses (`true`) or resumes entry `index`; whether it was paused before. A resume
    /// wakes every sleeper of the queue, since a push to it while it was paused woke nobody.
    pub fn set_paused(&self, index: u32, paused: bool) -> bool {
        let Some(w) = self.flow_word(index) else { return false };
        // SeqCst: pairs with the fence of a producer's notify and the `sleepers` increment
        // of a consumer (see the module comment).
        let had = if paused {
            w.fetch_or(FLOW_PAUSED, Ordering::SeqCst)
        } else {
            w.fetch_and(!FLOW_PAUSED, Ordering::SeqCst)
        };
        if !paused {
            if let Some(wk) = self.waker(index) {
                crate::wait::wake_all(wk);
            }
        }
        had & FLOW_PAUSED != 0
    }

    /// Clears entry `index`'s flow word; the caller holds the entry in `QUEUE_CREATING`.
    pub(super) fn reset_flow(&self, index: u32) {
        if let Some(w) = self.flow_word(index) {
            w.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::segment::{one_queue_segment, QueueSpec};
    use crate::{Owner, Thief};

    #[test]
    fn a_paused_queue_gives_nothing_until_resumed() {
        let (_dir, seg, q) = one_queue_segment();
        let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let thief = Thief::new(seg.clone(), &q, 1).unwrap();
        assert!(!seg.set_paused(q.index, true));
        owner.push(b"a").unwrap();
        owner.push(b"b").unwrap();
        assert!(seg.is_paused(q.index));
        assert!(thief.steal().unwrap().is_none());
        assert!(owner.pop().unwrap().is_none());
        assert_eq!(thief.len(), 2, "pushes are taken while paused");
        assert!(seg.set_paused(q.index, false));
        thief.steal().unwrap().expect("a job once resumed").ack().unwrap();
        owner.pop().unwrap().expect("the other").ack().unwrap();
    }

    #[test]
    fn a_new_queue_in_a_paused_entry_starts_unpaused() {
        let (_dir, seg, q) = one_queue_segment();
        seg.set_paused(q.index, true);
        seg.delete_queue_at(q.index, true).unwrap();
        let q = seg.create_queue(&QueueSpec::new("again")).unwrap();
        assert!(!seg.is_paused(q.index));
    }
}
