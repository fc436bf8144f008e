//! Framing: `u32` big-endian body length, then the body (one JSON value).
//!
//! ```text
//!  +----------------+---------------------------+
//!  | len: u32 BE    | body: `len` bytes of JSON |
//!  +----------------+---------------------------+
//! ```
//!
//! Invariants:
//! - a length above [`MAX_FRAME_LEN`] is refused as soon as the 4 length bytes are read,
//!   before any buffer is allocated, so a hostile peer cannot make us allocate 4 GiB;
//! - a zero length is a frame with an empty body, which is not valid JSON: a decode error;
//! - an end of stream exactly at a frame boundary is [`FrameError::Closed`]; inside a frame it
//!   is [`FrameError::Truncated`], so a half-written frame is told from a clean close.
//!
//! The blocking helpers here serve clients (std sockets). The daemon reads and writes the same
//! format with tokio-util's `LengthDelimitedCodec` configured to it (`xtcqd::server::framing`);
//! `tests/daemon/framing.rs` runs the two against each other. [`decode`] is shared: the
//! body is the same JSON either way.

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Largest body a frame may carry (64 KiB): every request, every handshake message, and
/// every answer but the two below. A peer the daemon does not trust can make it read no more.
pub const MAX_FRAME_LEN: usize = 64 * 1024;

/// Largest body of an answer from the daemon (16 MiB): a whole-segment `Stats` or
/// `ListQueues` grows with the queue table (about 700 bytes a queue; `--queues` takes up to
/// 4096) and the processes attached. Only a client reads frames this large, from a daemon it
/// checked it trusts.
pub const MAX_REPLY_LEN: usize = 16 * 1024 * 1024;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// A frame could not be read, written or understood.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer announced a body larger than the limit ([`MAX_FRAME_LEN`], or
    /// [`MAX_REPLY_LEN`] for a daemon's answer).
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Announced length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// The stream ended at a frame boundary.
    #[error("connection closed")]
    Closed,
    /// The stream ended inside a frame.
    #[error("connection closed in the middle of a frame ({got} of {expected} bytes)")]
    Truncated {
        /// Bytes the frame needed (header included).
        expected: usize,
        /// Bytes that arrived.
        got: usize,
    },
    /// The body is not a valid message.
    #[error("malformed message: {0}")]
    Decode(#[source] serde_json::Error),
    /// A message could not be encoded (a bug, or a message over the limit).
    #[error("cannot encode message: {0}")]
    Encode(String),
    /// The transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// Checks an announced body length against [`MAX_FRAME_LEN`].
pub fn check_len(len: u32) -> Result<usize, FrameError> {
    check_len_within(len, MAX_FRAME_LEN)
}

/// Checks an announced body length against `max`.
pub fn check_len_within(len: u32, max: usize) -> Result<usize, FrameError> {
    let len = len as usize;
    if len > max {
        return Err(FrameError::TooLarge { len: len as u64, max });
    }
    Ok(len)
}

/// Encodes `msg` as one whole frame (prefix included).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; HEADER_LEN];
    serde_json::to_writer(&mut out, msg).map_err(|e| FrameError::Encode(e.to_string()))?;
    let body = out.len() - HEADER_LEN;
    if body > MAX_FRAME_LEN {
        return Err(FrameError::Encode(format!(
            "message of {body} bytes exceeds the frame limit of {MAX_FRAME_LEN} bytes"
        )));
    }
    out[..HEADER_LEN].copy_from_slice(&(body as u32).to_be_bytes());
    Ok(out)
}

/// Decodes a frame body.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    serde_json::from_slice(body).map_err(FrameError::Decode)
}

/// Writes `msg` as one frame and flushes.
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let bytes = encode(msg)?;
    w.write_all(&bytes)?;
    w.flush()?;
    Ok(())
}

/// Reads exactly `buf.len()` bytes; returns how many arrived before an end of stream.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads one frame's body (blocking), of at most [`MAX_FRAME_LEN`] bytes.
pub fn read_body<R: Read>(r: &mut R) -> Result<Vec<u8>, FrameError> {
    read_body_within(r, MAX_FRAME_LEN)
}

/// Reads one frame's body (blocking), of at most `max` bytes.
pub fn read_body_within<R: Read>(r: &mut R, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut hdr = [0u8; HEADER_LEN];
    match read_full(r, &mut hdr)? {
        0 => return Err(FrameError::Closed),
        HEADER_LEN => {}
        got => return Err(FrameError::Truncated { expected: HEADER_LEN, got }),
    }
    let len = check_len_within(u32::from_be_bytes(hdr), max)?;
    let mut body = vec![0u8; len];
    let got = read_full(r, &mut body)?;
    if got != len {
        return Err(FrameError::Truncated { expected: HEADER_LEN + len, got: HEADER_LEN + got });
    }
    Ok(body)
}

/// Reads and decodes one frame (blocking).
pub fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    decode(&read_body(r)?)
}

/// Reads and decodes one frame of at most `max` bytes (blocking): a client reading the
/// daemon's answers passes [`MAX_REPLY_LEN`].
pub fn read_frame_within<R: Read, T: DeserializeOwned>(r: &mut R, max: usize) -> Result<T, FrameError> {
    decode(&read_body_within(r, max)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::*;
    use std::io::Cursor;

    fn roundtrip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(m: T) {
        let bytes = encode(&m).expect("encode");
        let back: T = read_frame(&mut Cursor::new(bytes)).expect("decode");
        assert_eq!(back, m);
    }

    #[test]
    fn every_message_roundtrips() {
        roundtrip(Hello::new("test", 42));
        roundtrip(HelloReply::Ok(HelloOk {
            protocol_version: 1,
            daemon_version: "0.1.0".into(),
            daemon_pid: 7,
            daemon_epoch: 3,
            segment_path: "/dev/shm/x".into(),
            segment_digest: 11,
            wake_dir: Some("/run/xtcq/xtcqd.sock.wake".into()),
        }));
        roundtrip(HelloReply::VersionMismatch { daemon_version: 1, client_version: 9, message: "m".into() });
        roundtrip(HelloReply::Refused(ErrorReply::new(ErrorCode::Unauthorized, "no")));
        let reqs = vec![
            Request::Ping,
            Request::CreateQueue(QueueParams {
                name: "q".into(),
                deques: 4,
                capacity: 1024,
                flavor: Flavor::Fifo,
                max_attempts: 3,
                lease_ms: 0,
                levels: 1,
                aging: 0,
            }),
            Request::ListQueues,
            Request::Stats { queue: None },
            Request::Stats { queue: Some("q".into()) },
            Request::AttachOwner { queue: "q".into(), deque: Some(2) },
            Request::AttachThief { queue: "q".into() },
            Request::AttachInjector { queue: "q".into() },
            Request::Detach { queue: "q".into(), deque: 1 },
            Request::Shutdown,
            Request::Resume { slot: 3, slot_epoch: u64::MAX },
            Request::WakeDescriptor { queue: "q".into() },
            Request::ReleaseWake { queue: "q".into(), bit: 255 },
            Request::SetPaused { queue: "q".into(), paused: true },
            Request::DeleteQueue { name: "q".into(), force: false },
            Request::DeleteQueue { name: "q".into(), force: true },
            Request::FenceCommand { index: 1, birth: 2, generation: 3, pid: 4 },
            Request::FenceCgroup { index: 1, birth: 2, generation: 3, pid: 4 },
        ];
        for (i, r) in reqs.into_iter().enumerate() {
            roundtrip(RequestFrame { id: i as u64, request: r });
        }
        let info = QueueInfo {
            index: 0,
            name: "q".into(),
            flavor: Flavor::Lifo,
            deques: 2,
            capacity: 8,
            max_attempts: 0,
            lease_ms: 0,
            levels: 1,
            aging: 0,
            retry_backoff: None,
            paused: false,
        };
        let att =
            Attachment { process_slot: 3, slot_epoch: 9, segment_path: "/s".into(), queue: info.clone() };
        let resps = vec![
            Ok(Response::Pong),
            Ok(Response::QueueCreated(info.clone())),
            Ok(Response::Queues(vec![info.clone()])),
            Ok(Response::OwnerAttached(OwnerLease { attachment: att.clone(), deque: 1, lease: 9 << 32 | 4 })),
            Ok(Response::ThiefAttached(att.clone())),
            Ok(Response::InjectorAttached(att)),
            Ok(Response::Detached),
            Ok(Response::ShuttingDown),
            Ok(Response::Resumed { process_slot: 3, slot_epoch: 9 }),
            Ok(Response::WakeDescriptor { bit: 7 }),
            Ok(Response::WakeReleased),
            Ok(Response::PausedSet { was_paused: true }),
            Ok(Response::QueueDeleted(QueueDeleted {
                queue: info.clone(),
                dropped_queued: 5,
                dropped_dead: 1,
            })),
            Err(ErrorReply::new(ErrorCode::NoSuchQueue, "no such queue: q")),
            Err(ErrorReply::new(ErrorCode::SlotNotHeld, "not yours")),
            Err(ErrorReply::new(ErrorCode::QueueInUse, "pid 7 is attached")),
            Err(ErrorReply::new(ErrorCode::QueueNotEmpty, "3 queued job(s)")),
        ];
        for (i, r) in resps.into_iter().enumerate() {
            roundtrip(ServerMessage::Reply { id: i as u64, result: r });
        }
        roundtrip(ServerMessage::Event(Event::ShuttingDown { reason: "SIGTERM".into() }));
    }

    #[test]
    fn frame_is_big_endian_length_then_json() {
        let bytes = encode(&RequestFrame { id: 1, request: Request::Ping }).unwrap();
        let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(len, bytes.len() - 4);
        let v: serde_json::Value = serde_json::from_slice(&bytes[4..]).unwrap();
        assert_eq!(v["id"], 1);
    }

    #[test]
    fn an_answer_over_64_kib_is_read_within_the_reply_limit_only() {
        let big = serde_json::Value::String("x".repeat(MAX_FRAME_LEN + 10));
        let mut bytes = ((MAX_FRAME_LEN + 12) as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(&serde_json::to_vec(&big).unwrap());
        assert!(matches!(read_body(&mut Cursor::new(bytes.clone())), Err(FrameError::TooLarge { .. })));
        let back: serde_json::Value = read_frame_within(&mut Cursor::new(bytes), MAX_REPLY_LEN).unwrap();
        assert_eq!(back, big);
        let over = ((MAX_REPLY_LEN + 1) as u32).to_be_bytes().to_vec();
        assert!(matches!(
            read_body_within(&mut Cursor::new(over), MAX_REPLY_LEN),
            Err(FrameError::TooLarge { max: MAX_REPLY_LEN, .. })
        ));
    }

    #[test]
    fn oversized_length_is_refused_before_reading_the_body() {
        let mut bytes = (MAX_FRAME_LEN as u32 + 1).to_be_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        match read_body(&mut Cursor::new(bytes)) {
            Err(FrameError::TooLarge { len, max }) => {
                assert_eq!(len, MAX_FRAME_LEN as u64 + 1);
                assert_eq!(max, MAX_FRAME_LEN);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(matches!(
            read_body(&mut Cursor::new(u32::MAX.to_be_bytes().to_vec())),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn clean_close_and_truncation_are_told_apart() {
        assert!(matches!(read_body(&mut Cursor::new(Vec::new())), Err(FrameError::Closed)));
        assert!(matches!(
            read_body(&mut Cursor::new(vec![0, 0])),
            Err(FrameError::Truncated { expected: 4, got: 2 })
        ));
        let mut half = 100u32.to_be_bytes().to_vec();
        half.extend_from_slice(b"{\"id\":");
        assert!(matches!(
            read_body(&mut Cursor::new(half)),
            Err(FrameError::Truncated { expected: 104, got: 10 })
        ));
    }

    #[test]
    fn garbage_is_a_decode_error_never_a_panic() {
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            b"not json".to_vec(),
            b"{\"id\":1}".to_vec(),
            b"{\"id\":-1,\"request\":\"Ping\"}".to_vec(),
            b"{\"id\":1,\"request\":\"NoSuchRequest\"}".to_vec(),
            b"{\"id\":1,\"request\":{\"CreateQueue\":{\"name\":5}}}".to_vec(),
            vec![0xff, 0xfe, 0x00, 0x80],
            b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[".repeat(10),
        ];
        for body in cases {
            assert!(matches!(decode::<RequestFrame>(&body), Err(FrameError::Decode(_))), "{body:?}");
            assert!(decode::<Hello>(&body).is_err());
            assert!(decode::<ServerMessage>(&body).is_err());
        }
        // Pseudo-random bytes: never a panic.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            let n = (x % 64) as usize;
            let mut body = Vec::with_capacity(n);
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                body.push(x as u8);
            }
            let _ = decode::<RequestFrame>(&body);
            let _ = decode::<HelloReply>(&body);
        }
    }

    #[test]
    fn an_over_limit_message_is_not_encoded() {
        let r = RequestFrame { id: 0, request: Request::AttachThief { queue: "x".repeat(MAX_FRAME_LEN) } };
        assert!(matches!(encode(&r), Err(FrameError::Encode(_))));
    }

    #[test]
    fn unknown_error_codes_from_a_newer_daemon_decode_as_unknown() {
        let body = br#"{"Reply":{"id":1,"result":{"Err":{"code":"SomethingNew","message":"m"}}}}"#;
        match decode::<ServerMessage>(body).unwrap() {
            ServerMessage::Reply { result: Err(e), .. } => assert_eq!(e.code, ErrorCode::Unknown),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_a_daemon_does_not_know_is_refused_as_an_unknown_variant() {
        // What `xtcq work` recognises to say that xtcqd predates `FenceCgroup`.
        let body = br#"{"id":1,"request":{"FenceCgroupLater":{"index":1}}}"#;
        match decode::<RequestFrame>(body) {
            Err(FrameError::Decode(m)) => assert!(m.to_string().contains("unknown variant"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn resume_has_the_wire_shape_an_older_daemon_refuses_as_an_unknown_variant() {
        // What a daemon that predates Resume sees: a request variant it does not know. It
        // answers BadRequest (a decode error), which the client takes for "no resume here".
        let bytes =
            encode(&RequestFrame { id: 5, request: Request::Resume { slot: 1, slot_epoch: 2 } }).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes[4..]).unwrap();
        assert_eq!(v["request"]["Resume"]["slot"], 1);
        assert_eq!(v["request"]["Resume"]["slot_epoch"], 2);
        // A forged slot of the wrong type or range is a decode error, never a panic.
        for body in [
            br#"{"id":1,"request":{"Resume":{"slot":-1,"slot_epoch":1}}}"#.as_slice(),
            br#"{"id":1,"request":{"Resume":{"slot":4294967296,"slot_epoch":1}}}"#,
            br#"{"id":1,"request":{"Resume":{"slot":"0","slot_epoch":1}}}"#,
            br#"{"id":1,"request":{"Resume":{"slot":0}}}"#,
        ] {
            assert!(matches!(decode::<RequestFrame>(body), Err(FrameError::Decode(_))), "{body:?}");
        }
    }

    #[test]
    fn delete_queue_has_the_wire_shape_an_older_daemon_refuses_as_an_unknown_variant() {
        // What a daemon that predates DeleteQueue sees: a request variant it does not know,
        // which it answers with BadRequest (a decode error), deleting nothing.
        let bytes = encode(&RequestFrame {
            id: 6,
            request: Request::DeleteQueue { name: "old".into(), force: true },
        })
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes[4..]).unwrap();
        assert_eq!(v["request"]["DeleteQueue"]["name"], "old");
        assert_eq!(v["request"]["DeleteQueue"]["force"], true);
        // A field of the wrong type, or a missing one, is a decode error, never a panic (and
        // never a delete with a defaulted `force`).
        for body in [
            br#"{"id":1,"request":{"DeleteQueue":{"name":"q"}}}"#.as_slice(),
            br#"{"id":1,"request":{"DeleteQueue":{"name":"q","force":"yes"}}}"#,
            br#"{"id":1,"request":{"DeleteQueue":{"name":7,"force":false}}}"#,
            br#"{"id":1,"request":{"DeleteQueue":"q"}}"#,
        ] {
            assert!(matches!(decode::<RequestFrame>(body), Err(FrameError::Decode(_))), "{body:?}");
        }
        // A client that predates the new refusal codes still reads the reply (as Unknown).
        #[derive(serde::Deserialize)]
        #[serde(rename = "ErrorCode")]
        enum OldErrorCode {
            NoSuchQueue,
            #[serde(other)]
            Unknown,
        }
        for code in [ErrorCode::QueueInUse, ErrorCode::QueueNotEmpty] {
            let json = serde_json::to_string(&code).unwrap();
            assert!(matches!(serde_json::from_str::<OldErrorCode>(&json).unwrap(), OldErrorCode::Unknown));
        }
        assert!(matches!(
            serde_json::from_str::<OldErrorCode>("\"NoSuchQueue\"").unwrap(),
            OldErrorCode::NoSuchQueue
        ));
    }

    #[test]
    fn hello_from_any_version_decodes() {
        // A future client may add fields; the daemon must still read the version.
        let body = br#"{"protocol_version":99,"client_name":"x","pid":1,"new_field":[1,2]}"#;
        let h: Hello = decode(body).unwrap();
        assert_eq!(h.protocol_version, 99);
    }
}
