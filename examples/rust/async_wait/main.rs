//! A consumer in tokio: `steal_async` waits on the thief's wake descriptor (no thread, no
//! polling) while a producer thread pushes the jobs. Needs the client's `tokio` feature.
//!
//! The socket comes from `$XTCQ_SOCKET` or the default, as for `xtcq`.

use xtcq_client::{AsyncWake, Client, Error, QueueParams};

const JOBS: usize = 3;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let client = Client::connect(None)?;
    match client.create_queue(&QueueParams::new("example-async")) {
        Ok(_) | Err(Error::QueueExists(_)) => {}
        Err(e) => return Err(e),
    }
    let thief = client.attach_thief("example-async")?;
    let wake = AsyncWake::new(thief.wake_fd()?)?;

    // The producer: another connection, as another process would have.
    let producer = std::thread::spawn(|| -> Result<(), Error> {
        let client = Client::connect(None)?;
        let owner = client.attach_owner("example-async")?;
        for i in 0..JOBS {
            owner.push(format!("async job {i}").as_bytes())?;
        }
        Ok(())
    });

    for _ in 0..JOBS {
        let job = thief.steal_async(&wake).await?; // cancel safe: dropping it takes nothing
        println!("ran {}", String::from_utf8_lossy(&job.payload()?));
        job.ack()?;
    }
    producer.join().expect("the producer thread")?;
    Ok(())
}
