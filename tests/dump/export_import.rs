//! Jobs survive a reboot or an upgrade: `xtcqd --export-on-stop` writes
//! every queue, queued job and dead letter to a dump, a new daemon on a new segment imports
//! it once with `--import-on-start`, and a segment an older layout-4 build wrote (a committed
//! fixture, `fixtures/make-v4-segment.sh`) imports into this build with every job once.

use std::path::Path;
use std::time::Duration;
use xtcq_testkit::*;

/// Dead letters of `q` as (payload, attempts, last error), sorted.
fn dead(d: &Daemon, q: &str) -> Vec<(String, u64, String)> {
    let v: serde_json::Value = serde_json::from_str(&ok(&d.run(&["dead", q, "--json"]))).expect("json");
    let mut out: Vec<_> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|x| {
            (
                x["payload"].as_str().expect("payload").to_string(),
                x["attempts"].as_u64().expect("attempts"),
                x["last_error"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn stop(d: &mut Daemon) {
    ok(&d.run(&["shutdown"]));
    let child = d.child.take().expect("running");
    let o = wait_bounded(child, Duration::from_secs(30), "xtcqd to stop");
    assert!(o.status.success(), "xtcqd failed to stop cleanly: {}", d.log_text());
}

fn fail_n(d: &Daemon, q: &str, n: usize) {
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let t = c.attach_thief(q).expect("attach");
    for _ in 0..n {
        t.steal().expect("steal").expect("a job").fail("it broke").expect("fail");
    }
}

fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    SMALL_SEGMENT.iter().copied().chain(extra.iter().copied()).collect()
}

#[test]
fn export_on_stop_then_import_on_start_keeps_every_job_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("jobs.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    let mut d = Daemon::builder().in_dir(dir).flags(flags(&["--export-on-stop", &dump_s])).start();
    ok(&d.run(&["create", "farm", "--max-attempts", "1", "--max-dead", "500", "--flavor", "fifo"]));
    ok(&d.run(&["create", "mail"]));
    let farm: Vec<String> = (0..300).map(|i| format!("job {i}")).collect();
    ok(&d.run_in(&["push", "farm"], (farm.join("\n") + "\n").as_bytes()));
    fail_n(&d, "farm", 20);
    ok(&d.run(&["push", "mail", "héllo", "with \"quotes\" and \\ too"]));
    let live = dir_path(&d).join("live.dump");
    ok(&d.run(&["export", live.to_str().expect("utf-8")]));
    stop(&mut d);
    // The same lines, but that the daemon's own dump also names each queue's owner (the
    // daemon keeps owners; `xtcq export` reads only the segment).
    let without_owner = |p: &Path| -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(p).expect("dump");
        text.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).expect("json line");
                if v["kind"] == "queue" {
                    assert_eq!(
                        v.as_object_mut().expect("object").remove("owner").is_some(),
                        p == dump,
                        "{l}"
                    );
                }
                v
            })
            .collect()
    };
    assert_eq!(without_owner(&live), without_owner(&dump));

    // A new segment (as after a reboot or an upgrade), then the import.
    std::fs::remove_file(&d.segment).expect("remove the segment");
    d.restart_with(&flags(&["--import-on-start", &dump_s]), |_| {});
    let want_dead: Vec<(String, u64, String)> = {
        let mut v: Vec<_> = farm[..20].iter().map(|p| (p.clone(), 1, "it broke".to_string())).collect();
        v.sort();
        v
    };
    assert_eq!(dead(&d, "farm"), want_dead);
    let s = d.stats();
    let q = s["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .find(|q| q["info"]["name"] == "farm")
        .cloned()
        .expect("farm");
    assert_eq!((q["info"]["max_attempts"].clone(), q["quota"]["max_dead"].clone()), (1.into(), 500.into()));
    assert!(!dump.exists() && Path::new(&format!("{dump_s}.imported")).exists());

    // A restart with the same flags imports nothing again.
    d.kill();
    d.restart_with(&flags(&["--import-on-start", &dump_s]), |_| {});
    let mut want_farm = farm[20..].to_vec();
    want_farm.sort();
    assert_eq!(d.drain("farm"), want_farm);
    assert_eq!(d.drain("mail"), vec!["héllo".to_string(), "with \"quotes\" and \\ too".to_string()]);
    assert_eq!(dead(&d, "farm").len(), 20);
    ok(&d.run(&["check"]));
}

fn dir_path(d: &Daemon) -> &Path {
    d.dir()
}

/// The layout-4 fixture: what `make-v4-segment.sh` put in it, each once.
#[test]
fn a_layout_4_segment_imports_into_this_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = dir.path().join("old-v4.seg");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/segment-v4.bin.gz");
    let o = run_bounded(std::process::Command::new("gzip").arg("-dc").arg(&fixture), None);
    std::fs::write(&old, &o.stdout).expect("write the fixture");
    let old_s = old.to_str().expect("utf-8").to_string();

    let out = dir.path().join("v4.dump");
    let d = Daemon::builder().in_dir(dir).flags(flags(&["--import-on-start", &old_s])).start();
    // Answered once the import is over (the daemon accepts only after it).
    let err = |s: &str| (s.to_string(), 1, "exit 3".to_string());
    assert_eq!(dead(&d, "alpha"), vec![err("ad1"), err("ad2")]);
    // The file, renamed once imported, reads for an export too (read-only, layout 4).
    let o = d.run(&["export", "--segment", &format!("{old_s}.imported"), out.to_str().expect("utf-8")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&out).expect("dump").lines().count(),
        1 + 2 + 8 + 1,
        "header, 2 queues, 8 jobs, end"
    );
    assert_eq!(dead(&d, "beta"), vec![err("bd1")]);
    assert_eq!(d.drain("alpha"), vec!["a1", "a2", "a3"]);
    assert_eq!(d.drain("beta"), vec!["b1", "b2"]);
    ok(&d.run(&["check"]));
}

/// `xtcq export` -> `kill -9` of the daemon -> a new segment -> `xtcq import`: every queued
/// job and dead letter once; a second import of the file is refused, saying why.
#[test]
fn export_kill_recreate_import_by_hand() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "farm", "--max-attempts", "1"]));
    let jobs: Vec<String> = (0..50).map(|i| format!("j{i}")).collect();
    ok(&d.run_in(&["push", "farm"], (jobs.join("\n") + "\n").as_bytes()));
    fail_n(&d, "farm", 5);
    let dump = d.dir().join("by-hand.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();
    ok(&d.run(&["export", &dump_s]));
    d.kill();
    std::fs::remove_file(&d.segment).expect("remove the segment");
    d.restart_with(SMALL_SEGMENT, |_| {});
    ok(&d.run(&["import", &dump_s]));
    let again = d.run(&["import", &dump_s]);
    assert_ne!(code(&again), 0);
    assert!(stderr(&again).contains("was imported already"), "{}", stderr(&again));
    let mut want_dead: Vec<_> = jobs[..5].iter().map(|p| (p.clone(), 1, "it broke".to_string())).collect();
    want_dead.sort();
    assert_eq!(dead(&d, "farm"), want_dead);
    let mut want = jobs[5..].to_vec();
    want.sort();
    assert_eq!(d.drain("farm"), want);
    ok(&d.run(&["check"]));
}
