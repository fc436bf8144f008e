//! The soak's parent side: the processes it runs and kills.
//!
//! - One producer and four workers at a time, each incarnation with its own log file, so a
//!   kill never mixes the lines of two processes.
//! - Every kill is `kill -9`, noted with its CLOCK_MONOTONIC time and the daemon instance
//!   then running, for the recovery times; a killed process is replaced at once.
//! - The daemon is killed a few times, spread over the run, and restarted on the same socket
//!   and segment; the clients keep working in shared memory meanwhile.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use xtcq_client::{Client, Flavor, QueueParams};
use xtcq_shm::segment::monotonic_ns;
use xtcq_testkit::*;

use super::tally::line_count;
use super::{QUEUE, ROLES, WORKERS};

/// The soak's sizes, from the environment (see the module docs of `daemon_soak.rs`).
pub struct Settings {
    pub jobs: u64,
    pub secs: u64,
    pub kill_ms: u64,
    pub daemon_kills: u64,
    pub seed: u64,
}

impl Settings {
    pub fn from_env() -> Settings {
        Settings {
            jobs: env_or("XTCQ_SOAK_JOBS", 200_000),
            secs: env_or("XTCQ_SOAK_SECS", 0),
            kill_ms: env_or("XTCQ_SOAK_KILL_MS", 300).max(10),
            daemon_kills: env_or("XTCQ_SOAK_DAEMON_KILLS", 3),
            seed: env_or("XTCQ_SOAK_SEED", monotonic_ns() | 1),
        }
    }
}

/// A child process and the log it writes.
pub struct Child {
    pub role: Role,
    pub log: PathBuf,
}

/// One `kill -9`.
pub struct Kill {
    pub pid: u32,
    pub at_ns: u64,
    /// Index of the daemon instance running when it was killed.
    pub daemon: usize,
}

/// Everything the soak started, and what it did to it.
pub struct Fleet {
    pub socket: PathBuf,
    pub dir: PathBuf,
    /// Every daemon instance, the running one last.
    pub daemons: Vec<Daemon>,
    producer: Option<Child>,
    workers: Vec<Child>,
    pub producer_logs: Vec<PathBuf>,
    pub worker_logs: Vec<PathBuf>,
    incarnation: usize,
    pub kills: Vec<Kill>,
    /// When each killed worker was gone, by its log.
    pub killed_at: BTreeMap<PathBuf, u64>,
    pub worker_kills: u64,
    pub producer_kills: u64,
    /// From each daemon kill to its successor being ready.
    pub daemon_restarts: Vec<Duration>,
}

impl Fleet {
    /// A daemon with the soak's queue, a producer of `jobs` and the workers.
    pub fn start(jobs: u64) -> Fleet {
        let daemon = Daemon::builder().flags(MEDIUM_SEGMENT).start();
        let params = QueueParams {
            name: QUEUE.into(),
            deques: 4,
            capacity: 256,
            flavor: Flavor::Lifo,
            max_attempts: 0,
            lease_ms: 0,
            levels: 1,
            aging: 0,
        };
        daemon.client().create_queue(&params).expect("create queue");
        let mut fleet = Fleet {
            socket: daemon.socket.clone(),
            dir: daemon.dir().to_path_buf(),
            daemons: vec![daemon],
            producer: None,
            workers: Vec::new(),
            producer_logs: Vec::new(),
            worker_logs: Vec::new(),
            incarnation: 0,
            kills: Vec::new(),
            killed_at: BTreeMap::new(),
            worker_kills: 0,
            producer_kills: 0,
            daemon_restarts: Vec::new(),
        };
        fleet.spawn_producer(jobs);
        for _ in 0..WORKERS {
            let w = fleet.spawn_worker();
            fleet.workers.push(w);
        }
        fleet
    }

    /// Ids the producers logged as pushed so far.
    pub fn pushed(&self) -> u64 {
        line_count(&self.producer_logs)
    }

    /// Jobs the workers logged as run so far.
    fn run(&self) -> u64 {
        line_count(&self.worker_logs)
    }

    fn spawn_producer(&mut self, n: u64) {
        self.incarnation += 1;
        let k = self.incarnation;
        let log = self.dir.join(format!("producer.{k}.log"));
        let env = [
            ("XTCQ_TEST_LOG", log.display().to_string()),
            ("XTCQ_TEST_BASE", ((k as u64 + 1) << 32).to_string()),
            ("XTCQ_TEST_N", n.to_string()),
        ];
        self.producer_logs.push(log.clone());
        self.producer = Some(Child { role: spawn_role(ROLES, "producer", &self.socket, &env), log });
    }

    fn spawn_worker(&mut self) -> Child {
        self.incarnation += 1;
        let log = self.dir.join(format!("worker.{}.log", self.incarnation));
        let env = [
            ("XTCQ_TEST_LOG", log.display().to_string()),
            ("XTCQ_SOAK_RUNLOG", super::tally::run_log(&log).display().to_string()),
            ("XTCQ_SOAK_WORK_US", env_or("XTCQ_SOAK_WORK_US", 200).to_string()),
        ];
        self.worker_logs.push(log.clone());
        Child { role: spawn_role(ROLES, "worker", &self.socket, &env), log }
    }

    /// Whether the producer is running (`false` once it exited; a failure fails the soak).
    fn producer_running(&mut self) -> bool {
        let Some(ch) = self.producer.as_mut().and_then(|p| p.role.child.as_mut()) else { return false };
        match ch.try_wait() {
            Ok(Some(st)) => {
                assert!(st.success(), "the producer failed: {st:?}");
                self.producer = None;
                false
            }
            _ => true,
        }
    }

    /// Every job pushed, run, and nothing left queued, claimed or being filled.
    fn all_run(&self, jobs: u64) -> bool {
        let pushed = self.pushed();
        let idle = Client::connect(Some(&self.socket))
            .ok()
            .and_then(|c| c.stats(Some(QUEUE)).ok())
            .is_some_and(|s| {
                let r = &s.queues[0].records;
                r.queued == 0 && r.claimed == 0 && r.filling == 0
            });
        pushed >= jobs && idle && self.run() >= pushed
    }

    /// Kills and kills again until every job is run (or the time cap stops production).
    pub fn under_fire(&mut self, s: &Settings, rng: &mut Rng) {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(if s.secs > 0 { s.secs + 600 } else { 1800 });
        let mut next_daemon_kill = 1;
        loop {
            assert!(Instant::now() < deadline, "soak did not finish in time");
            let producing = self.producer_running();
            if !producing && self.all_run(s.jobs) {
                return;
            }
            if !producing && self.pushed() < s.jobs {
                // Killed and not restarted, or exited early: restart with the rest.
                self.spawn_producer(s.jobs - self.pushed());
            }
            if s.secs > 0 && t0.elapsed() > Duration::from_secs(s.secs) {
                if let Some(mut p) = self.producer.take() {
                    p.role.kill9();
                    self.producer_kills += 1;
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(s.kill_ms / 2 + rng.below(s.kill_ms)));
            // The daemon, a few times, spread over the run.
            if next_daemon_kill <= s.daemon_kills
                && self.run() * (s.daemon_kills + 1) >= s.jobs * next_daemon_kill
            {
                next_daemon_kill += 1;
                self.kill_daemon(rng);
            } else if (rng.below(5) == 0 || self.producer_kills == 0) && self.producer_running() {
                // The first kill is the producer's, so that even a short run covers a
                // producer dying mid-stream.
                self.kill_producer(s.jobs);
            } else {
                self.kill_worker(rng);
            }
        }
    }

    fn kill_daemon(&mut self, rng: &mut Rng) {
        let d = self.daemons.last_mut().unwrap();
        d.signal(libc::SIGKILL);
        let _ = d.wait_exit(Duration::from_secs(10));
        let t = Instant::now();
        // Clients keep working in shared memory meanwhile; a short gap, then restart.
        std::thread::sleep(Duration::from_millis(50 + rng.below(200)));
        let mut next = Daemon::builder().at(&self.dir).flags(MEDIUM_SEGMENT).start();
        next.adopt_dir(self.daemons.last_mut().unwrap());
        self.daemon_restarts.push(t.elapsed());
        self.daemons.push(next);
    }

    fn kill_producer(&mut self, jobs: u64) {
        let mut p = self.producer.take().unwrap();
        let (pid, at_ns) = (p.role.pid(), monotonic_ns());
        p.role.kill9();
        self.kills.push(Kill { pid, at_ns, daemon: self.daemons.len() - 1 });
        self.producer_kills += 1;
        let pushed = self.pushed();
        if pushed < jobs {
            self.spawn_producer(jobs - pushed);
        }
    }

    fn kill_worker(&mut self, rng: &mut Rng) {
        let i = rng.below(self.workers.len() as u64) as usize;
        let (pid, at_ns) = (self.workers[i].role.pid(), monotonic_ns());
        self.workers[i].role.kill9();
        // After the wait: the process is gone by then, so its runs ended before it.
        self.killed_at.insert(self.workers[i].log.clone(), monotonic_ns());
        self.kills.push(Kill { pid, at_ns, daemon: self.daemons.len() - 1 });
        self.worker_kills += 1;
        self.workers[i] = self.spawn_worker();
    }

    /// Lets the workers stop once the queue stays empty, then waits until the daemon has
    /// seen every child go; returns a client of the last daemon.
    pub fn drain(&mut self) -> Client {
        for w in &mut self.workers {
            w.role.release();
        }
        for w in &mut self.workers {
            let _ = w.role.finish(Duration::from_secs(120));
        }
        let c = Client::connect(Some(&self.socket)).expect("connect");
        eventually(Duration::from_secs(10), || {
            c.stats(None).ok().filter(|s| s.processes.iter().all(|p| p.pid == std::process::id())).map(|_| ())
        })
        .unwrap_or_else(|| panic!("children not recovered; daemon log:\n{}", self.daemon().log_text()));
        c
    }

    /// The daemon running now.
    pub fn daemon(&self) -> &Daemon {
        self.daemons.last().unwrap()
    }
}
