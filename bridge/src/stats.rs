//! The bridge's counters: logged every `--stats-interval` and at exit, and written as JSON
//! to `--stats-file` (atomically: a temporary file renamed over it) for scripts and tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one bridge. Names as they appear in the JSON.
#[derive(Default, Debug)]
pub struct Counters {
    /// `out`: jobs taken from the local queue.
    pub stolen: AtomicU64,
    /// `out`: publishes the server acked as new messages.
    pub published: AtomicU64,
    /// `out`: publishes the server acked as duplicates (a re-queued job it already had).
    pub duplicates: AtomicU64,
    /// `out`: publishes that failed; the job was given back to the local queue.
    pub publish_errors: AtomicU64,
    /// Jobs acked locally (`out`) or messages acked upstream (`in`).
    pub acked: AtomicU64,
    /// `out`: local acks refused (the lease had expired; the job is re-queued and its next
    /// publish is a duplicate).
    pub local_ack_lost: AtomicU64,
    /// `in`: messages fetched.
    pub fetched: AtomicU64,
    /// `in`: messages pushed into the local queue.
    pub pushed: AtomicU64,
    /// `in`: deliveries of a message this bridge already held (not pushed again).
    pub redelivered_held: AtomicU64,
    /// `in`: messages terminated (`+TERM`) after a local dead letter or too many deliveries.
    pub terminated: AtomicU64,
    /// `in`: messages given back (`-NAK`): the local job was lost or could not be pushed.
    pub nacked: AtomicU64,
    /// `in`: upstream acks or terms the server refused or did not confirm.
    pub ack_errors: AtomicU64,
    /// `in`: acks sent after this bridge's hold lapsed (AckWait passed without a `+WPI`).
    pub late_acks: AtomicU64,
    /// `in`: redeliveries whose local job was pushed before a restart (`--state`): adopted
    /// or settled, not pushed again.
    pub adopted: AtomicU64,
    /// `in`: messages held now (pushed, not settled yet).
    pub held: AtomicU64,
    /// `in`: times the stream was found deleted (and created again, or taken as re-created).
    pub streams_recreated: AtomicU64,
    /// `in`: held messages forgotten upstream because their stream was deleted (their local
    /// jobs ran or run here; nothing was acked for them).
    pub dropped_with_stream: AtomicU64,
}

impl Counters {
    fn fields(&self) -> Vec<(&'static str, u64)> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("stolen", l(&self.stolen)),
            ("published", l(&self.published)),
            ("duplicates", l(&self.duplicates)),
            ("publish_errors", l(&self.publish_errors)),
            ("acked", l(&self.acked)),
            ("local_ack_lost", l(&self.local_ack_lost)),
            ("fetched", l(&self.fetched)),
            ("pushed", l(&self.pushed)),
            ("redelivered_held", l(&self.redelivered_held)),
            ("terminated", l(&self.terminated)),
            ("nacked", l(&self.nacked)),
            ("ack_errors", l(&self.ack_errors)),
            ("late_acks", l(&self.late_acks)),
            ("adopted", l(&self.adopted)),
            ("held", l(&self.held)),
            ("streams_recreated", l(&self.streams_recreated)),
            ("dropped_with_stream", l(&self.dropped_with_stream)),
        ]
    }

    /// One JSON object.
    pub fn json(&self) -> String {
        let body: Vec<String> = self.fields().iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    }

    /// `k=v` pairs for a log line.
    pub fn line(&self) -> String {
        self.fields().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }

    /// Writes the JSON to `path` (temporary file, then rename).
    pub fn write(&self, path: &Path) {
        let mut tmp = PathBuf::from(path);
        tmp.as_mut_os_string().push(".tmp");
        let done = std::fs::write(&tmp, self.json()).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = done {
            tracing::warn!(path = %path.display(), "cannot write the stats file: {e}");
        }
    }
}

/// `a += 1`.
pub fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}
