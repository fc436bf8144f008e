//! A queue as the protocol names it: its flavor and parameters at create, what the daemon
//! says of it, and what attaching to it or deleting it gives back.
//!
//! - Fields may be added (with `#[serde(default)]`), never removed or retyped.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Order in which a queue's owners pop their own deque.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Flavor {
    /// Newest first (the Chase-Lev default; best cache locality).
    Lifo,
    /// Oldest first.
    Fifo,
}

impl Flavor {
    /// Its name as the CLI takes and prints it: `lifo` or `fifo`.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Lifo => "lifo",
            Flavor::Fifo => "fifo",
        }
    }
}

/// Properties of a queue to create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueParams {
    /// Name: 1 to 64 bytes of UTF-8, no whitespace or control characters.
    pub name: String,
    /// Deques (that is, owners) the queue can have; at most the segment's deques per queue.
    pub deques: u32,
    /// Slots per deque: a power of two, at most the segment's deque capacity.
    pub capacity: u32,
    /// The owners' pop order.
    pub flavor: Flavor,
    /// Attempts before a job is dead-lettered (0: no limit).
    pub max_attempts: u32,
    /// Default claim lease in ms (0: none).
    pub lease_ms: u32,
    /// Priority levels, 1 to 8: a push's priority (0 the most urgent) picks one, and a
    /// consumer takes from the most urgent non-empty level first. Each level has `deques`
    /// deques of the segment's deques per queue. Absent (1) from an older client.
    #[serde(default = "one_level")]
    pub levels: u32,
    /// Every `aging`-th job a consumer handle takes comes from the least urgent non-empty
    /// level (0: never). Absent (0) from an older client.
    #[serde(default)]
    pub aging: u32,
}

/// One priority level: what a queue created without levels has.
pub fn one_level() -> u32 {
    1
}

impl QueueParams {
    /// A queue called `name` with the defaults: 4 deques of 1024 slots, LIFO owners, no
    /// attempt limit, no claim lease. The segment must allow that many deques and slots.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            deques: 4,
            capacity: 1024,
            flavor: Flavor::Lifo,
            max_attempts: 0,
            lease_ms: 0,
            levels: 1,
            aging: 0,
        }
    }
}

/// Which settings of an existing queue differ from those a create asked for, one phrase
/// each (`"flavor is lifo, not fifo"`); empty when they match. Used by the daemon to answer
/// an idempotent create ([`Request::CreateQueueExistOk`](crate::Request::CreateQueueExistOk)).
pub fn settings_differ(asked: &QueueParams, existing: &QueueInfo) -> Vec<String> {
    let mut out = Vec::new();
    if asked.flavor != existing.flavor {
        out.push(format!("flavor is {}, not {}", existing.flavor.name(), asked.flavor.name()));
    }
    let numbers = [
        ("deques", existing.deques, asked.deques),
        ("capacity", existing.capacity, asked.capacity),
        ("max_attempts", existing.max_attempts, asked.max_attempts),
        ("lease_ms", existing.lease_ms, asked.lease_ms),
        ("levels", existing.levels, asked.levels),
        ("aging", existing.aging, asked.aging),
    ];
    for (what, has, want) in numbers {
        if has != want {
            out.push(format!("{what} is {has}, not {want}"));
        }
    }
    out
}

/// A queue as the daemon describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    /// Queue-table index.
    pub index: u32,
    /// Name.
    pub name: String,
    /// The owners' pop order.
    pub flavor: Flavor,
    /// Deques.
    pub deques: u32,
    /// Slots per deque.
    pub capacity: u32,
    /// Attempts before dead-lettering (0: no limit).
    pub max_attempts: u32,
    /// Default claim lease in ms (0: none).
    pub lease_ms: u32,
    /// Priority levels (see [`QueueParams::levels`]). Absent (1) from an older daemon.
    #[serde(default = "one_level")]
    pub levels: u32,
    /// Aging (see [`QueueParams::aging`]). Absent (0) from an older daemon.
    #[serde(default)]
    pub aging: u32,
    /// The retry backoff set for the queue (`None`: a failed job is retried at once). Absent
    /// from a daemon that predates it.
    #[serde(default)]
    pub retry_backoff: Option<crate::backoff::RetryBackoff>,
    /// Paused ([`crate::msg::Request::SetPaused`]): consumers take nothing from it. Absent
    /// (false) from a daemon that predates pausing.
    #[serde(default)]
    pub paused: bool,
}

/// What an attached process needs to map the segment and act in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// The process slot registered for this connection: the `me` passed to the segment API.
    pub process_slot: u32,
    /// The slot's incarnation number.
    pub slot_epoch: u64,
    /// The segment file.
    pub segment_path: PathBuf,
    /// The queue attached to.
    pub queue: QueueInfo,
}

/// A deque lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerLease {
    /// Slot and segment.
    pub attachment: Attachment,
    /// The deque now owned.
    pub deque: u32,
    /// The lease word stored in the deque header: `epoch << 32 | (slot + 1)`.
    pub lease: u64,
}

impl OwnerLease {
    /// The epoch half of the lease word.
    pub fn lease_epoch(&self) -> u32 {
        (self.lease >> 32) as u32
    }
}

/// What a [`Request::DeleteQueue`](crate::Request::DeleteQueue) did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDeleted {
    /// The queue as it was.
    pub queue: QueueInfo,
    /// Queued jobs dropped (only with `force`).
    pub dropped_queued: u64,
    /// Dead letters dropped (only with `force`).
    pub dropped_dead: u64,
}
