//! Connecting to NATS (with reconnects and backoff) and setting up the stream and consumer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::CreateStreamErrorKind;
use async_nats::jetstream::{self, consumer, stream};

use tokio::sync::watch;

use crate::auth::NatsAuth;
use crate::error::BridgeError;
use crate::Stop;

/// Connects, retrying the first connection too, with exponential backoff capped at 5 s: a
/// bridge started before its server, or cut off from it, waits instead of exiting. Returns
/// once connected (no request is sent before: it would time out and end the bridge), or
/// `None` when `stop` comes first. A server that refuses the credentials (or the TLS
/// handshake) before the first connection is an error: waiting would not mend it.
pub async fn connect(
    url: &str,
    auth: &NatsAuth,
    stop: &Stop,
) -> Result<Option<async_nats::Client>, BridgeError> {
    let (refused_tx, refused) = watch::channel(None::<String>);
    let client = client(url, auth, refused_tx).await?;
    let mut stop = stop.clone();
    // Looks every 100 ms; says what it waits for once the first connection is not quick.
    for looks in 0u32.. {
        if client.connection_state() == async_nats::connection::State::Connected {
            break;
        }
        if let Some(why) = refused.borrow().clone() {
            return Err(BridgeError::nats(url, refusal_hint(&why)));
        }
        if *stop.borrow() > 0 {
            return Ok(None);
        }
        if looks == 5 {
            tracing::warn!(%url, "NATS does not answer yet (is nats-server up there?); waiting for it");
        }
        if looks % 50 == 5 {
            if let Some(info) = server_info(url).await {
                if info.contains("\"tls_verify\":true") && auth.nats_tls_cert.is_none() {
                    return Err(BridgeError::nats(
                        url,
                        "the server requires a TLS client certificate (its INFO says tls_verify) and this \
                         bridge has none: give --nats-tls-cert and --nats-tls-key",
                    ));
                }
                tracing::warn!(%url, "the server answers, but connecting to it fails: if it has TLS, \
                    --nats-tls-ca must be the CA of its certificate (its log says why it refused)");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            // A sender gone cannot wake us again: the sleep paces the next look.
            r = stop.changed() => if r.is_err() { tokio::time::sleep(Duration::from_millis(100)).await },
        }
    }
    Ok(Some(client))
}

/// The INFO line of the (first) server of `url`, without spaces, when it answers: a TLS
/// handshake that fails (no client certificate, an unknown CA) shows only as "IO error",
/// which reads like a server that is away.
async fn server_info(url: &str) -> Option<String> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let first = url.split(',').next().unwrap_or_default().trim();
    let hostport = first.split_once("://").map_or(first, |(_, r)| r);
    let hostport = hostport.rsplit_once('@').map_or(hostport, |(_, r)| r).trim_end_matches('/');
    let addr = if hostport.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        hostport.to_string()
    } else {
        format!("{hostport}:4222")
    };
    let info = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        let mut line = String::new();
        let mut r = tokio::io::BufReader::new(tcp).take(64 * 1024);
        r.read_line(&mut line).await.ok()?;
        Some(line)
    };
    let line = tokio::time::timeout(Duration::from_secs(2), info).await.ok().flatten()?;
    line.starts_with("INFO ").then(|| line.replace(' ', ""))
}

/// Connection errors that retrying does not mend (async-nats reports them as text).
fn is_refusal(error: &str) -> bool {
    ["authorization violation", "TLS error", "failed signing nonce"].iter().any(|e| error.contains(e))
}

fn refusal_hint(why: &str) -> String {
    let what = if why.contains("TLS") {
        "the TLS handshake failed: check --nats-tls-ca (the server's CA), --nats-tls-cert and \
         --nats-tls-key (when it verifies clients), and that the server has TLS on"
    } else {
        "the server refused this bridge's credentials: give the user it knows with --nats-user and \
         its password in XTCQ_NATS_PASSWORD (or --nats-password-file), or a token in XTCQ_NATS_TOKEN \
         (or --nats-token-file), or the TLS client certificate it maps (--nats-tls-cert, --nats-tls-key)"
    };
    format!("{why}: {what}")
}

/// The client, its first connection made in the background.
async fn client(
    url: &str,
    auth: &NatsAuth,
    refused: watch::Sender<Option<String>>,
) -> Result<async_nats::Client, BridgeError> {
    let url_owned = url.to_string();
    let connected = Arc::new(AtomicBool::new(false));
    let opts = async_nats::ConnectOptions::new()
        .name("xtcq-bridge")
        .retry_on_initial_connect()
        .max_reconnects(None)
        .reconnect_delay_callback(|attempts| {
            let ms = 100u64.saturating_mul(1 << attempts.min(6) as u64).min(5_000);
            Duration::from_millis(ms)
        })
        .event_callback(move |ev| {
            let url = url_owned.clone();
            let (connected, refused) = (connected.clone(), refused.clone());
            async move {
                match ev {
                    async_nats::Event::Connected => {
                        connected.store(true, Ordering::Relaxed);
                        tracing::info!(%url, "connected to NATS")
                    }
                    async_nats::Event::Disconnected => {
                        tracing::warn!(%url, "disconnected from NATS; reconnecting with backoff")
                    }
                    async_nats::Event::ClientError(async_nats::ClientError::Other(e))
                        if is_refusal(&e) && !connected.load(Ordering::Relaxed) =>
                    {
                        let _ = refused.send(Some(e));
                    }
                    // The request it refused then times out; say why here.
                    async_nats::Event::ServerError(async_nats::ServerError::Other(e))
                        if e.contains("Permissions Violation") =>
                    {
                        tracing::warn!(%url, "NATS refused: {e}: the user this bridge connects as may not do \
                            that; give it the permissions its side needs (the shipped bridge/nats.conf)")
                    }
                    e => tracing::info!(%url, "NATS: {e}"),
                }
            }
        });
    auth.apply(opts)?.connect(url).await.map_err(|e| BridgeError::nats(url, e))
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
/// Returns the stream's creation time (ns), its identity: a deleted and re-created stream
/// has another.
pub async fn ensure_stream(js: &jetstream::Context, spec: &StreamSpec<'_>) -> Result<u64, BridgeError> {
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
    Ok(unix_ns(info.created.unix_timestamp_nanos()))
}

/// Nanoseconds since the epoch as a u64 (0 before it, the far future saturated).
pub fn unix_ns(ns: i128) -> u64 {
    u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
}

/// How long a stream must have been gone before a bridge creates it again: nats-server (2.9)
/// takes a deleted stream out of its API first and removes its files after, so a stream
/// created at once under the same name lost its files to that removal (seen: "could not
/// create consumer directory", then no message delivered, ever).
pub const DELETE_GRACE: Duration = Duration::from_secs(2);

/// What the server says of a stream now.
pub enum StreamNow {
    /// It exists, created at this time (ns).
    Created(u64),
    /// It does not exist.
    Missing,
}

/// The stream's identity now, or why the server could not tell (away, refusing).
pub async fn stream_now(js: &jetstream::Context, name: &str) -> Result<StreamNow, String> {
    use async_nats::jetstream::context::GetStreamErrorKind;
    match js.get_stream(name).await {
        Ok(s) => Ok(StreamNow::Created(unix_ns(s.cached_info().created.unix_timestamp_nanos()))),
        Err(e) => match e.kind() {
            GetStreamErrorKind::JetStream(j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND => {
                Ok(StreamNow::Missing)
            }
            _ => Err(e.to_string()),
        },
    }
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
