//! Named sizes for a segment: [`SegmentConfig::small`] and the `with_*` steps from it, so a
//! caller (a test, an example, a tool) says which sizes matter to it instead of spelling out
//! every field.
//!
//! - Every step is a `const fn` that sets one concern and nothing else; [`validate`]
//!   (`SegmentConfig::validate`) still checks the result, at `Segment::create`.
//! - The defaults for what a caller leaves alone are [`SegmentConfig::default`]'s (payload
//!   inline area, block classes), so a small segment is laid out like a big one.
//!
//! [`validate`]: SegmentConfig::validate

use super::SegmentConfig;

impl SegmentConfig {
    /// A small segment: 2 queues of 2 deques of 1,024 handles (what [`QueueSpec::new`] asks
    /// for), 256 records of payloads up to 64 bytes, 8 process slots, overflow rings of 256,
    /// a key table of 64 entries.
    ///
    /// [`QueueSpec::new`]: crate::QueueSpec::new
    ///
    /// ```
    /// use xtcq_shm::SegmentConfig;
    /// let cfg = SegmentConfig::small().with_records(1024).with_process_slots(16);
    /// assert_eq!((cfg.job_records, cfg.process_slots, cfg.queues), (1024, 16, 2));
    /// assert!(cfg.validate().is_ok());
    /// ```
    pub const fn small() -> Self {
        let d = Self::DEFAULT;
        Self {
            queues: 2,
            deques_per_queue: 2,
            deque_capacity: 1024,
            job_records: 256,
            payload_bytes: 64,
            process_slots: 8,
            overflow_capacity: 256,
            keys: 64,
            ..d
        }
    }

    /// `queues` queues of `deques_per_queue` deques each.
    ///
    /// ```
    /// let cfg = xtcq_shm::SegmentConfig::small().with_queues(1, 4);
    /// assert_eq!((cfg.queues, cfg.deques_per_queue), (1, 4));
    /// ```
    pub const fn with_queues(mut self, queues: u32, deques_per_queue: u32) -> Self {
        self.queues = queues;
        self.deques_per_queue = deques_per_queue;
        self
    }

    /// Handles per deque (a power of two).
    ///
    /// ```
    /// assert_eq!(xtcq_shm::SegmentConfig::small().with_deque_capacity(16).deque_capacity, 16);
    /// ```
    pub const fn with_deque_capacity(mut self, capacity: u32) -> Self {
        self.deque_capacity = capacity;
        self
    }

    /// Job records, shared by every queue.
    ///
    /// ```
    /// assert_eq!(xtcq_shm::SegmentConfig::small().with_records(64).job_records, 64);
    /// ```
    pub const fn with_records(mut self, records: u32) -> Self {
        self.job_records = records;
        self
    }

    /// Cells per overflow ring (a power of two).
    ///
    /// ```
    /// assert_eq!(xtcq_shm::SegmentConfig::small().with_overflow_capacity(64).overflow_capacity, 64);
    /// ```
    pub const fn with_overflow_capacity(mut self, capacity: u32) -> Self {
        self.overflow_capacity = capacity;
        self
    }

    /// The largest payload a push takes.
    ///
    /// ```
    /// assert_eq!(xtcq_shm::SegmentConfig::small().with_payload_bytes(16).payload_bytes, 16);
    /// ```
    pub const fn with_payload_bytes(mut self, bytes: u32) -> Self {
        self.payload_bytes = bytes;
        self
    }

    /// Process table entries.
    ///
    /// ```
    /// assert_eq!(xtcq_shm::SegmentConfig::small().with_process_slots(4).process_slots, 4);
    /// ```
    pub const fn with_process_slots(mut self, slots: u32) -> Self {
        self.process_slots = slots;
        self
    }

    /// Entries of the key table (0: none).
    ///
    /// ```
    /// assert_eq!(xtcq_shm::SegmentConfig::small().with_keys(128).keys, 128);
    /// ```
    pub const fn with_keys(mut self, keys: u32) -> Self {
        self.keys = keys;
        self
    }
}
