//! `in` and a stream that was deleted: noticed, created again (or taken, when another bridge
//! or an operator created it first), said in the log, and the messages held from the deleted
//! stream forgotten upstream.
//!
//! Why forget them rather than settle them: `+ACK`, `-NAK`, `+TERM` and `+WPI` name a message
//! by stream and consumer name and sequence, and a re-created stream and consumer take the
//! same names and number from 1 again, so an ack for a deleted stream's message 3 settles the
//! new stream's message 3, which may not have run anywhere. Their local jobs still run here
//! (they were pushed); their messages went with the stream.

use std::time::Instant;

use super::Bridge;
use crate::nats::{self, StreamNow, StreamSpec};
use crate::stats::bump;

impl Bridge<'_> {
    /// Looks at the stream (and, with `consumer`, at the consumer). `false` when the server
    /// could not tell (away, refusing): nothing may then be settled upstream.
    pub(super) async fn check_stream(&mut self, consumer: bool) -> bool {
        let name = self.args.common.stream.clone();
        if consumer {
            self.checked = Instant::now();
        }
        let created = match nats::stream_now(&self.js, &name).await {
            Ok(StreamNow::Created(t)) if t == self.stream_created => {
                self.missing_since = None;
                return !consumer || self.check_consumer().await;
            }
            Ok(StreamNow::Created(t)) => {
                tracing::warn!(stream = %name,
                    "stream {name} was deleted and created again (by another bridge or an operator): \
                     using the new one");
                t
            }
            Ok(StreamNow::Missing) => {
                let since = *self.missing_since.get_or_insert_with(|| {
                    tracing::warn!(stream = %name, "stream {name} is gone: creating it again in {:?} \
                        unless another bridge does; settling nothing meanwhile", nats::DELETE_GRACE);
                    Instant::now()
                });
                if since.elapsed() < nats::DELETE_GRACE {
                    return false;
                }
                match self.create_streams().await {
                    Ok(t) => {
                        tracing::warn!(stream = %name, "stream {name} was deleted: created it again");
                        t
                    }
                    Err(e) => {
                        tracing::warn!(stream = %name, "stream {name} was deleted, and creating it failed: {e}");
                        return false;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(stream = %name, "cannot read stream {name}: {e}; settling nothing until it answers");
                return false;
            }
        };
        self.missing_since = None;
        bump(&self.counters.streams_recreated);
        self.stream_created = created;
        self.forget_deleted();
        self.remake_consumer().await
    }

    /// The work-queue stream and the dead-letter stream, created as at the start; the new
    /// stream's creation time.
    async fn create_streams(&self) -> Result<u64, crate::error::BridgeError> {
        let c = &self.args.common;
        let subject = c.subject();
        let spec = StreamSpec {
            name: &c.stream,
            subject: &subject,
            duplicate_window: std::time::Duration::from_secs(600),
        };
        let created = nats::ensure_stream(&self.js, &spec).await?;
        let dead_stream = self.args.dead_stream.clone().unwrap_or_else(|| format!("{}_DEAD", c.stream));
        nats::ensure_dead_stream(&self.js, &dead_stream, &self.dead_subject).await?;
        Ok(created)
    }

    /// Drops the held messages (and `--state` orphans) stored before the current stream was
    /// created: the deleted stream's.
    fn forget_deleted(&mut self) {
        let created = self.stream_created;
        let before = self.held.len();
        self.held.retain(|k, _| k.stored_ns >= created);
        let dropped = before - self.held.len();
        self.orphans.retain(|k, _| k.stored_ns >= created);
        if dropped > 0 {
            tracing::warn!(
                jobs = dropped,
                "jobs held from the deleted stream: they run here, and nothing is sent upstream for them \
                 (their messages went with the stream; an ack would settle the new stream's message of \
                 the same sequence)"
            );
            self.counters.dropped_with_stream.fetch_add(dropped as u64, std::sync::atomic::Ordering::Relaxed);
        }
        self.save();
    }

    /// The consumer, made again if it is gone (the stream's deletion takes it along; an
    /// operator may delete it alone). `false` when the server could not tell.
    async fn check_consumer(&mut self) -> bool {
        use async_nats::jetstream::context::ConsumerInfoErrorKind;
        let (stream, name) = (&self.args.common.stream, &self.args.consumer);
        let info = match self.js.get_stream_no_info(stream).await {
            Ok(s) => s.consumer_info(name).await.map_err(|e| (e.kind(), e.to_string())),
            Err(e) => Err((ConsumerInfoErrorKind::Request, e.to_string())),
        };
        match info {
            Ok(_) => true,
            Err((ConsumerInfoErrorKind::NotFound, _)) => {
                tracing::warn!(%stream, consumer = %name, "consumer {name} was deleted: creating it again");
                self.remake_consumer().await
            }
            Err((_, e)) => {
                tracing::warn!(%stream, consumer = %name, "cannot read consumer {name}: {e}");
                false
            }
        }
    }

    /// Creates the consumer (or takes the one another bridge created) and its AckWait.
    async fn remake_consumer(&mut self) -> bool {
        let (c, args) = (&self.args.common, self.args);
        match nats::ensure_consumer(&self.js, &c.stream, &args.consumer, args.ack_wait).await {
            Ok(mut consumer) => {
                if let Ok(info) = consumer.info().await {
                    self.ack_wait = info.config.ack_wait;
                }
                self.consumer = consumer;
                true
            }
            Err(e) => {
                tracing::warn!("{e}; trying again");
                false
            }
        }
    }
}
