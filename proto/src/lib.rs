//! `xtcq-proto`: the control protocol between `xtcqd` and the processes that use it.
//!
//! One place for everything both sides must agree on:
//! - [`frame`]: how messages travel — a 4-byte big-endian length, then that many bytes of
//!   JSON; frames above [`MAX_FRAME_LEN`] are refused before anything is allocated;
//! - [`msg`]: the typed messages — the [`msg::Hello`] handshake that opens every connection,
//!   the [`msg::Request`] / [`msg::Response`] pairs, server [`msg::Event`]s and the typed
//!   [`msg::ErrorCode`] every error reply carries;
//! - [`dead`]: listing, re-queuing and purging dead letters through the daemon;
//! - [`backoff`]: a queue's retry backoff policy (exponential, jittered, capped);
//! - [`duration`]: the one duration syntax of both programs' flags (`500ms`, `5s`, `2m`);
//! - [`lease`]: the lease durations the daemon can honour (1 ms resolution);
//! - [`names`]: users and groups by name, through the system's name service (NSS);
//! - [`queue_name`]: which queue names exist, and how a name from the segment is printed;
//! - [`paths`]: where the socket and the segment are by default, resolved the same way by the
//!   daemon and by every client.
//!
//! Invariants:
//! - the handshake types ([`msg::Hello`], [`msg::HelloReply`]) never change shape, so a
//!   client and a daemon of different protocol versions can always tell each other so;
//! - decoding never panics on any input: garbage yields a [`frame::FrameError`];
//! - nothing here does I/O on its own except the blocking helpers in [`frame`] that a caller
//!   hands a reader or writer.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backoff;
pub mod batch_msg;
pub mod dead;
pub mod duration;
pub mod frame;
pub mod job_msg;
pub mod lease;
pub mod msg;
pub mod names;
pub mod paths;
mod queue_msg;
pub mod queue_name;
mod stats_msg;

pub use backoff::{Jitter, RetryBackoff};
pub use batch_msg::{BatchAction, BatchInfo, BatchStatus, OnComplete};
pub use frame::{FrameError, MAX_FRAME_LEN, MAX_REPLY_LEN};
pub use msg::*;

/// The protocol version this build speaks. Bumped on any incompatible change to [`msg`]
/// after the handshake.
///
/// - 2: `DeadLetters` and `ActOnDead` (dead letters through the daemon), and the
///   `FenceCommand` / `Unfence` shapes that had changed without a bump.
pub const PROTOCOL_VERSION: u32 = 2;
