//! A job's fate by id (`xtcq job QUEUE ID`, the id `push --print-handle` prints), through
//! each state with real processes: queued, delayed, running (by the `xtcq work` that holds
//! it, with its lease), dead (with its reason), finished once acked, and unknown for an id
//! of nothing (exit 3) or of another queue.

use std::process::Stdio;
use std::time::Duration;

use xtcq_testkit::*;

fn state(d: &Daemon, queue: &str, id: &str) -> serde_json::Value {
    let o = d.run(&["job", queue, id, "--json"]);
    assert!(matches!(code(&o), 0 | 3), "xtcq job: {}", stderr(&o));
    serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
}

fn push(d: &Daemon, args: &[&str]) -> String {
    ok(&d.run(&[&["push", "--print-handle"], args].concat())).trim().to_string()
}

#[test]
fn a_job_is_followed_by_id_through_every_state() {
    let d = Daemon::start();
    ok(&d.run(&["create", "jobs", "--max-attempts", "1", "--lease", "30s"]));
    ok(&d.run(&["create", "other"]));

    let queued = push(&d, &["jobs", "first"]);
    assert_eq!(state(&d, "jobs", &queued), serde_json::json!({"Queued": {"attempts": 0}}));
    let said = ok(&d.run(&["job", "jobs", &queued]));
    assert!(said.contains(&format!("job {queued} of jobs: queued")), "{said}");
    assert_eq!(state(&d, "other", &queued), serde_json::json!("Unknown"), "not the other queue's job");
    assert_eq!(code(&d.run(&["job", "jobs", "9999.1"])), 3, "an id of nothing is unknown");
    assert_eq!(code(&d.run(&["job", "jobs", "not-an-id"])), 2);

    let later = push(&d, &["jobs", "--delay", "1h", "later"]);
    let s = state(&d, "jobs", &later);
    assert!(s["Delayed"]["due_in_ms"].as_u64().is_some_and(|ms| ms > 3_000_000), "{s}");

    // Running: a worker holds `first` in a command that waits until told to finish.
    let go = d.dir().join("go");
    let script = format!(r#"while [ ! -e {} ]; do sleep 0.05; done"#, go.display());
    let worker = d
        .xtcq()
        .args(["work", "jobs", "--max-jobs", "1", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn work");
    let running = eventually(Duration::from_secs(30), || {
        let s = state(&d, "jobs", &queued);
        s.get("Running").cloned()
    })
    .expect("the job running");
    assert_eq!(running["pid"], worker.id(), "held by the worker's process: {running}");
    assert!(running["lease_left_ms"].as_u64().is_some_and(|ms| ms <= 30_000), "{running}");
    std::fs::write(&go, b"").expect("tell it to finish");
    let out = wait_bounded(worker, Duration::from_secs(30), "worker");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(state(&d, "jobs", &queued), serde_json::json!("Finished"), "acked");

    // Dead: one attempt allowed, and the command fails.
    let doomed = push(&d, &["jobs", "doomed"]);
    let w = d.run(&["work", "jobs", "--max-jobs", "1", "--", "sh", "-c", "echo broken >&2; exit 7"]);
    assert_ne!(code(&w), 0);
    let s = state(&d, "jobs", &doomed);
    assert_eq!(s["Dead"]["attempts"], 1, "{s}");
}
