//! A push with nobody asleep makes no system call; a push with a thief asleep in
//! `steal_wait` makes a futex wake (the negative control: the method can see a system call);
//! a consumer holding a wake descriptor costs a push nothing until it arms it, and one armed
//! costs the push one datagram (datagram kind) or one futex wake (futex kind).
//!
//! `xtcq-push-probe` (src/bin) attaches as owner to a real daemon and pushes between two
//! marker writes to stderr; it runs under `strace -f`, and every line strace printed for the
//! pushing thread between the markers is a system call (or a signal) the pushes made. Other
//! threads (the client's reader thread, parked in a read) are told apart by thread id. The
//! process's first push is marked apart (one-time set-up may happen there) and only bounded.
//!
//! Skipped, loudly, where strace is not installed (`.ci/run` installs it) or cannot trace
//! (no ptrace in the sandbox).

use std::path::PathBuf;
use std::process::Command;

use xtcq_testkit::Daemon;

const JOBS: usize = 10_000;

const SIZES: &[&str] = &[
    "--queues",
    "2",
    "--deques-per-queue",
    "2",
    "--deque-capacity",
    "16384",
    "--records",
    "32768",
    "--payload-bytes",
    "64",
    "--process-slots",
    "8",
    "--overflow-capacity",
    "1024",
];

fn probe_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_xtcq-push-probe"))
}

/// `Some(reason)` when strace cannot be used here.
fn strace_unusable() -> Option<String> {
    match Command::new("strace").arg("-o").arg("/dev/null").arg("true").output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("strace not installed".into()),
        Err(e) => Some(format!("cannot run strace: {e}")),
        Ok(o) if !o.status.success() => {
            Some(format!("strace cannot trace here: {}", String::from_utf8_lossy(&o.stderr).trim()))
        }
        Ok(_) => None,
    }
}

/// What strace saw the pushing thread do between the markers.
struct Trace {
    tid: String,
    /// Between `XTCQ-PUSH-BEGIN` and `XTCQ-PUSH-END`: the measured pushes.
    between: Vec<String>,
    /// Between `XTCQ-FIRST-BEGIN` and `XTCQ-FIRST-END`: the process's first push.
    first: Vec<String>,
    stdout: String,
}

/// Starts a daemon with a one-deque queue, runs the probe under strace in `mode`, and
/// returns the pushing thread's lines between the markers.
fn trace_probe(mode: &str, jobs: usize) -> Trace {
    trace_probe_with(mode, jobs, None)
}

/// [`trace_probe`] with the probe's wake descriptor of `wake_kind` (`XTCQ_WAKE_FD`).
fn trace_probe_with(mode: &str, jobs: usize, wake_kind: Option<&str>) -> Trace {
    let d = Daemon::builder().daemon_defaults().flags(SIZES).start();
    let mut params = xtcq_client::QueueParams::new("probe");
    params.deques = 1;
    params.capacity = 16384;
    d.client().create_queue(&params).expect("create queue");
    let out_file = d.dir().join(format!("strace.{mode}"));
    let out = Command::new("strace")
        .arg("-f")
        .args(["-e", "trace=all"])
        .arg("-o")
        .arg(&out_file)
        .arg(probe_exe())
        .arg(&d.socket)
        .arg("probe")
        .arg(mode)
        .arg(jobs.to_string())
        .envs(wake_kind.map(|k| (xtcq_client::WAKE_FD_ENV, k)))
        .output()
        .expect("run strace");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = std::fs::read_to_string(&out_file).expect("read strace output");
    assert!(
        out.status.success(),
        "probe failed ({}): stdout {stdout}\nstderr {}\ndaemon log:\n{}\nstrace (tail):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.log_text(),
        tail(&text, 40)
    );
    assert!(stdout.contains(&format!("pushed {jobs}")), "probe said {stdout:?}");
    let parse = |m: &str| {
        between_markers(&text, m).unwrap_or_else(|e| panic!("{e}; strace (tail):\n{}", tail(&text, 60)))
    };
    let (first_tid, first) = parse("FIRST");
    let (tid, between) = parse("PUSH");
    assert_eq!(first_tid, tid, "the first push and the others ran on different threads");
    Trace { tid, between, first, stdout }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Finds the thread that wrote the `XTCQ-{label}-BEGIN` marker, and its lines up to its
/// `XTCQ-{label}-END` marker: `(thread id, lines)`.
fn between_markers(text: &str, label: &str) -> Result<(String, Vec<String>), String> {
    let tid_of = |l: &str| l.split_whitespace().next().unwrap_or("").to_string();
    let (begin_m, end_m) = (format!("write(2, \"XTCQ-{label}-BEGIN"), format!("\"XTCQ-{label}-END"));
    let mut lines = text.lines();
    let begin = lines
        .by_ref()
        .find(|l| l.contains(&begin_m))
        .ok_or_else(|| format!("no {label} begin marker in strace's output"))?;
    let tid = tid_of(begin);
    if tid.parse::<u32>().is_err() {
        return Err(format!("strace line without a thread id: {begin:?}"));
    }
    let mut between = Vec::new();
    for l in lines {
        if tid_of(l) != tid {
            continue;
        }
        if l.contains(&end_m) {
            return Ok((tid, between));
        }
        between.push(l.to_string());
    }
    Err(format!("no {label} end marker from thread {tid}"))
}

fn skip() -> bool {
    if let Some(why) = strace_unusable() {
        xtcq_testkit::skipped(&format!("{why} (apt-get install strace; .ci/run installs it)"));
        return true;
    }
    false
}

#[test]
fn push_with_nobody_asleep_makes_no_system_call() {
    if skip() {
        return;
    }
    let t = trace_probe("quiet", JOBS);
    assert!(
        t.between.is_empty(),
        "{JOBS} pushes with nobody asleep made {} system calls (thread {}):\n{}",
        t.between.len(),
        t.tid,
        t.between.join("\n")
    );
    // The first push of a process may set something up once (rustix finds the vDSO for the
    // first clock read with prctl(PR_GET_AUXV)); shown, and bounded, but not the claim.
    assert!(
        t.first.len() <= 4 && !t.first.iter().any(|l| l.contains("futex(")),
        "the first push made unexpected system calls:\n{}",
        t.first.join("\n")
    );
    eprintln!(
        "{JOBS} pushes by thread {}: no system call ({}); the first push before them: {:?}",
        t.tid,
        t.stdout.trim(),
        t.first
    );
}

/// A consumer that holds a wake descriptor but is not waiting on it (it armed once, then
/// disarmed: awake, busy with a job): pushes still make no system call.
#[test]
fn push_with_a_descriptor_registered_but_not_armed_makes_no_system_call() {
    if skip() {
        return;
    }
    let futex = xtcq_shm::futex_ring::FutexRing::new().is_ok();
    for kind in ["datagram", "futex"].into_iter().filter(|k| futex || *k == "datagram") {
        let t = trace_probe_with("registered", JOBS, Some(kind));
        assert!(
            t.between.is_empty(),
            "{JOBS} pushes with a {kind} descriptor registered and nobody asleep made {} system calls (thread {}):\n{}",
            t.between.len(),
            t.tid,
            t.between.join("\n")
        );
    }
}

#[test]
fn push_with_a_thief_asleep_makes_a_futex_wake() {
    if skip() {
        return;
    }
    let t = trace_probe("sleeper", 1);
    let wakes: Vec<&String> =
        t.between.iter().filter(|l| l.contains("futex(") && l.contains("FUTEX_WAKE")).collect();
    assert!(
        !wakes.is_empty(),
        "a push with a thief asleep made no futex wake (thread {}); its system calls:\n{}",
        t.tid,
        t.between.join("\n")
    );
}

/// A consumer armed on a datagram wake descriptor: the push sends it one datagram (and makes
/// no futex wake: the one sleeper was the descriptor's).
#[test]
fn push_with_a_descriptor_armed_sends_one_datagram() {
    if skip() {
        return;
    }
    let t = trace_probe_with("descriptor", 1, Some("datagram"));
    let sends: Vec<&String> = t.between.iter().filter(|l| l.contains("sendto(")).collect();
    assert_eq!(sends.len(), 1, "one datagram for one push (thread {}):\n{}", t.tid, t.between.join("\n"));
    assert!(sends[0].contains(".wake/"), "sent to the wake directory: {}", sends[0]);
    assert!(
        !t.between.iter().any(|l| l.contains("FUTEX_WAKE")),
        "a futex wake besides the datagram:\n{}",
        t.between.join("\n")
    );
}

/// A consumer armed on a futex-kind wake descriptor (an io_uring futex wait): the push makes
/// the one futex wake it makes for any sleeper, and sends nothing.
#[test]
fn push_with_a_futex_descriptor_armed_makes_one_futex_wake() {
    if skip() {
        return;
    }
    if let Err(e) = xtcq_shm::futex_ring::FutexRing::new() {
        xtcq_testkit::skipped(&format!("futex-kind wake descriptors: {e}"));
        return;
    }
    let t = trace_probe_with("descriptor", 1, Some("futex"));
    let wakes: Vec<&String> = t.between.iter().filter(|l| l.contains("FUTEX_WAKE")).collect();
    assert_eq!(wakes.len(), 1, "one futex wake for one push (thread {}):\n{}", t.tid, t.between.join("\n"));
    assert!(
        !t.between.iter().any(|l| l.contains("sendto(")),
        "a datagram besides the futex wake:\n{}",
        t.between.join("\n")
    );
}

#[test]
fn marker_parsing_sees_calls_of_the_marked_thread_only() {
    // The parser the two tests rely on: lines of other threads are ignored, lines of the
    // marked thread between the markers are returned, resumed calls included.
    let text = "\
100 write(2, \"XTCQ-PUSH-BEGIN\\n\", 16) = 16
101 read(3,  <unfinished ...>
100 futex(0x7f0000000000, FUTEX_WAKE, 2147483647) = 1
101 <... read resumed>\"x\", 1) = 1
100 write(2, \"XTCQ-PUSH-END\\n\", 14) = 14
";
    let (tid, between) = between_markers(text, "PUSH").expect("parse");
    assert_eq!(tid, "100");
    assert_eq!(between.len(), 1);
    assert!(between[0].contains("FUTEX_WAKE"));
    assert!(between_markers("100 write(2, \"XTCQ-PUSH-BEGIN\\n\", 16) = 16\n", "PUSH").is_err());
    assert!(between_markers(text, "FIRST").is_err());
}
