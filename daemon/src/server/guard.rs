//! Watching the segment's file for what another process can do to it: truncate it, unlink it,
//! or put another file at its path.
//!
//! The daemon keeps the file it created or adopted open and mapped for its whole life and
//! never opens the path again; this module compares, at each scan, that open file with what
//! it was (`fstat`: its length) and with what the path now names (`lstat`: device and
//! inode). The first difference found is kept for good (a replaced file coming back does not
//! make the daemon trust the path again), logged at error level once, and from then on every
//! control request but `Ping` and `Shutdown` is refused with that reason: no new process
//! attaches to a segment that is gone, or maps a different file than the daemon serves.
//!
//! Processes already attached to an unlinked file keep working in it (their mapping is the
//! file), and the daemon goes on watching and recovering them. A truncated file is lost: the
//! SIGBUS guard ([`xtcq_shm::sigbus`]) turns every touch of it into zero pages in the daemon
//! and in every reader, instead of a crash.
//!
//! Only the recovery and attach paths pay for this: one `fstat` and one `lstat` per scan.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::error;
use xtcq_proto::{ErrorCode, ErrorReply};
use xtcq_shm::Segment;

/// How often the segment's file is checked.
pub const SCAN_EVERY: Duration = Duration::from_millis(100);

/// What the daemon knows of its segment's file.
#[derive(Debug)]
pub struct SegmentGuard {
    seg: Arc<Segment>,
    path: PathBuf,
    /// `(dev, ino)` of the open file.
    id: (u64, u64),
    /// The length it must have.
    len: u64,
    /// Whether the path is checked: not for a sealed memfd, which has none.
    by_path: bool,
    /// The first thing found wrong; never cleared.
    lost: Mutex<Option<String>>,
}

impl SegmentGuard {
    /// Watches `seg` (just created or adopted: its file is what its path names).
    pub fn new(seg: Arc<Segment>) -> std::io::Result<Self> {
        let md = seg.file().metadata()?;
        Ok(Self {
            path: seg.path().to_path_buf(),
            id: (md.dev(), md.ino()),
            len: seg.descriptor().regions.total_len,
            by_path: !seg.is_sealed(),
            seg,
            lost: Mutex::new(None),
        })
    }

    /// The segment's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the segment is no longer served, once it is not.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The refusal for a control request, once the segment is lost.
    pub fn refusal(&self) -> Option<ErrorReply> {
        self.lost().map(|why| {
            ErrorReply::new(
                ErrorCode::SegmentLost,
                format!(
                    "xtcqd refuses new work: {why}. Processes attached before keep what they \
                     mapped; stop this xtcqd and start it again (with --recreate if the file is \
                     still there) to serve a segment anew"
                ),
            )
        })
    }

    /// Checks the file once; returns what is wrong, if anything (also kept and logged the
    /// first time).
    pub fn scan(&self) -> Option<String> {
        if let Some(why) = self.lost() {
            return Some(why);
        }
        let why = self.what_is_wrong()?;
        error!(segment = %self.path.display(), "segment lost: {why}");
        *self.lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        Some(why)
    }

    fn what_is_wrong(&self) -> Option<String> {
        let p = self.path.display();
        if self.seg.is_lost() {
            return Some(format!("segment {p} was truncated by another process (its pages vanished)"));
        }
        match self.seg.file().metadata() {
            Ok(md) if md.len() < self.len => {
                return Some(format!(
                    "segment {p} was truncated by another process to {} bytes (it has {})",
                    md.len(),
                    self.len
                ))
            }
            Ok(_) => {}
            Err(e) => return Some(format!("cannot fstat segment {p}: {e}")),
        }
        if !self.by_path {
            return None;
        }
        // The path before the link count: a file renamed over ours also unlinks ours, and
        // "replaced" is the better answer then.
        match std::fs::symlink_metadata(&self.path) {
            Ok(md) if (md.dev(), md.ino()) != self.id => Some(format!(
                "segment {p} now names another file (dev {} inode {}, not this daemon's dev {} inode {}); \
                 this daemon will not adopt it",
                md.dev(),
                md.ino(),
                self.id.0,
                self.id.1
            )),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
                "segment {p} was unlinked (removed by hand, or by systemd-logind's RemoveIPC=yes at \
                 logout); its jobs live on only in the processes that still map it"
            )),
            Err(e) => Some(format!("cannot stat segment path {p}: {e}")),
        }
    }
}
