//! `xtcq-bridge out`: local queue -> JetStream.
//!
//! Each round takes up to `--batch` jobs, publishes them all with their `Nats-Msg-Id`, awaits
//! every publish ack, and only then acks each job locally. A job whose publish failed is
//! released (re-queued without counting an attempt). A crash after the publish and before
//! the local ack leaves the job claimed by a dead process: the daemon re-queues it, the next
//! round publishes it again under the same id, and the stream's duplicate window drops it
//! (`duplicates` in the counters). A publish that finds no stream for the subject (the stream
//! was deleted) gives its job back, and the bridge creates the stream again and says so.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use xtcq_client::{Client, OwnedJob, ThiefHandle};

use crate::error::BridgeError;
use crate::msg_id::{self, MsgIds};
use crate::nats::{self, StreamSpec};
use crate::stats::{bump, Counters};
use crate::{OutArgs, Stop};

/// Test hook: abort (as a `kill -9` would stop it) once this many publishes were acked,
/// after the publish acks and before the local acks of that round.
const CRASH_ENV: &str = "XTCQ_BRIDGE_TEST_CRASH_AFTER_PUBLISH";

/// The local end, and the ids of its segment's jobs.
struct Attached {
    _client: Client,
    thief: ThiefHandle,
    ids: MsgIds,
}

fn attach(args: &OutArgs, secret: &[u8; 32]) -> Result<Attached, BridgeError> {
    let client = Client::connect(args.common.socket.as_deref())?;
    let thief = client.attach_thief(&args.common.queue)?;
    // The segment's creation time: a new segment's records start over, its ids must not
    // meet the old one's inside the duplicate window.
    let ids = MsgIds::new(secret, client.segment_created_unix_ns()?);
    Ok(Attached { _client: client, thief, ids })
}

/// Attaches, retrying with backoff while the daemon is away (restarting) until a stop.
async fn attach_retry(
    args: &OutArgs,
    secret: &[u8; 32],
    stop: &Stop,
) -> Result<Option<Attached>, BridgeError> {
    let mut delay = Duration::from_millis(100);
    loop {
        match attach(args, secret) {
            Ok(a) => return Ok(Some(a)),
            Err(BridgeError::Local(xtcq_client::Error::NoSuchQueue(q))) => {
                return Err(BridgeError::Local(xtcq_client::Error::NoSuchQueue(q)))
            }
            Err(e) => {
                tracing::warn!("cannot attach to queue {}: {e}; retrying in {delay:?}", args.common.queue)
            }
        }
        if *stop.borrow() > 0 {
            return Ok(None);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Runs until a stop (or an error that retrying cannot mend).
pub async fn run(args: &OutArgs, stop: Stop, counters: Arc<Counters>) -> Result<(), BridgeError> {
    let c = &args.common;
    let subject = c.subject();
    // Before anything is taken: a secret that cannot be used ends the bridge here.
    let secret = msg_id::load_or_create(&args.id_secret)?;
    let Some(client) = nats::connect(&c.nats, &c.auth, &stop).await? else {
        tracing::info!("bridge out stopped before NATS answered: no job was taken");
        return Ok(());
    };
    let js = jetstream::new(client);
    let spec = StreamSpec { name: &c.stream, subject: &subject, duplicate_window: args.duplicate_window };
    nats::ensure_stream(&js, &spec).await?;
    let crash_after: Option<u64> = std::env::var(CRASH_ENV).ok().and_then(|v| v.parse().ok());
    tracing::info!(queue = %c.queue, stream = %c.stream, %subject, "bridge out running");
    'attach: while let Some(local) = attach_retry(args, &secret, &stop).await? {
        while *stop.borrow() == 0 {
            let jobs = match steal(&local.thief, args.batch).await {
                Ok(j) => j,
                Err(e) => {
                    tracing::warn!("taking jobs from {}: {e}; attaching again", c.queue);
                    continue 'attach;
                }
            };
            counters.stolen.fetch_add(jobs.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let r = Round { js: &js, subject: &subject, ids: &local.ids, counters: &counters };
            let (failed, no_stream) = r.publish_and_ack(jobs, crash_after).await;
            if no_stream {
                recreate_stream(&js, &spec).await;
            } else if failed > 0 {
                // The server is away or refusing: give it a moment instead of spinning.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        break;
    }
    tracing::info!("bridge out stopped: every job taken was published and acked, or given back");
    Ok(())
}

/// A publish found no stream for the subject: the stream was deleted (or its subjects
/// changed). Creates it again (once it has been gone for [`nats::DELETE_GRACE`]), so that the
/// jobs given back are published into it.
async fn recreate_stream(js: &jetstream::Context, spec: &StreamSpec<'_>) {
    let name = spec.name;
    match nats::stream_now(js, name).await {
        Ok(nats::StreamNow::Missing) => {
            tracing::warn!(
                stream = name,
                "stream {name} is gone (a publish found no stream): creating it again \
                in {:?}; the jobs of that round went back to the local queue",
                nats::DELETE_GRACE
            );
            tokio::time::sleep(nats::DELETE_GRACE).await;
            let still = matches!(nats::stream_now(js, name).await, Ok(nats::StreamNow::Missing));
            match nats::ensure_stream(js, spec).await {
                Ok(_) if still => {
                    tracing::warn!(stream = name, "stream {name} was deleted: created it again")
                }
                Ok(_) => tracing::warn!(
                    stream = name,
                    "stream {name} was deleted and created again (by another bridge or an operator)"
                ),
                Err(e) => {
                    tracing::warn!("stream {name} was deleted, and creating it failed: {e}; trying again")
                }
            }
        }
        Ok(nats::StreamNow::Created(_)) => {
            tracing::warn!(
                stream = name,
                subject = spec.subject,
                "a publish found no stream for the subject, but stream {name} exists: does it still take \
                 the subject? the jobs go back to the local queue and are published again"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(e) => {
            tracing::warn!("a publish found no stream, and stream {name} cannot be read: {e}; trying again");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Waits up to 200 ms for a first job (in a blocking thread: the steal sleeps on a futex),
/// then takes what else is there, up to `batch`.
async fn steal(thief: &ThiefHandle, batch: usize) -> Result<Vec<OwnedJob>, xtcq_client::Error> {
    let t = thief.clone();
    let batch = batch.max(1);
    let joined = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        if let Some(j) = t.steal_wait(Some(Duration::from_millis(200)))? {
            out.push(j.into_owned());
            while out.len() < batch {
                let more = t.steal_batch(batch - out.len())?;
                if more.is_empty() {
                    break;
                }
                out.extend(more.into_iter().map(|j| j.into_owned()));
            }
        }
        Ok(out)
    })
    .await;
    joined.unwrap_or_else(|e| Err(xtcq_client::Error::Corrupt(format!("steal thread failed: {e}"))))
}

struct Round<'a> {
    js: &'a jetstream::Context,
    subject: &'a str,
    ids: &'a MsgIds,
    counters: &'a Counters,
}

impl Round<'_> {
    /// Publishes `jobs`, then acks locally those the server stored (or had already). Returns
    /// how many failed (released to the local queue), and whether a publish found no stream.
    async fn publish_and_ack(&self, mut jobs: Vec<OwnedJob>, crash_after: Option<u64>) -> (usize, bool) {
        let mut pending = Vec::with_capacity(jobs.len());
        for job in &mut jobs {
            pending.push(self.publish(job).await);
        }
        // Awaited together: each ack's timeout (the context's, 5 s) runs at once, so a round
        // whose server went away gives its jobs back after one timeout, not one per job.
        let acks = futures_util::future::join_all(pending.into_iter().map(|p| async move {
            match p {
                Some(fut) => Some(fut.await),
                None => None,
            }
        }))
        .await;
        let mut stored = Vec::with_capacity(jobs.len());
        let mut no_stream = false;
        for a in acks {
            stored.push(match a {
                Some(Ok(ack)) => {
                    bump(if ack.duplicate { &self.counters.duplicates } else { &self.counters.published });
                    true
                }
                Some(Err(e)) => {
                    no_stream |= e.kind() == jetstream::context::PublishErrorKind::StreamNotFound;
                    tracing::warn!(
                        "publish not acked by the server: {e}; the job goes back to the local queue"
                    );
                    false
                }
                None => false,
            });
        }
        if let Some(n) = crash_after {
            if self.counters.published.load(std::sync::atomic::Ordering::Relaxed) >= n {
                tracing::error!("{CRASH_ENV}={n}: aborting between the publish acks and the local acks");
                std::process::abort();
            }
        }
        let mut failed = 0;
        for (job, ok) in jobs.into_iter().zip(stored) {
            failed += usize::from(!self.settle(job, ok));
        }
        (failed, no_stream)
    }

    async fn publish(&self, job: &mut OwnedJob) -> Option<jetstream::context::PublishAckFuture> {
        let payload = match job.payload() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("reading a job's payload: {e}");
                return None;
            }
        };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, self.ids.id(job.id()).as_str());
        match self.js.publish_with_headers(self.subject.to_string(), headers, payload.into()).await {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!("publishing to {}: {e}", self.subject);
                None
            }
        }
    }

    /// Acks `job` locally when its publish was acked, else releases it. `true` when acked.
    fn settle(&self, job: OwnedJob, stored: bool) -> bool {
        let handle = job.handle();
        if !stored {
            bump(&self.counters.publish_errors);
            if let Err(e) = job.release() {
                tracing::warn!(job = %handle, "giving back an unpublished job: {e} (the daemon re-queues it)");
            }
            return false;
        }
        match job.ack() {
            Ok(()) => bump(&self.counters.acked),
            Err(e) => {
                // Lease expired: the daemon re-queued it; its next publish is a duplicate.
                bump(&self.counters.local_ack_lost);
                tracing::warn!(job = %handle, "local ack refused after the publish: {e}");
            }
        }
        true
    }
}
