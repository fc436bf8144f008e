//! Red-team pass 5 on `xtcq import` and `--import-on-start`: dumps an import can know it
//! cannot take, yet took part of before. Each refused dump must keep its name, create no
//! queue and queue no job (docs/src/guarantees/data.md, "Export and import"). Real xtcqd, real `xtcq`.

use std::path::Path;
use xtcq_testkit::*;

fn header() -> String {
    r#"{"kind":"header","format":"xtcq-dump","version":2,"layout_version":6}"#.to_string()
}

fn queue_line(name: &str, deques: u32, capacity: u32, max_records: u32) -> String {
    format!(
        r#"{{"kind":"queue","name":"{name}","flavor":"fifo","deques":{deques},"capacity":{capacity},"max_attempts":0,"lease_ms":0,"max_records":{max_records},"max_dead":0}}"#
    )
}

fn job_line(queue: &str, i: usize) -> String {
    format!(r#"{{"kind":"job","queue":"{queue}","payload":"job-{i}","attempts":0,"state":"queued"}}"#)
}

/// A version-2 dump of `queues` (each a queue line), `jobs` jobs in the first queue `first`.
fn dump(path: &Path, first: &str, queues: &[String], jobs: usize) {
    let mut lines = vec![header()];
    lines.extend(queues.iter().cloned());
    lines.extend((0..jobs).map(|i| job_line(first, i)));
    lines.push(format!(r#"{{"kind":"end","queues":{},"jobs":{jobs}}}"#, queues.len()));
    std::fs::write(path, lines.join("\n") + "\n").expect("write dump");
}

/// Imports `f` and expects a refusal that wrote nothing: exit 1, `f` keeps its name, none of
/// `queues` exists, no job queued. Returns stderr.
fn refused(d: &Daemon, f: &Path, queues: &[&str]) -> String {
    let o = d.run(&["import", f.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 1, "stdout: {} stderr: {}", stdout(&o), stderr(&o));
    assert!(f.exists(), "{} was renamed though the import was refused: {}", f.display(), stderr(&o));
    let ls = ok(&d.run(&["ls"]));
    for q in queues {
        assert!(!ls.contains(q), "a refused import created queue {q}: {ls}\nstderr: {}", stderr(&o));
    }
    assert_eq!(d.stats()["records"]["queued"].as_u64(), Some(0), "a refused import queued jobs");
    stderr(&o)
}

/// The second queue line cannot be created (0 deques); the first must not be created either.
#[test]
fn a_dump_with_a_bad_queue_line_creates_no_queue() {
    let d = Daemon::start();
    let f = d.dir().join("badq.dump");
    dump(&f, "good5", &[queue_line("good5", 1, 64, 0), queue_line("bad5", 0, 64, 0)], 3);
    let e = refused(&d, &f, &["good5", "bad5"]);
    assert!(e.contains("bad5") && e.contains("deques"), "the error names the queue and what is wrong: {e}");
}

/// A queue line whose name the segment refuses (whitespace) is caught before anything.
#[test]
fn a_dump_with_a_bad_queue_name_creates_no_queue() {
    let d = Daemon::start();
    let f = d.dir().join("badname.dump");
    dump(&f, "fine5", &[queue_line("fine5", 1, 64, 0), queue_line("has space", 1, 64, 0)], 2);
    let e = refused(&d, &f, &["fine5", "has space"]);
    assert!(e.contains("has space"), "the error names the queue: {e}");
}

/// A queue whose record quota is more than the segment's records: before, the queue was
/// created, its limits refused, and the file left `.importing`.
#[test]
fn a_dump_with_a_quota_over_the_segment_creates_nothing() {
    let d = Daemon::builder().flags(["--records", "64"]).start();
    let f = d.dir().join("quota.dump");
    dump(&f, "quota5", &[queue_line("quota5", 1, 64, 1000)], 2);
    let e = refused(&d, &f, &["quota5"]);
    assert!(e.contains("quota5") && e.contains("1000"), "the error names the queue and its quota: {e}");
}

/// More new queues than free queue-table entries: before, the first ones were created.
#[test]
fn more_new_queues_than_the_queue_table_holds_creates_none() {
    let d = Daemon::builder().flags(["--queues", "2"]).start();
    let f = d.dir().join("table.dump");
    let qs: Vec<String> = ["t5a", "t5b", "t5c"].iter().map(|q| queue_line(q, 1, 64, 0)).collect();
    dump(&f, "t5a", &qs, 1);
    let e = refused(&d, &f, &["t5a", "t5b", "t5c"]);
    assert!(e.contains("--queues"), "the error names the flag to raise: {e}");
}

/// `--import-on-start` checks queue lines the same way: the start fails and no queue is left
/// in the segment (which the next start, without the dump, adopts).
#[test]
fn import_on_start_with_a_bad_queue_line_leaves_no_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("start.dump");
    dump(&f, "s5good", &[queue_line("s5good", 1, 64, 0), queue_line("s5bad", 0, 64, 0)], 2);
    let mut flags: Vec<&str> = SMALL_SEGMENT.to_vec();
    flags.extend(["--import-on-start", f.to_str().expect("utf-8")]);
    let (status, err) = run_daemon_once(&dir.path().join("xtcqd.sock"), &dir.path().join("segment"), &flags);
    assert!(!status.success(), "xtcqd started with a dump it cannot take: {err}");
    assert!(err.contains("s5bad"), "the error names the queue: {err}");
    assert!(f.exists(), "start.dump was renamed though nothing was imported");
    let d = Daemon::builder().at(dir.path()).start();
    let ls = ok(&d.run(&["ls"]));
    assert!(!ls.contains("s5good"), "a refused import left queue s5good in the segment: {ls}");
}

/// A 4 GiB file of zeros (sparse: no disk) with no newline, as a truncated or corrupt copy
/// may be: the reader must refuse it without holding the whole "line". Before, `lines()`
/// grew one string until memory ran out (here, under a 2 GiB address-space limit, the CLI
/// aborted with "memory allocation failed"; without one, the host swapped).
#[test]
fn a_file_with_a_gigabyte_line_is_refused_without_reading_it_whole() {
    use std::os::unix::process::CommandExt;
    let d = Daemon::start();
    let f = d.dir().join("zeros.dump");
    std::fs::File::create(&f).expect("create").set_len(4 << 30).expect("sparse 4 GiB");
    let mut cmd = d.xtcq();
    cmd.args(["import", f.to_str().expect("utf-8")]);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 2 << 30, rlim_max: 2 << 30 };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = run_bounded(&mut cmd, None);
    assert_eq!(code(&o), 1, "stdout: {} stderr: {}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("line 1") && stderr(&o).contains("longer than"), "{}", stderr(&o));
    assert!(f.exists(), "the refused file keeps its name");
}

/// Two `xtcq import` of one file at once: one imports every job, once; the other is refused
/// saying another import has (or had) the file, whichever step it was at when the first
/// renamed it; before, one between its check and its rename said "cannot rename ...: No such
/// file or directory".
#[test]
fn two_imports_of_one_file_at_once_import_it_once() {
    let d = Daemon::builder().flags(["--records", "1024", "--overflow-capacity", "1024"]).start();
    for round in 0..4 {
        let q = format!("twice{round}");
        let f = d.dir().join(format!("twice{round}.dump"));
        dump(&f, &q, &[queue_line(&q, 1, 64, 0)], 200);
        let spawn = || {
            let mut c = d.xtcq();
            c.args(["import", f.to_str().expect("utf-8")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().expect("xtcq import")
        };
        let (a, b) = (spawn(), spawn());
        let limit = std::time::Duration::from_secs(30);
        let outs = [wait_bounded(a, limit, "xtcq import"), wait_bounded(b, limit, "xtcq import")];
        let good = outs.iter().filter(|o| code(o) == 0).count();
        assert_eq!(good, 1, "exactly one import succeeds: {:?}", outs.iter().map(stderr).collect::<Vec<_>>());
        let other = outs.iter().find(|o| code(o) != 0).expect("the refused one");
        let e = stderr(other);
        assert!(
            e.contains("another import") || e.contains("was imported already"),
            "the refusal says another import has (or had) the file: {e}"
        );
        let got = d.drain(&q);
        assert_eq!(got.len(), 200, "every job once");
    }
}

/// Another user's `xtcq import` of a dump with a job for a queue that user may not use
/// (alice's, not shared): before, the check passed (the queue exists), the file became
/// `.importing`, bob's own queue was created and its jobs written, and then the attach to
/// alice's queue was refused. It must be refused before anything is written.
#[test]
fn a_dump_with_a_job_for_a_queue_the_user_may_not_use_writes_nothing() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqi{tag}");
    let alice = SystemUser::create(&format!("xtcqia{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqib{tag}"), &group);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut flags: Vec<&str> = vec!["--group", &group, "--allow-uid", &alice.user, "--allow-uid", &bob.user];
    flags.extend(["--records", "64"]);
    let d = Daemon::builder().in_dir(dir).flags(flags).start();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    let as_user = |u: &SystemUser, args: &[&str]| {
        let mut c = d.xtcq();
        c.args(args).uid(u.id("-u")).gid(u.id("-g"));
        run_bounded(&mut c, None)
    };
    ok(&as_user(&alice, &["create", "alices5"]));
    // bob's own directory, so that bob may rename his dump.
    let bobs = d.dir().join("bob");
    std::fs::create_dir(&bobs).expect("mkdir");
    std::os::unix::fs::chown(&bobs, Some(bob.id("-u")), Some(bob.id("-g"))).expect("chown");
    let f = bobs.join("mixed.dump");
    let mut lines = vec![header(), queue_line("bobs5", 1, 64, 0)];
    lines.extend((0..3).map(|i| job_line("bobs5", i)));
    lines.push(job_line("alices5", 3));
    lines.push(r#"{"kind":"end","queues":1,"jobs":4}"#.to_string());
    std::fs::write(&f, lines.join("\n") + "\n").expect("write dump");
    std::os::unix::fs::chown(&f, Some(bob.id("-u")), Some(bob.id("-g"))).expect("chown");
    let o = as_user(&bob, &["import", f.to_str().expect("utf-8")]);
    assert_ne!(code(&o), 0, "bob imported into alice's queue: {}", stderr(&o));
    assert!(f.exists(), "the refused file was renamed: {}", stderr(&o));
    assert!(stderr(&o).contains("alices5"), "the error names the queue: {}", stderr(&o));
    let ls = ok(&d.run(&["ls"]));
    assert!(!ls.contains("bobs5"), "a refused import created bob's queue: {ls}");
    assert_eq!(d.stats()["records"]["queued"].as_u64(), Some(0), "a refused import queued jobs");
}

/// More payloads of one size than the segment has free blocks to hold them: knowable from
/// the stats (each class's free blocks), yet before, 4 of 6 jobs were written, the fifth
/// failed and the file stayed `.importing`.
#[test]
fn more_block_payloads_than_free_blocks_writes_nothing() {
    let d = Daemon::builder().flags(["--payload-bytes", "1024", "--payload-blocks", "1KiB=4"]).start();
    let f = d.dir().join("blocks.dump");
    let big = "b".repeat(500);
    let mut lines = vec![header(), queue_line("blk5", 1, 64, 0)];
    lines.extend((0..6).map(|i| {
        format!(r#"{{"kind":"job","queue":"blk5","payload":"{i}{big}","attempts":0,"state":"queued"}}"#)
    }));
    lines.push(r#"{"kind":"end","queues":1,"jobs":6}"#.to_string());
    std::fs::write(&f, lines.join("\n") + "\n").expect("write dump");
    let e = refused(&d, &f, &["blk5"]);
    assert!(e.contains("--payload-blocks"), "the error names the flag: {e}");
}

/// Five dead letters for a queue whose dump line caps them at 2: imported, the daemon's next
/// scan would drop the 3 oldest (counted only in the queue's `dead_dropped`) while the import
/// said "5 job(s) imported". The import refuses them whole instead, saying why.
#[test]
fn dead_letters_past_max_dead_are_refused_not_imported_then_dropped() {
    let d = Daemon::start();
    let f = d.dir().join("dead.dump");
    let mut lines = vec![
        header(),
        r#"{"kind":"queue","name":"dead5","flavor":"fifo","deques":1,"capacity":64,"max_attempts":0,"lease_ms":0,"max_records":0,"max_dead":2}"#.to_string(),
    ];
    lines.extend((0..5).map(|i| {
        format!(r#"{{"kind":"job","queue":"dead5","payload":"d{i}","attempts":3,"state":"dead","last_error":"e"}}"#)
    }));
    lines.push(r#"{"kind":"end","queues":1,"jobs":5}"#.to_string());
    std::fs::write(&f, lines.join("\n") + "\n").expect("write dump");
    let e = refused(&d, &f, &["dead5"]);
    assert!(e.contains("5 dead letters") && e.contains("at most 2"), "the error counts: {e}");
}
