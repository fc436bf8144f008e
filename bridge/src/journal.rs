//! `in`'s state file (`--state`): which stream message each local job it pushed came from, so
//! that a restarted bridge recognises the redelivery of a message whose job is already on this
//! host, instead of pushing a second copy that a second worker could run at the same time.
//!
//! Format, one entry a line, rewritten whole (a temporary file renamed over it):
//!
//! ```text
//! xtcq-bridge-state 2 SEGMENT_CREATED_NS
//! STREAM_SEQ STORED_NS RECORD_INDEX BIRTH
//! ```
//!
//! A message is named by its stream sequence *and* the time the server stored it
//! ([`MsgKey`]): a deleted and re-created stream numbers its messages from 1 again, and a
//! sequence alone would take a new message for the redelivery of a job settled long ago (and
//! ack it, unrun). Entries of another segment (the daemon recreated it) are dropped on load:
//! their jobs are gone. So are those of a version 1 file, which named messages by sequence
//! only: which stream they came from cannot be told. Written after each fetched batch is pushed, so a crash in the middle of a batch's
//! pushes can still leave a job pushed and not recorded (pushed again after a restart).
//! Not fsynced: it guards against a crash of the bridge, and a crash of the host loses the
//! segment in /dev/shm anyway.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use xtcq_client::JobId;

use crate::error::BridgeError;

const MAGIC: &str = "xtcq-bridge-state 2";
const MAGIC_V1: &str = "xtcq-bridge-state 1";

/// One stream message, named by what the stream gave: its sequence, and when the server
/// stored it. Every redelivery of a message carries both; a re-created stream's message of
/// the same sequence was stored later (after the stream's creation, itself after the
/// deletion), so the pair never names two messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgKey {
    /// Stream sequence.
    pub seq: u64,
    /// The server's time of storing it (ns since the epoch).
    pub stored_ns: u64,
}

impl std::fmt::Display for MsgKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.seq, self.stored_ns)
    }
}

/// The file and the segment its entries belong to.
pub struct Journal {
    path: PathBuf,
    segment: u64,
}

impl Journal {
    /// The journal at `path` for the segment created at `segment` (ns).
    pub fn new(path: &Path, segment: u64) -> Self {
        Journal { path: path.to_path_buf(), segment }
    }

    /// The entries left by the previous run (none when the file is missing or is another
    /// segment's).
    pub fn load(&self) -> Result<HashMap<MsgKey, JobId>, BridgeError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
            Err(e) => return Err(self.bad(format!("cannot read it: {e}"))),
        };
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default();
        if header.starts_with(MAGIC_V1) {
            tracing::warn!(path = %self.path.display(),
                "state file of an older bridge (messages named by sequence only): ignored; a redelivery \
                 of a job it held may be pushed again");
            return Ok(HashMap::new());
        }
        let Some(seg) = header.strip_prefix(MAGIC).map(str::trim) else {
            return Err(self.bad(format!("not a bridge state file (first line {header:?})")));
        };
        if seg.parse::<u64>().ok() != Some(self.segment) {
            tracing::warn!(path = %self.path.display(), "state file of another segment: its jobs are gone, ignored");
            return Ok(HashMap::new());
        }
        let mut out = HashMap::new();
        for l in lines {
            let f: Vec<u64> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            let [seq, stored_ns, index, birth] = f[..] else {
                return Err(self.bad(format!("bad line {l:?}")));
            };
            out.insert(MsgKey { seq, stored_ns }, JobId { index: index as u32, birth: birth as u32 });
        }
        Ok(out)
    }

    /// Replaces the file's entries with `entries`.
    pub fn save<'a>(&self, entries: impl Iterator<Item = (MsgKey, &'a JobId)>) {
        let mut text = format!("{MAGIC} {}\n", self.segment);
        for (k, id) in entries {
            text.push_str(&format!("{} {} {} {}\n", k.seq, k.stored_ns, id.index, id.birth));
        }
        let mut tmp = self.path.clone();
        tmp.as_mut_os_string().push(".tmp");
        if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &self.path)) {
            tracing::warn!(path = %self.path.display(), "cannot write the state file: {e}; after a crash, jobs held now may be pushed twice");
        }
    }

    fn bad(&self, message: String) -> BridgeError {
        BridgeError::State { path: self.path.clone(), message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_another_segments_are_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state");
        let j = Journal::new(&path, 7);
        assert!(j.load().expect("missing file").is_empty());
        let id = JobId { index: 3, birth: 9 };
        let k = MsgKey { seq: 42, stored_ns: 1_700_000_000_000_000_001 };
        j.save([(k, &id)].into_iter());
        let loaded = j.load().expect("load");
        assert_eq!(loaded.get(&k), Some(&id));
        assert_eq!(loaded.get(&MsgKey { seq: 42, stored_ns: k.stored_ns + 1 }), None, "another stream's 42");
        assert!(Journal::new(&path, 8).load().expect("other segment").is_empty());
        std::fs::write(&path, "xtcq-bridge-state 1 7\n42 3 9\n").expect("write");
        assert!(j.load().expect("version 1").is_empty(), "sequence-only entries are not trusted");
        std::fs::write(&path, "junk\n").expect("write");
        assert!(j.load().is_err());
    }
}
