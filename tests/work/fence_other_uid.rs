//! A non-root worker whose command leaves processes of another uid in its group (a setuid
//! helper such as `sudo -u` or `su`) cannot stop them itself (`kill` is EPERM): it must not
//! take the group for empty and settle the job, which would then run again beside them. It
//! leaves the job to the daemon (root here), whose fence kills the group first.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;
use xtcq_testkit::runs::*;
use xtcq_testkit::*;

#[test]
fn a_group_a_non_root_worker_cannot_signal_is_fenced_by_the_daemon() {
    other_uid_leftovers("10ms", "s");
}

#[test]
fn a_job_left_to_a_daemon_that_expires_no_lease_is_not_stranded() {
    // With lease expiry off the daemon never takes the job back: the worker must, once the
    // leftovers are gone (here they end by themselves), or the job stays claimed for ever.
    other_uid_leftovers("0", "n");
}

/// A non-root worker's command starts a loop (about a second) as another user and fails;
/// over its attempts no two runs overlap and the job ends a dead letter.
fn other_uid_leftovers(scan: &str, tag: &str) {
    if !is_root() {
        xtcq_testkit::skipped("needs root (two users and a setuid helper)");
        return;
    }
    let Ok(setpriv) = which("setpriv") else {
        xtcq_testkit::skipped("setpriv not found");
        return;
    };
    let (w, o) = (format!("xtcqfw{tag}"), format!("xtcqfo{tag}"));
    let worker_user = SystemUser::create(&w, &w);
    let other_user = SystemUser::create(&o, &o);
    // Dropped before the users: whatever of theirs a failing run left behind dies with it.
    let _reaper = KillUsersProcesses([worker_user.user.clone(), other_user.user.clone()]);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // The stand-in for `sudo -u`: a setuid-root copy of setpriv the worker's user may run.
    let helper = dir.path().join("asuser");
    std::fs::copy(&setpriv, &helper).expect("copy setpriv");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o4755)).expect("setuid");
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).expect("mkdir");
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let log = logs.join("runs");
    std::fs::write(&log, "").expect("log");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--group", &worker_user.group, "--allow-uid", &worker_user.user]);
    flags.extend(["--lease-scan-interval", scan]);
    let d = Daemon::builder().in_dir(dir).flags(&flags).start();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    ok(&d.run(&["create", "q", "--max-attempts", "3", "--allow-uid", &worker_user.user]));
    ok(&d.run(&["push", "q", "g0"]));
    // Each attempt starts a loop as the other user in the command's group, then fails.
    let beat = format!(
        "echo \"start $XTCQ_PAYLOAD $XTCQ_ATTEMPT $(date +%s%N) $$\" >> {log}; \
         for i in $(seq 100); do echo \"alive $XTCQ_PAYLOAD $XTCQ_ATTEMPT $(date +%s%N) $$\" >> {log}; sleep 0.01; done",
        log = log.display()
    );
    let script = format!(
        "'{}' --reuid={} --regid={} --clear-groups sh -c '{}' & sleep 0.3; exit 1",
        helper.display(),
        other_user.id("-u"),
        other_user.id("-g"),
        beat
    );
    let worker = d
        .xtcq()
        .args(["work", "q", "--idle-exit", "3s", "--", "sh", "-c", &script])
        .uid(worker_user.id("-u"))
        .gid(worker_user.id("-g"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn work");
    let out = wait_bounded(worker, Duration::from_secs(60), "worker");
    let all = lines(&log);
    let bad = overlaps(&all);
    kill_logged(&all);
    let dead = stdout(&d.run(&["dead", "q"]));
    assert!(bad.is_empty(), "{bad:?}\nworker: {}\n{}", stderr(&out), d.log_text());
    assert!(all.iter().any(|l| l.what == "start"), "the command ran: {}", stderr(&out));
    assert!(dead.contains("g0"), "the job ends a dead letter after its attempts: {dead}\n{}", stderr(&out));
}

struct KillUsersProcesses([String; 2]);

impl Drop for KillUsersProcesses {
    fn drop(&mut self) {
        for u in &self.0 {
            let _ = std::process::Command::new("pkill").args(["-9", "-u", u]).status();
        }
    }
}

fn which(name: &str) -> std::io::Result<std::path::PathBuf> {
    let o = std::process::Command::new("sh").args(["-c", &format!("command -v {name}")]).output()?;
    let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if o.status.success() && !p.is_empty() {
        Ok(p.into())
    } else {
        Err(std::io::Error::new(std::io::ErrorKind::NotFound, name.to_string()))
    }
}
