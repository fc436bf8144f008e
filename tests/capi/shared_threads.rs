//! Red team: the C API's owner, injector and one thief shared by four pthreads, every claim
//! acked on another thread than its own (`tests/c/threads_fork.c`), then a fork whose
//! child must find every inherited handle refused. `stats --json` then says exactly the
//! jobs the program ran: no count lost between the handle lanes and the shared lane.

use std::process::Command;
use std::time::Duration;

use xtcq_testkit::*;

#[test]
fn c_handles_shared_by_pthreads_are_counted_exactly_and_refused_after_fork() {
    let d = Daemon::builder().daemon_defaults().flags(["--records", "4096"]).start();
    ok(&d.run(&["create", "q"]));
    let exe = compile_c("tests/c/threads_fork.c", d.dir(), &[]);
    const JOBS: u64 = 8_000;
    let out = run_within(
        Command::new(&exe).arg(&d.socket).arg("q").arg(JOBS.to_string()).arg("3000"),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let n = JOBS + 1;
    assert_eq!(stdout.trim(), format!("done {n}"));
    let s = d.stats();
    let q = s["queues"].as_array().unwrap().iter().find(|q| q["info"]["name"] == "q").expect("queue");
    let m = &q["metrics"];
    assert_eq!(
        ["pushed", "claimed", "acked", "nacked", "recovered"].map(|k| m[k].as_u64()),
        [Some(n), Some(n), Some(n), Some(0), Some(0)],
        "{m}"
    );
}
