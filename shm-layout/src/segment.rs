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

mod clock;
mod compat;
mod digest;
mod errors;
mod flow;
mod levels;
mod memory;
mod queue_table;
mod quota;
mod rate;
mod running;

pub use crate::limit_words::{Rate, Running, Tokens};
use clock::now_unix_ns;
pub use clock::{coarse_monotonic_ns, monotonic_ns};
pub use errors::{DeleteError, QueueError, SegmentError};
pub use memory::host_memory_and_swap;
pub use queue_table::{DroppedJobs, QueueDeleted, QueueInfo, QueueSpec, QueueUsage};
pub use quota::{Held, QueueQuota, QueueRecordCount, QuotaState};
pub use rate::RateLimit;
pub use running::RunningWalk;

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
    /// The payload block region, laid out from `desc.config` once.
    blocks: crate::layout::payload::BlockLayout,
    /// Where this process sends descriptor wakes, once the daemon said ([`Segment::set_wake_dir`]).
    wake: std::sync::OnceLock<crate::wait::WakeDir>,
}

/// The block layout of a validated configuration (which `compute_regions` already laid out).
fn block_layout(c: &SegmentConfig) -> crate::layout::payload::BlockLayout {
    crate::layout::payload::block_layout(c).unwrap_or(crate::layout::payload::BlockLayout {
        counts: [0; crate::layout::payload::PAYLOAD_CLASSES],
        first: [0; crate::layout::payload::PAYLOAD_CLASSES],
        data: [0; crate::layout::payload::PAYLOAD_CLASSES],
        total: 0,
        len: 0,
    })
}

/// Guards `map` against a truncation of its file ([`crate::sigbus`]).
fn guard(map: &MmapRaw) -> Option<crate::sigbus::Guard> {
    let ready_at = core::mem::offset_of!(SegmentHeader, live) + core::mem::offset_of!(HeaderLive, ready);
    crate::sigbus::Guard::register(map.as_ptr() as usize, map.len(), ready_at)
}

fn io_err<'p>(path: &'p Path, what: &'static str) -> impl FnOnce(io::Error) -> SegmentError + 'p {
    move |source| SegmentError::Io { path: path.to_path_buf(), what, source }
}

/// Why a new segment file could not be created at `path`.
fn create_error(path: &Path, e: io::Error) -> SegmentError {
    const NO_DIR: &str = "cannot create it in a directory that does not exist (create the directory first)";
    match e.kind() {
        io::ErrorKind::AlreadyExists => SegmentError::Exists { path: path.to_path_buf() },
        io::ErrorKind::NotFound if path.parent().is_some_and(|d| !d.is_dir()) => io_err(path, NO_DIR)(e),
        _ => io_err(path, "cannot create")(e),
    }
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| create_error(path, e))?;
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
        // A memfd lives on the kernel's internal tmpfs, which has no size limit: a fallocate
        // larger than memory would take pages until the OOM killer ends something, instead
        // of failing. Refused here when it could never fit.
        if let Some(room) = memory::host_memory_and_swap() {
            if regions.total_len > room {
                return Err(SegmentError::NoSpace {
                    path,
                    len: regions.total_len,
                    source: io::Error::new(
                        io::ErrorKind::OutOfMemory,
                        format!("a memfd segment larger than this host's memory and swap ({room} bytes)"),
                    ),
                });
            }
        }
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
        let blocks = block_layout(config);
        let seg = Segment {
            map,
            _file: file,
            path: path.to_path_buf(),
            desc,
            guard,
            blocks,
            wake: Default::default(),
        };
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
        Self::attach_mode(file, path, false)
    }

    /// Maps a copy of the segment file at `path` read-only, to copy its jobs out
    /// ([`crate::transfer`]): this layout version or an older one whose regions are laid out
    /// as this build's are ([`READABLE_LAYOUT_VERSIONS`]). Nothing may be written through it
    /// (a store faults).
    ///
    /// The file is read into a private memfd first and that is mapped: a mapping of the
    /// file itself faults with SIGBUS on every page past a truncation made while it is read
    /// (by anyone who may write the file), where `read` only comes up short, which the
    /// length check then refuses. The copy is also a snapshot: jobs moving in a live
    /// segment move no more while it is read. It costs memory the size of the segment as its
    /// header gives it (checked before the copy, so a longer file costs no more; a header
    /// forged to declare a huge, consistent segment still costs that much).
    pub fn open_read_only(path: &Path) -> Result<Segment, SegmentError> {
        let file = OpenOptions::new().read(true).open(path).map_err(io_err(path, "cannot open"))?;
        // Only the length its own header gives, checked first: a file of any length costs no
        // disk (sparse), and copied whole it would take that much memory.
        let len = Self::declared_len(&file, path)?;
        let copy = rustix::fs::memfd_create("xtcq-segment-copy", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| io_err(path, "cannot create a memfd to copy it into")(e.into()))?;
        let mut copy = File::from(copy);
        // `take`: a file that grows while it is read is copied up to the length it had.
        io::copy(&mut io::Read::take(&file, len), &mut copy).map_err(io_err(path, "cannot read"))?;
        Self::attach_mode(copy, path, true)
    }

    /// The length the header of the segment file `file` gives, once its magic and
    /// descriptor check out (as [`attach_mode`](Self::attach_mode) checks them, read-only);
    /// read with `pread`, so a truncation makes it come up short, never a fault.
    fn declared_len(file: &File, path: &Path) -> Result<u64, SegmentError> {
        let actual = file.metadata().map_err(io_err(path, "cannot stat"))?.len();
        let header_len = core::mem::size_of::<SegmentHeader>();
        let mut header = core::mem::MaybeUninit::<SegmentHeader>::zeroed();
        // SAFETY: the header's bytes, zeroed above, so initialised; nothing else refers to them.
        let bytes = unsafe { core::slice::from_raw_parts_mut(header.as_mut_ptr().cast::<u8>(), header_len) };
        std::os::unix::fs::FileExt::read_exact_at(file, bytes, 0).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                SegmentError::Truncated { path: path.to_path_buf(), actual, needed: header_len as u64 }
            }
            _ => io_err(path, "cannot read")(e),
        })?;
        let base = header.as_ptr().cast::<u8>();
        // SAFETY: `base` is a whole, aligned header; both descriptors are plain integers,
        // valid for any bits, and no longer than it.
        let desc = unsafe { core::ptr::read(base.cast::<SegmentDescriptor>()) };
        let desc = match desc.layout_version {
            // SAFETY: as above.
            4 | 5 => compat::descriptor_of_v5(unsafe { core::ptr::read(base.cast()) }),
            // SAFETY: as above.
            6..=9 => compat::descriptor_of_v9(unsafe { core::ptr::read(base.cast()) }),
            _ => desc,
        };
        if desc.magic != MAGIC {
            return Err(SegmentError::BadMagic {
                path: path.to_path_buf(),
                found: desc.magic,
                expected: MAGIC,
            });
        }
        validate_descriptor(&desc, actual, true).map_err(|e| invalid(e, path, actual))?;
        Ok(desc.regions.total_len)
    }

    fn attach_mode(file: File, path: &Path, read_only: bool) -> Result<Segment, SegmentError> {
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
        let opts = MmapOptions::new().len(actual as usize).clone();
        let map = if read_only { opts.map_raw_read_only(&file) } else { opts.map_raw(&file) }
            .map_err(io_err(path, "cannot map"))?;
        // Guarded from here: the file may be truncated between the fstat above and the reads
        // below. (Not a read-only map: the guard's recovery writes the ready word.)
        let guard = if read_only { None } else { guard(&map) };
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
        let desc = match desc.layout_version {
            // SAFETY: as above; the older descriptor is as long or shorter.
            4 | 5 if read_only => {
                compat::descriptor_of_v5(unsafe { core::ptr::read_volatile(base as *const _) })
            }
            // SAFETY: as above; the older descriptor is as long.
            6..=9 if read_only => {
                compat::descriptor_of_v9(unsafe { core::ptr::read_volatile(base as *const _) })
            }
            _ => desc,
        };
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
        validate_descriptor(&desc, actual, read_only).map_err(|e| invalid(e, path, actual))?;
        let blocks = block_layout(&desc.config);
        Ok(Segment {
            map,
            _file: file,
            path: path.to_path_buf(),
            desc,
            guard,
            blocks,
            wake: Default::default(),
        })
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
    pub(crate) unsafe fn at<T>(&self, offset: u64) -> &T {
        debug_assert!(offset + core::mem::size_of::<T>() as u64 <= self.desc.regions.total_len);
        debug_assert!(offset.is_multiple_of(core::mem::align_of::<T>() as u64));
        // SAFETY: per the contract, in bounds and aligned; the mapping lives as long as self.
        unsafe { &*(self.map.as_mut_ptr().add(offset as usize) as *const T) }
    }

    /// `n` values of `T` from `offset`, as a slice.
    ///
    /// # Safety
    /// As [`at`](Self::at), for `offset + n * size_of::<T>()`.
    #[inline]
    pub(crate) unsafe fn slice_at<T>(&self, offset: u64, n: usize) -> &[T] {
        debug_assert!(offset + (n * core::mem::size_of::<T>()) as u64 <= self.desc.regions.total_len);
        // SAFETY: per the contract.
        unsafe { core::slice::from_raw_parts(self.map.as_mut_ptr().add(offset as usize) as *const T, n) }
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
            if let Some(w) = self.waker(q) {
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

    /// Deque `deque` of queue `q`, resolved with the queue's capacity and flavor: of level
    /// `deque / q.spec.deques` (`levels`), so `0..q.spec.level_deques()` are all of them.
    pub fn deque(&self, q: &QueueInfo, deque: u32) -> Result<DequeRef<'_>, QueueError> {
        let count = q.spec.level_deques();
        let no_such = || QueueError::NoSuchDeque { queue: q.spec.name.clone(), index: deque, count };
        if deque >= count || q.spec.capacity > self.desc.config.deque_capacity {
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

    /// The wait word of queue-table entry `queue`.
    pub fn wait_word(&self, queue: u32) -> Option<&WaitWord> {
        let off = self.queue_entry_offset(queue)? + core::mem::offset_of!(QueueEntry, wait) as u64;
        // SAFETY: in bounds as in `queue_control`; atomics only.
        Some(unsafe { self.at(off) })
    }

    /// Queue `queue`'s wait word with what this process needs to wake its sleepers.
    pub fn waker(&self, queue: u32) -> Option<crate::wait::Waker<'_>> {
        Some(crate::wait::Waker {
            word: self.wait_word(queue)?,
            queue,
            dir: self.wake.get(),
            flow: self.flow_word(queue)?,
            limit: self.running_words(queue)?,
            rate: self.rate_words(queue)?,
            slot: None,
        })
    }

    /// Sends descriptor wakes into the daemon's wake directory `dir` from now on (the daemon
    /// itself, and each client once the daemon named it). Set once: a later call is ignored.
    pub fn set_wake_dir(&self, dir: &Path) -> io::Result<()> {
        if self.wake.get().is_none() {
            let _ = self.wake.set(crate::wait::WakeDir::open(dir)?);
        }
        Ok(())
    }

    /// The daemon's wake directory, once set.
    pub fn wake_dir(&self) -> Option<&Path> {
        self.wake.get().map(crate::wait::WakeDir::dir)
    }

    /// The job-record arena.
    pub fn records(&self) -> RecordArena<'_> {
        let c = &self.desc.config;
        let inline = self.desc.regions.record_stride as usize - RECORD_HEADER_SIZE;
        // SAFETY: the records region holds `job_records` records of `record_stride` bytes
        // inside the validated mapping, each 64-aligned, their inline area the stride's rest
        // (at least 8 bytes when there are blocks, see `payload::inline_area`); the block
        // region is laid out as `self.blocks` says, inside the mapping, 128-aligned.
        unsafe {
            let blocks = crate::record::blocks::PayloadBlocks::new(
                self.map.as_mut_ptr().add(self.desc.regions.blocks as usize),
                &self.blocks,
            );
            RecordArena::new(
                self.map.as_mut_ptr().add(self.desc.regions.records as usize),
                c.job_records,
                self.desc.regions.record_stride as usize,
                inline as u32,
                c.payload_bytes,
                blocks,
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

/// The error of a descriptor that is `e`, of the file at `path`, `actual` bytes long.
fn invalid(e: Invalid, path: &Path, actual: u64) -> SegmentError {
    match e {
        Invalid::Version(found) => {
            SegmentError::Version { path: path.to_path_buf(), found, expected: LAYOUT_VERSION }
        }
        Invalid::Truncated(needed) => SegmentError::Truncated { path: path.to_path_buf(), actual, needed },
        Invalid::What(what) => SegmentError::Inconsistent { path: path.to_path_buf(), what },
    }
}

/// The layout versions [`Segment::open_read_only`] reads: versions 4 and 5 differ from this
/// one in the descriptor (read through `compat`) and in having no payload blocks (every
/// payload inline, the record sized for the largest), which their descriptor, put in this
/// version's terms, says exactly; versions 6 to 9 only in the words of a queue's control
/// and wait lines they lack (read as zero: not paused, no concurrency or rate limit, one
/// priority level), in the priority bits of a record's flags (zero: priority 0) and in the
/// batch region they do not have (no job of theirs is in a batch) and the key table they lack (read through `compat`,
/// with `keys` 0).
pub const READABLE_LAYOUT_VERSIONS: [u32; 7] = [4, 5, 6, 7, 8, 9, LAYOUT_VERSION];

fn validate_descriptor(d: &SegmentDescriptor, file_len: u64, older_ok: bool) -> Result<(), Invalid> {
    let readable = older_ok && READABLE_LAYOUT_VERSIONS.contains(&d.layout_version);
    if d.layout_version != LAYOUT_VERSION && !readable {
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
    let mut want = compute_regions(&d.config).map_err(|e| Invalid::What(format!("configuration: {e}")))?;
    if d.layout_version == 4 {
        // No metrics region: the segment ends with the process table (see `descriptor_of_v4`).
        want.total_len = want.metrics.next_multiple_of(4096);
        want.metrics = want.total_len;
    } else if d.layout_version < 10 {
        // No batch region: the segment ends with the metrics region.
        let blocks = u64::from(d.config.queues) * (u64::from(d.config.process_slots) + 2);
        want.total_len = (want.metrics + blocks * 128).next_multiple_of(4096);
    }
    let r = &d.regions;
    let fields = [
        ("queue table offset", r.queue_table, want.queue_table),
        ("deque region offset", r.deques, want.deques),
        ("deque stride", r.deque_stride, want.deque_stride),
        ("overflow region offset", r.overflow, want.overflow),
        ("overflow stride", r.overflow_stride, want.overflow_stride),
        ("record region offset", r.records, want.records),
        ("record stride", r.record_stride, want.record_stride),
        ("payload block region offset", r.blocks, want.blocks),
        ("process table offset", r.processes, want.processes),
        ("metrics region offset", r.metrics, want.metrics),
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

/// A small segment in a temporary directory with one queue, `jobs`, for unit tests.
#[cfg(test)]
pub(crate) fn one_queue_segment() -> (tempfile::TempDir, std::sync::Arc<Segment>, QueueInfo) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::SegmentConfig::small().with_queues(1, 1).with_records(64);
    let seg = std::sync::Arc::new(Segment::create(&dir.path().join("s"), &config, 0o600).expect("segment"));
    let q = seg.create_queue(&QueueSpec::new("jobs")).expect("queue");
    (dir, seg, q)
}
