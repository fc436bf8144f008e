//! The dead-letter messages: [`crate::msg::Request::DeadLetters`] lists a queue's dead
//! letters a page at a time, [`crate::msg::Request::ActOnDead`] re-queues or purges many.
//!
//! Rules kept:
//! - a page is sized to fit a frame ([`crate::MAX_FRAME_LEN`]): payloads are cut to
//!   [`DEAD_PAYLOAD_SHOWN`] bytes, their whole length said beside;
//! - a job is named as people name it (id or handle, [`JobRef`]); the daemon resolves it
//!   against the queue's dead letters, never trusting the name.

use serde::{Deserialize, Serialize};

/// What to do to dead letters ([`crate::msg::Request::ActOnDead`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeadAction {
    /// Back in line, attempts reset.
    Requeue,
    /// Deleted.
    Purge,
}

/// A job as a person names it: `index.number`, where `number` is its birth (its stable id,
/// as every command prints it) or its current generation (its handle).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRef {
    /// Record index.
    pub index: u32,
    /// Birth or generation.
    pub number: u32,
}

/// One dead letter as [`crate::msg::Request::DeadLetters`] lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterInfo {
    /// Record index.
    pub index: u32,
    /// Its current generation (with `index`, the handle).
    pub generation: u32,
    /// Its birth generation (with `index`, the stable id).
    pub birth: u32,
    /// Times it was run and given back.
    pub attempts: u32,
    /// Why it last failed.
    pub last_error: String,
    /// Its payload, cut to [`DEAD_PAYLOAD_SHOWN`] bytes so that a page fits a frame.
    pub payload: Vec<u8>,
    /// The payload's whole length.
    pub payload_len: u32,
}

/// The most payload bytes of one dead letter that a [`DeadLetterInfo`] carries.
pub const DEAD_PAYLOAD_SHOWN: usize = 8 * 1024;

/// A page of dead letters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterPage {
    /// The dead letters, in record order.
    pub letters: Vec<DeadLetterInfo>,
    /// The `from` of the next page, when there may be more.
    pub next: Option<u32>,
}

/// What a [`crate::msg::Request::ActOnDead`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadActed {
    /// Jobs re-queued (or purged).
    pub done: u64,
    /// Jobs that stopped being dead letters between the check and their turn (another
    /// process re-queued or purged them): left alone.
    pub gone: u64,
}
