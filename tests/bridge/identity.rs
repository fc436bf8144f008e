//! The bridge's identities, attacked as a third party on the NATS server and as an operator
//! would: `out`'s message ids published ahead of it, a stream deleted and re-created under
//! `in`'s `--state`, and a stream deleted under both bridges. Real nats-server, real xtcqd
//! hosts, real `xtcq work` workers; every wait is a bounded wait for a condition.

use xtcq_testkit::bridge::*;
use xtcq_testkit::*;

use std::path::Path;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(45);

/// A worker script that appends each payload to `file`, except the third party's.
fn record_real(file: &Path) -> String {
    format!("case \"$XTCQ_PAYLOAD\" in forged*) ;; *) echo \"$XTCQ_PAYLOAD\" >> {} ;; esac", file.display())
}

/// What a third party who saw one of `out`'s ids publishes ahead of it: the ids that follow
/// from it when it reads as `PREFIX:INDEX.BIRTH` (record index and birth generation), for the
/// next records and births; with any other id, the same guesses on its prefix.
fn predicted_ids(seen: &str) -> Vec<(String, Vec<u8>)> {
    let (prefix, last) = seen.rsplit_once(':').unwrap_or((seen, ""));
    let (index, birth) = last.split_once('.').unwrap_or(("0", "0"));
    let (index, birth): (u32, u32) = (index.parse().unwrap_or(0), birth.parse().unwrap_or(0));
    let mut out = Vec::new();
    for i in index.saturating_sub(4)..index + 24 {
        for b in birth.saturating_sub(2)..=birth + 2 {
            out.push((format!("{prefix}:{i}.{b}"), format!("forged-{i}.{b}").into_bytes()));
        }
    }
    out
}

#[test]
fn ids_published_ahead_by_a_third_party_make_no_job_a_duplicate() {
    let Some(nats) = Nats::start("ids_published_ahead_by_a_third_party_make_no_job_a_duplicate") else {
        return;
    };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--lease", "2s"], b"");
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    a.ok(&["push", "q"], b"probe\n");
    wait_until(LONG, "the probe stored", || nats.messages("JOBS") == 1);
    // The third party reads the probe's id, as any subscriber can, and publishes the ids that
    // follow from it before the bridge does.
    let seen = nats.msg_ids("JOBS").pop().expect("the probe's id");
    let forged = predicted_ids(&seen);
    let stored = nats.publish_with_ids("xtcq.jobs.q", &forged) as u64;
    let (names, text) = payloads(10);
    a.ok(&["push", "q"], &text);
    wait_until(LONG, "A's bridge acked the 10 jobs", || out.stat("acked") == 11);
    let runs = b.dir().join("runs");
    let mut inb = Bridge::start(&b, &nats, "in", "q", "JOBS", &["--consumer", "B", "--ack-wait", "10s"], &[]);
    let _w = b.worker("q", "60s", &record_real(&runs));
    // Everything the stream holds runs on B: the real jobs, and the third party's (anyone who
    // may publish on the subject can add jobs; that is what NATS permissions are for).
    inb.wait_for(LONG, "every stored message settled on B", |i| i.stat("acked") == nats_total(&out, stored));
    let counts = line_counts(&runs);
    for name in names.iter().chain([&"probe".to_string()]) {
        assert_eq!(counts.get(name), Some(&1), "{name} ran once on B (seen id {seen:?}): {counts:?}");
    }
    assert_eq!(out.stat("duplicates"), 0, "no real job taken for a duplicate: {}", out.proc.log_text());
    assert_eq!(nats.messages("JOBS"), 0);
    out.stop();
    inb.stop();
    a.check();
    b.check();
}

/// The messages the stream took: what `out` published, and the third party's.
fn nats_total(out: &Bridge, forged: u64) -> u64 {
    out.stat("published") + forged
}

/// `in` with `--state` holds 5 jobs and is killed; B runs them; the stream is deleted and
/// re-created (by an operator), and its new messages take the same sequences 1..5. The
/// restarted `in` must push and run them: they are not the jobs its state file names.
#[test]
fn a_recreated_streams_sequences_are_not_taken_for_jobs_held_before() {
    let Some(nats) = Nats::start("a_recreated_streams_sequences_are_not_taken_for_jobs_held_before") else {
        return;
    };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--lease", "1s"], b"");
    let state = b.dir().join("bridge.state");
    let state = state.to_str().expect("utf8 path");
    let args = ["--consumer", "B", "--ack-wait", "3s", "--state", state];
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    let old: Vec<String> = (0..5).map(|i| format!("old-{i}")).collect();
    a.ok(&["push", "q"], format!("{}\n", old.join("\n")).as_bytes());
    let mut first = Bridge::start(&b, &nats, "in", "q", "JOBS", &args, &[]);
    first.wait_for(LONG, "the first bridge holds the 5 jobs", |f| f.stat("held") == 5);
    let recorded = || std::fs::read_to_string(state).unwrap_or_default().lines().count();
    wait_until(LONG, "the state file records the 5 jobs", || recorded() == 6);
    first.proc.kill9();
    let runs = b.dir().join("runs");
    let _w = b.worker("q", "60s", &record_real(&runs));
    wait_until(LONG, "B runs the 5 held jobs", || line_counts(&runs).len() == 5 && b.live("q") == 0);
    nats.delete_stream("JOBS");
    nats.create_work_stream("JOBS", "xtcq.jobs.q");
    let new: Vec<String> = (0..5).map(|i| format!("new-{i}")).collect();
    a.ok(&["push", "q"], format!("{}\n", new.join("\n")).as_bytes());
    wait_until(LONG, "the 5 new jobs stored in the new stream", || nats.messages("JOBS") == 5);
    let mut second = Bridge::start(&b, &nats, "in", "q", "JOBS", &args, &[]);
    second.wait_for(LONG, "the 5 new messages acked", |s| s.stat("acked") == 5 && s.stat("held") == 0);
    let counts = line_counts(&runs);
    for name in old.iter().chain(&new) {
        assert_eq!(counts.get(name), Some(&1), "{name} ran once: {counts:?}\n{}", second.proc.log_text());
    }
    assert_eq!((second.stat("pushed"), second.stat("adopted")), (5, 0), "{}", second.proc.log_text());
    assert_eq!(nats.messages("JOBS"), 0);
    second.stop();
    out.stop();
    b.check();
}

/// The stream is deleted under running bridges while `in` holds 5 jobs, `in` stopped
/// (SIGSTOP) so that `out` is the one to find it gone: `out` creates it again and says so;
/// `in`, resumed, finds a new stream and says so. The 5 new jobs run on B and are acked; the
/// 5 held from the deleted stream still run on B, and nothing is acked upstream for them
/// (their messages went with the stream, and an ack naming their sequences would settle the
/// new stream's). Then the stream is deleted again while both idle: `in` creates it by itself,
/// and 3 more jobs go through it.
#[test]
fn both_bridges_recover_from_a_deleted_stream_and_ack_nothing_unrun() {
    let Some(nats) = Nats::start("both_bridges_recover_from_a_deleted_stream_and_ack_nothing_unrun") else {
        return;
    };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--lease", "1s"], b"");
    let state = b.dir().join("bridge.state");
    let state = state.to_str().expect("utf8 path");
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    let mut inb = Bridge::start(
        &b,
        &nats,
        "in",
        "q",
        "JOBS",
        &["--consumer", "B", "--ack-wait", "3s", "--state", state],
        &[],
    );
    let jobs = |prefix: &str, n: usize| (0..n).map(|i| format!("{prefix}-{i}")).collect::<Vec<_>>();
    let push = |names: &[String]| a.ok(&["push", "q"], format!("{}\n", names.join("\n")).as_bytes());
    let (old, new, later) = (jobs("old", 5), jobs("new", 5), jobs("later", 3));
    push(&old);
    inb.wait_for(LONG, "in holds the 5 jobs (no worker yet)", |i| i.stat("held") == 5);
    inb.proc.signal(libc::SIGSTOP);
    nats.delete_stream("JOBS");
    push(&new);
    out.wait_for(LONG, "out publishes the new jobs into a stream again", |o| o.stat("acked") == 10);
    assert!(out.proc.log_text().contains("stream JOBS was deleted"), "out says so: {}", out.proc.log_text());
    inb.proc.signal(libc::SIGCONT);
    inb.wait_for(LONG, "in notices the new stream", |i| {
        i.proc.log_text().contains("stream JOBS was deleted")
    });
    inb.wait_for(LONG, "in pushes the 5 new jobs", |i| i.stat("pushed") == 10);
    assert_eq!(
        inb.stat("dropped_with_stream"),
        5,
        "the 5 held from the deleted stream: {}",
        inb.proc.log_text()
    );
    let runs = b.dir().join("runs");
    let _w = b.worker("q", "60s", &record_real(&runs));
    wait_until(LONG, "B runs the 10 jobs", || line_counts(&runs).len() == 10);
    inb.wait_for(LONG, "every held job settled", |i| i.stat("held") == 0 && i.stat("acked") == 5);
    assert_eq!(nats.messages("JOBS"), 0);
    assert_eq!(nats.consumer("JOBS", "B"), (0, 0, 0), "nothing pending, nothing redelivered");
    // Deleted again, both idle: `in` finds it gone by itself and creates it.
    let recreated = inb.stat("streams_recreated");
    nats.delete_stream("JOBS");
    inb.wait_for(LONG, "in creates the stream again", |i| i.stat("streams_recreated") == recreated + 1);
    assert!(
        inb.proc.log_text().contains("stream JOBS was deleted: created it again"),
        "{}",
        inb.proc.log_text()
    );
    push(&later);
    inb.wait_for(LONG, "the 3 later jobs acked", |i| i.stat("acked") == 8 && i.stat("held") == 0);
    let counts = line_counts(&runs);
    for name in old.iter().chain(&new).chain(&later) {
        assert_eq!(counts.get(name), Some(&1), "{name} ran once: {counts:?}");
    }
    inb.stop();
    assert_eq!(inb.stat("acked"), 8, "acked upstream: the new streams' jobs only: {}", inb.proc.log_text());
    assert_eq!(nats.messages("JOBS"), 0);
    out.stop();
    a.check();
    b.check();
}

/// `out`'s secret: created owner-only on first start, the same file kept; a file others may
/// read, one owned by another user, or a symbolic link is refused before anything is taken,
/// with a message naming `--id-secret`.
#[test]
fn out_keeps_its_id_secret_owner_only_and_refuses_one_others_may_read() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(nats) = Nats::start("out_keeps_its_id_secret_owner_only_and_refuses_one_others_may_read") else {
        return;
    };
    let a = Host::start("A");
    a.ok(&["create", "q"], b"");
    let secret = a.id_secret();
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    out.stop();
    let first = std::fs::read(&secret).expect("the secret was created");
    assert_eq!(std::fs::metadata(&secret).expect("stat").mode() & 0o777, 0o600);
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    out.stop();
    assert_eq!(std::fs::read(&secret).expect("read"), first, "kept across restarts");
    a.ok(&["push", "q"], b"kept\n");
    let refused = |path: &Path| {
        let mut c = std::process::Command::new(xtcq_testkit::exe::bridge_exe());
        c.args(["out", "q", "--nats", &nats.url(), "--stream", "JOBS", "--id-secret"]).arg(path);
        c.arg("--socket").arg(a.socket());
        let mut p = Proc::spawn(c, a.dir().join("refused.log"));
        let status = p.wait(LONG);
        let log = p.log_text();
        let _ = std::fs::remove_file(a.dir().join("refused.log"));
        assert_eq!(status.code(), Some(2), "{}: {log}", path.display());
        log
    };
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    assert!(refused(&secret).contains("(--id-secret): has mode 0640"), "group-readable");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let link = a.dir().join("link.secret");
    std::os::unix::fs::symlink(&secret, &link).expect("symlink");
    assert!(refused(&link).contains("is a symbolic link"), "a symlink");
    if is_root() {
        let other = a.dir().join("other.secret");
        std::fs::copy(&secret, &other).expect("copy");
        std::os::unix::fs::chown(&other, Some(65534), None).expect("chown");
        assert!(refused(&other).contains("is owned by uid 65534"), "another user's");
    }
    assert_eq!(a.live("q"), 1, "no job taken by a refused bridge");
}
