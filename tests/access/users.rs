//! Limits and permissions across users, through the `xtcq` command line: one user cannot
//! take every connection or process slot of a daemon others use (per-uid limits, and
//! refusals are exit 4 with the flag that raises the limit), and a queue is its creator's
//! unless shared with `create --allow-uid / --allow-gid` (checked by the daemon, kept
//! across a restart). Cross-user tests create their own users as root and are skipped
//! otherwise.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use xtcq_testkit::*;

/// `hold`: this test binary run again as a client that connects, pings and then holds its
/// connection (no process slot) until its stdin closes.
#[test]
fn child_main() {
    let Ok(role) = std::env::var("XTCQ_TEST_ROLE") else { return };
    assert_eq!(role, "hold");
    let socket = std::env::var("XTCQ_TEST_SOCKET").expect("socket");
    let code = match xtcq_client::Client::connect(Some(std::path::Path::new(&socket))).and_then(|c| {
        c.ping()?;
        Ok(c)
    }) {
        Ok(c) => {
            println!("@@ ready");
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            drop(c);
            0
        }
        Err(e) => {
            println!("@@ error {e}");
            1
        }
    };
    std::process::exit(code);
}

/// Starts the `hold` role as `u` and waits for its first line.
fn hold_as(d: &Daemon, u: &SystemUser) -> (Child, String) {
    let mut c = Command::new(std::env::current_exe().expect("test exe"));
    c.args(["--exact", &test_name(module_path!(), "child_main"), "--nocapture", "--test-threads", "1"])
        .env("XTCQ_TEST_ROLE", "hold")
        .env("XTCQ_TEST_SOCKET", &d.socket)
        .uid(u.id("-u"))
        .gid(u.id("-g"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("spawn hold");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(at) = line.find("@@ ") {
                let _ = tx.send(line[at + 3..].to_string());
            }
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("a line from the hold role");
    (child, line)
}

fn as_user(d: &Daemon, u: &SystemUser, args: &[&str]) -> Command {
    let mut c = d.xtcq();
    c.args(args).uid(u.id("-u")).gid(u.id("-g"));
    c
}

/// A daemon in a fresh directory others may enter, its socket open to every user (so the
/// daemon's own checks are what refuse), and its segment shared with `group`.
fn shared_daemon(group: &str, extra: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    start_shared(dir, group, extra)
}

fn start_shared(dir: tempfile::TempDir, group: &str, extra: &[&str]) -> Daemon {
    let d = Daemon::builder().in_dir(dir).flags(shared_flags(group, extra)).start();
    open_socket(&d);
    d
}

/// The sizes, `--group GROUP` and `extra`.
fn shared_flags<'a>(group: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--group", group]);
    flags.extend(extra);
    flags
}

/// Lets every user connect, so that the daemon's own checks are what refuses them.
fn open_socket(d: &Daemon) {
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
}

#[track_caller]
fn refused(o: &std::process::Output, want: &[&str]) {
    assert_eq!(code(o), 4, "expected exit 4; stdout: {} stderr: {}", stdout(o), stderr(o));
    for w in want {
        assert!(stderr(o).contains(w), "stderr lacks {w:?}: {}", stderr(o));
    }
}

#[test]
fn the_connection_limit_is_exit_4_naming_the_flag() {
    let d = Daemon::builder()
        .in_dir(tempfile::tempdir().expect("tempdir"))
        .flags([SMALL_SEGMENT, &["--max-connections", "1"]].concat())
        .start();
    // The readiness probe's connection may still count for a moment.
    let created = (0..500).any(|_| {
        let done = d.run(&["create", "q"]).status.success();
        if !done {
            std::thread::sleep(Duration::from_millis(20));
        }
        done
    });
    assert!(created, "create never got the one connection: {}", d.log_text());
    // A consumer that waits holds the only connection, once it is attached (the log says
    // so); until then, nothing else connects. (It may itself be refused while the readiness
    // probe's connection still counts: then it is started again.)
    let mut waiter = None;
    for _ in 0..50 {
        let mut w = d
            .xtcq()
            .args(["steal", "q", "--wait", "--timeout", "60s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn steal");
        let attached = (0..1000).find_map(|_| {
            let me = format!("pid={} ", w.id());
            if d.log_text().lines().any(|l| l.contains("process registered") && l.contains(&me)) {
                return Some(true);
            }
            if let Ok(Some(_)) = w.try_wait() {
                return Some(false);
            }
            std::thread::sleep(Duration::from_millis(10));
            None
        });
        if attached == Some(true) {
            waiter = Some(w);
            break;
        }
        let _ = w.kill();
        let _ = w.wait();
    }
    let waiter = waiter.expect("the waiting consumer never attached");
    let o = d.run(&["ls"]);
    refused(&o, &["--max-connections 1", "restart xtcqd with a higher --max-connections"]);
    let _ = Command::new("kill").arg(waiter.id().to_string()).status();
    let _ = wait_bounded(waiter, Duration::from_secs(30), "steal");
}

#[test]
fn one_user_cannot_take_every_connection_or_process_slot() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcql{tag}");
    let alice = SystemUser::create(&format!("xtcqla{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqlb{tag}"), &format!("xtcqm{tag}"));
    let flags = [
        "--allow-uid",
        &alice.user,
        "--allow-uid",
        &bob.user,
        "--max-connections-per-uid",
        "2",
        "--process-slots-per-uid",
        "1",
    ];
    let d = shared_daemon(&group, &flags);
    ok(&d.run(&["create", "q", "--allow-uid", &alice.user]));

    // alice's first consumer takes her one process slot and one of her two connections.
    let waiter = as_user(&d, &alice, &["steal", "q", "--wait", "--timeout", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn steal");
    // It holds the slot before anyone else asks: otherwise a try that got there first takes
    // it, the first consumer is the one refused, and no try after it ever is.
    let pid = waiter.id();
    wait_until(Duration::from_secs(30), "alice's first consumer registered", || {
        d.stats()["processes"].as_array().is_some_and(|ps| ps.iter().any(|p| p["pid"] == pid))
    });
    let mut second = None;
    let mut last = String::new();
    for _ in 0..500 {
        let o = run_bounded(&mut as_user(&d, &alice, &["steal", "q"]), None);
        if code(&o) == 4 {
            second = Some(o);
            break;
        }
        last = format!("exit {}: {}", code(&o), stderr(&o));
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(o) = second else {
        let _ = std::process::Command::new("kill").arg(waiter.id().to_string()).status();
        let w = wait_bounded(waiter, Duration::from_secs(10), "alice's steal");
        panic!(
            "a second consumer of alice's was never refused a slot; the last try: {last}\nthe first consumer: \
             exit {}: {}\n{}",
            code(&w),
            stderr(&w),
            d.log_text()
        );
    };
    refused(
        &o,
        &[&format!("({})", alice.user), "--process-slots-per-uid 1", "higher --process-slots-per-uid"],
    );

    // A connection that holds no slot still counts: with it, alice has two; a third is
    // refused, and the message names the limit.
    let (mut holder, line) = hold_as(&d, &alice);
    assert_eq!(line, "ready");
    let o = run_bounded(&mut as_user(&d, &alice, &["ls"]), None);
    refused(&o, &["--max-connections-per-uid 2", "higher --max-connections-per-uid"]);

    // Others are not locked out: bob, and root (the daemon's own uid, not limited).
    ok(&run_bounded(&mut as_user(&d, &bob, &["ls"]), None));
    ok(&d.run(&["ls"]));
    ok(&d.run_in(&["push", "q"], b"done\n"));
    let got = wait_bounded(waiter, Duration::from_secs(60), "alice's steal");
    assert_eq!(stdout(&got), "done\n", "{}", stderr(&got));
    drop(holder.stdin.take());
    let _ = holder.wait();
}

#[test]
fn a_queue_is_its_creators_unless_shared_and_stays_so_after_a_restart() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqp{tag}");
    // Both in the group the segment is shared with; carol's group is another one.
    let alice = SystemUser::create(&format!("xtcqpa{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqpb{tag}"), &group);
    // alice creates three of the four queues: more than her default share of them.
    let users = ["--allow-uid", &alice.user, "--allow-uid", &bob.user, "--queues-per-uid", "4"];
    let mut d = shared_daemon(&group, &users);
    let alice_do = |d: &Daemon, args: &[&str]| run_bounded(&mut as_user(d, &alice, args), None);
    ok(&alice_do(&d, &["create", "private"]));
    ok(&alice_do(&d, &["create", "shared", "--allow-uid", &bob.user]));
    ok(&alice_do(&d, &["create", "team", "--allow-gid", &group]));
    let bob_push = |d: &Daemon, q: &str| run_bounded(&mut as_user(d, &bob, &["push", q]), Some(b"x\n"));

    let check = |d: &Daemon| {
        refused(
            &bob_push(d, "private"),
            &[&format!("({}) may not use (attach to) queue private", bob.user), "--allow-uid"],
        );
        ok(&bob_push(d, "shared"));
        ok(&bob_push(d, "team"));
        // Sharing lets bob use a queue, not delete it.
        refused(
            &run_bounded(&mut as_user(d, &bob, &["delete", "shared", "--force"]), None),
            &[&format!("only its owner, uid {} ({})", alice.id("-u"), alice.user)],
        );
        // Root (here also the daemon's uid) may use any queue.
        ok(&d.run_in(&["push", "private"], b"root\n"));
    };
    check(&d);

    // The permissions are the daemon's own, kept across a restart.
    let mut child = d.child.take().expect("daemon");
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    child.wait().expect("reap");
    d.restart_with(&shared_flags(&group, &users), |_| {});
    open_socket(&d);
    check(&d);
    ok(&alice_do(&d, &["delete", "shared", "--force"]));
}

/// Dead letters are edited by the daemon, which refuses a user who may not use the queue
/// (listing, re-queuing and purging alike) and leaves the dead letter where it was.
#[test]
fn a_user_not_allowed_on_a_queue_is_refused_its_dead_letters() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqd{tag}");
    let alice = SystemUser::create(&format!("xtcqda{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqdb{tag}"), &group);
    let d = shared_daemon(&group, &["--allow-uid", &alice.user, "--allow-uid", &bob.user]);
    ok(&run_bounded(&mut as_user(&d, &alice, &["create", "private", "--max-attempts", "1"]), None));
    ok(&d.run_in(&["push", "private"], b"x\n"));
    // Root may use any queue: it runs the job, which fails into a dead letter.
    let _ = d.run(&["work", "private", "--max-jobs", "1", "--", "false"]);
    let listed = ok(&d.run(&["dead", "private"]));
    let id =
        listed.lines().nth(1).and_then(|l| l.split_whitespace().next()).expect("a dead letter").to_string();
    let not_bob = format!("({}) may not use (attach to) queue private", bob.user);
    for args in [
        vec!["dead", "private", "--requeue"],
        vec!["dead", "private", "--requeue", &id],
        vec!["dead", "private", "--purge"],
        vec!["dead", "private"],
    ] {
        refused(&run_bounded(&mut as_user(&d, &bob, &args), None), &[&not_bob]);
    }
    assert_eq!(ok(&d.run(&["dead", "private"])), listed, "bob changed nothing");
    ok(&run_bounded(&mut as_user(&d, &alice, &["dead", "private", "--requeue"]), None));
    assert_eq!(code(&d.run(&["dead", "private"])), 3, "its owner may");
}

#[test]
fn one_users_flood_of_bare_connections_does_not_lock_others_out() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqf{tag}");
    let alice = SystemUser::create(&format!("xtcqfa{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqfb{tag}"), &format!("xtcqn{tag}"));
    let flags = [
        "--allow-uid",
        &alice.user,
        "--allow-uid",
        &bob.user,
        "--max-connections",
        "16",
        "--max-connections-per-uid",
        "4",
    ];
    let d = shared_daemon(&group, &flags);
    // bob opens 40 connections that never say Hello, and keeps them open.
    let flood = "import socket,sys\n\
                 s=[socket.socket(socket.AF_UNIX) for _ in range(40)]\n\
                 [x.connect(sys.argv[1]) for x in s]\n\
                 print('ready',flush=True)\n\
                 sys.stdin.read()\n";
    let mut bobs = Command::new("python3")
        .args(["-c", flood])
        .arg(&d.socket)
        .uid(bob.id("-u"))
        .gid(bob.id("-g"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 as bob");
    let mut line = String::new();
    BufReader::new(bobs.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "ready", "bob's flood did not connect");
    // alice gets in at once, while bob's refused connections are still being answered.
    let o = run_bounded(&mut as_user(&d, &alice, &["ls"]), None);
    drop(bobs.stdin.take());
    let _ = bobs.wait();
    assert_eq!(code(&o), 0, "alice was locked out: {}\n{}", stderr(&o), d.log_text());
}

/// One allowed user cannot take every queue-table entry or every record (before, nothing
/// stopped it, and the other members' creates and pushes failed): past `--queues-per-uid`
/// its create is refused, its queues' record quotas add up to at most `--records-per-uid`
/// (an even slice each unless `xtcq limits` moves them), and another user and root still
/// create and push.
#[test]
fn one_user_cannot_take_every_queue_or_record() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqs{tag}");
    let alice = SystemUser::create(&format!("xtcqsa{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqsb{tag}"), &group);
    let flags = [
        "--allow-uid",
        &alice.user,
        "--allow-uid",
        &bob.user,
        "--queues-per-uid",
        "2",
        "--records-per-uid",
        "100",
    ];
    let d = shared_daemon(&group, &flags);
    let run =
        |u: &SystemUser, args: &[&str], stdin: Option<&[u8]>| run_bounded(&mut as_user(&d, u, args), stdin);

    ok(&run(&alice, &["create", "a1"], None));
    ok(&run(&alice, &["create", "a2"], None));
    refused(&run(&alice, &["create", "a3"], None), &["--queues-per-uid 2"]);
    // Each of alice's queues got half her share: 50 records, which the quota then keeps.
    let quota = |q: &str| {
        let s = d.stats();
        let q = s["queues"].as_array().expect("queues").iter().find(|x| x["info"]["name"] == q).cloned();
        let q = q.expect("the queue");
        (q["quota"]["max_records"].as_u64(), q["quota"]["records_used"].as_u64())
    };
    assert_eq!(quota("a1").0, Some(50));
    let jobs: String = (0..50).map(|i| format!("a{i}\n")).collect();
    ok(&run(&alice, &["push", "a1"], Some(jobs.as_bytes())));
    wait_until(Duration::from_secs(10), "the scan to count a1's records", || quota("a1").1 == Some(50));
    let o = run(&alice, &["push", "a1", "--timeout", "100ms", "one more"], None);
    assert_eq!(code(&o), 1, "a push past the quota: {}", stderr(&o));
    assert!(stderr(&o).contains("quota"), "{}", stderr(&o));
    // Moving her share: more than she has left, and "no quota", are refused.
    refused(&run(&alice, &["limits", "a1", "--max-records", "51"], None), &["--records-per-uid 100"]);
    refused(&run(&alice, &["limits", "a1", "--max-records", "0"], None), &["--records-per-uid 100"]);
    ok(&run(&alice, &["limits", "a2", "--max-records", "10"], None));
    ok(&run(&alice, &["limits", "a1", "--max-records", "90"], None));

    // bob is not locked out, nor is root.
    ok(&run(&bob, &["create", "b1"], None));
    ok(&run(&bob, &["push", "b1"], Some(b"x\ny\n")));
    ok(&d.run(&["create", "r1"]));
    ok(&d.run(&["limits", "a1", "--max-records", "4000"]));
}

/// The stats' (max_records, records_used) of queue `q`.
fn quota_of(d: &Daemon, name: &str) -> (Option<u64>, Option<u64>) {
    let s = d.stats();
    let q = s["queues"].as_array().expect("queues").iter().find(|x| x["info"]["name"] == name).cloned();
    let q = q.unwrap_or_else(|| panic!("queue {name} in {s}"));
    (q["quota"]["max_records"].as_u64(), q["quota"]["records_used"].as_u64())
}

/// One `xtcq push` of more lines than the segment has records, by a user whose share is
/// 100 records (50 per queue). Before, a push was refused only past the quota *as the
/// daemon's last scan counted it*, so one burst between two scans took every record (4096
/// of 4096 with the default 100 ms scan) and the others' pushes failed "all records in
/// use"; here the scan is an hour apart so the outcome does not depend on speed. Pushes and
/// frees now keep the count themselves.
#[test]
fn one_burst_cannot_take_more_than_the_records_share() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqr{tag}");
    let alice = SystemUser::create(&format!("xtcqra{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqrb{tag}"), &group);
    let flags = [
        "--allow-uid",
        &alice.user,
        "--allow-uid",
        &bob.user,
        "--queues-per-uid",
        "2",
        "--records-per-uid",
        "100",
        "--lease-scan-interval",
        "1h",
    ];
    let d = shared_daemon(&group, &flags);
    let run =
        |u: &SystemUser, args: &[&str], stdin: Option<&[u8]>| run_bounded(&mut as_user(&d, u, args), stdin);
    ok(&run(&alice, &["create", "a1"], None));
    ok(&run(&bob, &["create", "b1"], None));
    let jobs: String = (0..5000).map(|i| format!("a{i}\n")).collect();
    let o = run(&alice, &["push", "a1", "--timeout", "100ms"], Some(jobs.as_bytes()));
    assert_eq!(code(&o), 1, "the push went past the share: {}", stderr(&o));
    let queued = d.stats()["records"]["queued"].as_u64().expect("queued");
    assert!(queued <= 100, "alice's share is 100 records; she holds {queued}");
    ok(&run(&bob, &["push", "b1", "--timeout", "100ms", "bob's"], None));
}

/// `xtcq import` by a user with a share, of a dump whose queue has no quota (every queue of
/// root's or of a daemon before shares, and every `xtcq export` of one) or a quota past the
/// share: before, the queue was created, setting its quota refused, the file left
/// `.importing` (every later import refused) and no job in. The rule of `xtcq import`: a
/// dump this user cannot import whole is refused with nothing written. No quota in the
/// dump keeps the quota the daemon gives; one past the share is refused up front.
#[test]
fn a_user_with_a_share_imports_a_dump_whole_or_not_at_all() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqi{tag}");
    let alice = SystemUser::create(&format!("xtcqia{tag}"), &group);
    let flags = ["--allow-uid", &alice.user, "--queues-per-uid", "2", "--records-per-uid", "100"];
    let d = shared_daemon(&group, &flags);
    let dumps = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::chown(dumps.path(), Some(alice.id("-u")), None).expect("chown");
    let dump = |name: &str, max_records: u32| {
        let f = dumps.path().join(format!("{name}.dump"));
        let lines = [
            r#"{"kind":"header","format":"xtcq-dump","version":2,"layout_version":6}"#.to_string(),
            format!(
                r#"{{"kind":"queue","name":"{name}","flavor":"fifo","deques":1,"capacity":64,"max_attempts":0,"lease_ms":0,"max_records":{max_records},"max_dead":10}}"#
            ),
            format!(r#"{{"kind":"job","queue":"{name}","payload":"one","attempts":0,"state":"queued"}}"#),
            format!(r#"{{"kind":"job","queue":"{name}","payload":"two","attempts":0,"state":"queued"}}"#),
            r#"{"kind":"end","queues":1,"jobs":2}"#.to_string(),
        ];
        std::fs::write(&f, lines.join("\n") + "\n").expect("write the dump");
        std::os::unix::fs::chown(&f, Some(alice.id("-u")), None).expect("chown");
        f
    };
    let with = |f: &std::path::Path, s: &str| std::path::PathBuf::from(format!("{}{s}", f.display()));

    let f = dump("noquota", 0);
    let o = run_bounded(&mut as_user(&d, &alice, &["import", f.to_str().expect("utf-8")]), None);
    ok(&o);
    assert!(with(&f, ".imported").exists() && !with(&f, ".importing").exists());
    assert_eq!(quota_of(&d, "noquota").0, Some(50), "the queue got her slice");
    assert_eq!(d.drain("noquota").len(), 2);

    let f = dump("toobig", 500);
    let o = run_bounded(&mut as_user(&d, &alice, &["import", f.to_str().expect("utf-8")]), None);
    assert_ne!(code(&o), 0, "imported past her share: {}", stderr(&o));
    assert!(stderr(&o).contains("--records-per-uid"), "name the flag: {}", stderr(&o));
    assert!(f.exists() && !with(&f, ".importing").exists(), "the file was claimed: {}", stderr(&o));
    let names = ok(&d.run(&["ls", "--json"]));
    assert!(!names.contains("toobig"), "a queue was left behind: {names}");
}

/// `--records-per-uid` above the segment's `--records` (an operator's "plenty"): each new
/// queue's even slice was larger than the segment (a quota of 50,000 in 4,096 records), so
/// the `--export-on-stop` dump of it could not be imported after a reboot ("a record quota
/// of 50000 is more than the segment's 4096 records") and xtcqd did not start. The share is
/// at most the segment's records.
#[test]
fn a_records_share_above_the_segment_survives_a_reboot() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqe{tag}");
    let alice = SystemUser::create(&format!("xtcqea{tag}"), &group);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dump = dir.path().join("reboot.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    let extra = ["--allow-uid", &alice.user, "--queues-per-uid", "2", "--records-per-uid", "100000"];
    let mut flags = shared_flags(&group, &extra);
    flags.extend(["--export-on-stop", &dump_s, "--import-on-start", &dump_s]);
    let mut d = Daemon::builder().in_dir(dir).flags(flags.clone()).start();
    open_socket(&d);
    ok(&run_bounded(&mut as_user(&d, &alice, &["create", "a1"]), None));
    ok(&run_bounded(&mut as_user(&d, &alice, &["push", "a1", "kept"]), None));
    let (max, _) = quota_of(&d, "a1");
    assert!(max.is_some_and(|m| (1..=4096).contains(&m)), "a quota past the segment: {max:?}");
    ok(&d.run(&["shutdown"]));
    d.wait_exit(Duration::from_secs(30));
    std::fs::remove_file(&d.segment).expect("a reboot empties /dev/shm");
    d.restart_with(&flags, |_| {});
    assert_eq!(d.drain("a1"), ["kept"], "{}", d.log_text());
}
