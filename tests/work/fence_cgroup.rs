//! A command that leaves its process group (`setsid`, a double fork) is dead before its job
//! runs again, where `xtcq work` can make cgroups (root here; a delegated subtree elsewhere):
//! each command runs in a cgroup of its own, whose `cgroup.kill` the daemon is handed and
//! writes when it fences. The runs log CLOCK_MONOTONIC lines as in `cli_fence.rs`; the test
//! fails if a line of one run comes after the start of the job's next run.
//!
//! Skipped, saying why, where no cgroup v2 can be made (not root, no cgroup2 mount).

use std::io::BufRead;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use xtcq_testkit::runs::*;
use xtcq_testkit::*;

const ROLE: &str = "XTCQ_FENCE_CGROUP_TEST_LOG";

/// The command: logs `start`, then (first attempt) a heartbeat every 2 ms forever, or
/// (later attempts) one more line and exits.
#[test]
fn child_main() {
    heartbeat_role(ROLE);
}

/// The directory of this process's cgroup v2, if this process may make cgroups below it;
/// else why not.
fn own_cgroup_dir() -> Result<PathBuf, String> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::")).ok_or("no cgroup v2 hierarchy")?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let dir = mountinfo
        .lines()
        .filter_map(|l| l.split_once(" - "))
        .filter(|(_, fs)| fs.starts_with("cgroup2 "))
        .find_map(|(m, _)| {
            let f: Vec<&str> = m.split_whitespace().collect();
            let below = if f[3] == "/" { own } else { own.strip_prefix(f[3])? };
            Some(Path::new(f[4]).join(below.trim_start_matches('/')))
        })
        .ok_or("no cgroup2 mount")?;
    // Tests of this file probe at once, from threads of one process: one name each.
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!("xtcq-test-probe.{}.{n}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|e| format!("cannot make a cgroup in {}: {e}", dir.display()))?;
    let _ = std::fs::remove_dir(&probe);
    Ok(dir)
}

/// Whether the tests can run here; says why not when they cannot.
fn usable() -> bool {
    if let Err(why) = own_cgroup_dir() {
        xtcq_testkit::skipped(&format!(
            "no cgroup can be made here ({why}); run as root, or in a delegated cgroup"
        ));
        return false;
    }
    if std::process::Command::new("setsid").arg("--version").output().is_err() {
        xtcq_testkit::skipped("setsid not found");
        return false;
    }
    true
}

/// The command's script: `{child}` in `script` stands for the logging child (`child_main`);
/// a later attempt runs the child alone, to its end.
fn command_script(script: &str) -> String {
    let exe = std::env::current_exe().expect("exe");
    let child = format!(
        "'{}' --exact {} --nocapture --test-threads 1 >/dev/null 2>&1",
        exe.display(),
        test_name(module_path!(), "child_main")
    );
    format!("if [ \"$XTCQ_ATTEMPT\" != 0 ]; then exec {{child}}; fi; {script}").replace("{child}", &child)
}

/// `xtcq work` whose command is `sh -c SCRIPT` (see `command_script`).
fn work_running(d: &Daemon, queue: &str, log: &Path, extra: &[&str], script: &str) -> Child {
    let script = command_script(script);
    d.xtcq()
        .args(["work", queue, "--max-jobs", "1"])
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .env(ROLE, log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn work")
}

/// Ways to leave the command's process group, each leaving the logging child running.
const ESCAPES: [&str; 2] = [
    // setsid(1) forks, and the child makes a session of its own.
    "setsid -f {child}",
    // A double fork: a subshell starts it and exits at once; it makes a session of its own.
    "( setsid {child} & )",
];

fn wait_line(log: &Path, what: &str, job: &str, attempt: u32) {
    wait_until(Duration::from_secs(30), &format!("{what} of job {job} attempt {attempt}"), || {
        lines(log).iter().any(|l| l.what == what && l.job == job && l.attempt == attempt)
    });
}

/// The first line the worker wrote on stderr (which fence is in force), once it exited.
fn fence_line(w: &mut Child) -> String {
    let mut line = String::new();
    let _ = std::io::BufReader::new(w.stderr.take().expect("stderr")).read_line(&mut line);
    line
}

/// Removes the cgroups the (killed) workers `pids` left, once their fence emptied them: only
/// a later worker in the same cgroup would (a killed worker cleans up nothing).
fn remove_left_cgroups(pids: &[u32]) {
    let home = own_cgroup_dir().expect("cgroup dir");
    let Ok(entries) = std::fs::read_dir(&home) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if pids.iter().any(|p| name.starts_with(&format!("xtcq-work.{p}."))) {
            wait_until(Duration::from_secs(10), &format!("{name} removable"), || {
                std::fs::remove_dir(e.path()).is_ok() || !e.path().exists()
            });
        }
    }
}

fn check_no_overlap(d: &Daemon, log: &Path, rounds: usize) {
    let all = lines(log);
    let bad = overlaps(&all);
    kill_logged(&all);
    assert!(
        bad.is_empty(),
        "{} overlapping run(s), e.g. {:?}\n{}",
        bad.len(),
        &bad[..bad.len().min(5)],
        d.log_text()
    );
    let ends = all.iter().filter(|l| l.what == "end").count();
    assert_eq!(ends, rounds, "every job ran to its end once");
}

/// The second run of job `job`, then a check that no run of it overlapped another.
fn second_run(d: &Daemon, queue: &str, log: &Path, job: &str) {
    let second = work_running(d, queue, log, &["--idle-exit", "20s"], "exit 9");
    let out = wait_bounded(second, Duration::from_secs(60), "second worker");
    let all = lines(log);
    let bad = overlaps(&all);
    if !bad.is_empty() {
        // Fail at the first overlap (the run left behind keeps logging).
        kill_logged(&all);
        panic!("job {job}: {bad:?}\n{}", d.log_text());
    }
    assert!(all.iter().any(|l| l.what == "end" && l.job == job), "{}", stderr(&out));
}

#[test]
fn a_command_that_left_its_group_is_dead_before_its_job_runs_again() {
    if !usable() {
        return;
    }
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let log = d.dir().join("runs");
    const ROUNDS: usize = 20;
    let mut killed = Vec::new();
    for r in 0..ROUNDS {
        let job = format!("k{r}");
        ok(&d.run(&["push", "q", &job]));
        let escape = format!("{}; exec sleep 600", ESCAPES[r % ESCAPES.len()]);
        let mut first = work_running(&d, "q", &log, &[], &escape);
        killed.push(first.id());
        wait_line(&log, "alive", &job, 0);
        let _ = first.kill(); // SIGKILL, mid-run
        let _ = first.wait();
        second_run(&d, "q", &log, &job);
        // Read once nothing holds its stderr open any more.
        let said = fence_line(&mut first);
        assert!(said.contains("fence: cgroup"), "the worker said: {said}");
    }
    check_no_overlap(&d, &log, ROUNDS);
    remove_left_cgroups(&killed);
}

#[test]
fn what_a_command_left_outside_its_group_is_dead_before_its_job_is_settled() {
    // The command starts a helper in a session of its own and fails: the worker itself must
    // stop the helper before it gives the job back to run again.
    if !usable() {
        return;
    }
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let log = d.dir().join("runs");
    const ROUNDS: usize = 4;
    let mut workers = Vec::new();
    for r in 0..ROUNDS {
        let job = format!("f{r}");
        ok(&d.run(&["push", "q", &job]));
        let script = format!("{}; sleep 0.2; exit 1", ESCAPES[r % ESCAPES.len()]);
        let first = work_running(&d, "q", &log, &[], &script);
        workers.push(first.id());
        wait_bounded(first, Duration::from_secs(60), "first worker");
        second_run(&d, "q", &log, &job);
    }
    check_no_overlap(&d, &log, ROUNDS);
    // Each command's cgroup was removed once empty.
    let left: Vec<String> = std::fs::read_dir(own_cgroup_dir().expect("cgroup dir"))
        .expect("list cgroups")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| workers.iter().any(|w| n.starts_with(&format!("xtcq-work.{w}."))))
        .collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
}

#[test]
fn a_command_that_left_its_group_stays_fenced_across_a_daemon_restart() {
    // The worker is killed while the daemon is down: the next daemon knows the command's
    // cgroup from the state file (path and id) and kills what it lists before the re-run.
    if !usable() {
        return;
    }
    let mut d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let log = d.dir().join("runs");
    let mut killed = Vec::new();
    for (r, escape) in ESCAPES.iter().enumerate() {
        let job = format!("w{r}");
        ok(&d.run(&["push", "q", &job]));
        let mut first = work_running(&d, "q", &log, &[], &format!("{escape}; exec sleep 600"));
        killed.push(first.id());
        wait_line(&log, "alive", &job, 0);
        d.kill();
        let _ = first.kill();
        let _ = first.wait();
        d.restart_with(SMALL_SEGMENT, |_| {});
        second_run(&d, "q", &log, &job);
    }
    check_no_overlap(&d, &log, ESCAPES.len());
    remove_left_cgroups(&killed);
}

/// A cgroup the test makes under its own, removed (once empty) on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(name: &str) -> Self {
        let p =
            own_cgroup_dir().expect("cgroup dir").join(format!("xtcq-test.{}.{name}", std::process::id()));
        std::fs::create_dir(&p).expect("mkdir cgroup");
        TestCgroup(p)
    }

    fn open(&self, name: &str, write: bool) -> OwnedFd {
        std::fs::OpenOptions::new().read(!write).write(write).open(self.0.join(name)).expect("open").into()
    }

    fn dir(&self) -> OwnedFd {
        std::fs::File::open(&self.0).expect("open cgroup").into()
    }

    /// `sleep 600` in its own process group, in this cgroup; with `escape`, in a session of
    /// its own too, like a daemonized helper.
    fn sleeper(&self, escape: bool) -> Child {
        let procs = self.0.join("cgroup.procs");
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("600");
        // SAFETY: open, write and setsid between fork and exec; the path is allocated before.
        let path = std::ffi::CString::new(procs.into_os_string().into_encoded_bytes()).expect("path");
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                if escape && libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        if !escape {
            cmd.process_group(0);
        }
        cmd.spawn().expect("sleep")
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        wait_until(Duration::from_secs(10), "the test cgroup empty", || {
            std::fs::read_to_string(self.0.join("cgroup.events")).is_ok_and(|t| t.contains("populated 0"))
        });
        // The cgroups workers made in it (a killed one removes nothing).
        for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn the_daemon_fences_only_a_cgroup_that_is_the_commands_and_kills_it_whole() {
    if !usable() {
        return;
    }
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--lease-scan-interval", "10ms"]);
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q", "--lease", "300ms"]));
    ok(&d.run(&["push", "q", "a"]));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let thief = c.attach_thief("q").expect("thief");
    let job = thief.steal().expect("steal").expect("a job");
    let (a, b) = (TestCgroup::new("a"), TestCgroup::new("b"));
    // The command leads its group in cgroup a; a helper of it left the group (setsid).
    let mut command = a.sleeper(false);
    let mut helper = a.sleeper(true);
    let pid = command.id();
    let generation = job.handle().generation;
    let refused = |dir: &OwnedFd, kill: &OwnedFd, why: &str| {
        let e = c
            .fence_command_in_cgroup(job.id(), generation, pid, (dir.as_fd(), kill.as_fd()))
            .expect_err(why)
            .to_string();
        assert!(e.contains(why), "{e}");
    };
    let bare =
        xtcq_client::Request::FenceCgroup { index: job.id().index, birth: job.id().birth, generation, pid };
    let e = c.call(bare).expect_err("no descriptors").to_string();
    assert!(e.contains("needs two descriptors"), "{e}");
    let tmp: OwnedFd = std::fs::File::open(d.dir()).expect("open").into();
    refused(&tmp, &a.open("cgroup.kill", true), "not a cgroup v2 directory");
    refused(&a.dir(), &b.open("cgroup.kill", true), "not the cgroup.kill of its directory");
    refused(&a.dir(), &a.open("cgroup.kill", false), "not open for writing");
    refused(&b.dir(), &b.open("cgroup.kill", true), &format!("pid {pid} is not in the cgroup"));
    c.fence_command_in_cgroup(
        job.id(),
        generation,
        pid,
        (a.dir().as_fd(), a.open("cgroup.kill", true).as_fd()),
    )
    .expect("the command's own cgroup");
    // The lease runs out (nothing extends it): the daemon fences, and both are killed.
    let mut other = b.sleeper(true);
    wait_until(Duration::from_secs(20), "the command and its helper killed", || {
        command.try_wait().expect("try_wait").is_some() && helper.try_wait().expect("try_wait").is_some()
    });
    assert!(other.try_wait().expect("try_wait").is_none(), "another cgroup's process was killed");
    let _ = other.kill();
    let _ = other.wait();
    drop(job);
}

#[test]
fn a_registration_whose_cgroup_the_workers_next_command_runs_in_is_forgotten() {
    // `xtcq work` runs a thread's next command in the cgroup its last one ended in, and does
    // not wait for the daemon's answer to its word that the last one ended. Where that word
    // is lost (the connection broke), the old registration must not stay: its cgroup now
    // holds another job's command, which a fence of the old job would kill.
    if !usable() {
        return;
    }
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "a"]));
    ok(&d.run(&["push", "q", "b"]));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let thief = c.attach_thief("q").expect("thief");
    let (first, second) =
        (thief.steal().expect("steal").expect("a"), thief.steal().expect("steal").expect("b"));
    let g = TestCgroup::new("reused");
    let register = |job: &xtcq_client::Job<'_>, pid: u32| {
        c.fence_command_in_cgroup(
            job.id(),
            job.handle().generation,
            pid,
            (g.dir().as_fd(), g.open("cgroup.kill", true).as_fd()),
        )
        .expect("fence");
    };
    let registered = || {
        xtcqd::persistence::state::StateFile::beside(&d.socket)
            .expect("state file")
            .load()
            .map_or(0, |s| s.fences.len())
    };
    let mut a = g.sleeper(false);
    register(&first, a.id());
    let _ = a.kill();
    let _ = a.wait();
    // No Unfence for `a` (the word that was lost); the cgroup is empty and runs `b` next.
    let mut b = g.sleeper(false);
    register(&second, b.id());
    assert_eq!(registered(), 1, "the registration of the command that ended is forgotten at once");
    let _ = b.kill();
    let _ = b.wait();
    first.ack().expect("ack a");
    second.ack().expect("ack b");
}

/// Kills the processes of a test user when dropped (before the user is removed).
struct KillUserProcesses(String);

impl Drop for KillUserProcesses {
    fn drop(&mut self) {
        let _ = std::process::Command::new("pkill").args(["-9", "-u", &self.0]).status();
    }
}

#[test]
fn a_non_root_worker_in_a_cgroup_delegated_to_its_user_fences_what_left_its_group() {
    // What the docs say to do for a user (`systemd-run --user --scope -p Delegate=yes`) and
    // for a unit (`Delegate=yes`): the worker's user owns its cgroup, as systemd delegates it.
    if !is_root() {
        xtcq_testkit::skipped("needs root (a user of its own, and a cgroup to delegate to it)");
        return;
    }
    if !usable() {
        return;
    }
    let user = SystemUser::create("xtcqcgd", "xtcqcgd");
    let _reaper = KillUserProcesses(user.user.clone());
    let (uid, gid) = (user.id("-u"), user.id("-g"));
    let delegated = TestCgroup::new("delegated");
    for f in ["", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"] {
        std::os::unix::fs::chown(delegated.0.join(f), Some(uid), Some(gid)).expect("delegate");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).expect("mkdir");
    std::fs::set_permissions(&logs, std::os::unix::fs::PermissionsExt::from_mode(0o777)).expect("chmod");
    let log = logs.join("runs");
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--group", &user.group, "--allow-uid", &user.user]);
    let d = Daemon::builder().in_dir(dir).flags(&flags).start();
    std::fs::set_permissions(&d.socket, std::os::unix::fs::PermissionsExt::from_mode(0o666)).expect("chmod");
    ok(&d.run(&["create", "q", "--allow-uid", &user.user]));
    for (r, escape) in ESCAPES.iter().enumerate() {
        let job = format!("d{r}");
        ok(&d.run(&["push", "q", &job]));
        // As systemd starts a delegated unit: root puts the process in the cgroup, then it
        // runs as the user.
        let mut first = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && exec setpriv --reuid="$1" --regid="$2" --clear-groups "$3" --socket "$4" work q --max-jobs 1 -- sh -c "$5""#)
            .arg(&delegated.0)
            .args([uid.to_string(), gid.to_string()])
            .arg(xtcq_exe())
            .arg(&d.socket)
            .arg(command_script(&format!("{escape}; exec sleep 600")))
            .env(ROLE, &log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn work");
        wait_line(&log, "alive", &job, 0);
        let _ = first.kill();
        let _ = first.wait();
        second_run(&d, "q", &log, &job);
        let said = fence_line(&mut first);
        assert!(said.contains("fence: cgroup"), "the worker said: {said}");
    }
    check_no_overlap(&d, &log, ESCAPES.len());
}
