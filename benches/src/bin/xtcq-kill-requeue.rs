//! Kill-to-re-queue latency against a running `xtcqd`: how long after a `kill -9` of a
//! consumer holding a job another consumer, already waiting, gets that job.
//!
//! `xtcq-kill-requeue SOCKET [ROUNDS]` (default 20 rounds): creates queue `kill-requeue`
//! (if missing), and each round pushes one job, starts a holder (this program again, as
//! `hold SOCKET`) that steals it and says so, kills the holder with SIGKILL and times until
//! the waiting consumer here has the job. Prints each round's latency and the p50 and max.
//! Used by `benches/idle_cpu.sh`; not a criterion bench.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xtcq_client::{Client, Error, Flavor, QueueParams};

const QUEUE: &str = "kill-requeue";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("hold") => hold(Path::new(args.get(2).ok_or("hold SOCKET")?)),
        Some(socket) => {
            let rounds = args.get(2).map(|r| r.parse()).transpose()?.unwrap_or(20);
            measure(Path::new(socket), rounds)
        }
        None => Err("usage: xtcq-kill-requeue SOCKET [ROUNDS]".into()),
    }
}

/// The holder: steals one job, says so on stdout, then waits to be killed.
fn hold(socket: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let c = Client::connect(Some(socket))?;
    let t = c.attach_thief(QUEUE)?;
    let j = t.steal_wait(Some(Duration::from_secs(30)))?.ok_or("no job to hold")?;
    println!("held");
    std::thread::sleep(Duration::from_secs(600));
    drop(j);
    Ok(())
}

fn measure(socket: &Path, rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let c = Client::connect(Some(socket))?;
    let mut p = QueueParams::new(QUEUE);
    p.deques = 1;
    p.capacity = 64;
    p.flavor = Flavor::Fifo;
    match c.create_queue(&p) {
        Ok(_) | Err(Error::QueueExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let inj = c.attach_injector(QUEUE)?;
    let thief = c.attach_thief(QUEUE)?;
    let me = std::env::current_exe()?;
    let mut took = Vec::new();
    for round in 0..rounds {
        inj.push(format!("job {round}").as_bytes())?;
        let mut holder = Command::new(&me)
            .arg("hold")
            .arg(socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(holder.stdout.take().ok_or("holder stdout")?).read_line(&mut line)?;
        if line.trim() != "held" {
            return Err(format!("holder said {line:?}").into());
        }
        // The waiting consumer is asleep on the queue before the kill.
        std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
            let waiter = s.spawn(|| -> Result<Instant, String> {
                let j = thief.steal_wait(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
                let at = Instant::now();
                j.ok_or("the killed holder's job never came back")?.ack().map_err(|e| e.to_string())?;
                Ok(at)
            });
            std::thread::sleep(Duration::from_millis(50));
            let t0 = Instant::now();
            holder.kill()?;
            let at = waiter.join().map_err(|_| "waiter panicked")??;
            took.push(at - t0);
            Ok(())
        })?;
        let _ = holder.wait();
        println!("round {round}: {:?}", took[round]);
    }
    took.sort();
    println!(
        "kill-to-re-queue over {rounds} rounds: p50 {:?}, max {:?}",
        took[took.len() / 2],
        took[took.len() - 1]
    );
    Ok(())
}
