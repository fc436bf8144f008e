//! Batches on the wire: [`crate::msg::Request::Batch`] and its answer.

use serde::{Deserialize, Serialize};

/// What to do with a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchAction {
    /// Open it; `on_complete` is the callback job, pushed once when it completes.
    Open {
        /// The callback job, if any.
        on_complete: Option<OnComplete>,
    },
    /// Seal it: it takes no more jobs, and completes when its last job ends.
    Seal,
    /// Only say where it is.
    Progress,
}

/// A batch's callback job: `payload` pushed into queue `queue` when the batch completes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnComplete {
    /// The queue it is pushed into (the batch's own, or another).
    pub queue: String,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Where a batch is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchStatus {
    /// Takes pushes.
    Open,
    /// Takes no more pushes; completes when its last job ends.
    Sealed,
    /// Every job ended (acked, dead or cancelled); its callback was pushed.
    Complete,
}

/// A batch and its counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchInfo {
    /// Its name.
    pub name: String,
    /// Its slot in the segment's batch table.
    pub slot: u32,
    /// The generation it was opened at (pushes name the batch by slot and generation).
    pub generation: u32,
    /// Where it is.
    pub status: BatchStatus,
    /// Jobs pushed into it.
    pub pushed: u64,
    /// Jobs not yet ended (at the daemon's last count).
    pub running: u64,
    /// Jobs acked.
    pub acked: u64,
    /// Dead letters.
    pub dead: u64,
    /// Jobs cancelled.
    pub cancelled: u64,
}
