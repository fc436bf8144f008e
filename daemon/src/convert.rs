//! Conversions between the segment's types (`xtcq_shm`) and their protocol mirrors
//! (`xtcq_proto`), all here. Functions rather than `From` impls: neither type is this crate's
//! (the orphan rule), and the protocol crate stays free of the segment format, so that a
//! client speaking it needs no layout.

use xtcq_proto as proto;
use xtcq_shm::segment::QueueError;
use xtcq_shm::QueueInfo;

/// Converts a segment queue error to an error reply.
pub fn queue_error(e: &QueueError) -> proto::ErrorReply {
    use proto::ErrorCode as C;
    let code = match e {
        QueueError::NoSuchQueue(_) => C::NoSuchQueue,
        QueueError::Exists(_) => C::QueueExists,
        QueueError::TableFull(_) => C::QueueTableFull,
        QueueError::BadSpec(_) | QueueError::NoSuchDeque { .. } => C::BadRequest,
        QueueError::NotActive { .. } => C::NoSuchQueue,
        QueueError::Corrupt { .. } => C::Corrupt,
    };
    proto::ErrorReply::new(code, e.to_string())
}

/// Protocol view of a queue.
pub fn queue_info(q: &QueueInfo) -> proto::QueueInfo {
    proto::QueueInfo {
        index: q.index,
        name: q.spec.name.clone(),
        flavor: flavor_to_proto(q.spec.flavor),
        deques: q.spec.deques,
        capacity: q.spec.capacity,
        max_attempts: q.spec.max_attempts,
        lease_ms: q.spec.lease_ms,
        levels: q.spec.levels,
        aging: q.spec.aging,
        retry_backoff: None,
        paused: false,
    }
}

/// The segment's flavor of a protocol one.
pub fn flavor_from_proto(f: proto::Flavor) -> xtcq_shm::Flavor {
    match f {
        proto::Flavor::Lifo => xtcq_shm::Flavor::Lifo,
        proto::Flavor::Fifo => xtcq_shm::Flavor::Fifo,
    }
}

/// The protocol's flavor of a segment one.
pub fn flavor_to_proto(f: xtcq_shm::Flavor) -> proto::Flavor {
    match f {
        xtcq_shm::Flavor::Lifo => proto::Flavor::Lifo,
        xtcq_shm::Flavor::Fifo => proto::Flavor::Fifo,
    }
}
