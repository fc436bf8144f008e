//! Connecting to NATS (with reconnects and backoff) and setting up the stream and consumer.

use std::time::Duration;

use async_nats::jetstream::context::CreateStreamErrorKind;
use async_nats::jetstream::{self, consumer, stream};

use crate::error::BridgeError;
use crate::Stop;

/// Connects, retrying the first connection too, with exponential backoff capped at 5 s: a
/// bridge started before its server, or cut off from it, waits instead of exiting. Returns
/// once connected (no request is sent before: it would time out and end the bridge), or
/// `None` when `stop` comes first.
pub async fn connect(url: &str, stop: &Stop) -> Result<Option<async_nats::Client>, BridgeError> {
    let client = client(url).await?;
    let mut stop = stop.clone();
    // Looks every 100 ms; says what it waits for once the first connection is not quick.
    for looks in 0u32.. {
        if client.connection_state() == async_nats::connection::State::Connected {
            break;
        }
        if *stop.borrow() > 0 {
            return Ok(None);
        }
        if looks == 5 {
            tracing::warn!(%url, "NATS does not answer yet (is nats-server up there?); waiting for it");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            // A sender gone cannot wake us again: the sleep paces the next look.
            r = stop.changed() => if r.is_err() { tokio::time::sleep(Duration::from_millis(100)).await },
        }
    }
    Ok(Some(client))
}

/// The client, its first connection made in the background.
async fn client(url: &str) -> Result<async_nats::Client, BridgeError> {
    let url_owned = url.to_string();
    async_nats::ConnectOptions::new()
        .name("xtcq-bridge")
        .retry_on_initial_connect()
        .max_reconnects(None)
        .reconnect_delay_callback(|attempts| {
            let ms = 100u64.saturating_mul(1 << attempts.min(6) as u64).min(5_000);
            Duration::from_millis(ms)
        })
        .event_callback(move |ev| {
            let url = url_owned.clone();
            async move {
                match ev {
                    async_nats::Event::Connected => tracing::info!(%url, "connected to NATS"),
                    async_nats::Event::Disconnected => {
                        tracing::warn!(%url, "disconnected from NATS; reconnecting with backoff")
                    }
                    e => tracing::info!(%url, "NATS: {e}"),
                }
            }
        })
        .connect(url)
        .await
        .map_err(|e| BridgeError::nats(url, e))
}

/// The stream's settings the bridge needs.
pub struct StreamSpec<'a> {
    /// Stream name.
    pub name: &'a str,
    /// The subject jobs are published on.
    pub subject: &'a str,
    /// How long the server remembers a `Nats-Msg-Id` to drop a second copy.
    pub duplicate_window: Duration,
}

/// Creates the work-queue stream, or checks that the existing one is one: with any other
/// retention an acked job would stay in the stream (limits) or go to every consumer
/// (interest), and without a duplicate window a re-published job would be stored twice.
pub async fn ensure_stream(js: &jetstream::Context, spec: &StreamSpec<'_>) -> Result<(), BridgeError> {
    let cfg = stream::Config {
        name: spec.name.to_string(),
        subjects: vec![spec.subject.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: spec.duplicate_window,
        ..Default::default()
    };
    let bad = |message: String| BridgeError::Stream { stream: spec.name.to_string(), message };
    let mut s = js.get_or_create_stream(cfg).await.map_err(|e| {
        let hint = match e.kind() {
            CreateStreamErrorKind::JetStreamUnavailable => {
                ": the server answers but has no JetStream; start nats-server with -js (or enable \
                 jetstream in its configuration)"
            }
            CreateStreamErrorKind::EmptyStreamName | CreateStreamErrorKind::InvalidStreamName => {
                ": give --stream a name of letters, digits, '-' or '_'"
            }
            _ => "",
        };
        bad(format!("cannot create or read it: {e}{hint}"))
    })?;
    let info = s.info().await.map_err(|e| bad(format!("cannot read its settings: {e}")))?;
    if info.config.retention != stream::RetentionPolicy::WorkQueue {
        return Err(bad(format!(
            "has retention {:?}; the bridge needs WorkQueue (each job to one consumer, removed once acked): \
             use another stream name, or recreate it",
            info.config.retention
        )));
    }
    if info.config.duplicate_window.is_zero() {
        return Err(bad(
            "has no duplicate window; a job re-published after a crash would be stored twice".into()
        ));
    }
    if !info.config.subjects.iter().any(|s| s == spec.subject) {
        tracing::warn!(stream = spec.name, subject = spec.subject, subjects = ?info.config.subjects,
            "the stream does not list this subject by name; publishing relies on a wildcard of it");
    }
    Ok(())
}

/// A limits stream that keeps dead letters' copies (published by `in`), unless one exists.
pub async fn ensure_dead_stream(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
) -> Result<(), BridgeError> {
    let cfg = stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    js.get_or_create_stream(cfg).await.map(|_| ()).map_err(|e| BridgeError::Stream {
        stream: name.to_string(),
        message: format!("cannot create or read the dead-letter stream: {e}"),
    })
}

/// The durable pull consumer, created if missing. `max_deliver` is unlimited: the bridge
/// dead-letters by itself at the local queue's attempt limit (a message the server stops
/// delivering would stay in a work-queue stream forever, seen by no one).
pub async fn ensure_consumer(
    js: &jetstream::Context,
    stream_name: &str,
    name: &str,
    ack_wait: Duration,
) -> Result<consumer::PullConsumer, BridgeError> {
    let bad = |message: String| BridgeError::Stream { stream: stream_name.to_string(), message };
    let s = js
        .get_stream(stream_name)
        .await
        .map_err(|e| bad(format!("cannot read it ({e}); start `xtcq-bridge out` first or create it")))?;
    let cfg = consumer::pull::Config {
        durable_name: Some(name.to_string()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait,
        max_deliver: -1,
        ..Default::default()
    };
    s.get_or_create_consumer(name, cfg).await.map_err(|e| bad(format!("consumer {name}: {e}")))
}
