//! `xtcq push QUEUE --key KEY [--or-existing] PAYLOAD`: a unique job.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use xtcq_client::{Due, Error, OnDuplicate, Pushed};

use crate::cmd::connect;
use crate::exit;
use crate::out;
use crate::room::Room;

/// A push with a key, as the command line gave it.
pub struct KeyedPush<'a> {
    pub queue: &'a str,
    pub key: &'a str,
    pub payload: &'a [String],
    pub or_existing: bool,
    pub timeout: Duration,
    pub due: Option<Due>,
    /// `--priority`: a job with a key is pushed at priority 0 only.
    pub priority: u32,
    /// `--batch`: the batch it joins.
    pub batch: Option<&'a str>,
}

/// Pushes one job with a key; prints `new ID` or `existing ID` on stdout. Refused (a live
/// job holds the key, and no --or-existing): exit [`exit::DUPLICATE`], the message naming
/// that job.
pub fn push(socket: Option<&Path>, p: KeyedPush<'_>) -> Result<i32> {
    let [payload] = p.payload else {
        bail!("--key pushes one job: give exactly one payload argument (got {})", p.payload.len());
    };
    if p.priority != 0 {
        bail!("a job with --key is pushed at priority 0, not --priority {}: drop one of the two", p.priority);
    }
    let client = connect(socket)?;
    let inj = client.attach_injector(p.queue)?;
    if let Some(name) = p.batch {
        inj.set_batch(Some(&client.batch_progress(p.queue, name)?));
    }
    let on_duplicate = if p.or_existing { OnDuplicate::ReturnExisting } else { OnDuplicate::Refuse };
    let key = p.key.as_bytes();
    let mut room = Room::new(p.queue, p.timeout);
    let pushed = room.push(
        |b| match p.due {
            None => inj.push_with_key(b, key, on_duplicate),
            Some(due) => inj.push_delayed_with_key(b, key, due, on_duplicate),
        },
        payload.as_bytes(),
    );
    let line = match pushed {
        Ok(Pushed::New(h)) => format!("new {}\n", xtcq_client::JobId::of_push(h)),
        Ok(Pushed::Existing(id)) => format!("existing {id}\n"),
        Err(e) => match e.downcast_ref::<Error>() {
            Some(Error::DuplicateKey { existing, .. }) => {
                eprintln!(
                    "xtcq: {}: a job with key {:?} is queued, delayed or running: {existing}",
                    p.queue, p.key
                );
                return Ok(exit::DUPLICATE);
            }
            _ => return Err(e),
        },
    };
    out::print(line)?;
    Ok(exit::OK)
}
