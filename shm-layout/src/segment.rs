//! Creating, attaching to and resolving views into a segment file.
//!
//! A segment is one file mapped `MAP_SHARED` (memmap2's `MmapRaw`: never a `&mut [u8]`, since
//! other processes write it). Creation: open with `O_EXCL` and mode 0600, reserve every page
//! with `fallocate` (tmpfs reserves nothing on `ftruncate`, and a full `/dev/shm` would turn
//! into SIGBUS on first touch instead of an error here), initialise, store the header's ready
//! word last with Release, then `fchmod` to the final mode (a umask would otherwise narrow
//! 0660 to 0640). Attaching: `fstat` first (a file still being created is 0 bytes, and a read
//! past the end of a mapping is SIGBUS), map, check the ready word with Acquire, copy the
//! descriptor out once and validate all of it against the mapped length.
//!
//! Invariants after a successful `create` / `attach`:
//! - the mapping is at least `regions.total_len` bytes, and every region offset, stride and
//!   struct size was recomputed from the configuration and matched;
//! - the validated descriptor is kept in the `Segment` and never re-read, so a process that
//!   later scribbles on the header cannot move the regions under us;
//! - every accessor bounds-checks its index against that configuration.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use memmap2::{MmapOptions, MmapRaw};

use crate::deque::{DequeRef, Flavor};
use crate::layout::*;
use crate::overflow::OverflowRef;
use crate::record::arena::RecordArena;
use crate::record::state::{State, StateWord, NO_HOLDER};
use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// Why a segment could not be created or attached.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// The configuration cannot be laid out.
    #[error("invalid segment configuration: {0}")]
    Config(#[from] ConfigError),
    /// `create` found a file there.
    #[error("segment {path} already exists; attach to it, or remove it first")]
    Exists {
        /// The path.
        path: PathBuf,
    },
    /// tmpfs or the disk is full.
    #[error(
        "not enough space for segment {path}: it needs {len} bytes ({source}); free space \
         (for /dev/shm: `df -h /dev/shm`) or choose fewer records, smaller payloads or \
         smaller deques"
    )]
    NoSpace {
        /// The path.
        path: PathBuf,
        /// Bytes needed.
        len: u64,
        /// The OS error.
        source: io::Error,
    },
    /// Another OS error on `path`.
    #[error("segment {path}: {what}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file is smaller than the header, or than the header says.
    #[error("segment {path} is {actual} bytes but must be at least {needed}: truncated, or not a segment")]
    Truncated {
        /// The path.
        path: PathBuf,
        /// File length.
        actual: u64,
        /// Length needed.
        needed: u64,
    },
    /// Not an xtcq segment.
    #[error("{path} is not an xtcq segment (first bytes {found:02x?}, expected {expected:02x?})")]
    BadMagic {
        /// The path.
        path: PathBuf,
        /// What was found.
        found: [u8; 8],
        /// [`MAGIC`].
        expected: [u8; 8],
    },
    /// Made by an incompatible build.
    #[error(
        "segment {path} has layout version {found}; this build reads version {expected}. \
         Stop the daemon that made it and recreate the segment, or use a matching xtcq"
    )]
    Version {
        /// The path.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// [`LAYOUT_VERSION`].
        expected: u32,
    },
    /// A daemon started with `--recreate` replaced the segment.
    #[error(
        "segment {path} was replaced by a daemon started with --recreate; connect to the daemon \
         again to use the new one"
    )]
    Retired {
        /// The path.
        path: PathBuf,
    },
    /// The ready word is not set.
    #[error(
        "segment {path} is not ready: its creator has not finished (or died while creating \
         it); wait, or remove it and let the daemon recreate it"
    )]
    NotReady {
        /// The path.
        path: PathBuf,
    },
    /// The header disagrees with itself or the file.
    #[error("segment {path} header is inconsistent: {what}")]
    Inconsistent {
        /// The path.
        path: PathBuf,
        /// What differs.
        what: String,
    },
}

/// A queue-table lookup or creation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// No such queue.
    #[error("no such queue: {0}")]
    NoSuchQueue(String),
    /// The table index is out of range or unused.
    #[error("queue index {index} is not an active queue (the segment has {queues} entries)")]
    NotActive {
        /// The index.
        index: u32,
        /// Table size.
        queues: u32,
    },
    /// A queue of that name exists.
    #[error("a queue named {0:?} already exists")]
    Exists(String),
    /// The table is full.
    #[error("all {0} queue-table entries are in use; create the segment with more queues")]
    TableFull(u32),
    /// The spec does not fit the segment.
    #[error("invalid queue: {0}")]
    BadSpec(String),
    /// The queue's descriptor in the segment is invalid.
    #[error("queue {index} in the segment is corrupt: {what}")]
    Corrupt {
        /// The index.
        index: u32,
        /// What is wrong.
        what: String,
    },
    /// Deque index out of range.
    #[error("queue {queue} has {count} deques; there is no deque {index}")]
    NoSuchDeque {
        /// Queue name.
        queue: String,
        /// Index asked for.
        index: u32,
        /// Deques in the queue.
        count: u32,
    },
}

/// Why a queue was not deleted ([`Segment::delete_queue_at`]). Nothing was changed, except
/// that a forced delete that ran into a process it was not told about may have dropped some
/// of the queue's queued jobs before it put the queue back (see `delete_queue_at`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeleteError {
    /// No such queue, not an active one, or its descriptor is corrupt.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Some of its deques have an owner.
    #[error(
        "queue {queue} has owners (deque, process slot): {leases:?}; an owner's lease ends when it \
         detaches or its process exits"
    )]
    Leased {
        /// Queue name.
        queue: String,
        /// `(deque, owner's process slot)` of each leased deque.
        leases: Vec<(u32, u32)>,
    },
    /// Some of its jobs are being run (claimed, or held while their holder writes the header).
    #[error(
        "queue {queue} has {claimed} job(s) being run ((process slot, jobs): {holders:?}); wait until \
         they are acked or given back"
    )]
    JobsHeld {
        /// Queue name.
        queue: String,
        /// Jobs claimed.
        claimed: u32,
        /// `(process slot, jobs)` holding them ([`NO_HOLDER`] is left out).
        holders: Vec<(u32, u32)>,
    },
    /// It holds jobs, and the delete was not forced.
    #[error(
        "queue {queue} still holds {queued} queued job(s) and {dead} dead letter(s); consume or purge \
         them, or force the delete to drop them"
    )]
    NotEmpty {
        /// Queue name.
        queue: String,
        /// Jobs waiting to be claimed.
        queued: u32,
        /// Dead letters.
        dead: u32,
    },
    /// Jobs of the queue kept coming back while a forced delete was dropping them: some
    /// process the caller did not keep away is still giving jobs back to it.
    #[error(
        "jobs of queue {queue} kept coming back while it was being deleted: a process is still using it"
    )]
    StillInUse {
        /// Queue name.
        queue: String,
    },
}

/// What refers to one queue-table entry, from one walk of its deques and of every record
/// ([`Segment::queue_usage`]). A racy snapshot unless the caller keeps everyone else away.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueUsage {
    /// `(deque, owner's process slot)` of every deque of the entry with a lease word, over
    /// all of the segment's deques per queue (a lease beyond the queue's count is corruption,
    /// and still someone's).
    pub leases: Vec<(u32, u32)>,
    /// Records of the queue waiting to be claimed.
    pub queued: u32,
    /// Dead letters of the queue.
    pub dead: u32,
    /// Records of the queue being run (`Claimed` or `Writing`).
    pub claimed: u32,
    /// `(process slot, jobs)` holding those, by slot ascending; claims revoked by a daemon
    /// and not yet given back ([`NO_HOLDER`]) are counted in `claimed` only.
    pub holders: Vec<(u32, u32)>,
    /// Records being filled whose queue field names the entry. Only a hint: a filler writes
    /// the queue field during the fill, so until it publishes, the field may still name the
    /// queue of the record's previous job. A job can only be pushed to a queue by one of its
    /// owners or injectors, so the daemon keeps those away instead of counting on this.
    pub filling: u32,
}

impl QueueUsage {
    /// Whether a delete (forced or not) must be refused with this usage.
    pub fn refusal(&self, queue: &str, force: bool) -> Result<(), DeleteError> {
        if !self.leases.is_empty() {
            return Err(DeleteError::Leased { queue: queue.to_string(), leases: self.leases.clone() });
        }
        if self.claimed > 0 {
            return Err(DeleteError::JobsHeld {
                queue: queue.to_string(),
                claimed: self.claimed,
                holders: self.holders.clone(),
            });
        }
        if !force && (self.queued > 0 || self.dead > 0) {
            return Err(DeleteError::NotEmpty {
                queue: queue.to_string(),
                queued: self.queued,
                dead: self.dead,
            });
        }
        Ok(())
    }
}

/// Jobs a delete dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DroppedJobs {
    /// Queued jobs freed.
    pub queued: u32,
    /// Dead letters freed.
    pub dead: u32,
}

/// A queue [`Segment::delete_queue_at`] deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueDeleted {
    /// The queue as it was.
    pub info: QueueInfo,
    /// What a forced delete dropped (zero without force).
    pub dropped: DroppedJobs,
}

/// A queue's properties, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    /// Name, 1–64 bytes of UTF-8.
    pub name: String,
    /// The owners' order.
    pub flavor: Flavor,
    /// Deques (owners) the queue can have.
    pub deques: u32,
    /// Slots per deque, a power of two.
    pub capacity: u32,
    /// Attempts before dead-lettering (0: no limit).
    pub max_attempts: u32,
    /// Default claim lease in ms (0: none).
    pub lease_ms: u32,
}

/// An active queue, as read from the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// Table index.
    pub index: u32,
    /// Its properties.
    pub spec: QueueSpec,
}

/// A mapped segment.
#[derive(Debug)]
pub struct Segment {
    /// This mapping's registration with the SIGBUS guard; declared before `map` so that it
    /// drops (unregisters) before the mapping is unmapped.
    guard: Option<crate::sigbus::Guard>,
    map: MmapRaw,
    _file: File,
    path: PathBuf,
    desc: SegmentDescriptor,
}

/// Guards `map` against a truncation of its file ([`crate::sigbus`]).
fn guard(map: &MmapRaw) -> Option<crate::sigbus::Guard> {
    let ready_at = core::mem::offset_of!(SegmentHeader, live) + core::mem::offset_of!(HeaderLive, ready);
    crate::sigbus::Guard::register(map.as_ptr() as usize, map.len(), ready_at)
}

fn io_err<'p>(path: &'p Path, what: &'static str) -> impl FnOnce(io::Error) -> SegmentError + 'p {
    move |source| SegmentError::Io { path: path.to_path_buf(), what, source }
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// CLOCK_MONOTONIC in ns: the same clock in every process on the host.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// CLOCK_MONOTONIC_COARSE in ns: the time of the last kernel tick (1-4 ms resolution), never
/// ahead of [`monotonic_ns`]. For a job's enqueue time, which is there to tell a job's age:
/// the precise clock costs ~34 ns per call in this project's KVM guests (measured with a C
/// loop of 10M calls: 34.1 ns vs 6.7 ns coarse), half of a whole single-thread push + pop.
pub fn coarse_monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Segment {
    /// Creates a new segment file at `path` (which must not exist) with `config`, readable
    /// and writable by the modes in `mode` (e.g. `0o600`, or `0o660` for a group).
    pub fn create(path: &Path, config: &SegmentConfig, mode: u32) -> Result<Segment, SegmentError> {
        let regions = compute_regions(config)?;
        if mode & 0o007 != 0 {
            return Err(SegmentError::Inconsistent {
                path: path.to_path_buf(),
                what: format!("mode {mode:o} would make the segment world-accessible"),
            });
        }
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path).map_err(
                |e| {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        SegmentError::Exists { path: path.to_path_buf() }
                    } else {
                        io_err(path, "cannot create")(e)
                    }
                },
            )?;
        // Remove the half-made file on any error below, so a retry is not refused.
        let result = Self::init(file, path, config, regions, mode);
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    /// Creates a new segment in a sealed memfd (no path anyone could truncate, unlink or
    /// replace): `memfd_create(MFD_ALLOW_SEALING)`, sized and initialised as [`create`]
    /// does, then sealed with `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`, so no process that
    /// is handed it can change its size. `label` names it in messages (and `/proc/PID/fd`).
    ///
    /// [`create`]: Segment::create
    pub fn create_memfd(label: &str, config: &SegmentConfig) -> Result<Segment, SegmentError> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let regions = compute_regions(config)?;
        let path = PathBuf::from(format!("memfd:{label}"));
        let fd = rustix::fs::memfd_create(label, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(|e| io_err(&path, "cannot create the memfd")(e.into()))?;
        let seg = Self::init(File::from(fd), &path, config, regions, 0o600)?;
        rustix::fs::fcntl_add_seals(&seg._file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(|e| io_err(&path, "cannot seal the memfd")(e.into()))?;
        Ok(seg)
    }

    /// Whether the segment's size is sealed (a memfd from [`create_memfd`]): then no process
    /// can truncate it.
    ///
    /// [`create_memfd`]: Segment::create_memfd
    pub fn is_sealed(&self) -> bool {
        use rustix::fs::SealFlags;
        rustix::fs::fcntl_get_seals(&self._file)
            .is_ok_and(|s| s.contains(SealFlags::SHRINK | SealFlags::GROW))
    }

    fn init(
        file: File,
        path: &Path,
        config: &SegmentConfig,
        regions: RegionOffsets,
        mode: u32,
    ) -> Result<Segment, SegmentError> {
        let len = regions.total_len;
        match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, len) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::NOSPC || e == rustix::io::Errno::FBIG => {
                return Err(SegmentError::NoSpace { path: path.to_path_buf(), len, source: e.into() })
            }
            // A file system without fallocate: size it the plain way; the pages are then
            // reserved as they are touched by the initialisation below.
            Err(e) if e == rustix::io::Errno::OPNOTSUPP => {
                file.set_len(len).map_err(io_err(path, "cannot size"))?
            }
            Err(e) => return Err(io_err(path, "cannot reserve space")(e.into())),
        }
        let map = MmapOptions::new().len(len as usize).map_raw(&file).map_err(io_err(path, "cannot map"))?;
        let desc = SegmentDescriptor {
            magic: MAGIC,
            layout_version: LAYOUT_VERSION,
            flags: 0,
            sizes: StructSizes::CURRENT,
            config: *config,
            regions,
            creator_pid: std::process::id(),
            creator_uid: rustix::process::getuid().as_raw(),
            created_unix_ns: now_unix_ns(),
        };
        let guard = guard(&map);
        let seg = Segment { map, _file: file, path: path.to_path_buf(), desc, guard };
        // SAFETY: the mapping is `total_len >= size_of::<SegmentHeader>()` bytes, page
        // aligned, and no one else can have it yet (O_EXCL, mode 0600, ready unset).
        unsafe { core::ptr::write_volatile(seg.map.as_mut_ptr() as *mut SegmentDescriptor, desc) };
        // fallocate'd pages read as zero, which is the initial state of every word except
        // the records' state words: generation 1, Free.
        let free = StateWord::pack(1, State::Free, NO_HOLDER).0;
        let arena = seg.records();
        for i in 0..config.job_records {
            if let Some(h) = arena.header(i) {
                h.state.store(free, Ordering::Relaxed);
            }
        }
        // Release: every write above is visible to an attacher whose Acquire load of `ready`
        // sees READY.
        seg.header_live().ready.store(READY, Ordering::Release);
        rustix::fs::fchmod(&seg._file, rustix::fs::Mode::from_raw_mode(mode))
            .map_err(|e| io_err(path, "cannot set mode")(e.into()))?;
        Ok(seg)
    }

    /// Attaches to the segment file at `path`.
    pub fn attach(path: &Path) -> Result<Segment, SegmentError> {
        let file =
            OpenOptions::new().read(true).write(true).open(path).map_err(io_err(path, "cannot open"))?;
        Self::attach_file(file, path)
    }

    /// Attaches to an already open segment file (e.g. one received over the control socket);
    /// `path` is only used in messages.
    pub fn attach_file(file: File, path: &Path) -> Result<Segment, SegmentError> {
        let header_len = core::mem::size_of::<SegmentHeader>() as u64;
        let actual = file.metadata().map_err(io_err(path, "cannot stat"))?.len();
        if actual < header_len {
            return Err(SegmentError::Truncated { path: path.to_path_buf(), actual, needed: header_len });
        }
        if actual > isize::MAX as u64 {
            return Err(SegmentError::Inconsistent {
                path: path.to_path_buf(),
                what: format!("file length {actual} is larger than the address space"),
            });
        }
        let map =
            MmapOptions::new().len(actual as usize).map_raw(&file).map_err(io_err(path, "cannot map"))?;
        // Guarded from here: the file may be truncated between the fstat above and the reads
        // below.
        let guard = guard(&map);
        let base = map.as_mut_ptr();
        // SAFETY: `actual >= size_of::<SegmentHeader>()` and the mapping is page aligned, so
        // the header's live line is inside the mapping and aligned for `HeaderLive`; it is
        // only accessed through atomics.
        let live = unsafe { &*(base.add(core::mem::offset_of!(SegmentHeader, live)) as *const HeaderLive) };
        // Acquire pairs with the creator's Release store of READY.
        let ready = live.ready.load(Ordering::Acquire);
        // SAFETY: in bounds as above; `SegmentDescriptor` is plain integers, valid for any
        // bits. Copied out once, so later writes to the header cannot change what we
        // validated (no TOCTOU).
        let desc = unsafe { core::ptr::read_volatile(base as *const SegmentDescriptor) };
        if desc.magic != MAGIC {
            return Err(SegmentError::BadMagic {
                path: path.to_path_buf(),
                found: desc.magic,
                expected: MAGIC,
            });
        }
        if ready == crate::layout::RETIRED {
            return Err(SegmentError::Retired { path: path.to_path_buf() });
        }
        if ready != READY {
            return Err(SegmentError::NotReady { path: path.to_path_buf() });
        }
        validate_descriptor(&desc, actual).map_err(|e| match e {
            Invalid::Version(found) => {
                SegmentError::Version { path: path.to_path_buf(), found, expected: LAYOUT_VERSION }
            }
            Invalid::Truncated(needed) => {
                SegmentError::Truncated { path: path.to_path_buf(), actual, needed }
            }
            Invalid::What(what) => SegmentError::Inconsistent { path: path.to_path_buf(), what },
        })?;
        Ok(Segment { map, _file: file, path: path.to_path_buf(), desc, guard })
    }

    /// Whether this mapping's file was truncated under it: a SIGBUS was taken in it and it
    /// now maps zero pages, with the ready word set to retired ([`crate::sigbus`]). For
    /// error paths, to say why [`is_retired`](Segment::is_retired) is true.
    pub fn is_lost(&self) -> bool {
        self.guard.as_ref().is_some_and(crate::sigbus::Guard::is_lost)
    }

    /// Where it was created or attached from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (to pass to another process).
    pub fn file(&self) -> &File {
        &self._file
    }

    /// The validated descriptor.
    pub fn descriptor(&self) -> &SegmentDescriptor {
        &self.desc
    }

    /// The configuration.
    pub fn config(&self) -> &SegmentConfig {
        &self.desc.config
    }

    /// Start address of this process's mapping (differs between mappings).
    pub fn base_addr(&self) -> usize {
        self.map.as_ptr() as usize
    }

    /// A `&T` at `offset` from the base.
    ///
    /// # Safety
    /// `offset + size_of::<T>() <= total_len`, `offset` aligned for `T`, and `T` only atomics
    /// (or plain data never written after `ready`).
    #[inline]
    unsafe fn at<T>(&self, offset: u64) -> &T {
        debug_assert!(offset + core::mem::size_of::<T>() as u64 <= self.desc.regions.total_len);
        debug_assert!(offset.is_multiple_of(core::mem::align_of::<T>() as u64));
        // SAFETY: per the contract, in bounds and aligned; the mapping lives as long as self.
        unsafe { &*(self.map.as_mut_ptr().add(offset as usize) as *const T) }
    }

    /// The header's live words.
    pub fn header_live(&self) -> &HeaderLive {
        // SAFETY: the header is inside every validated mapping; HeaderLive is atomics only.
        unsafe { self.at(core::mem::offset_of!(SegmentHeader, live) as u64) }
    }

    /// Marks the segment replaced (`xtcqd --recreate`, before it unlinks the file) and wakes
    /// every sleeping consumer, so that processes still mapping it see [`is_retired`] and
    /// stop, instead of queueing jobs no one will serve.
    ///
    /// [`is_retired`]: Segment::is_retired
    pub fn retire(&self) {
        // Stored before the wake-ups bump each wait word's `seq` (Release): a sleeper whose
        // Acquire read of `seq` comes after the bump sees RETIRED in its next look, and one
        // that read `seq` before it is woken (or finds `seq` moved).
        self.header_live().ready.store(crate::layout::RETIRED, Ordering::Release);
        for q in 0..self.desc.config.queues {
            if let Some(w) = self.wait_word(q) {
                crate::wait::wake_all(w);
            }
        }
    }

    /// Whether a daemon replaced this segment ([`retire`](Segment::retire)). One load of a
    /// line that is written only when a daemon starts or retires the segment, so it stays in
    /// every core's cache: cheap enough for every push and steal.
    #[inline]
    pub fn is_retired(&self) -> bool {
        self.header_live().ready.load(Ordering::Relaxed) == crate::layout::RETIRED
    }

    /// Offset of queue-table entry `index`. Only its atomic parts are ever borrowed: the
    /// descriptor is plain data and is reached through raw pointers, so no `&` ever covers
    /// bytes that another process (or the daemon in this one) writes.
    fn queue_entry_offset(&self, index: u32) -> Option<u64> {
        if index >= self.desc.config.queues {
            return None;
        }
        Some(self.desc.regions.queue_table + index as u64 * core::mem::size_of::<QueueEntry>() as u64)
    }

    fn queue_control(&self, index: u32) -> Option<&QueueControl> {
        let off = self.queue_entry_offset(index)? + core::mem::offset_of!(QueueEntry, control) as u64;
        // SAFETY: index < queues, so the entry lies inside the queue table, which validation
        // placed inside the mapping; 128-aligned since the table start and size are.
        Some(unsafe { self.at(off) })
    }

    fn queue_desc_ptr(&self, index: u32) -> Option<*mut QueueDescriptor> {
        let off = self.queue_entry_offset(index)?;
        // SAFETY: in bounds as in `queue_control`.
        Some(unsafe { self.map.as_mut_ptr().add(off as usize) as *mut QueueDescriptor })
    }

    /// Writes a queue into table entry `index`, which must be free. Used by the daemon (the
    /// only writer of the queue table) and by tests that run without one.
    pub fn create_queue_at(&self, index: u32, spec: &QueueSpec) -> Result<QueueInfo, QueueError> {
        self.check_spec(spec)?;
        let not_active = QueueError::NotActive { index, queues: self.desc.config.queues };
        let control = self.queue_control(index).ok_or(not_active.clone())?;
        let desc_ptr = self.queue_desc_ptr(index).ok_or(not_active)?;
        if control
            .state
            .compare_exchange(QUEUE_FREE, QUEUE_CREATING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(QueueError::BadSpec(format!("queue-table entry {index} is in use")));
        }
        let mut name = [0u8; MAX_QUEUE_NAME];
        name[..spec.name.len()].copy_from_slice(spec.name.as_bytes());
        let desc = QueueDescriptor {
            name,
            name_len: spec.name.len() as u32,
            flavor: spec.flavor as u32,
            deque_count: spec.deques,
            capacity: spec.capacity,
            max_attempts: spec.max_attempts,
            lease_ms: spec.lease_ms,
            created_unix_ns: now_unix_ns(),
        };
        // SAFETY: the entry is in the mapping (above) and ours alone while CREATING; the
        // descriptor is plain data that nothing borrows.
        unsafe { core::ptr::write_volatile(desc_ptr, desc) };
        // Release: readers that see ACTIVE (Acquire) see the descriptor.
        control.state.store(QUEUE_ACTIVE, Ordering::Release);
        Ok(QueueInfo { index, spec: spec.clone() })
    }

    /// Creates a queue in the first free table entry; refuses a duplicate name.
    pub fn create_queue(&self, spec: &QueueSpec) -> Result<QueueInfo, QueueError> {
        self.check_spec(spec)?;
        if self.queue_by_name(&spec.name).is_ok() {
            return Err(QueueError::Exists(spec.name.clone()));
        }
        for i in 0..self.desc.config.queues {
            match self.create_queue_at(i, spec) {
                Ok(q) => return Ok(q),
                Err(QueueError::BadSpec(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(QueueError::TableFull(self.desc.config.queues))
    }

    fn check_spec(&self, spec: &QueueSpec) -> Result<(), QueueError> {
        let c = &self.desc.config;
        if spec.name.is_empty() || spec.name.len() > MAX_QUEUE_NAME {
            return Err(QueueError::BadSpec(format!(
                "name must be 1 to {MAX_QUEUE_NAME} bytes, got {}",
                spec.name.len()
            )));
        }
        if spec.name.chars().any(|ch| ch.is_control() || ch.is_whitespace()) {
            return Err(QueueError::BadSpec(format!(
                "name {:?} contains whitespace or control characters",
                spec.name
            )));
        }
        if spec.deques == 0 || spec.deques > c.deques_per_queue {
            return Err(QueueError::BadSpec(format!(
                "deques must be 1 to {} (the segment's deques per queue), got {}",
                c.deques_per_queue, spec.deques
            )));
        }
        if !spec.capacity.is_power_of_two() || spec.capacity < 2 || spec.capacity > c.deque_capacity {
            return Err(QueueError::BadSpec(format!(
                "capacity must be a power of two from 2 to {} (the segment's deque capacity), got {}",
                c.deque_capacity, spec.capacity
            )));
        }
        Ok(())
    }

    /// Reads and validates the queue at table entry `index`.
    pub fn queue(&self, index: u32) -> Result<QueueInfo, QueueError> {
        let not_active = QueueError::NotActive { index, queues: self.desc.config.queues };
        let control = self.queue_control(index).ok_or(not_active.clone())?;
        let desc_ptr = self.queue_desc_ptr(index).ok_or(not_active.clone())?;
        // Acquire pairs with the Release store of ACTIVE in `create_queue_at`.
        if control.state.load(Ordering::Acquire) != QUEUE_ACTIVE {
            return Err(not_active);
        }
        // SAFETY: in the mapping; plain data valid for any bits, copied out once.
        let d = unsafe { core::ptr::read_volatile(desc_ptr) };
        // Still ACTIVE after the copy, or the queue was deleted meanwhile and is not to be
        // reported. (A delete leaves the descriptor as it was, so the copy is whole unless the
        // entry was also created anew while we copied: a delete and a create, each a walk of
        // every record, inside one 96-byte copy.) The fence keeps the copy's reads before the
        // re-check, as in a seqlock reader; the Acquire load alone would not.
        crate::sync::fence(Ordering::Acquire);
        if control.state.load(Ordering::Acquire) != QUEUE_ACTIVE {
            return Err(not_active);
        }
        let corrupt = |what: String| QueueError::Corrupt { index, what };
        let c = &self.desc.config;
        if d.name_len == 0 || d.name_len as usize > MAX_QUEUE_NAME {
            return Err(corrupt(format!("name length {}", d.name_len)));
        }
        let name = std::str::from_utf8(&d.name[..d.name_len as usize])
            .map_err(|_| corrupt("name is not UTF-8".into()))?
            .to_string();
        let flavor = Flavor::from_u32(d.flavor).ok_or_else(|| corrupt(format!("flavor {}", d.flavor)))?;
        if d.deque_count == 0 || d.deque_count > c.deques_per_queue {
            return Err(corrupt(format!("deque count {}", d.deque_count)));
        }
        if !d.capacity.is_power_of_two() || d.capacity < 2 || d.capacity > c.deque_capacity {
            return Err(corrupt(format!("deque capacity {}", d.capacity)));
        }
        Ok(QueueInfo {
            index,
            spec: QueueSpec {
                name,
                flavor,
                deques: d.deque_count,
                capacity: d.capacity,
                max_attempts: d.max_attempts,
                lease_ms: d.lease_ms,
            },
        })
    }

    /// All active queues.
    pub fn queues(&self) -> Vec<Result<QueueInfo, QueueError>> {
        (0..self.desc.config.queues)
            .filter_map(|i| match self.queue(i) {
                Err(QueueError::NotActive { .. }) => None,
                r => Some(r),
            })
            .collect()
    }

    /// The active queue called `name`.
    pub fn queue_by_name(&self, name: &str) -> Result<QueueInfo, QueueError> {
        self.queues()
            .into_iter()
            .flatten()
            .find(|q| q.spec.name == name)
            .ok_or_else(|| QueueError::NoSuchQueue(name.to_string()))
    }

    /// The raw state word (`QUEUE_*`) of queue-table entry `index`, `None` out of range.
    pub fn queue_state(&self, index: u32) -> Option<u32> {
        self.queue_control(index).map(|c| c.state.load(Ordering::Acquire))
    }

    /// What refers to queue-table entry `index`: leases on its deques and its records by
    /// state. Empty for an index out of range.
    pub fn queue_usage(&self, index: u32) -> QueueUsage {
        let mut u = QueueUsage::default();
        if index >= self.desc.config.queues {
            return u;
        }
        for d in 0..self.desc.config.deques_per_queue {
            if let Some(h) = self.deque_header(index, d) {
                if let Some(slot) = crate::recovery::lease_holder(h.lease.load(Ordering::Acquire)) {
                    u.leases.push((d, slot));
                }
            }
        }
        let records = self.records();
        let mut holders = std::collections::BTreeMap::<u32, u32>::new();
        for i in 0..records.len() {
            let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
            // The word first (Acquire), then the queue field: for a published record the
            // field was written before the word's publishing CAS, so it is the job's queue.
            let w = st.load();
            if hdr.queue.load(Ordering::Relaxed) != index {
                continue;
            }
            match w.state() {
                Some(State::Queued) => u.queued += 1,
                Some(State::Dead) => u.dead += 1,
                Some(State::Claimed | State::Writing) => {
                    u.claimed += 1;
                    if w.holder() != NO_HOLDER {
                        *holders.entry(w.holder()).or_insert(0) += 1;
                    }
                }
                Some(State::Filling) => u.filling += 1,
                // Free, or bits no correct program writes (`check` reports those).
                Some(State::Free) | None => {}
            }
        }
        u.holders = holders.into_iter().collect();
        u
    }

    /// Deletes the queue at table entry `index`, so that the entry can be created anew:
    /// refused while one of its deques is leased or one of its jobs is being run, and, unless
    /// `force`, while it holds queued jobs or dead letters (with `force` those are dropped:
    /// each record is freed by one CAS that bumps its generation, so a handle from before
    /// fails its claim, re-queue or purge).
    ///
    /// The caller (the daemon, under the lock it takes to create queues and attach processes)
    /// must keep every process away from the queue: no owner, thief or injector attached. A
    /// record being filled cannot be told to belong to the queue before it is published (see
    /// [`QueueUsage::filling`]), and a thief or injector leaves no trace in the segment.
    ///
    /// Steps: `ACTIVE -> DELETING` first, so that no lookup (`queue`, `queues`,
    /// `queue_by_name`) returns it and nothing new attaches; then the jobs are dropped; then
    /// every deque of the entry (`top = bottom = 0`, slots and lease word zeroed) and its
    /// overflow ring (`head = tail = 0`, cells zeroed) are reset, and its sleepers woken (the
    /// wait word's `seq` is bumped, never reset: a sleeper compares it with the value it read);
    /// then `DELETING -> FREE`. A lease or claim that shows up once the entry is `DELETING`
    /// (a process the caller did not keep away) puts the entry back to `ACTIVE` and refuses.
    /// A crash in between leaves `DELETING`, which [`finish_interrupted_deletes`] completes.
    ///
    /// [`finish_interrupted_deletes`]: Segment::finish_interrupted_deletes
    pub fn delete_queue_at(&self, index: u32, force: bool) -> Result<QueueDeleted, DeleteError> {
        let info = self.queue(index)?;
        let name = info.spec.name.as_str();
        // Refuse before the entry leaves ACTIVE, so that a refused delete never makes the
        // queue disappear for a moment.
        self.queue_usage(index).refusal(name, force)?;
        let not_active = QueueError::NotActive { index, queues: self.desc.config.queues };
        let control = self.queue_control(index).ok_or(not_active.clone())?;
        // AcqRel: we see every write made under the ACTIVE state we replace; a racing second
        // delete (or anything else that moved the word) fails here.
        control
            .state
            .compare_exchange(QUEUE_ACTIVE, QUEUE_DELETING, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| not_active)?;
        let mut dropped = DroppedJobs::default();
        // Look again now that the queue cannot be found: a lease or a claim that came between
        // the first look and the CAS, or a job re-queued in the middle of our withdrawals (a
        // nack), is someone the caller did not keep away. Each round withdraws what it finds;
        // jobs that keep coming back after a few rounds are a process still at work.
        const ROUNDS: u32 = 4;
        for round in 0..=ROUNDS {
            let usage = self.queue_usage(index);
            let refused = usage.refusal(name, force).and_then(|()| {
                if round == ROUNDS && (usage.queued > 0 || usage.dead > 0) {
                    Err(DeleteError::StillInUse { queue: name.to_string() })
                } else {
                    Ok(())
                }
            });
            if let Err(e) = refused {
                // Back as it was: the deques, ring and descriptor are untouched so far. (Jobs
                // a forced delete withdrew stay dropped; their handles fail as stale.)
                control.state.store(QUEUE_ACTIVE, Ordering::Release);
                return Err(e);
            }
            if usage.queued == 0 && usage.dead == 0 {
                break;
            }
            let d = self.withdraw_jobs(index);
            dropped.queued += d.queued;
            dropped.dead += d.dead;
        }
        self.reset_queue_entry(index);
        // Release: whoever creates the entry anew (its Acquire CAS from FREE) sees the reset.
        control.state.store(QUEUE_FREE, Ordering::Release);
        Ok(QueueDeleted { info, dropped })
    }

    /// Completes every delete a crash interrupted (entries left `DELETING`): drops the jobs
    /// still naming the entry, resets it as [`delete_queue_at`] does, marks it `FREE`.
    /// Returns each entry finished and what it dropped. An entry still in use (a deque
    /// lease or a claimed job) goes back to `ACTIVE` instead: the delete is undone, not
    /// forced. For a daemon adopting a segment, before it serves anyone.
    ///
    /// [`delete_queue_at`]: Segment::delete_queue_at
    pub fn finish_interrupted_deletes(&self) -> Vec<(u32, DroppedJobs)> {
        let mut out = Vec::new();
        for index in 0..self.desc.config.queues {
            let Some(control) = self.queue_control(index) else { break };
            if control.state.load(Ordering::Acquire) != QUEUE_DELETING {
                continue;
            }
            // The daemon may have died after ACTIVE -> DELETING but before the re-check that
            // would have refused (a lease or a claim appeared: a process the daemon did not
            // know of). Someone still uses the queue: undo the delete rather than reset a
            // deque or free a job under them. Otherwise the delete had passed its checks, and
            // whatever is left of its jobs goes.
            let usage = self.queue_usage(index);
            if !usage.leases.is_empty() || usage.claimed > 0 {
                control.state.store(QUEUE_ACTIVE, Ordering::Release);
                continue;
            }
            let dropped = self.withdraw_jobs(index);
            self.reset_queue_entry(index);
            control.state.store(QUEUE_FREE, Ordering::Release);
            out.push((index, dropped));
        }
        out
    }

    /// Frees every `Queued` record and dead letter whose queue is `index` (one CAS each,
    /// from the exact word seen: a record that moved meanwhile is left to the next look).
    fn withdraw_jobs(&self, index: u32) -> DroppedJobs {
        let mut dropped = DroppedJobs::default();
        let records = self.records();
        for i in 0..records.len() {
            let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
            let w = st.load();
            let state = match w.state() {
                Some(s @ (State::Queued | State::Dead)) => s,
                _ => continue,
            };
            if hdr.queue.load(Ordering::Relaxed) != index {
                continue;
            }
            // `Queued(g) / Dead(g) -> Free(g + 1)`; fails if the record moved on (its
            // generation or state changed), and then it is no longer this job.
            if st.withdraw(w.generation(), state).is_ok() {
                match state {
                    State::Dead => dropped.dead += 1,
                    _ => dropped.queued += 1,
                }
            }
        }
        dropped
    }

    /// Resets queue-table entry `index`'s deques, overflow ring and sleepers, for an entry
    /// this caller holds in `DELETING` (nobody else reads or writes them).
    fn reset_queue_entry(&self, index: u32) {
        // Relaxed throughout: published by the Release store of FREE that follows.
        for d in 0..self.desc.config.deques_per_queue {
            if let Some((h, slots)) = self.deque_words(index, d) {
                for s in slots {
                    s.store(0, Ordering::Relaxed);
                }
                h.top.store(0, Ordering::Relaxed);
                h.bottom.store(0, Ordering::Relaxed);
                h.lease.store(0, Ordering::Relaxed);
            }
        }
        if let Some((h, cells)) = self.overflow_words(index) {
            // A zero cell is "empty at lap 0", what position 0 expects, as in a new segment.
            for c in cells {
                c.store(0, Ordering::Relaxed);
            }
            h.head.store(0, Ordering::Relaxed);
            h.tail.store(0, Ordering::Relaxed);
        }
        // Anyone still asleep on the queue (nobody should be) wakes up and looks again, and
        // finds it gone; `seq` only moves forward.
        if let Some(w) = self.wait_word(index) {
            crate::wait::wake_all(w);
        }
    }

    /// Deque `deque` of entry `queue` with all of the segment's `deque_capacity` slots,
    /// whatever the queue there uses.
    fn deque_words(&self, queue: u32, deque: u32) -> Option<(&DequeHeader, &[AtomicU64])> {
        let off = self.deque_offset(queue, deque)?;
        // SAFETY: indices checked by `deque_offset`; the deque region and stride were
        // validated against the mapping, and the stride holds the header and the segment's
        // `deque_capacity` slots after it (both 128-aligned); atomics only.
        Some(unsafe {
            let h: &DequeHeader = self.at(off);
            let slots = core::slice::from_raw_parts(
                self.map.as_mut_ptr().add((off + core::mem::size_of::<DequeHeader>() as u64) as usize)
                    as *const AtomicU64,
                self.desc.config.deque_capacity as usize,
            );
            (h, slots)
        })
    }

    /// The overflow ring of entry `queue`, as raw words.
    fn overflow_words(&self, queue: u32) -> Option<(&OverflowHeader, &[AtomicU64])> {
        let c = &self.desc.config;
        if queue >= c.queues {
            return None;
        }
        let off = self.desc.regions.overflow + queue as u64 * self.desc.regions.overflow_stride;
        // SAFETY: queue < queues; the overflow region and stride were validated against the
        // mapping, the stride holds the header and `overflow_capacity` cells after it, and
        // both are 128-aligned; atomics only.
        Some(unsafe {
            let h: &OverflowHeader = self.at(off);
            let cells = core::slice::from_raw_parts(
                self.map.as_mut_ptr().add((off + core::mem::size_of::<OverflowHeader>() as u64) as usize)
                    as *const AtomicU64,
                c.overflow_capacity as usize,
            );
            (h, cells)
        })
    }

    fn deque_offset(&self, queue: u32, deque: u32) -> Option<u64> {
        let c = &self.desc.config;
        if queue >= c.queues || deque >= c.deques_per_queue {
            return None;
        }
        let n = queue as u64 * c.deques_per_queue as u64 + deque as u64;
        Some(self.desc.regions.deques + n * self.desc.regions.deque_stride)
    }

    /// The header (indices and lease) of deque `deque` of queue-table entry `queue`.
    pub fn deque_header(&self, queue: u32, deque: u32) -> Option<&DequeHeader> {
        let off = self.deque_offset(queue, deque)?;
        // SAFETY: indices checked against the configuration; the deque region and stride
        // were validated, and the stride is a multiple of 128.
        Some(unsafe { self.at(off) })
    }

    /// Deque `deque` of queue `q`, resolved with the queue's capacity and flavor.
    pub fn deque(&self, q: &QueueInfo, deque: u32) -> Result<DequeRef<'_>, QueueError> {
        let no_such =
            || QueueError::NoSuchDeque { queue: q.spec.name.clone(), index: deque, count: q.spec.deques };
        if deque >= q.spec.deques || q.spec.capacity > self.desc.config.deque_capacity {
            return Err(no_such());
        }
        let off = self.deque_offset(q.index, deque).ok_or_else(no_such)?;
        // SAFETY: as in `deque_header`; the slots follow the header and `capacity` is at most
        // the segment's deque capacity, which the stride holds.
        let (h, slots) = unsafe {
            let h: &DequeHeader = self.at(off);
            let slots = core::slice::from_raw_parts(
                self.map.as_mut_ptr().add((off + core::mem::size_of::<DequeHeader>() as u64) as usize)
                    as *const AtomicU64,
                q.spec.capacity as usize,
            );
            (h, slots)
        };
        let top: &AtomicI64 = &h.top;
        DequeRef::new(top, &h.bottom, slots, q.spec.flavor).map_err(|_| no_such())
    }

    /// The overflow ring of queue-table entry `queue`.
    pub fn overflow(&self, queue: u32) -> Option<OverflowRef<'_>> {
        let (h, cells) = self.overflow_words(queue)?;
        OverflowRef::new(&h.head, &h.tail, cells).ok()
    }

    /// The wait word of queue-table entry `queue`.
    pub fn wait_word(&self, queue: u32) -> Option<&WaitWord> {
        let off = self.queue_entry_offset(queue)? + core::mem::offset_of!(QueueEntry, wait) as u64;
        // SAFETY: in bounds as in `queue_control`; atomics only.
        Some(unsafe { self.at(off) })
    }

    /// The job-record arena.
    pub fn records(&self) -> RecordArena<'_> {
        let c = &self.desc.config;
        // SAFETY: the records region holds `job_records` records of `record_stride` bytes
        // inside the validated mapping, each 64-aligned.
        unsafe {
            RecordArena::new(
                self.map.as_mut_ptr().add(self.desc.regions.records as usize),
                c.job_records,
                self.desc.regions.record_stride as usize,
                c.payload_bytes,
            )
        }
    }

    /// Process slot `index`.
    pub fn process_slot(&self, index: u32) -> Option<&ProcessSlot> {
        if index >= self.desc.config.process_slots {
            return None;
        }
        let off = self.desc.regions.processes + index as u64 * core::mem::size_of::<ProcessSlot>() as u64;
        // SAFETY: index checked; the process table is inside the validated mapping.
        Some(unsafe { self.at(off) })
    }
}

enum Invalid {
    Version(u32),
    Truncated(u64),
    What(String),
}

fn validate_descriptor(d: &SegmentDescriptor, file_len: u64) -> Result<(), Invalid> {
    if d.layout_version != LAYOUT_VERSION {
        return Err(Invalid::Version(d.layout_version));
    }
    if d.flags != 0 {
        return Err(Invalid::What(format!("unknown flags {:#x}", d.flags)));
    }
    let cur = StructSizes::CURRENT;
    let sizes = [
        ("header", d.sizes.header, cur.header),
        ("queue entry", d.sizes.queue_entry, cur.queue_entry),
        ("deque header", d.sizes.deque_header, cur.deque_header),
        ("overflow header", d.sizes.overflow_header, cur.overflow_header),
        ("record header", d.sizes.record_header, cur.record_header),
        ("process slot", d.sizes.process_slot, cur.process_slot),
    ];
    for (name, found, want) in sizes {
        if found != want {
            return Err(Invalid::What(format!("{name} size is {found} bytes, this build uses {want}")));
        }
    }
    d.config.validate().map_err(|e| Invalid::What(format!("configuration: {e}")))?;
    let want = compute_regions(&d.config).map_err(|e| Invalid::What(format!("configuration: {e}")))?;
    let r = &d.regions;
    let fields = [
        ("queue table offset", r.queue_table, want.queue_table),
        ("deque region offset", r.deques, want.deques),
        ("deque stride", r.deque_stride, want.deque_stride),
        ("overflow region offset", r.overflow, want.overflow),
        ("overflow stride", r.overflow_stride, want.overflow_stride),
        ("record region offset", r.records, want.records),
        ("record stride", r.record_stride, want.record_stride),
        ("process table offset", r.processes, want.processes),
        ("total length", r.total_len, want.total_len),
    ];
    for (name, found, w) in fields {
        if found != w {
            return Err(Invalid::What(format!("{name} is {found}, but the configuration puts it at {w}")));
        }
    }
    if file_len < r.total_len {
        return Err(Invalid::Truncated(r.total_len));
    }
    Ok(())
}
