//! Unique jobs through the command line, across a holder's kill -9, a daemon's kill -9 and
//! restart, a full key table and garbage written into it.

use std::time::Duration;

use xtcq_client::{Client, Error};
use xtcq_testkit::*;

use super::{daemon, QUEUE};

/// Claims one job, says its id, and holds it until killed.
pub(super) fn holder(c: &Client) -> Result<(), Error> {
    let thief = c.attach_thief(QUEUE)?;
    let job = thief.steal_wait(Some(Duration::from_secs(30)))?.expect("a job to hold");
    out(format_args!("held {}", job.id()));
    hold();
    job.ack()?;
    Ok(())
}

/// `xtcq push QUEUE --key KEY job` (and `extra` flags): exit status and stdout.
fn push_key(d: &Daemon, key: &str, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["push", QUEUE, "--key", key];
    args.extend_from_slice(extra);
    args.push("job");
    let o = d.run(&args);
    (code(&o), format!("{}{}", stdout(&o), stderr(&o)))
}

/// The id a `new ID` / `existing ID` line names.
fn id_of(out: &str, what: &str) -> String {
    let line = out.lines().find(|l| l.starts_with(what)).unwrap_or_else(|| panic!("no {what:?} in {out:?}"));
    line[what.len()..].trim().to_string()
}

/// Steals and acks one job with the command line.
fn steal_one(d: &Daemon) {
    ok(&d.run(&["steal", QUEUE, "--wait", "--timeout", "20s"]));
}

#[test]
fn unique_key_cli_refuses_or_answers_the_existing_job() {
    let d = daemon("64");
    let (st, out) = push_key(&d, "order-42", &[]);
    assert_eq!(st, 0, "{out}");
    let id = id_of(&out, "new ");
    let (st, out) = push_key(&d, "order-42", &[]);
    assert_eq!(st, 6, "refused: {out}");
    assert!(out.contains(&id), "the refusal names the job that holds the key: {out}");
    let (st, out) = push_key(&d, "order-42", &["--or-existing"]);
    assert_eq!((st, id_of(&out, "existing ")), (0, id.clone()), "{out}");
    let o = d.run(&["push", QUEUE, "--key", &"x".repeat(65), "job"]);
    assert!(code(&o) != 0 && stderr(&o).contains("64 bytes"), "{}", stderr(&o));
    steal_one(&d);
    let (st, out) = push_key(&d, "order-42", &[]);
    assert_eq!(st, 0, "the key is free once its job was acked: {out}");
    assert_ne!(id_of(&out, "new "), id);
}

#[test]
fn unique_key_stays_bound_while_a_killed_holders_job_is_recovered() {
    let d = daemon("64");
    let (_, out) = push_key(&d, "k", &[]);
    let id = id_of(&out, "new ");
    let mut h = spawn_role(super::roles_module(), "holder", &d.socket, &[]);
    assert_eq!(h.line(Duration::from_secs(30)), format!("held {id}"));
    assert_eq!(push_key(&d, "k", &[]).0, 6, "held: the key is bound");
    h.kill9();
    // The daemon gives the job back; it is queued again, the same job: the key holds.
    wait_until(Duration::from_secs(30), "the job given back", || d.stats()["records"]["queued"] == 1);
    let (st, out) = push_key(&d, "k", &["--or-existing"]);
    assert_eq!((st, id_of(&out, "existing ")), (0, id), "{out}");
    steal_one(&d);
    assert_eq!(push_key(&d, "k", &[]).0, 0, "free once the recovered job was acked");
}

#[test]
fn unique_keys_hold_across_a_daemon_kill9_and_restart() {
    let mut d = daemon("64");
    let (_, out) = push_key(&d, "k", &["--delay", "1h"]);
    let delayed = id_of(&out, "new ");
    let (_, out) = push_key(&d, "q", &[]);
    let queued = id_of(&out, "new ");
    d.kill();
    let mut flags: Vec<&str> = MEDIUM_SEGMENT.to_vec();
    flags.extend(["--keys", "64"]);
    d.restart_with(&flags, |_| {});
    let (st, out) = push_key(&d, "k", &["--or-existing"]);
    assert_eq!((st, id_of(&out, "existing ")), (0, delayed), "a delayed job's key holds: {out}");
    let (st, out) = push_key(&d, "q", &["--or-existing"]);
    assert_eq!((st, id_of(&out, "existing ")), (0, queued), "a queued job's key holds: {out}");
    steal_one(&d);
    assert_eq!(push_key(&d, "q", &[]).0, 0, "free once acked");
}

#[test]
fn unique_key_table_full_is_a_clear_error() {
    let d = daemon("4");
    for k in 0..4 {
        assert_eq!(push_key(&d, &format!("k{k}"), &[]).0, 0);
    }
    let (st, out) = push_key(&d, "k4", &[]);
    assert_eq!(st, 1, "{out}");
    assert!(out.contains("key table is full") && out.contains("--keys"), "{out}");
    steal_one(&d);
    assert_eq!(push_key(&d, "k4", &[]).0, 0, "an acked job's entry is reused");
}

#[test]
fn unique_key_garbage_in_the_table_neither_crashes_nor_blocks() {
    let d = daemon("64");
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("map the segment");
    let entries = seg.key_table().entries();
    let mut rng = Rng::new(7);
    // Every word of every entry: states, locks, jobs, queues, lengths, bytes.
    let words: Vec<u64> = (0..entries.len() * 16).map(|_| rng.next_u64()).collect();
    let start = entries.as_ptr() as usize - seg.base_addr();
    scribble::write_at(&d.segment, start as u64, &scribble::u64_bytes(&words));
    for k in 0..20 {
        let (st, out) = push_key(&d, &format!("g{k}"), &[]);
        assert_eq!(st, 0, "garbage is reusable: {out}");
    }
    assert_eq!(push_key(&d, "g3", &[]).0, 6, "still unique");
    assert!(d.run(&["ls"]).status.success(), "the daemon is alive");
}

#[test]
fn unique_key_kept_by_export_and_import() {
    let mut d = daemon("64");
    let (_, out) = push_key(&d, "kept", &[]);
    assert!(out.starts_with("new "), "{out}");
    ok(&d.run(&["push", QUEUE, "keyless"]));
    let dump = d.dir().join("keys.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    ok(&d.run(&["export", &dump_s]));
    let text = std::fs::read_to_string(&dump).expect("the dump");
    assert!(text.contains(r#""key":"kept""#), "the dump names the key: {text}");
    d.kill();
    std::fs::remove_file(&d.segment).expect("remove the segment");
    let mut flags: Vec<&str> = MEDIUM_SEGMENT.to_vec();
    flags.extend(["--keys", "64"]);
    d.restart_with(&flags, |_| {});
    ok(&d.run(&["import", &dump_s]));
    assert_eq!(push_key(&d, "kept", &[]).0, 6, "the imported job holds its key");
    assert_eq!(push_key(&d, "keyless", &[]).0, 0, "a keyless job holds none");
}
