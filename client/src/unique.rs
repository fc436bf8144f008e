//! Unique jobs: a push with a key ([`InjectorHandle::push_with_key`],
//! [`OwnerHandle::push_with_key`]) is refused while a job of the queue pushed with the same
//! key is queued, delayed or running, across every process (the key table in the segment,
//! see `xtcq_shm::keys`).

pub use xtcq_shm::keys::MAX_KEY_LEN;
use xtcq_shm::{JobHandle, JobId, Key, PushError};

use crate::delay::{announce, Due};
use crate::handles::{usable, InjectorHandle, OwnerHandle};
use crate::Error;

/// What a push with a key does when a live job holds the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnDuplicate {
    /// Refuse it: [`Error::DuplicateKey`], with the existing job's id.
    #[default]
    Refuse,
    /// Push nothing and answer the existing job's id: [`Pushed::Existing`].
    ReturnExisting,
}

/// What a push with a key did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// A new job, which holds the key.
    New(JobHandle),
    /// Nothing: this job of the queue holds the key ([`OnDuplicate::ReturnExisting`]).
    Existing(JobId),
}

impl Pushed {
    /// The id of the job that holds the key: the new one or the existing one.
    pub fn id(&self) -> JobId {
        match *self {
            Pushed::New(h) => JobId::of_push(h),
            Pushed::Existing(id) => id,
        }
    }
}

/// `key` as a key, or why it cannot be one.
fn key_of(key: &[u8]) -> Result<Key, Error> {
    Key::new(key).map_err(|e| Error::KeyRefused(e.to_string()))
}

/// The answer to a push with `key` that returned `r`.
fn settle(r: Result<JobHandle, PushError>, key: &[u8], on_duplicate: OnDuplicate) -> Result<Pushed, Error> {
    match r {
        Ok(h) => Ok(Pushed::New(h)),
        Err(PushError::Key(xtcq_shm::KeyError::Duplicate { existing })) => match on_duplicate {
            OnDuplicate::ReturnExisting => Ok(Pushed::Existing(existing)),
            OnDuplicate::Refuse => {
                Err(Error::DuplicateKey { key: String::from_utf8_lossy(key).into_owned(), existing })
            }
        },
        Err(e) => Err(Error::from_push(e)),
    }
}

impl InjectorHandle {
    /// Queues a job that holds `key` (1 to 64 bytes) in this queue while it is queued,
    /// delayed or running; while another job does, nothing is pushed and `on_duplicate`
    /// says what to answer.
    pub fn push_with_key(
        &self,
        payload: &[u8],
        key: &[u8],
        on_duplicate: OnDuplicate,
    ) -> Result<Pushed, Error> {
        usable(self.inj.segment(), &self.conn, &self.att, self.lost_at)?;
        let k = key_of(key)?;
        settle(self.inj.push_with_key(payload, &k, None), key, on_duplicate)
    }

    /// [`push_with_key`](Self::push_with_key) of a job due at `due` (see
    /// [`push_delayed`](Self::push_delayed)): it holds the key while it waits.
    pub fn push_delayed_with_key(
        &self,
        payload: &[u8],
        key: &[u8],
        due: Due,
        on_duplicate: OnDuplicate,
    ) -> Result<Pushed, Error> {
        usable(self.inj.segment(), &self.conn, &self.att, self.lost_at)?;
        let k = key_of(key)?;
        let pushed =
            settle(self.inj.push_with_key(payload, &k, Some(due.monotonic_ns())), key, on_duplicate)?;
        if let Pushed::New(h) = pushed {
            announce(&self.conn, h);
        }
        Ok(pushed)
    }
}

impl OwnerHandle {
    /// [`InjectorHandle::push_with_key`] into this handle's deque.
    pub fn push_with_key(
        &self,
        payload: &[u8],
        key: &[u8],
        on_duplicate: OnDuplicate,
    ) -> Result<Pushed, Error> {
        self.usable()?;
        let k = key_of(key)?;
        settle(self.owner.push_with_key(payload, &k), key, on_duplicate)
    }
}
