//! Red-team pass on `xtcq work`'s cgroup reuse: each command leaves a helper in a session of
//! its own (`setsid -f`) and exits 0. The helper must be dead before the job is settled,
//! and the next command, run in the cgroup the last one ended in, must neither meet it nor
//! be killed for it: every job acked once, no helper left. Real xtcqd, real `xtcq work`.

use std::time::Duration;

use xtcq_testkit::*;

fn alive(pid: i32) -> bool {
    // A zombie is not alive: its state in /proc is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

#[test]
fn helpers_left_by_each_command_die_and_the_next_command_runs_unharmed() {
    let cgroup_ok =
        std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|c| c.contains("0::")) && is_root();
    if !cgroup_ok {
        xtcq_testkit::skipped("needs root and a cgroup v2 hierarchy for the cgroup fence");
        return;
    }
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "j1", "j2", "j3", "j4"]));
    let dir = d.dir().to_path_buf();
    let (pids, done) = (dir.join("pids"), dir.join("done"));
    let script = format!(
        "setsid -f sh -c 'echo $$ >> \"{}\"; exec sleep 600'; sleep 0.05; echo \"$XTCQ_PAYLOAD\" >> \"{}\"",
        pids.display(),
        done.display()
    );
    let w = d
        .xtcq()
        .args(["work", "q", "--max-jobs", "4", "--", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn work");
    let out = wait_bounded(w, Duration::from_secs(120), "xtcq work");
    assert!(out.status.success(), "xtcq work: {}", stderr(&out));
    assert!(stderr(&out).contains("fence: cgroup"), "not the cgroup fence: {}", stderr(&out));
    let mut ran: Vec<String> =
        std::fs::read_to_string(&done).expect("done").lines().map(str::to_string).collect();
    ran.sort();
    assert_eq!(ran, ["j1", "j2", "j3", "j4"], "each command ran to its end once");
    let helpers: Vec<i32> =
        std::fs::read_to_string(&pids).expect("pids").lines().map(|l| l.parse().expect("pid")).collect();
    assert_eq!(helpers.len(), 4);
    let left: Vec<i32> = helpers.into_iter().filter(|&p| alive(p)).collect();
    for &p in &left {
        // SAFETY: kill(2) of a pid this test's command started.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "helpers outlived their command: {left:?}");
    let s = d.stats();
    assert_eq!((s["records"]["queued"].as_u64(), s["records"]["dead"].as_u64()), (Some(0), Some(0)), "{s}");
}
