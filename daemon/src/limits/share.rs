//! What one user may take of the segment's shared room: queue-table entries and job records
//! (`--queues-per-uid`, `--records-per-uid`), so that one allowed user cannot fill either and
//! make the others' creates and pushes fail.
//!
//! Rules kept:
//! - a user's queues are those it owns (the daemon's record of owners, never the segment);
//!   its records are the record quotas of those queues (`max_records`), which every push
//!   into the queue keeps, whoever pushes: so the sum of its queues' quotas is at most its
//!   share, and a queue of a limited user always has a quota (never 0, "none");
//! - a new queue of a limited user gets, unless asked for more with `xtcq limits`, an even
//!   slice of the share (`records / queues`), or what is left of it if that is less; none left
//!   is a refusal that names the flag and how to make room;
//! - root and the daemon's own uid are not limited (they can stop the daemon anyway), nor is
//!   the daemon's own import (the operator's);
//! - checked under the registry's lock, in the step that creates the queue or sets its
//!   quota, so two creates at once cannot both take the last of a share.
//!
//! A process attached to the segment can rewrite a quota word (as it can every word there):
//! the share is summed from the daemon's own record of the quotas it set, never from those
//! words, and the scan writes them back (see `quota`), so a rewrite holds until then only.

use xtcq_proto as proto;
use xtcq_shm::segment::QueueQuota;

use crate::registry::{Bookkeeping, Registry};

/// The most one uid may own of the segment's queue-table entries and records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UidShare {
    /// Queues one uid may own.
    pub queues: u32,
    /// Records the quotas of one uid's queues may add up to.
    pub records: u32,
    /// The uids without a limit.
    pub exempt: [u32; 2],
}

impl UidShare {
    /// The record quota a new queue gets when its owner's other queues hold `held`.
    fn slice(&self, held: u64) -> u32 {
        let left = u64::from(self.records).saturating_sub(held);
        let even = (self.records / self.queues.max(1)).max(1);
        left.min(u64::from(even)) as u32
    }
}

impl Registry {
    /// Lets no uid but `share.exempt` own more than `share` of the queues and records.
    pub fn limit_share_per_uid(mut self, share: UidShare) -> Self {
        self.share = Some(share);
        self
    }

    /// The share that limits `uid`, if one does.
    pub(crate) fn share_of(&self, uid: u32) -> Option<UidShare> {
        self.share.filter(|s| !s.exempt.contains(&uid))
    }

    /// `uid`'s queues (by the daemon's record) other than `except`: how many, and the sum of
    /// their record quotas.
    fn owned(&self, t: &Bookkeeping, uid: u32, except: Option<u32>) -> (u32, u64) {
        t.queues
            .iter()
            .filter(|(&i, a)| a.owner == uid && Some(i) != except)
            .fold((0, 0), |(n, held), (&i, _)| (n + 1, held + u64::from(self.quota_of(t, i).max_records)))
    }

    /// The quota a new queue of `owner` starts with, or why `owner` may not create one.
    pub(crate) fn quota_for_new_queue(
        &self,
        t: &Bookkeeping,
        owner: u32,
    ) -> Result<QueueQuota, proto::ErrorReply> {
        let mut quota = self.default_quota();
        let Some(share) = self.share_of(owner) else { return Ok(quota) };
        let (queues, held) = self.owned(t, owner, None);
        let who = proto::names::uid_label(owner);
        if queues >= share.queues {
            return Err(refusal(format!(
                "{who} owns {queues} queues, the most one user may (--queues-per-uid {}); delete one \
                 (xtcq delete), or ask the operator to raise --queues-per-uid",
                share.queues
            )));
        }
        quota.max_records = share.slice(held);
        if quota.max_records == 0 {
            return Err(refusal(format!(
                "the record quotas of {who}'s queues add up to {held}, all of its share \
                 (--records-per-uid {}); lower one (xtcq limits QUEUE --max-records N), delete one, or \
                 ask the operator to raise --records-per-uid",
                share.records
            )));
        }
        Ok(quota)
    }

    /// Refuses a record quota of `n` for queue `index` (owned by `owner`) that would take
    /// `owner` past its share, or that is "none" (0) for a limited owner.
    pub(crate) fn check_quota_change(
        &self,
        t: &Bookkeeping,
        index: u32,
        owner: u32,
        n: u32,
    ) -> Result<(), proto::ErrorReply> {
        let Some(share) = self.share_of(owner) else { return Ok(()) };
        let (_, others) = self.owned(t, owner, Some(index));
        let left = u64::from(share.records).saturating_sub(others);
        if n == 0 || u64::from(n) > left {
            return Err(refusal(format!(
                "a record quota of {n} would take {} past its share of records (--records-per-uid {}: \
                 its other queues hold {others}); give 1 to {left}, or lower another queue's quota first",
                proto::names::uid_label(owner),
                share.records
            )));
        }
        Ok(())
    }
}

fn refusal(message: String) -> proto::ErrorReply {
    proto::ErrorReply::new(proto::ErrorCode::LimitReached, message)
}
