//! The client library starts no thread: it lives inside programs that allow none (a
//! PostgreSQL backend, through the C API). Before, every connection started a reader thread.
//! Counted in a process of its own (this test binary run again), before and after a round of
//! connect, create, push, steal, ack, stats, and a daemon stop noticed while idle.

use std::time::Duration;

use xtcq_testkit::*;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").expect("/proc/self/task").count()
}

/// The role: uses a client, prints the thread counts.
#[test]
fn child_main() {
    let Ok(socket) = std::env::var("XTCQ_TEST_THREADS_SOCKET") else { return };
    let before = threads();
    let c = xtcq_client::Client::connect(Some(std::path::Path::new(&socket))).expect("connect");
    c.create_queue(&xtcq_client::QueueParams { capacity: 64, ..xtcq_client::QueueParams::new("q") })
        .expect("create");
    let owner = c.attach_owner("q").expect("owner");
    owner.push(b"job").expect("push");
    let thief = c.attach_thief("q").expect("thief");
    thief.steal().expect("steal").expect("a job").ack().expect("ack");
    c.stats(None).expect("stats");
    let during = threads();
    println!("@@ {before} {during}");
    // The daemon is stopped now; an idle client notices when it asks.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    let gone = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        !c.is_connected()
    });
    println!("@@ gone {gone} {:?} {}", c.shutdown_notice(), threads());
}

#[test]
fn the_client_starts_no_thread() {
    use std::io::{BufRead, Write};
    let mut d = Daemon::start();
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", &test_name(module_path!(), "child_main"), "--nocapture", "--test-threads", "1"])
        .env("XTCQ_TEST_THREADS_SOCKET", &d.socket)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = || loop {
        let l = lines.next().expect("a line").expect("read");
        if let Some(at) = l.find("@@ ") {
            return l[at + 3..].to_string();
        }
    };
    let counts: Vec<usize> = next().split(' ').map(|n| n.parse().expect("a count")).collect();
    assert_eq!(counts[0], counts[1], "threads before and while using the client: {counts:?}");
    d.stop();
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let last = next();
    assert!(last.starts_with("gone true Some(\"SIGTERM\")"), "{last}");
    assert!(last.ends_with(&format!(" {}", counts[0])), "{last}");
    let _ = child.wait();
}
