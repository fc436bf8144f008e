//! The daemon-private state file: what only `xtcqd` may say, kept where only `xtcqd` writes.
//!
//! Every attached process maps the segment read-write, so nothing in it can tell the daemon
//! who holds a process slot or who may use a queue: a hostile one could write every slot as
//! taken, or name itself the owner of a queue. The daemon keeps that in its own memory while
//! it runs, and in this file (beside the socket, `SOCKET.state`) for the next daemon:
//!
//! - the process slots it registered: slot, epoch, and the process as the kernel identified
//!   it (pid, uid, start time);
//! - each queue's permissions: its owner uid and the uids and gids it was shared with, and
//!   its retry backoff (clients learn it at attach; the segment has no room of its own for
//!   it, and a policy a hostile process could rewrite would be no policy);
//! - the commands `xtcq work` registered for fencing (slot, job, pid, start time), so that
//!   the next daemon kills them before their jobs run again.
//!
//! The file is reached through the socket directory's descriptor, never followed through a
//! symlink (`O_NOFOLLOW`), created owner-only with `O_EXCL` under a temporary name and
//! renamed into place (a crash leaves the old file or the new one, never half of one). A
//! file that is not a regular file owned by the daemon's uid with no group or other access
//! is ignored, with a warning: the daemon then trusts nothing it cannot verify.
//!
//! The file is one line of JSON (the whole state), followed by a journal of fence
//! registrations, one JSON line each (`{"add":…}` / `{"remove":…}`), appended to the file
//! just written: a registration must be kept before it is answered, once per job, and an
//! append costs one `write` where a rewrite costs a create and a rename. The whole file is
//! rewritten (and the journal emptied) at any other change, and after `JOURNAL_MAX` lines.
//!
//! Invariant: the file names the segment it describes (device and inode); a daemon adopting
//! another segment ignores it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};
use tracing::warn;

/// A process slot as this daemon registered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRecord {
    /// Incarnation.
    pub epoch: u64,
    /// Pid in the daemon's namespace.
    pub pid: u32,
    /// Uid (from `SO_PEERCRED`).
    pub uid: u32,
    /// Start time from `/proc` (0: not known, so it cannot be verified after a restart).
    pub start_time: u64,
}

/// A command `xtcq work` registered for fencing (see [`crate::fence`]): what the next
/// daemon needs to find its process group and re-identify its leader, and its cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceRecord {
    /// The process slot that holds the job.
    pub slot: u32,
    /// The job's record index.
    pub index: u32,
    /// The job's birth (with the index, its id).
    pub birth: u32,
    /// The command's pid, which is also its process group id.
    pub pid: u32,
    /// Its start time from `/proc`.
    pub start_time: u64,
    /// The cgroup it runs in, when the worker handed one over (see [`crate::fence::cgroup`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupRecord>,
}

/// A command's cgroup as the state file keeps it: how a next daemon finds it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupRecord {
    /// Its path as the kernel named the directory descriptor to the daemon.
    pub path: String,
    /// Its id (the directory's inode), which no other cgroup gets while the host runs.
    pub id: u64,
}

/// One line of the journal after the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FenceChange {
    /// A command was registered (replacing any for its slot and record).
    Add(FenceRecord),
    /// The command `pid` of (slot, record, birth) exited and was reaped.
    Remove {
        /// Its slot.
        slot: u32,
        /// Its record.
        index: u32,
        /// Its job's birth.
        birth: u32,
        /// Its pid (another registration for the job stays).
        pid: u32,
    },
}

/// Journal lines after which the next change rewrites the whole file.
const JOURNAL_MAX: u32 = 4096;

/// Who may use a queue besides root and the daemon's own uid.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueAcl {
    /// The queue's name when it was created (a queue-table entry reused for another name is
    /// another queue).
    pub name: String,
    /// The uid that created it.
    pub owner: u32,
    /// Further uids allowed (`create --allow-uid`).
    #[serde(default)]
    pub uids: Vec<u32>,
    /// Gids whose members are allowed (`create --allow-gid`).
    #[serde(default)]
    pub gids: Vec<u32>,
    /// The retry backoff `xtcq create --retry-backoff` set (`None`: retried at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<xtcq_proto::RetryBackoff>,
}

impl QueueAcl {
    /// What a dump carries of it.
    pub fn into_grants(self) -> xtcq_dump::QueueGrants {
        xtcq_dump::QueueGrants {
            owner: self.owner,
            uids: self.uids,
            gids: self.gids,
            retry_backoff: self.retry_backoff,
        }
    }
}

/// The file's content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonState {
    /// `(st_dev, st_ino)` of the segment this describes.
    pub segment: (u64, u64),
    /// Registered process slots, by index.
    #[serde(default)]
    pub slots: BTreeMap<u32, SlotRecord>,
    /// Queue permissions, by queue-table index.
    #[serde(default)]
    pub queues: BTreeMap<u32, QueueAcl>,
    /// Commands registered for fencing.
    #[serde(default)]
    pub fences: Vec<FenceRecord>,
    /// The segment's daemon epoch of the daemon that wrote this (`None`: an older daemon's
    /// file). A daemon started since on the segment (with another `--state`) makes the file
    /// stale: the next one finds the epoch moved on by more than itself.
    #[serde(default)]
    pub daemon_epoch: Option<u64>,
    /// The segment's path and the daemon that wrote this, for the next daemon to say when
    /// that segment is gone or replaced (`None`: an older daemon's file, which kept them in
    /// `SOCKET.segment`; see `crate::persistence::segment_memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<Served>,
}

/// Which segment file a daemon served, by path, and which daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// The segment's path.
    pub path: PathBuf,
    /// The daemon's pid.
    pub pid: u32,
    /// The kernel's boot id when it was written (`/proc/sys/kernel/random/boot_id`): a
    /// segment in memory does not survive a reboot, which is no error of anyone's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), `None` where the kernel does not say.
pub fn boot_id() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(text.trim().to_string()).filter(|s| !s.is_empty())
}

/// The state file, reached through its directory's descriptor.
#[derive(Debug)]
pub struct StateFile {
    dir: OwnedFd,
    dir_path: PathBuf,
    name: OsString,
    /// The file last written, open for the journal, and its journal's length.
    journal: Mutex<Option<(std::fs::File, u32)>>,
}

fn no_follow_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?)
}

impl StateFile {
    /// The default state file of the daemon serving `socket`: `SOCKET.state` in the
    /// socket's directory (which startup has checked is ours, or root's and sticky).
    pub fn beside(socket: &Path) -> io::Result<StateFile> {
        StateFile::at(&default_path(socket))
    }

    /// The state file `path`. Its directory must be the daemon's own or root's, and not
    /// writable by others unless sticky (where no one else can replace our file).
    pub fn at(path: &Path) -> io::Result<StateFile> {
        let dir_path = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the state file path names no file"))?
            .to_os_string();
        let dir = no_follow_dir(dir_path)?;
        let st = rustix::fs::fstat(&dir)?;
        let me = rustix::process::geteuid().as_raw();
        let open_to_others = st.st_mode & 0o022 != 0 && st.st_mode & 0o1000 == 0;
        if (st.st_uid != me && st.st_uid != 0) || open_to_others {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "the directory is owned by uid {} with mode {:o}: it must be ours (uid {me}) or root's, \
                     and not writable by others unless sticky (give --state a path in a directory only \
                     this user can write)",
                    st.st_uid,
                    st.st_mode & 0o7777
                ),
            ));
        }
        Ok(StateFile { dir, dir_path: dir_path.to_path_buf(), name, journal: Mutex::new(None) })
    }

    /// The file's path (for messages).
    pub fn path(&self) -> PathBuf {
        self.dir_path.join(&self.name)
    }

    /// The state, if the file exists, is the daemon's own, and parses; `None` otherwise
    /// (with a warning for a file that exists but is not to be trusted).
    pub fn load(&self) -> Option<DaemonState> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&self.dir, self.name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return None,
            Err(e) => {
                warn!(file = %self.path().display(), error = %e, "cannot open xtcqd's state file; ignoring it");
                return None;
            }
        };
        let f = std::fs::File::from(fd);
        let md = f.metadata().ok()?;
        let me = rustix::process::geteuid().as_raw();
        if !md.is_file() || md.uid() != me || md.mode() & 0o077 != 0 {
            warn!(
                file = %self.path().display(),
                owner = md.uid(),
                mode = format!("{:o}", md.mode() & 0o7777),
                "xtcqd's state file is not a regular file of uid {me} with mode 0600; ignoring it (remove it)"
            );
            return None;
        }
        let mut text = String::new();
        (&f).take(64 << 20).read_to_string(&mut text).ok()?;
        let mut lines = text.lines();
        let mut state: DaemonState = match serde_json::from_str(lines.next().unwrap_or_default()) {
            Ok(s) => s,
            Err(e) => {
                warn!(file = %self.path().display(), error = %e, "xtcqd's state file does not parse; ignoring it");
                return None;
            }
        };
        let changes: Result<Vec<FenceChange>, _> = lines.map(serde_json::from_str).collect();
        match changes {
            Ok(changes) => state.apply(&changes),
            // Only this daemon's uid writes here, a line at a time: not ours to guess at.
            Err(e) => {
                warn!(file = %self.path().display(), error = %e, "the journal of xtcqd's state file does not parse; ignoring the file");
                return None;
            }
        }
        Some(state)
    }

    fn journal(&self) -> MutexGuard<'_, Option<(std::fs::File, u32)>> {
        self.journal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `change` to the file last saved. `Ok(false)` when there is none yet, or its
    /// journal is long: the caller saves the whole state instead.
    pub fn append(&self, change: &FenceChange) -> io::Result<bool> {
        let mut j = self.journal();
        let Some((f, lines)) = j.as_mut().filter(|(_, n)| *n < JOURNAL_MAX) else { return Ok(false) };
        let mut line = serde_json::to_vec(change).map_err(io::Error::other)?;
        line.push(b'\n');
        // One write: a reader (the next daemon) sees the line whole or not at all.
        if let Err(e) = f.write_all(&line) {
            *j = None;
            return Err(e);
        }
        *lines += 1;
        Ok(true)
    }

    /// Replaces the file with `state`: a new owner-only file under a temporary name no one
    /// can guess (random; `O_EXCL | O_NOFOLLOW`, so nothing planted there is written
    /// through or stands in the way), then a rename.
    pub fn save(&self, state: &DaemonState) -> io::Result<()> {
        let bytes = serde_json::to_vec(state).map_err(io::Error::other)?;
        let (tmp, fd) = self.create_temporary()?;
        let mut f = std::fs::File::from(fd);
        let mut j = self.journal();
        *j = None;
        let written = f.write_all(&bytes).and_then(|()| f.write_all(b"\n"));
        let renamed = written.and_then(|()| {
            Ok(rustix::fs::renameat(&self.dir, tmp.as_os_str(), &self.dir, self.name.as_os_str())?)
        });
        if let Err(e) = renamed {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_os_str(), rustix::fs::AtFlags::empty());
            return Err(e);
        }
        *j = Some((f, 0));
        Ok(())
    }

    /// A new owner-only file beside the state file, under a random name (a few tries: a
    /// name taken, by chance or by a planted file, is passed over).
    fn create_temporary(&self) -> io::Result<(OsString, OwnedFd)> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut last = io::Error::other("no temporary name tried");
        for _ in 0..8 {
            let mut random = [0u8; 8];
            rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
            let mut tmp = self.name.clone();
            tmp.push(format!(".tmp.{:016x}", u64::from_ne_bytes(random)));
            match rustix::fs::openat(&self.dir, tmp.as_os_str(), flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok((tmp, fd)),
                Err(rustix::io::Errno::EXIST) => last = io::Error::from(rustix::io::Errno::EXIST),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last)
    }
}

impl DaemonState {
    /// Applies journal lines, in order, to the fence registrations.
    pub fn apply(&mut self, changes: &[FenceChange]) {
        let mut fences: BTreeMap<(u32, u32), FenceRecord> =
            self.fences.iter().map(|r| ((r.slot, r.index), r.clone())).collect();
        for c in changes {
            match c {
                FenceChange::Add(r) => {
                    fences.insert((r.slot, r.index), r.clone());
                }
                &FenceChange::Remove { slot, index, birth, pid } => {
                    if fences.get(&(slot, index)).is_some_and(|r| r.birth == birth && r.pid == pid) {
                        fences.remove(&(slot, index));
                    }
                }
            }
        }
        self.fences = fences.into_values().collect();
    }
}

/// `SOCKET.state`.
pub fn default_path(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_os_string();
    s.push(".state");
    PathBuf::from(s)
}

/// `(st_dev, st_ino)` of an open file.
pub fn file_id(f: &std::fs::File) -> (u64, u64) {
    f.metadata().map(|m| (m.dev(), m.ino())).unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::{CgroupRecord, DaemonState, FenceChange, FenceRecord, QueueAcl, SlotRecord, StateFile};
    use std::os::unix::fs::PermissionsExt;

    fn sample() -> DaemonState {
        let mut s = DaemonState { segment: (1, 2), ..Default::default() };
        s.slots.insert(3, SlotRecord { epoch: 4, pid: 5, uid: 6, start_time: 7 });
        s.queues.insert(
            0,
            QueueAcl { name: "q".into(), owner: 6, uids: vec![8], gids: vec![9], retry_backoff: None },
        );
        s.fences.push(FenceRecord { slot: 3, index: 10, birth: 11, pid: 12, start_time: 13, cgroup: None });
        let cgroup = Some(CgroupRecord { path: "/sys/fs/cgroup/w/xtcq-work.1.2".into(), id: 77 });
        s.fences.push(FenceRecord { slot: 3, index: 11, birth: 1, pid: 14, start_time: 15, cgroup });
        s
    }

    #[test]
    fn saved_state_loads_back_owner_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = StateFile::beside(&dir.path().join("xtcqd.sock")).expect("state");
        assert_eq!(f.load(), None, "no file yet");
        f.save(&sample()).expect("save");
        assert_eq!(f.load(), Some(sample()));
        let md = std::fs::metadata(f.path()).expect("stat");
        assert_eq!(md.mode() & 0o777, 0o600);
    }

    #[test]
    fn journal_lines_are_applied_after_the_state_until_the_next_save() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = StateFile::beside(&dir.path().join("xtcqd.sock")).expect("state");
        let add = |index, birth| FenceRecord {
            slot: 3,
            index,
            birth,
            pid: 40 + index,
            start_time: 1,
            cgroup: None,
        };
        assert!(!f.append(&FenceChange::Add(add(1, 1))).expect("append"), "nothing saved yet");
        f.save(&sample()).expect("save");
        for c in [
            FenceChange::Add(add(1, 1)),
            FenceChange::Add(add(2, 5)),
            FenceChange::Remove { slot: 3, index: 2, birth: 4, pid: 42 }, // another birth: stays
            FenceChange::Remove { slot: 3, index: 2, birth: 5, pid: 7 },  // another pid: stays
            FenceChange::Remove { slot: 3, index: 1, birth: 1, pid: 41 },
        ] {
            assert!(f.append(&c).expect("append"));
        }
        let mut want = sample();
        want.fences.insert(0, add(2, 5)); // in (slot, record) order
        assert_eq!(f.load(), Some(want));
        f.save(&sample()).expect("save");
        assert_eq!(f.load(), Some(sample()), "a save empties the journal");
    }

    #[test]
    fn a_planted_link_is_neither_followed_nor_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let precious = dir.path().join("precious");
        std::fs::write(&precious, b"keep me").expect("write");
        let f = StateFile::beside(&dir.path().join("xtcqd.sock")).expect("state");
        // At the file's own name, and at the temporary name a save uses.
        std::os::unix::fs::symlink(&precious, f.path()).expect("symlink");
        let tmp = dir.path().join(format!("xtcqd.sock.state.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&precious, &tmp).expect("symlink");
        assert_eq!(f.load(), None, "a link is not read");
        f.save(&sample()).expect("save");
        assert_eq!(std::fs::read(&precious).expect("read"), b"keep me");
        assert!(std::fs::symlink_metadata(f.path()).expect("stat").is_file(), "the link was replaced");
        assert_eq!(f.load(), Some(sample()));
    }

    #[test]
    fn a_directory_planted_where_a_save_used_to_write_does_not_stop_it() {
        // The temporary name was SOCKET.state.tmp.PID: anyone who could create an entry in
        // the directory (a sticky /tmp) made every save, and so every fence, fail.
        let dir = tempfile::tempdir().expect("tempdir");
        let f = StateFile::beside(&dir.path().join("xtcqd.sock")).expect("state");
        std::fs::create_dir(dir.path().join(format!("xtcqd.sock.state.tmp.{}", std::process::id())))
            .expect("plant");
        std::fs::create_dir(dir.path().join("xtcqd.sock.state.tmp.0")).expect("plant");
        f.save(&sample()).expect("save");
        assert_eq!(f.load(), Some(sample()));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()) && e.file_name() != "xtcqd.sock.state")
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
    }

    #[test]
    fn a_directory_others_may_write_is_refused_unless_sticky() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("xtcqd.state");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = StateFile::at(&path).expect_err("world-writable");
        assert!(e.to_string().contains("not writable by others unless sticky"), "{e}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        StateFile::at(&path).expect("sticky");
    }

    #[test]
    fn a_file_others_may_read_or_write_is_not_trusted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = StateFile::beside(&dir.path().join("xtcqd.sock")).expect("state");
        f.save(&sample()).expect("save");
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(f.load(), None);
    }
}
