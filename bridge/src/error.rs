//! The bridge's errors: each says what was wrong and what to do.

use std::time::Duration;

/// Why the bridge could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The local daemon refused or failed.
    #[error("local xtcqd: {0}")]
    Local(#[from] xtcq_client::Error),
    /// Talking to the NATS server failed.
    #[error("NATS at {url}: {message}")]
    Nats {
        /// The server.
        url: String,
        /// What failed.
        message: String,
    },
    /// The stream exists with settings the bridge cannot keep its promises with.
    #[error("stream {stream}: {message}")]
    Stream {
        /// The stream.
        stream: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The `--state` file cannot be used.
    #[error("state file {path}: {message}; fix or remove it (removing it may let jobs held before a crash run twice)")]
    State {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `out`'s `--id-secret` file cannot be used.
    #[error("id secret {path} (--id-secret): {message}")]
    IdSecret {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// A credential or TLS option cannot be used.
    #[error("{flag}: {message}")]
    Credentials {
        /// The option (or variable) at fault.
        flag: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// The consumer's AckWait would let JetStream redeliver a job the local queue still runs.
    #[error(
        "consumer {consumer}: its AckWait ({ack_wait:?}) must be longer than the local queue's lease \
         ({lease:?}), or JetStream may hand the message to a second host while this one still runs it; \
         recreate the consumer with a longer --ack-wait (or shorten the queue's lease)"
    )]
    AckWaitTooShort {
        /// The consumer.
        consumer: String,
        /// Its AckWait.
        ack_wait: Duration,
        /// The local lease (or the bridge's poll interval times 3 when the queue has none).
        lease: Duration,
    },
}

impl BridgeError {
    /// A NATS failure at `url`.
    pub fn nats(url: &str, e: impl std::fmt::Display) -> Self {
        BridgeError::Nats { url: url.to_string(), message: e.to_string() }
    }
}
