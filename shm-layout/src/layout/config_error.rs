//! Why a segment configuration cannot be laid out: each variant names the field and the
//! bound it broke, or the flag that would make room, so the message says what to change.

/// A configuration that cannot be laid out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A count is zero or too large.
    #[error("{field} is {value}; it must be between {min} and {max}")]
    OutOfRange {
        /// Field name.
        field: &'static str,
        /// Given value.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A capacity is not a power of two.
    #[error("{field} is {value}; it must be a power of two")]
    NotPowerOfTwo {
        /// Field name.
        field: &'static str,
        /// Given value.
        value: u64,
    },
    /// No inline area or block class holds a payload of `payload_bytes`.
    #[error(
        "payload_bytes is {payload_bytes} but the largest place for a payload holds {room} bytes; \
         raise inline_bytes (--inline-bytes) or give blocks to a class of at least {payload_bytes} \
         bytes (--payload-blocks SIZE=COUNT)"
    )]
    NoRoomForPayload {
        /// The largest payload asked for.
        payload_bytes: u32,
        /// The largest inline area or block.
        room: u32,
    },
    /// The whole does not fit in 64 bits or in the address space.
    #[error(
        "the segment would be larger than {max} bytes, the most one may be: choose fewer records \
         (--records) or payload blocks (--payload-blocks), or fewer, smaller deques (--queues, \
         --deques-per-queue, --deque-capacity)"
    )]
    TooLarge {
        /// The limit.
        max: u64,
    },
}
