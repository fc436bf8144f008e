//! Per-user limits on the daemon's shared resources, so that one allowed user cannot take
//! every connection (through idle connections that said Hello, or many processes) and lock
//! out the others. Process slots are limited in the registry (`--process-slots-per-uid`);
//! connections here (`--max-connections-per-uid`). The daemon's own uid and root are not
//! limited: they can stop the daemon anyway.
//!
//! Invariant: a uid's count is the number of live [`UidConnection`] guards for it; each
//! connection holds one from its identification until it closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use xtcq_proto::{names, ErrorCode, ErrorReply};

/// Connections held per uid.
#[derive(Debug)]
pub struct UidConnections {
    per_uid: usize,
    exempt: [u32; 2],
    held: Mutex<HashMap<u32, usize>>,
}

/// One connection counted against its uid; uncounted when dropped.
#[derive(Debug)]
pub struct UidConnection {
    owner: Option<Arc<UidConnections>>,
    uid: u32,
}

impl UidConnections {
    /// At most `per_uid` connections for any uid but `exempt`.
    pub fn new(per_uid: usize, exempt: [u32; 2]) -> Arc<Self> {
        Arc::new(Self { per_uid, exempt, held: Mutex::new(HashMap::new()) })
    }

    /// Counts one more connection of `uid`, or refuses (the reply names the limit and the
    /// flag that raises it).
    pub fn enter(self: &Arc<Self>, uid: u32) -> Result<UidConnection, ErrorReply> {
        if self.exempt.contains(&uid) {
            return Ok(UidConnection { owner: None, uid });
        }
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(uid).or_insert(0);
        if *n >= self.per_uid {
            return Err(ErrorReply::new(
                ErrorCode::LimitReached,
                format!(
                    "{} already holds {} connections to this xtcqd, the most one user may hold \
                     (--max-connections-per-uid {}); close some, or restart xtcqd with a higher \
                     --max-connections-per-uid",
                    names::uid_label(uid),
                    *n,
                    self.per_uid
                ),
            ));
        }
        *n += 1;
        Ok(UidConnection { owner: Some(self.clone()), uid })
    }
}

impl Drop for UidConnection {
    fn drop(&mut self) {
        let Some(o) = &self.owner else { return };
        let mut held = o.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use xtcq_proto::ErrorCode;

    use super::UidConnections;

    #[test]
    fn a_uid_gets_its_share_and_the_exempt_ones_are_not_counted() {
        let c = UidConnections::new(2, [7, 0]);
        let a = c.enter(1000).expect("first");
        let _b = c.enter(1000).expect("second");
        let e = c.enter(1000).expect_err("third");
        assert_eq!(e.code, ErrorCode::LimitReached);
        assert!(e.message.contains("--max-connections-per-uid 2"), "{}", e.message);
        c.enter(1001).expect("another uid");
        let _many: Vec<_> = (0..5).map(|_| c.enter(7).expect("exempt")).collect();
        drop(a);
        c.enter(1000).expect("one closed: room again");
    }
}
