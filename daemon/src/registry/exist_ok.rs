//! The idempotent create ([`proto::Request::CreateQueueExistOk`]): a second `create` of the
//! same queue succeeds, one that asks for other settings is refused, naming them. Without
//! the refusal a program that asked for a FIFO queue of one deque would silently run on a
//! LIFO queue of four that someone made before.

use xtcq_proto as proto;

use super::{Access, Op, Registry};
use crate::convert::queue_info;

impl Registry {
    /// The existing queue `p.name` when its settings and permissions are those asked
    /// (`created` false); refused with `QueueMismatch`, naming each difference, when they
    /// are not; else a new queue (`created` true), owned by `who`. Looked up and created
    /// under one lock, so that of two such creates racing, one creates and the other finds it.
    /// An existing queue `who` may not use is refused as an attach to it would be, before its
    /// settings are compared: "ok" must mean a queue the caller can use, and its settings
    /// are not told to those who may not use it.
    pub fn create_queue_exist_ok(
        &self,
        p: &proto::QueueParams,
        who: &Access,
        uids: &[u32],
        gids: &[u32],
    ) -> Result<(proto::QueueInfo, bool), proto::ErrorReply> {
        let mut t = self.lock();
        let Ok(q) = self.queue(&p.name) else {
            return self.create_queue_locked(&mut t, p, who.uid, uids, gids, true).map(|q| (q, true));
        };
        self.check_access(&t, q.index, &q.spec.name, Some(who), Op::Use)?;
        let mut info = queue_info(&q);
        let mut differ = proto::settings_differ(p, &info);
        // A queue without a record (state file lost) is open to nobody else: no allow lists.
        let acl = t.queues.get(&q.index).filter(|a| a.name == q.spec.name);
        let (has_uids, has_gids) = acl.map(|a| (a.uids.clone(), a.gids.clone())).unwrap_or_default();
        if has_uids != uids {
            differ.push(format!("its allowed uids are {has_uids:?}, not {uids:?}"));
        }
        if has_gids != gids {
            differ.push(format!("its allowed gids are {has_gids:?}, not {gids:?}"));
        }
        if !differ.is_empty() {
            return Err(proto::ErrorReply::new(
                proto::ErrorCode::QueueMismatch,
                format!(
                    "queue {} exists with other settings: {}; ask for those, use another name, or \
                     delete it first (xtcq delete) to change them",
                    proto::queue_name::escaped(&p.name),
                    differ.join(", ")
                ),
            ));
        }
        info.retry_backoff = acl.and_then(|a| a.retry_backoff);
        Ok((info, false))
    }
}
