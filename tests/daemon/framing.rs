//! One framing, two sides: the daemon's tokio-util codec (`xtcqd::server::framing`) and
//! proto's blocking reader and writer (`xtcq_proto::frame`), which clients use, run against
//! each other both ways with a normal frame, one whose body is exactly the limit, one over
//! it and a truncated one.

use std::time::Duration;

use xtcq_proto::frame::{self, FrameError, HEADER_LEN};
use xtcq_proto::MAX_FRAME_LEN;
use xtcqd::server::framing::{self, FrameReader};

/// A JSON string whose encoding is `len` bytes (two quotes around `len - 2` letters).
fn body_of(len: usize) -> serde_json::Value {
    serde_json::Value::String("x".repeat(len - 2))
}

/// A frame announcing `len` bytes, with `len` bytes of body (not checked against any limit).
fn raw_frame(len: usize) -> Vec<u8> {
    let mut out = (len as u32).to_be_bytes().to_vec();
    out.extend(std::iter::repeat_n(b'x', len));
    out
}

/// What the daemon's reader makes of `bytes`, then an end of stream.
fn daemon_reads(bytes: &[u8]) -> Result<Vec<u8>, FrameError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    rt.block_on(async {
        let mut r = bytes;
        FrameReader::default().next(&mut r, Duration::from_secs(5)).await
    })
}

fn client_reads(bytes: &[u8]) -> Result<Vec<u8>, FrameError> {
    frame::read_body(&mut std::io::Cursor::new(bytes))
}

#[test]
fn the_blocking_writer_is_read_by_the_codec() {
    let msg = xtcq_proto::Request::ListQueues;
    let bytes = frame::encode(&msg).expect("encode");
    let body = daemon_reads(&bytes).expect("a normal frame");
    assert_eq!(frame::decode::<xtcq_proto::Request>(&body).expect("decode"), msg);

    let at_limit = frame::encode(&body_of(MAX_FRAME_LEN)).expect("a body of exactly the limit is allowed");
    assert_eq!(daemon_reads(&at_limit).expect("at the limit").len(), MAX_FRAME_LEN);

    assert!(frame::encode(&body_of(MAX_FRAME_LEN + 1)).is_err(), "the writer refuses a body over the limit");
    match daemon_reads(&raw_frame(MAX_FRAME_LEN + 1)) {
        Err(FrameError::TooLarge { len, max }) => {
            assert_eq!((len, max), (MAX_FRAME_LEN as u64 + 1, MAX_FRAME_LEN))
        }
        r => panic!("over the limit: {r:?}"),
    }

    match daemon_reads(&bytes[..bytes.len() - 1]) {
        Err(FrameError::Truncated { expected, got }) => {
            assert_eq!((expected, got), (bytes.len(), bytes.len() - 1))
        }
        r => panic!("truncated body: {r:?}"),
    }
    match daemon_reads(&bytes[..2]) {
        Err(FrameError::Truncated { expected, got }) => assert_eq!((expected, got), (HEADER_LEN, 2)),
        r => panic!("truncated header: {r:?}"),
    }
    assert!(matches!(daemon_reads(&[]), Err(FrameError::Closed)), "an end at a frame boundary is a close");
}

#[test]
fn the_codec_writer_is_read_by_the_blocking_reader() {
    let msg = xtcq_proto::Response::Pong;
    let bytes = framing::encode(&msg).expect("encode");
    assert_eq!(bytes, frame::encode(&msg).expect("encode"), "the same bytes as the blocking writer");
    let body = client_reads(&bytes).expect("a normal frame");
    assert_eq!(frame::decode::<xtcq_proto::Response>(&body).expect("decode"), msg);

    let at_limit = framing::encode(&body_of(MAX_FRAME_LEN)).expect("a body of exactly the limit is allowed");
    assert_eq!(client_reads(&at_limit).expect("at the limit").len(), MAX_FRAME_LEN);

    assert!(
        matches!(framing::encode(&body_of(MAX_FRAME_LEN + 1)), Err(FrameError::Encode(_))),
        "the codec refuses a body over the limit"
    );
    match client_reads(&raw_frame(MAX_FRAME_LEN + 1)) {
        Err(FrameError::TooLarge { len, max }) => {
            assert_eq!((len, max), (MAX_FRAME_LEN as u64 + 1, MAX_FRAME_LEN))
        }
        r => panic!("over the limit: {r:?}"),
    }

    match client_reads(&bytes[..bytes.len() - 1]) {
        Err(FrameError::Truncated { expected, got }) => {
            assert_eq!((expected, got), (bytes.len(), bytes.len() - 1))
        }
        r => panic!("truncated: {r:?}"),
    }
}

/// Two frames in one read (a client that pipelines): both come out, in order, and the end
/// after them is a clean close.
#[test]
fn frames_read_together_come_out_one_by_one() {
    let mut bytes = frame::encode(&xtcq_proto::Request::Ping).expect("encode");
    bytes.extend(frame::encode(&xtcq_proto::Request::ListQueues).expect("encode"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    rt.block_on(async {
        let mut r = &bytes[..];
        let mut reader = FrameReader::default();
        let t = Duration::from_secs(5);
        let first: xtcq_proto::Request =
            frame::decode(&reader.next(&mut r, t).await.expect("first")).expect("json");
        let second: xtcq_proto::Request =
            frame::decode(&reader.next(&mut r, t).await.expect("second")).expect("json");
        assert_eq!((first, second), (xtcq_proto::Request::Ping, xtcq_proto::Request::ListQueues));
        assert!(matches!(reader.next(&mut r, t).await, Err(FrameError::Closed)));
    });
}
