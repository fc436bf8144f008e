//! Red-team pass 7 on `xtcq-bridge` started while its NATS server is away.
//!
//! - The promise (bridge/src/nats.rs): a bridge started before its server waits for it
//!   instead of exiting. Before: the first connection was retried in the background, but the
//!   stream set-up went ahead at once, timed out (about 10 s) and ended the bridge with
//!   "stream S: cannot create or read it: jetstream request timed out", which does not say
//!   that NATS was not there.
//! - Kept here: the bridge says NATS does not answer, waits through several of its retries
//!   (counted in its log, no clock), then carries every job once the server comes; a SIGTERM
//!   while it waits ends it cleanly.

use std::process::Command;
use std::time::Duration;

use xtcq_testkit::bridge::*;
use xtcq_testkit::*;

/// Failed connection attempts to wait through: with the bridge's backoff (100 ms doubling,
/// capped at 5 s) the seventh comes about 16 s in, past the set-up's old timeout.
const ATTEMPTS: usize = 7;

fn bridge_out(host: &Host, nats: &Nats, stats: &std::path::Path) -> Proc {
    let mut c = Command::new(exe::bridge_exe());
    c.args(["out", "q", "--nats", &nats.url(), "--stream", "JOBS"])
        .arg("--socket")
        .arg(host.socket())
        .arg("--id-secret")
        .arg(host.id_secret())
        .arg("--stats-file")
        .arg(stats)
        .env_remove("XTCQ_SOCKET")
        .env("RUST_LOG", "info");
    Proc::spawn(c, host.dir().join("bridge-out.log"))
}

/// Waits until the bridge logged `ATTEMPTS` failed connections, or exited (then fails).
fn wait_through_retries(b: &mut Proc) {
    wait_until(Duration::from_secs(120), "the bridge's connection retries", || {
        if let Some(Ok(Some(st))) = b.child.as_mut().map(|c| c.try_wait()) {
            panic!("the bridge exited ({st}) while NATS was away instead of waiting:\n{}", b.log_text());
        }
        b.log_text().matches("NATS: client error").count() >= ATTEMPTS
    });
    let log = b.log_text();
    assert!(log.contains("NATS does not answer yet"), "the bridge must say what it waits for:\n{log}");
}

#[test]
fn out_started_before_nats_waits_for_it_then_carries_every_job() {
    let Some(mut nats) = Nats::start("out_started_before_nats_waits_for_it_then_carries_every_job") else {
        return;
    };
    nats.kill();
    let a = Host::start("A");
    a.ok(&["create", "q"], b"");
    a.ok(&["push", "q"], b"one\ntwo\nthree\n");
    let stats = a.dir().join("bridge-out.json");
    let mut b = bridge_out(&a, &nats, &stats);
    wait_through_retries(&mut b);
    nats.spawn();
    let acked = || {
        let text = std::fs::read_to_string(&stats).unwrap_or_default();
        text.contains("\"acked\":3")
    };
    wait_until(Duration::from_secs(60), "every job published and acked locally", acked);
    assert_eq!(nats.messages("JOBS"), 3, "each job in the stream once");
    assert_eq!(a.live("q"), 0);
    b.signal(libc::SIGTERM);
    let st = b.wait(Duration::from_secs(30));
    assert!(st.success(), "{st}: {}", b.log_text());
}

#[test]
fn sigterm_while_waiting_for_nats_ends_the_bridge_cleanly() {
    let Some(mut nats) = Nats::start("sigterm_while_waiting_for_nats_ends_the_bridge_cleanly") else {
        return;
    };
    nats.kill();
    let a = Host::start("A");
    a.ok(&["create", "q"], b"");
    a.ok(&["push", "q"], b"kept\n");
    let mut b = bridge_out(&a, &nats, &a.dir().join("bridge-out.json"));
    wait_until(Duration::from_secs(60), "the bridge says it waits", || {
        b.log_text().contains("NATS does not answer yet") || b.log_text().contains("xtcq-bridge:")
    });
    b.signal(libc::SIGTERM);
    let st = b.wait(Duration::from_secs(30));
    assert!(st.success(), "{st}: {}", b.log_text());
    assert_eq!(a.live("q"), 1, "the job stays queued locally");
}

/// A NATS server without JetStream: the bridge must say so and how to enable it (before:
/// "cannot create or read it: jetstream unavailable", and nothing on what to do).
#[test]
fn a_server_without_jetstream_is_named_as_such() {
    let Some(mut nats) = Nats::start("a_server_without_jetstream_is_named_as_such") else { return };
    nats.kill();
    let url = nats.url();
    let port = url.rsplit(':').next().expect("port").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = std::fs::File::create(dir.path().join("nats.log")).expect("log");
    let plain = Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start nats-server");
    let mut plain = Proc { child: Some(plain), log: dir.path().join("nats.log") };
    wait_until(Duration::from_secs(10), "plain nats-server ready", || {
        std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().expect("port"))).is_ok()
    });
    let a = Host::start("A");
    a.ok(&["create", "q"], b"");
    let mut b = bridge_out(&a, &nats, &a.dir().join("bridge-out.json"));
    let st = b.wait(Duration::from_secs(60));
    let log = b.log_text();
    assert!(!st.success(), "{log}");
    assert!(log.contains("has no JetStream") && log.contains("-js"), "say what to do:\n{log}");
    plain.kill9();
}

/// `in --max-inflight 0` held nothing, so it fetched nothing, for ever and silently; now it
/// is refused as a bad argument (exit 2) saying why.
#[test]
fn in_refuses_max_inflight_0() {
    let o = run_bounded(
        Command::new(exe::bridge_exe()).args([
            "in",
            "q",
            "--stream",
            "S",
            "--consumer",
            "c",
            "--max-inflight",
            "0",
        ]),
        None,
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--max-inflight") && stderr(&o).contains("1 or more"), "{}", stderr(&o));
}
