//! Push three jobs as a queue's owner, then steal, run and ack each as a thief.
//!
//! The socket comes from `$XTCQ_SOCKET` or the default, as for `xtcq`.

use std::time::Duration;

use xtcq_client::{Client, Error, QueueParams};

fn main() -> Result<(), Error> {
    let client = Client::connect(None)?;
    // A queue that is already there (a second run) is used as it is.
    match client.create_queue(&QueueParams::new("example-jobs")) {
        Ok(_) | Err(Error::QueueExists(_)) => {}
        Err(e) => return Err(e),
    }
    let owner = client.attach_owner("example-jobs")?; // a deque of our own: no system call a push
    for i in 0..3 {
        owner.push(format!("job {i}").as_bytes())?;
    }
    let thief = client.attach_thief("example-jobs")?; // usually in another process
    while let Some(job) = thief.steal_wait(Some(Duration::from_millis(100)))? {
        println!("ran {}", String::from_utf8_lossy(&job.payload()?));
        job.ack()?; // or job.nack(); a job dropped unsettled is nacked
    }
    Ok(())
}
