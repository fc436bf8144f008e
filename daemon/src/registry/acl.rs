//! Per-queue permissions (see [`crate::state::QueueAcl`]).

use tracing::warn;

use super::{Registry, Tracked};

impl Registry {
    /// Keeps the recorded permissions only of queues that are still those queues (active
    /// at that index, with that name).
    pub(super) fn adopt_queue_acls(&self, t: &mut Tracked) {
        t.queues.retain(|&index, acl| match self.seg.queue(index) {
            Ok(q) if q.spec.name == acl.name => true,
            _ => {
                warn!(index, queue = %acl.name, "dropping the permissions of a queue that no longer exists");
                false
            }
        });
    }
}
