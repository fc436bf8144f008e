//! `xtcq-bridge in`: JetStream -> local queue.
//!
//! Each message is pushed into the local queue (the bridge attaches as an injector), and its
//! record is then watched ([`crate::local`]) until the local job is settled:
//!
//! | local fate                         | upstream                                    |
//! |------------------------------------|---------------------------------------------|
//! | queued or running (also retried    | `+WPI` every AckWait/3, so the server keeps |
//! | here after a local nack)           | it with us                                  |
//! | acked (record freed)               | `+ACK`                                      |
//! | dead letter (attempt limit here)   | copy to the dead-letter subject, then `+TERM`|
//! | lost (segment replaced)            | `-NAK` (redelivered, maybe elsewhere)       |
//!
//! A local nack is *not* a `-NAK`: xtcq re-queues the job itself, on this host, counting an
//! attempt; a `-NAK` as well would give the server's copy to another host while this one
//! still holds the job. A message delivered more often than the queue's max attempts (the
//! bridges that held it before died or lost it) is dead-lettered without being pushed.
//!
//! A redelivery of a message this bridge already holds (its `+WPI` came too late, e.g. it was
//! stopped or cut off) is not pushed again: the newer delivery replaces the older, and the
//! held job's settlement acks it. Messages are named by stream sequence and stored time
//! ([`MsgKey`]), never by sequence alone.
//!
//! A deleted stream: the bridge looks at the stream every second, after a failed fetch, and
//! before it sends any `+ACK`, `-NAK` or `+TERM` (these name the message by sequence only, so
//! one sent for a deleted stream's message would settle the new stream's message of that
//! sequence). When the stream is gone it creates it again (and the consumer), or takes the
//! one another bridge created, says so, and forgets upstream the messages it held from the
//! deleted stream: their local jobs run here, nothing is sent for them.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::PullConsumer, AckKind};
use futures_util::StreamExt;
use xtcq_client::{Client, InjectorHandle, JobId};

use crate::error::BridgeError;
use crate::journal::{Journal, MsgKey};
use crate::local::{Fate, Watch};
use crate::nats::{self, StreamSpec};
use crate::stats::{bump, Counters};
use crate::{InArgs, Stop};

mod stream;

/// How often the stream and the consumer are looked at when nothing else asks for it: a
/// fetch from a deleted consumer does not fail, it just brings nothing.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A message whose local job is not settled yet.
struct Held {
    msg: jetstream::Message,
    id: JobId,
    /// The identity of the segment it was pushed into.
    segment: u64,
    /// When the server last heard from us about it (its delivery, or our last `+WPI`).
    touched: Instant,
    /// A `+WPI` went out after AckWait had passed: the server may have redelivered it
    /// meanwhile, and a later `+WPI` does not undo that.
    lapsed: bool,
}

/// The local end: the injector, and the identity of its segment.
struct Local {
    _client: Client,
    injector: InjectorHandle,
    segment: u64,
    max_attempts: u32,
    lease: Duration,
}

fn attach(args: &InArgs) -> Result<Local, BridgeError> {
    let client = Client::connect(args.common.socket.as_deref())?;
    let injector = client.attach_injector(&args.common.queue)?;
    let segment = client.segment_created_unix_ns()?;
    let q = injector.queue();
    let (max_attempts, lease) = (q.max_attempts, Duration::from_millis(q.lease_ms as u64));
    Ok(Local { injector, segment, max_attempts, lease, _client: client })
}

/// What the loop keeps.
struct Bridge<'a> {
    args: &'a InArgs,
    js: jetstream::Context,
    nats: async_nats::Client,
    consumer: PullConsumer,
    ack_wait: Duration,
    dead_subject: String,
    local: Local,
    held: HashMap<MsgKey, Held>,
    /// `--state`, and the jobs a previous run pushed whose messages were not seen again yet.
    journal: Option<Journal>,
    orphans: HashMap<MsgKey, JobId>,
    /// The stream's creation time (ns), its identity; and when it and the consumer were last
    /// looked at.
    stream_created: u64,
    checked: Instant,
    /// Since when the stream is seen gone (it is created again after `DELETE_GRACE`).
    missing_since: Option<Instant>,
    /// Orphans no longer queued or running here are forgotten after this (2 x AckWait from the
    /// start: their redeliveries came by then, to us or to another bridge).
    orphans_until: Instant,
    counters: Arc<Counters>,
}

/// Runs until a stop, then drains (see `--drain-timeout`).
pub async fn run(args: &InArgs, stop: Stop, counters: Arc<Counters>) -> Result<(), BridgeError> {
    let Some(mut b) = Bridge::start(args, counters, &stop).await? else {
        tracing::info!("bridge in stopped before NATS answered: no message was fetched");
        return Ok(());
    };
    b.serve(stop).await;
    let _ = b.nats.flush().await;
    if b.held.is_empty() {
        tracing::info!("bridge in stopped: every message fetched was settled upstream");
    } else {
        tracing::warn!(held = b.held.len(),
            "bridge in stopped with messages whose local jobs are not settled; the server redelivers them after AckWait");
    }
    Ok(())
}

impl<'a> Bridge<'a> {
    /// Sets up the streams and the consumer, checks the consumer's AckWait against the local
    /// lease, attaches locally and loads the state file.
    /// `None` when a stop came before NATS answered.
    async fn start(
        args: &'a InArgs,
        counters: Arc<Counters>,
        stop: &Stop,
    ) -> Result<Option<Bridge<'a>>, BridgeError> {
        let c = &args.common;
        let subject = c.subject();
        let Some(nats) = nats::connect(&c.nats, &c.auth, stop).await? else { return Ok(None) };
        let js = jetstream::new(nats.clone());
        let spec =
            StreamSpec { name: &c.stream, subject: &subject, duplicate_window: Duration::from_secs(600) };
        let stream_created = nats::ensure_stream(&js, &spec).await?;
        let dead_subject = args.dead_subject.clone().unwrap_or_else(|| format!("xtcq.dead.{}", c.queue));
        let dead_stream = args.dead_stream.clone().unwrap_or_else(|| format!("{}_DEAD", c.stream));
        nats::ensure_dead_stream(&js, &dead_stream, &dead_subject).await?;
        let mut consumer = nats::ensure_consumer(&js, &c.stream, &args.consumer, args.ack_wait).await?;
        let ack_wait = consumer.info().await.map_err(|e| BridgeError::nats(&c.nats, e))?.config.ack_wait;
        let local = attach(args)?;
        let floor = local.lease.max(args.poll * 3);
        if ack_wait <= floor {
            return Err(BridgeError::AckWaitTooShort {
                consumer: args.consumer.clone(),
                ack_wait,
                lease: floor,
            });
        }
        tracing::info!(queue = %c.queue, stream = %c.stream, consumer = %args.consumer, ?ack_wait,
            lease = ?local.lease, max_attempts = local.max_attempts, "bridge in running");
        let journal = args.state.as_deref().map(|p| Journal::new(p, local.segment));
        let mut orphans = match &journal {
            Some(j) => j.load()?,
            None => HashMap::new(),
        };
        // Stored before this stream was created: a deleted stream's, never delivered again.
        orphans.retain(|k, _| k.stored_ns >= stream_created);
        if !orphans.is_empty() {
            tracing::info!(
                jobs = orphans.len(),
                "jobs pushed before a restart: their redeliveries will not be pushed again"
            );
        }
        Ok(Some(Bridge {
            args,
            js,
            nats,
            consumer,
            ack_wait,
            dead_subject,
            local,
            held: HashMap::new(),
            journal,
            orphans,
            orphans_until: Instant::now() + ack_wait * 2,
            stream_created,
            checked: Instant::now(),
            missing_since: None,
            counters,
        }))
    }

    /// Fetches and settles until a stop; after the first signal only settles, until nothing
    /// is held or `--drain-timeout` passed.
    async fn serve(&mut self, mut stop: Stop) {
        let args = self.args;
        let mut drain_until = None;
        loop {
            if self.checked.elapsed() >= CHECK_EVERY {
                self.check_stream(true).await;
            }
            self.settle_all().await;
            let level = *stop.borrow_and_update();
            if level >= 2 {
                return;
            }
            let room = if level == 1 { 0 } else { self.room() };
            if level == 1 {
                let until = *drain_until.get_or_insert_with(|| Instant::now() + args.drain_timeout);
                if self.held.is_empty() || Instant::now() >= until {
                    return;
                }
            }
            if room == 0 {
                // Full or draining: look again soon (a look is a few loads per held job), not
                // after a whole --poll, or the bridge idles while the local workers free room.
                let nap = args.poll.min(Duration::from_millis(5));
                tokio::select! { _ = tokio::time::sleep(nap) => {}, _ = stop.changed() => {} }
            } else {
                self.fetch(room).await;
            }
        }
    }
}

impl Bridge<'_> {
    /// Where held jobs are looked at: the current injector and its segment.
    fn watch(&self) -> Watch<'_> {
        Watch { injector: &self.local.injector, segment: self.local.segment }
    }

    /// Messages we may take now: the in-flight bound, and the free slots of the queue's
    /// overflow ring (where an injector's pushes go).
    fn room(&self) -> usize {
        self.args.max_inflight.saturating_sub(self.held.len()).min(self.local.injector.room())
    }

    async fn fetch(&mut self, room: usize) {
        let batch = self.consumer.batch().max_messages(room).expires(self.args.poll).messages().await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("fetching from {}: {e}", self.args.common.stream);
                self.check_stream(true).await;
                tokio::time::sleep(self.args.poll).await;
                return;
            }
        };
        // Held jobs are settled every --poll while the batch is open too: a batch that cannot
        // fill (the consumer's max_ack_pending reached, waiting on our acks) would otherwise
        // hold every ack back until it expires.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + self.args.poll, self.args.poll);
        let mut took = false;
        loop {
            tokio::select! {
                m = batch.next() => match m {
                    None => break,
                    Some(Ok(msg)) => {
                        took = true;
                        self.take(msg).await;
                    }
                    Some(Err(e)) => {
                        tracing::warn!("fetching from {}: {e}", self.args.common.stream);
                        // A deleted consumer (or stream) answers a waiting fetch so.
                        self.check_stream(true).await;
                        break;
                    }
                },
                _ = tick.tick() => {
                    if std::mem::take(&mut took) {
                        self.save();
                    }
                    self.settle_all().await;
                }
            }
        }
        if took {
            self.save();
        }
    }

    fn save(&self) {
        if let Some(j) = &self.journal {
            j.save(
                self.held.iter().map(|(k, h)| (*k, &h.id)).chain(self.orphans.iter().map(|(k, id)| (*k, id))),
            );
        }
    }

    /// A redelivery of a message whose job a previous run pushed here: `true` when handled
    /// (held again, or acked because the job succeeded meanwhile).
    async fn adopt(&mut self, key: MsgKey, msg: &jetstream::Message) -> bool {
        let Some(id) = self.orphans.remove(&key) else { return false };
        let fate = self.watch().fate(id, self.local.segment);
        tracing::info!(%key, ?fate, "redelivery of a job pushed here before a restart: not pushed again");
        match fate {
            Fate::Lost => return false,
            Fate::Gone => match msg.ack().await {
                Ok(()) => bump(&self.counters.acked),
                Err(e) => {
                    bump(&self.counters.ack_errors);
                    tracing::warn!(%key, "+ACK not sent: {e}");
                }
            },
            // Settled (or dead-lettered) by the next look, as any held job.
            Fate::Held { .. } | Fate::Dead { .. } => {
                let h = Held {
                    msg: msg.clone(),
                    id,
                    segment: self.local.segment,
                    touched: Instant::now(),
                    lapsed: false,
                };
                self.held.insert(key, h);
            }
        }
        bump(&self.counters.adopted);
        true
    }

    /// A message fetched: push it, or recognise it, or dead-letter it.
    async fn take(&mut self, msg: jetstream::Message) {
        bump(&self.counters.fetched);
        let (key, delivered) = match msg.info() {
            Ok(i) => {
                let stored_ns = nats::unix_ns(i.published.unix_timestamp_nanos());
                (MsgKey { seq: i.stream_sequence, stored_ns }, i.delivered)
            }
            Err(e) => {
                tracing::warn!("a message without JetStream metadata ({e}); terminated");
                let _ = msg.ack_with(AckKind::Term).await;
                return;
            }
        };
        tracing::debug!(%key, delivered, "fetched");
        if let Some(h) = self.held.get_mut(&key) {
            bump(&self.counters.redelivered_held);
            tracing::warn!(%key, delivered, job = %h.id.index, "redelivered while still held here: not pushed again");
            h.msg = msg;
            h.touched = Instant::now();
            h.lapsed = false;
            return;
        }
        if self.adopt(key, &msg).await {
            return;
        }
        let max = self.local.max_attempts as i64;
        if max > 0 && delivered > max {
            let why = format!("delivered {delivered} times, more than max attempts {max}");
            if self.dead_letter(&msg, 0, &why).await {
                self.held.remove(&key);
            }
            return;
        }
        match self.local.injector.push(&msg.payload) {
            Ok(h) => {
                bump(&self.counters.pushed);
                let id = JobId::of_push(h);
                let segment = self.local.segment;
                self.held.insert(key, Held { msg, id, segment, touched: Instant::now(), lapsed: false });
                self.counters.held.store(self.held.len() as u64, Ordering::Relaxed);
            }
            Err(xtcq_client::Error::PayloadTooLarge { len, max }) => {
                let why = format!("payload of {len} bytes, over the local queue's {max}");
                self.dead_letter(&msg, 0, &why).await;
            }
            Err(e) => {
                tracing::warn!(%key, "cannot push into {}: {e}; given back (-NAK)", self.args.common.queue);
                self.nak(&msg).await;
                if !matches!(e, xtcq_client::Error::QueueFull { .. }) {
                    self.reattach().await;
                }
            }
        }
    }

    async fn reattach(&mut self) {
        match attach(self.args) {
            Ok(l) => self.local = l,
            Err(e) => {
                tracing::warn!("attaching to {} again: {e}", self.args.common.queue);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }

    async fn nak(&self, msg: &jetstream::Message) {
        bump(&self.counters.nacked);
        if let Err(e) = msg.ack_with(AckKind::Nak(Some(self.args.nak_delay))).await {
            bump(&self.counters.ack_errors);
            tracing::warn!("-NAK not sent: {e} (the server redelivers after AckWait)");
        }
    }

    /// Looks at every held job and tells the server what became of it.
    async fn settle_all(&mut self) {
        let fates: Vec<(MsgKey, Fate)> =
            (self.held.iter()).map(|(k, h)| (*k, self.watch().fate(h.id, h.segment))).collect();
        // Settling names the message by sequence only: first make sure that the held messages
        // are still the stream's (this drops those of a deleted one). If the server cannot
        // tell, send nothing this round.
        if fates.iter().any(|(_, f)| !matches!(f, Fate::Held { .. })) && !self.check_stream(false).await {
            return;
        }
        let mut changed = false;
        for (key, fate) in fates {
            if self.held.contains_key(&key) && self.settle(key, fate).await {
                self.held.remove(&key);
                changed = true;
            }
        }
        if !self.orphans.is_empty() && Instant::now() >= self.orphans_until {
            let (w, segment) =
                (Watch { injector: &self.local.injector, segment: self.local.segment }, self.local.segment);
            let before = self.orphans.len();
            self.orphans.retain(|_, id| matches!(w.fate(*id, segment), Fate::Held { .. }));
            changed |= self.orphans.len() != before;
        }
        if changed {
            self.save();
        }
        self.counters.held.store(self.held.len() as u64, Ordering::Relaxed);
    }

    /// `true` once the message is settled upstream (forget it).
    async fn settle(&mut self, key: MsgKey, fate: Fate) -> bool {
        let ack_wait = self.ack_wait;
        let Some(h) = self.held.get_mut(&key) else { return true };
        match fate {
            Fate::Held { .. } => {
                if h.touched.elapsed() >= ack_wait / 3 {
                    h.lapsed |= h.touched.elapsed() >= ack_wait;
                    match h.msg.ack_with(AckKind::Progress).await {
                        Ok(()) => h.touched = Instant::now(),
                        Err(e) => tracing::warn!(%key, "+WPI not sent: {e}"),
                    }
                }
                false
            }
            Fate::Gone => {
                if h.lapsed || h.touched.elapsed() >= ack_wait {
                    bump(&self.counters.late_acks);
                    tracing::warn!(
                        %key,
                        "acking after this bridge's hold lapsed (AckWait passed without +WPI): \
                        the server may have given it to another holder too; harmless, the job succeeded here"
                    );
                }
                match h.msg.ack().await {
                    Ok(()) => bump(&self.counters.acked),
                    Err(e) => {
                        bump(&self.counters.ack_errors);
                        tracing::warn!(%key, "+ACK not sent: {e} (the server redelivers it: a second run)");
                    }
                }
                true
            }
            Fate::Dead { attempts, last_error } => {
                let msg = h.msg.clone();
                let why = format!("dead letter after {attempts} attempts: {last_error}");
                self.dead_letter(&msg, attempts, &why).await
            }
            Fate::Lost => {
                tracing::warn!(%key, "its local job is gone (segment replaced): given back (-NAK)");
                let msg = h.msg.clone();
                self.nak(&msg).await;
                true
            }
        }
    }

    /// Stores a copy on the dead-letter subject, then `+TERM`s the message. `false` when
    /// the copy was not stored (no `+TERM` then: tried again on the next look).
    async fn dead_letter(&self, msg: &jetstream::Message, attempts: u32, why: &str) -> bool {
        let (seq, stored_ns) = msg
            .info()
            .map(|i| (i.stream_sequence, nats::unix_ns(i.published.unix_timestamp_nanos())))
            .unwrap_or_default();
        // Named from what the stream gave, not from the message's own headers (anyone who may
        // publish on the subject chooses those): the same for each delivery of the message.
        let mut headers = async_nats::HeaderMap::new();
        let id = format!("{}:{seq}:{stored_ns}:dead", self.args.common.stream);
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        headers.insert("Xtcq-Reason", why);
        headers.insert("Xtcq-Attempts", attempts.to_string().as_str());
        headers.insert("Xtcq-Stream-Seq", seq.to_string().as_str());
        let stored =
            match self.js.publish_with_headers(self.dead_subject.clone(), headers, msg.payload.clone()).await
            {
                Ok(f) => f.await.map(|_| ()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
        if let Err(e) = stored {
            tracing::warn!(seq, "dead-letter copy not stored on {}: {e}; trying again", self.dead_subject);
            return false;
        }
        tracing::warn!(seq, "dead letter: {why}; copy on {}, terminated in the stream", self.dead_subject);
        bump(&self.counters.terminated);
        if let Err(e) = msg.ack_with(AckKind::Term).await {
            bump(&self.counters.ack_errors);
            tracing::warn!(seq, "+TERM not sent: {e}");
        }
        true
    }
}
