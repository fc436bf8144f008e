//! Dumps across restarts, and where their files land, as an operator and a neighbour meet
//! them: a plain restart with `--export-on-stop F --import-on-start F` (the segment
//! survives), owners and grants across a reboot, who may read a dump, a directory planted
//! at its temporary name, a segment file truncated while it is read, and queue names in a
//! dump that no create would take. Each was broken before (docs/src/guarantees/data.md, "Export and
//! import"). Real xtcqd, real `xtcq`, real users where it matters.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::time::Duration;

use xtcq_testkit::*;

fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    SMALL_SEGMENT.iter().copied().chain(extra.iter().copied()).collect()
}

fn stop(d: &mut Daemon) {
    ok(&d.run(&["shutdown"]));
    let child = d.child.take().expect("running");
    let o = wait_bounded(child, Duration::from_secs(30), "xtcqd to stop");
    assert!(o.status.success(), "xtcqd failed to stop cleanly: {}", d.log_text());
}

/// Restarts `d` with `flags` and waits for its "ready" line: the socket takes connections
/// before `--import-on-start` has run, so a look at the files before it races the import.
fn restart(d: &mut Daemon, flags: &[&str]) {
    let before = d.log_text().matches("xtcqd ready").count();
    d.restart_with(flags, |_| {});
    wait_until(Duration::from_secs(10), "xtcqd ready", || {
        d.log_text().matches("xtcqd ready").count() > before
    });
}

fn with_suffix(p: &Path, s: &str) -> std::path::PathBuf {
    let mut o = p.as_os_str().to_owned();
    o.push(s);
    o.into()
}

/// A plain restart with the book's pair of flags (Upgrades): the segment survives, so the
/// dump of it must not be imported on top of it. Before, every queued job and dead letter was doubled,
/// and the job running across the stop was queued again while it still ran.
#[test]
fn a_restart_with_a_surviving_segment_does_not_import_its_own_dump() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("jobs.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    let both = flags(&["--export-on-stop", &dump_s, "--import-on-start", &dump_s]);
    let mut d = Daemon::builder().in_dir(dir).flags(both.clone()).start();
    ok(&d.run(&["create", "q", "--max-attempts", "1", "--flavor", "fifo"]));
    ok(&d.run(&["push", "q", "dies", "runs", "a", "b", "c"]));
    let c = d.client();
    let t = c.attach_thief("q").expect("attach");
    t.steal().expect("steal").expect("a job").fail("broken").expect("fail");
    let held = t.steal().expect("steal").expect("a job");
    assert_eq!(held.payload().expect("payload"), b"runs");

    stop(&mut d);
    assert!(dump.exists(), "--export-on-stop wrote no dump: {}", d.log_text());
    restart(&mut d, &both);

    assert!(
        !dump.exists() && with_suffix(&dump, ".superseded").exists(),
        "the dump was not set aside: {}",
        d.log_text()
    );
    let s = d.stats();
    assert!(d.log_text().contains("not imported"), "the log says why: {}", d.log_text());
    assert_eq!(s["records"]["dead"].as_u64(), Some(1), "dead letters doubled: {s}");
    // The held job is still held, once: acked by its holder, it is gone for good.
    held.ack().expect("the holder acks across the restart");
    let mut left = d.drain("q");
    left.sort();
    assert_eq!(left, ["a", "b", "c"], "each queued job once, the held one not again");
}

/// `xtcq import` of a dump of the segment the daemon serves now: refused, nothing doubled.
#[test]
fn importing_a_dump_into_the_segment_it_came_from_is_refused() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "one", "two"]));
    let f = d.dir().join("live.dump");
    ok(&d.run(&["export", f.to_str().expect("utf-8")]));
    let o = d.run(&["import", f.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 1, "imported into its own segment: {}", stderr(&o));
    assert!(stderr(&o).contains("twice"), "say why: {}", stderr(&o));
    assert!(f.exists(), "the refused file was renamed");
    assert_eq!(d.drain("q").len(), 2, "jobs doubled");
}

/// A dump holds every payload: only its writer may read it, whatever the umask, both from
/// `xtcq export` and from `--export-on-stop`. Before, 0644 under umask 022.
#[test]
fn dumps_are_readable_by_their_writer_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let on_stop = dir.path().join("stop.dump");
    let on_stop_s = on_stop.to_str().expect("utf-8").to_string();
    let mut d = Daemon::builder()
        .in_dir(dir)
        .flags(flags(&["--export-on-stop", &on_stop_s]))
        .command(|c| {
            // SAFETY: umask(2) in the child between fork and exec has no preconditions.
            unsafe {
                c.pre_exec(|| {
                    libc::umask(0o022);
                    Ok(())
                })
            };
        })
        .start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "secret"]));
    let live = d.dir().join("live.dump");
    let mut cmd = d.xtcq();
    cmd.args(["export", live.to_str().expect("utf-8")]);
    // SAFETY: as above.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        })
    };
    ok(&run_bounded(&mut cmd, None));
    stop(&mut d);
    for f in [&live, &on_stop] {
        let mode = std::fs::metadata(f).expect("dump").mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is mode {mode:o}", f.display());
    }
}

/// A directory planted at the temporary name the daemon's export would use (its pid, known
/// to all) made `--export-on-stop` fail and xtcqd exit 1. The name is random now.
#[test]
fn a_directory_at_the_old_temporary_name_does_not_stop_the_export() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("jobs.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    let mut d = Daemon::builder().in_dir(dir).flags(flags(&["--export-on-stop", &dump_s])).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "kept"]));
    std::fs::create_dir(with_suffix(&dump, &format!(".tmp.{}", d.pid()))).expect("plant a directory");
    stop(&mut d);
    let text = std::fs::read_to_string(&dump).expect("the dump was written");
    assert!(text.contains("kept"), "{text}");
}

/// A segment file truncated and restored in a loop while `xtcq export --segment` reads it:
/// each export either copies it or says why not; none dies of SIGBUS (before, most did).
#[test]
fn a_segment_file_truncated_while_exported_never_kills_the_reader() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let jobs: Vec<String> = (0..2000).map(|i| format!("job {i}")).collect();
    ok(&d.run_in(&["push", "q"], (jobs.join("\n") + "\n").as_bytes()));
    stop(&mut d);
    let seg = d.dir().join("copy.seg");
    std::fs::copy(&d.segment, &seg).expect("copy the segment");
    let whole = std::fs::read(&seg).expect("read it");
    let stop_flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cutter = {
        let (seg, stop_flag) = (seg.clone(), stop_flag.clone());
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new().write(true).open(&seg).expect("open");
            while !stop_flag.load(std::sync::atomic::Ordering::Relaxed) {
                f.set_len(8192).expect("truncate");
                std::thread::sleep(Duration::from_micros(300));
                std::os::unix::fs::FileExt::write_all_at(&f, &whole, 0).expect("restore");
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    let mut outcomes = Vec::new();
    for i in 0..12 {
        let out = d.dir().join(format!("x{i}.dump"));
        let o = d.run(&["export", "--segment", seg.to_str().expect("utf-8"), out.to_str().expect("utf-8")]);
        outcomes.push((o.status.code(), o.status.signal(), stderr(&o)));
    }
    stop_flag.store(true, std::sync::atomic::Ordering::Relaxed);
    cutter.join().expect("cutter");
    for (code, signal, err) in &outcomes {
        assert!(signal.is_none(), "xtcq export was killed by signal {signal:?}: {outcomes:?}");
        assert!(matches!(code, Some(0) | Some(1)), "exit {code:?}: {err}");
    }
}

/// Queue names that no create takes (a path, a right-to-left override, a zero-width space)
/// in a dump: refused by `--import-on-start` and `xtcq import` alike, naming the queue and
/// the rule, with no queue made. Before, `--import-on-start` created them.
#[test]
fn a_dump_cannot_create_queues_no_create_would() {
    for name in ["../../etc", "x/y", "a\u{202e}b", "a\u{200b}b"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("names.dump");
        let q = serde_json::to_string(name).expect("json");
        let lines = [
            r#"{"kind":"header","format":"xtcq-dump","version":2,"layout_version":6}"#.to_string(),
            format!(
                r#"{{"kind":"queue","name":{q},"flavor":"fifo","deques":1,"capacity":64,"max_attempts":0,"lease_ms":0}}"#
            ),
            format!(r#"{{"kind":"job","queue":{q},"payload":"p","attempts":0,"state":"queued"}}"#),
            r#"{"kind":"end","queues":1,"jobs":1}"#.to_string(),
        ];
        std::fs::write(&f, lines.join("\n") + "\n").expect("write dump");
        let sock = dir.path().join("s.sock");
        let seg = dir.path().join("seg");
        let (st, log) = run_daemon_once(&sock, &seg, &["--import-on-start", f.to_str().expect("utf-8")]);
        assert!(!st.success(), "{name:?}: xtcqd imported it: {log}");
        assert!(log.contains("letters, digits"), "{name:?}: the error gives the rule: {log}");
        assert!(f.exists(), "{name:?}: the refused dump was renamed");
        let d = Daemon::start();
        let o = d.run(&["import", f.to_str().expect("utf-8")]);
        assert_eq!(code(&o), 1, "{name:?}: {}", stderr(&o));
        assert_eq!(ok(&d.run(&["ls", "--json"])).trim(), "[]", "{name:?}: a queue was made");
    }
}

/// Owners, grants and retry backoff across a reboot (`--export-on-stop`, a new segment,
/// `--import-on-start`): before, every queue became the daemon's and its owner was refused
/// on it.
#[test]
fn owners_grants_and_backoff_survive_a_reboot() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqo{tag}");
    let alice = SystemUser::create(&format!("xtcqoa{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqob{tag}"), &group);
    let carol = SystemUser::create(&format!("xtcqoc{tag}"), &group);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dump = dir.path().join("reboot.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    let users =
        ["--group", &group, "--allow-uid", &alice.user, "--allow-uid", &bob.user, "--allow-uid", &carol.user];
    let mut d =
        Daemon::builder().in_dir(dir).flags(flags(&users)).flags(["--export-on-stop", &dump_s]).start();
    let as_user = |d: &Daemon, u: &SystemUser, args: &[&str]| {
        std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
        let mut c = d.xtcq();
        c.args(args).uid(u.id("-u")).gid(u.id("-g"));
        run_bounded(&mut c, None)
    };
    ok(&as_user(&d, &alice, &["create", "aq", "--allow-uid", &bob.user, "--retry-backoff", "2s"]));
    ok(&as_user(&d, &alice, &["push", "aq", "before"]));
    stop(&mut d);
    std::fs::remove_file(&d.segment).expect("a reboot empties /dev/shm");
    let mut again = flags(&users);
    again.extend(["--import-on-start", &dump_s]);
    restart(&mut d, &again);

    ok(&as_user(&d, &alice, &["push", "aq", "after"]));
    ok(&as_user(&d, &bob, &["push", "aq", "by bob"]));
    let o = as_user(&d, &carol, &["push", "aq", "by carol"]);
    assert_eq!(code(&o), 4, "carol was never allowed on aq: {}", stderr(&o));
    let o = as_user(&d, &bob, &["delete", "aq", "--force"]);
    assert_ne!(code(&o), 0, "bob may use aq, not delete it: {}", stderr(&o));
    let s = d.stats();
    let q = s["queues"].as_array().expect("queues").iter().find(|q| q["info"]["name"] == "aq").cloned();
    let backoff = q.expect("aq")["info"]["retry_backoff"].clone();
    assert!(!backoff.is_null(), "the retry backoff was lost: {s}");
    let mut got = d.drain("aq");
    got.sort();
    assert_eq!(got, ["after", "before", "by bob"]);
}

/// Rewrites the dump at `f` as the build before segment names wrote it: version 2, no
/// segment in the header, no owners, grants or backoff.
fn as_version_2(f: &Path) {
    let text = std::fs::read_to_string(f).expect("the dump");
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            let o = v.as_object_mut().expect("an object");
            if o["kind"] == "header" {
                o.remove("segment");
                o.insert("version".into(), 2.into());
            }
            for k in ["owner", "allow_uids", "allow_gids", "retry_backoff"] {
                o.remove(k);
            }
            v.to_string()
        })
        .collect();
    std::fs::write(f, lines.join("\n") + "\n").expect("rewrite the dump");
}

/// The upgrade the book's pair of flags (Upgrades) is for: the build before this one stopped
/// with `--export-on-stop` (a version 2 dump, which names no segment), this build starts on
/// the same, surviving segment with `--import-on-start`. Before, both copies were kept: every
/// job doubled. A dump written after the adopted segment was made may hold its jobs: it is
/// set aside. After a reboot (a segment made after the dump) it is imported as before.
#[test]
fn an_older_dump_on_a_plain_restart_does_not_double_the_jobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("jobs.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    let both = flags(&["--export-on-stop", &dump_s, "--import-on-start", &dump_s]);
    let mut d = Daemon::builder().in_dir(dir).flags(both.clone()).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "one", "two"]));
    stop(&mut d);
    as_version_2(&dump);
    restart(&mut d, &both);
    let s = d.stats();
    assert_eq!(s["records"]["queued"].as_u64(), Some(2), "jobs doubled: {s}\n{}", d.log_text());
    let kept = with_suffix(&dump, ".superseded");
    assert!(kept.exists(), "the dump was not kept aside: {}", d.log_text());

    // A reboot: the dump, older than the new segment, is imported.
    stop(&mut d);
    std::fs::rename(&kept, &dump).expect("put the dump back");
    as_version_2(&dump);
    std::fs::remove_file(&d.segment).expect("a reboot empties /dev/shm");
    restart(&mut d, &both);
    let mut got = d.drain("q");
    got.sort();
    assert_eq!(got, ["one", "two"], "{}", d.log_text());
}

/// `--import-on-start` naming the daemon's own segment file (by a typo, or another spelling
/// of the path): before, the daemon renamed its own segment `.imported` (or `.superseded`)
/// at every start, lost it at once and refused all work; the next start made a new, empty
/// one. Now the start is refused, naming both flags, and the segment keeps its name and jobs.
#[test]
fn import_on_start_of_the_daemons_own_segment_is_refused() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "kept"]));
    stop(&mut d);
    // Another spelling of the same file.
    let name = d.segment.file_name().expect("a name").to_owned();
    let other = d.segment.parent().expect("a dir").join(".").join(name);
    let mut f = SMALL_SEGMENT.to_vec();
    f.extend(["--import-on-start", other.to_str().expect("utf-8")]);
    let (st, log) = run_daemon_once(&d.socket, &d.segment, &f);
    assert!(!st.success(), "xtcqd started: {log}");
    assert!(log.contains("--import-on-start") && log.contains("--segment"), "name both flags: {log}");
    assert!(d.segment.exists(), "the segment was renamed: {log}");
    restart(&mut d, SMALL_SEGMENT);
    assert_eq!(d.drain("q"), ["kept"], "{}", d.log_text());

    // A fresh segment too (the path given before the daemon made it).
    let dir = tempfile::tempdir().expect("tempdir");
    let (sock, seg) = (dir.path().join("s.sock"), dir.path().join("seg"));
    let mut f = SMALL_SEGMENT.to_vec();
    f.extend(["--import-on-start", seg.to_str().expect("utf-8")]);
    let (st, log) = run_daemon_once(&sock, &seg, &f);
    assert!(!st.success(), "xtcqd started: {log}");
    assert!(!with_suffix(&seg, ".imported").exists(), "the new segment was renamed: {log}");
}

/// A segment file with a long tail (a sparse file: no disk, any length) is copied up to the
/// length its header gives, not whole; a file that is no segment is refused before any of
/// it is copied. Before, every byte went into memory first: a 2 GiB sparse file of zeros
/// took 2 GiB of shared memory before "not an xtcq segment", so a 1 TB one exhausts the
/// host. Here a file-size limit of 64 MiB makes a copy past it fail at once (SIGXFSZ).
#[test]
fn a_sparse_segment_file_is_not_copied_whole_into_memory() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "in the tail's segment"]));
    stop(&mut d);
    let long = d.dir().join("long.seg");
    std::fs::copy(&d.segment, &long).expect("copy the segment");
    let f = std::fs::OpenOptions::new().write(true).open(&long).expect("open");
    f.set_len(1 << 30).expect("a 1 GiB sparse tail");
    let zeros = d.dir().join("zeros.seg");
    std::fs::File::create(&zeros).expect("create").set_len(1 << 30).expect("1 GiB of nothing");
    let export = |from: &Path, to: &str| {
        let mut cmd = d.xtcq();
        cmd.args(["export", "--segment", from.to_str().expect("utf-8"), to]);
        // SAFETY: setrlimit(2) in the child between fork and exec has no preconditions.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: 64 << 20, rlim_max: 64 << 20 };
                libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
                Ok(())
            })
        };
        run_bounded(&mut cmd, None)
    };
    let out = d.dir().join("long.dump");
    let o = export(&long, out.to_str().expect("utf-8"));
    assert_eq!(o.status.signal(), None, "the copy went past its segment's length: {}", stderr(&o));
    ok(&o);
    assert!(std::fs::read_to_string(&out).expect("dump").contains("in the tail's segment"));
    let o = export(&zeros, d.dir().join("zeros.dump").to_str().expect("utf-8"));
    assert_eq!(o.status.signal(), None, "a file of zeros was copied whole: {}", stderr(&o));
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("not an xtcq segment"), "{}", stderr(&o));
}

/// A retry backoff no create would take, in a dump's queue line (a zero base, a maximum
/// below the base): refused before anything is made, naming the line and the queue. Before,
/// the queues ahead of it were created and the file left `.importing`, with a message about
/// a `--retry-backoff` flag and no line.
#[test]
fn a_bad_retry_backoff_in_a_dump_is_refused_naming_its_line() {
    let mut d = Daemon::start();
    stop(&mut d);
    for backoff in
        [r#"{"base_ms":0,"max_ms":0,"jitter":"None"}"#, r#"{"base_ms":5,"max_ms":1,"jitter":"Full"}"#]
    {
        let f = d.dir().join("backoff.dump");
        let lines = [
            r#"{"kind":"header","format":"xtcq-dump","version":3,"layout_version":6}"#.to_string(),
            r#"{"kind":"queue","name":"first","flavor":"fifo","deques":1,"capacity":64,"max_attempts":0,"lease_ms":0,"owner":0}"#.to_string(),
            format!(
                r#"{{"kind":"queue","name":"bad","flavor":"fifo","deques":1,"capacity":64,"max_attempts":0,"lease_ms":0,"owner":0,"retry_backoff":{backoff}}}"#
            ),
            r#"{"kind":"job","queue":"first","payload":"p","attempts":0,"state":"queued"}"#.to_string(),
            r#"{"kind":"end","queues":2,"jobs":1}"#.to_string(),
        ];
        std::fs::write(&f, lines.join("\n") + "\n").expect("write dump");
        let mut fl = SMALL_SEGMENT.to_vec();
        fl.extend(["--import-on-start", f.to_str().expect("utf-8")]);
        let (st, log) = run_daemon_once(&d.socket, &d.segment, &fl);
        assert!(!st.success(), "{backoff}: imported: {log}");
        assert!(log.contains("line 3") && log.contains("bad"), "{backoff}: name the line and queue: {log}");
        assert!(
            f.exists() && !with_suffix(&f, ".importing").exists(),
            "{backoff}: the file was claimed: {log}"
        );
        restart(&mut d, SMALL_SEGMENT);
        assert_eq!(ok(&d.run(&["ls", "--json"])).trim(), "[]", "{backoff}: a queue was made");
        stop(&mut d);
    }
}

/// A directory at `FILE.superseded` (the name a restart sets a dump of its own segment
/// aside under, known to all): before, the start failed ("Is a directory"), left
/// `FILE.importing`, and every later start refused. Setting aside is not importing: the
/// start goes on, the dump keeps its name, and nothing is doubled.
#[test]
fn a_directory_at_the_superseded_name_does_not_stop_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("jobs.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    let both = flags(&["--export-on-stop", &dump_s, "--import-on-start", &dump_s]);
    let mut d = Daemon::builder().in_dir(dir).flags(both.clone()).start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "once"]));
    stop(&mut d);
    std::fs::create_dir(with_suffix(&dump, ".superseded")).expect("plant a directory");
    restart(&mut d, &both);
    assert!(!with_suffix(&dump, ".importing").exists(), "left claimed: {}", d.log_text());
    assert_eq!(d.drain("q"), ["once"], "{}", d.log_text());
    stop(&mut d);
    restart(&mut d, &both);
}
