//! What idle consumers cost: N consumers (threads of one process, each its own thief) asleep
//! on an empty queue for SECS, in the futex (`steal_wait`) or on wake descriptors (`poll(2)`
//! after `steal_or_arm`); the CPU seconds the consumers' process and the daemon used.

use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::Duration;

use xtcq_client::Client;

/// The idle role: `n` consumers asleep on `queue` in `mode` until killed.
pub fn consumers(mode: &str, socket: &str, queue: &str, n: usize) {
    let c = Client::connect(Some(std::path::Path::new(socket))).expect("connect");
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..n {
        let t = c.attach_thief(queue).expect("thief");
        let tx = tx.clone();
        let kind = match mode {
            "fd-futex" => Some(xtcq_client::WakeKind::Futex),
            "fd-dgram" => Some(xtcq_client::WakeKind::Datagram),
            _ => None,
        };
        std::thread::spawn(move || {
            let wake = kind.map(|k| t.wake_fd_of(k).expect("wake_fd"));
            if let Some(w) = &wake {
                assert!(t.steal_or_arm(w).expect("steal_or_arm").is_none(), "the queue is not empty");
            }
            tx.send(()).expect("ready");
            match &wake {
                None => drop(t.steal_wait(None)),
                Some(w) => loop {
                    let mut pfd = libc::pollfd { fd: w.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                    // SAFETY: poll(2) of one valid pollfd.
                    unsafe { libc::poll(&mut pfd, 1, -1) };
                    if t.steal_or_arm(w).is_err() {
                        return;
                    }
                },
            }
        });
    }
    for _ in 0..n {
        rx.recv().expect("a consumer");
    }
    println!("ready");
    std::io::stdout().flush().expect("flush");
    std::thread::sleep(Duration::from_secs(3600));
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields 14 and 15, counted after the ")" that ends the command's name.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<u64> = rest.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[11] + f[12]) as f64 / hz
}

/// Runs `n` idle consumers in `mode` for `secs`: (consumers' CPU s, daemon's CPU s).
pub fn measure(mode: &str, d: &xtcq_testkit::Daemon, queue: &str, n: usize, secs: u64) -> (f64, f64) {
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .env("XTCQ_WAKE_ROLE", format!("idle-{mode}"))
        .env("XTCQ_WAKE_SOCKET", &d.socket)
        .env("XTCQ_WAKE_QUEUE", queue)
        .env("XTCQ_WAKE_N", n.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn idle consumers");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready line");
    assert_eq!(line.trim(), "ready", "the idle consumers did not start");
    // Past the futex waiters' look before sleeping, and the daemon's answers to the attaches.
    std::thread::sleep(Duration::from_millis(500));
    let (c0, d0) = (cpu_seconds(child.id()), cpu_seconds(d.pid()));
    std::thread::sleep(Duration::from_secs(secs));
    let (c1, d1) = (cpu_seconds(child.id()), cpu_seconds(d.pid()));
    child.kill().expect("kill");
    child.wait().expect("reap");
    (c1 - c0, d1 - d0)
}
