//! Red-team pass on `create --exist-ok`, as a careless or hostile user: "ok" must mean a
//! queue with the settings asked that the caller can use. Real xtcqd, real `xtcq`, real
//! users where it matters.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use xtcq_testkit::child::COMMAND_LIMIT;
use xtcq_testkit::*;

/// Bob's `xtcq create mine --exist-ok` of alice's queue, which she shares with nobody: it
/// was "ok" (exit 0, same settings), and bob's first push was then refused; it also told
/// bob the settings of a queue he may not use. It is refused as his attach would be.
#[test]
fn exist_ok_of_a_queue_the_caller_may_not_use_is_refused() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create users");
        return;
    }
    let tag = std::process::id() % 100_000;
    let group = format!("xtcqe{tag}");
    let alice = SystemUser::create(&format!("xtcqea{tag}"), &group);
    let bob = SystemUser::create(&format!("xtcqeb{tag}"), &group);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--group", &group, "--allow-uid", &alice.user, "--allow-uid", &bob.user]);
    let d = Daemon::builder().in_dir(dir).flags(flags).start();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    let run = |u: &SystemUser, args: &[&str]| {
        let mut c: Command = d.xtcq();
        c.args(args).uid(u.id("-u")).gid(u.id("-g"));
        run_bounded(&mut c, None)
    };
    ok(&run(&alice, &["create", "mine"]));
    let o = run(&bob, &["create", "mine", "--exist-ok"]);
    assert_ne!(code(&o), 0, "bob was told ok for a queue he may not use: {}", stdout(&o));
    assert!(stderr(&o).contains("belongs to"), "the refusal says whose it is: {}", stderr(&o));
    // Shared with bob: his --exist-ok of it with the same grants is ok, and he can use it.
    ok(&run(&alice, &["create", "ours", "--allow-uid", &bob.user]));
    ok(&run(&bob, &["create", "ours", "--exist-ok", "--allow-uid", &bob.user]));
    ok(&run(&bob, &["push", "ours", "from bob"]));
}

/// Two `xtcq create --exist-ok` of one name at once, asking for other flavors, 20 times:
/// never both "ok" (one creates, the other is refused naming the flavor), and the queue is
/// as the one told "ok" asked.
#[test]
fn racing_exist_ok_creates_with_other_settings_are_never_both_ok() {
    let d = Daemon::builder().flags(SMALL_SEGMENT).start();
    for round in 0..20 {
        let name = format!("race{round}");
        let spawn = |flavor: &str| {
            d.xtcq()
                .args(["create", &name, "--exist-ok", "--flavor", flavor])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn xtcq")
        };
        let (a, b) = (spawn("fifo"), spawn("lifo"));
        let a = wait_bounded(a, COMMAND_LIMIT, "xtcq create");
        let b = wait_bounded(b, COMMAND_LIMIT, "xtcq create");
        assert_ne!(a.status.success(), b.status.success(), "round {round}: {} / {}", stderr(&a), stderr(&b));
        let loser = if a.status.success() { &b } else { &a };
        assert!(stderr(loser).contains("exists with other settings: flavor is"), "{}", stderr(loser));
        let ls = ok(&d.run(&["ls", "--json"]));
        let q: serde_json::Value = serde_json::from_str(&ls).expect("json");
        let queue = q.as_array().expect("array").iter().find(|x| x["name"] == name.as_str()).cloned();
        let flavor = queue.expect("the queue")["flavor"].clone();
        let want = if a.status.success() { "Fifo" } else { "Lifo" };
        assert_eq!(flavor, want, "round {round}: the queue is not what the caller told ok asked");
        ok(&d.run(&["delete", &name]));
    }
}
