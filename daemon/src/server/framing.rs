//! The daemon's side of the framing of `proto::frame` (a 4-byte big-endian length, then that
//! many bytes of JSON), through tokio-util's `LengthDelimitedCodec`.
//!
//! Rules kept:
//! - the codec is configured to exactly proto's wire format and its limit
//!   ([`proto::MAX_FRAME_LEN`]): a longer announced body is refused from its 4 length bytes,
//!   before anything is allocated; `tests/daemon/framing.rs` runs it against proto's blocking
//!   side both ways;
//! - answers may be larger, up to [`proto::MAX_REPLY_LEN`] ([`encode_reply`]): only clients
//!   read them, and a whole-segment `Stats` of a big queue table needs more than 64 KiB;
//! - two deadlines: a connection may wait as long as it likes before a frame's first byte,
//!   but once that byte arrived the frame must be whole within the io-timeout (a half-written
//!   frame cannot hold a task for ever). The reader records when the first byte came;
//! - reading is cancel-safe: bytes read stay in the reader's buffer, so a `select!` that
//!   drops a read loses nothing;
//! - errors are proto's [`FrameError`], so both sides report a frame alike.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;
use tokio_util::bytes::{Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};
use xtcq_proto::frame::{FrameError, HEADER_LEN};
use xtcq_proto::{MAX_FRAME_LEN, MAX_REPLY_LEN};

/// The codec of proto's wire format: a `u32` big-endian length at offset 0 counting the body
/// only, skipped from what is returned; bodies up to [`MAX_FRAME_LEN`].
pub fn codec() -> LengthDelimitedCodec {
    codec_within(MAX_FRAME_LEN)
}

/// The same codec with bodies up to `max`.
fn codec_within(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .big_endian()
        .length_field_offset(0)
        .length_field_length(HEADER_LEN)
        .length_adjustment(0)
        .num_skip(HEADER_LEN)
        .max_frame_length(max)
        .new_codec()
}

/// Encodes `msg` as one whole frame (prefix included), refusing a body over the limit.
pub fn encode<T: serde::Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    encode_within(msg, MAX_FRAME_LEN)
}

/// Encodes an answer to a request ([`MAX_REPLY_LEN`]: a client reads the daemon's answers up
/// to that; a whole-segment `Stats` of a big queue table needs more than [`MAX_FRAME_LEN`]).
pub fn encode_reply<T: serde::Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    encode_within(msg, MAX_REPLY_LEN)
}

/// Encodes `msg` as one whole frame, refusing a body over `max`.
fn encode_within<T: serde::Serialize>(msg: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(msg).map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = body.len();
    let mut out = BytesMut::with_capacity(HEADER_LEN + len);
    codec_within(max).encode(Bytes::from(body), &mut out).map_err(|_| {
        FrameError::Encode(format!("message of {len} bytes exceeds the frame limit of {max} bytes"))
    })?;
    Ok(out.to_vec())
}

/// Reads frames from a byte stream with the codec, keeping the two deadlines.
pub struct FrameReader {
    codec: LengthDelimitedCodec,
    buf: BytesMut,
    /// When the first byte of the frame being read arrived (`None`: none of it yet).
    started: Option<Instant>,
    /// The current frame's announced body length, once its 4 length bytes are in.
    announced: Option<usize>,
    /// Bytes of the current frame received so far, header included (for a truncation).
    received: usize,
    /// Bytes of the stream taken by the frames returned so far.
    consumed: u64,
}

impl Default for FrameReader {
    fn default() -> Self {
        Self {
            codec: codec(),
            buf: BytesMut::new(),
            started: None,
            announced: None,
            received: 0,
            consumed: 0,
        }
    }
}

impl FrameReader {
    /// The next frame's body from `r`: waits as long as needed for its first byte, then at
    /// most `t` for the rest.
    pub async fn next<R: AsyncRead + Unpin>(&mut self, mut r: R, t: Duration) -> Result<Vec<u8>, FrameError> {
        loop {
            if let Some(body) = self.decode()? {
                return Ok(body);
            }
            let n = match self.started {
                None => r.read_buf(&mut self.buf).await?,
                Some(at) => match tokio::time::timeout_at(at + t, r.read_buf(&mut self.buf)).await {
                    Ok(n) => n?,
                    Err(_) => {
                        return Err(FrameError::Io(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("frame not completed within {} s", t.as_secs()),
                        )))
                    }
                },
            };
            if n == 0 {
                return Err(self.ended());
            }
            self.received += n;
            self.started.get_or_insert_with(Instant::now);
        }
    }

    /// A whole frame's body, if the buffer holds one.
    fn decode(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        if self.announced.is_none() && self.buf.len() >= HEADER_LEN {
            // The codec has not taken the header off yet: the buffer starts with it.
            let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
            if len as usize > MAX_FRAME_LEN {
                return Err(FrameError::TooLarge { len: u64::from(len), max: MAX_FRAME_LEN });
            }
            self.announced = Some(len as usize);
        }
        let body = match self.codec.decode(&mut self.buf) {
            Ok(Some(body)) => body,
            Ok(None) => return Ok(None),
            // Checked above; kept for a codec that refuses for another reason.
            Err(e) => return Err(FrameError::Io(e)),
        };
        self.consumed += (HEADER_LEN + body.len()) as u64;
        // What is left is the start of the next frame, if anything.
        self.announced = None;
        self.received = self.buf.len();
        self.started = if self.buf.is_empty() { None } else { Some(Instant::now()) };
        Ok(Some(body.to_vec()))
    }

    /// Where the stream stands after the frames returned so far: the last frame took the
    /// bytes from this less its length (header included) to this.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The error for an end of stream now.
    fn ended(&self) -> FrameError {
        match (self.received, self.announced) {
            (0, _) => FrameError::Closed,
            (got, None) => FrameError::Truncated { expected: HEADER_LEN, got },
            (got, Some(len)) => FrameError::Truncated { expected: HEADER_LEN + len, got },
        }
    }
}
