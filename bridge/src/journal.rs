//! `in`'s state file (`--state`): which stream message each local job it pushed came from, so
//! that a restarted bridge recognises the redelivery of a message whose job is already on this
//! host, instead of pushing a second copy that a second worker could run at the same time.
//!
//! Format, one entry a line, rewritten whole (a temporary file renamed over it):
//!
//! ```text
//! xtcq-bridge-state 1 SEGMENT_CREATED_NS
//! STREAM_SEQ RECORD_INDEX BIRTH
//! ```
//!
//! Entries of another segment (the daemon recreated it) are dropped on load: their jobs are
//! gone. Written after each fetched batch is pushed, so a crash in the middle of a batch's
//! pushes can still leave a job pushed and not recorded (pushed again after a restart).
//! Not fsynced: it guards against a crash of the bridge, and a crash of the host loses the
//! segment in /dev/shm anyway.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use xtcq_client::JobId;

use crate::error::BridgeError;

const MAGIC: &str = "xtcq-bridge-state 1";

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
    pub fn load(&self) -> Result<HashMap<u64, JobId>, BridgeError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
            Err(e) => return Err(self.bad(format!("cannot read it: {e}"))),
        };
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default();
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
            let [seq, index, birth] = f[..] else {
                return Err(self.bad(format!("bad line {l:?}")));
            };
            out.insert(seq, JobId { index: index as u32, birth: birth as u32 });
        }
        Ok(out)
    }

    /// Replaces the file's entries with `entries`.
    pub fn save<'a>(&self, entries: impl Iterator<Item = (u64, &'a JobId)>) {
        let mut text = format!("{MAGIC} {}\n", self.segment);
        for (seq, id) in entries {
            text.push_str(&format!("{seq} {} {}\n", id.index, id.birth));
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
        j.save([(42u64, &id)].into_iter());
        assert_eq!(j.load().expect("load").get(&42), Some(&id));
        assert!(Journal::new(&path, 8).load().expect("other segment").is_empty());
        std::fs::write(&path, "junk\n").expect("write");
        assert!(j.load().is_err());
    }
}
