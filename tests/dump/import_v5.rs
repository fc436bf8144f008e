//! A segment a layout-5 build wrote (before payload blocks; a committed fixture,
//! `fixtures/make-v5-segment.sh`, made with the build of b6080fa): this build's xtcqd refuses
//! to serve it, with the layout-version message that says how to keep its jobs; that path
//! works: `xtcq export --segment` reads it (read-only), and `xtcq import` of the dump puts
//! every queued job and dead letter once into a new segment; `--import-on-start` takes the
//! file directly too.

use std::path::Path;
use xtcq_testkit::*;

fn fixture(dir: &Path) -> String {
    let old = dir.join("old-v5.seg");
    let gz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/segment-v5.bin.gz");
    let o = run_bounded(std::process::Command::new("gzip").arg("-dc").arg(&gz), None);
    std::fs::write(&old, &o.stdout).expect("write the fixture");
    // Owner-only, as a daemon leaves its segment (xtcqd refuses a wider one first).
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    old.to_str().expect("utf-8").to_string()
}

/// The payloads of `q`'s dead letters whose last error is "exit 3", sorted.
fn dead(d: &Daemon, q: &str) -> Vec<String> {
    let o = d.run(&["dead", q, "--json"]);
    let out = ok(&o);
    assert_eq!(
        out.matches("\"last_error\": \"exit 3\"").count(),
        out.matches("\"payload\"").count(),
        "{out}"
    );
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("\"payload\": \"")?.strip_suffix('"').map(str::to_string))
        .collect();
    v.sort();
    v
}

#[test]
fn a_layout_5_segment_is_refused_then_exported_and_imported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = fixture(dir.path());
    let dump = dir.path().join("v5.dump");
    let dump_s = dump.to_str().expect("utf-8").to_string();

    // Served as it is: refused, saying what to do.
    let o =
        run_bounded(xtcqd().arg("--socket").arg(dir.path().join("old.sock")).args(["--segment", &old]), None);
    assert_ne!(code(&o), 0, "xtcqd served a layout-5 segment");
    let e = stderr(&o);
    let reads = format!("layout version 5; this build reads version {}", xtcq_shm::layout::LAYOUT_VERSION);
    assert!(e.contains(&reads), "{e}");
    assert!(e.contains("xtcq export --segment") && e.contains("xtcq import"), "{e}");

    // Exported with this build, imported into a new segment: every job once.
    let d = Daemon::start();
    let o = d.run(&["export", "--segment", &old, &dump_s]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    ok(&d.run(&["import", &dump_s]));
    assert_eq!(d.drain("alpha"), vec!["a1", "a2", "a3"]);
    assert_eq!(d.drain("beta"), vec!["b1", "b2"]);
    assert_eq!(dead(&d, "alpha"), vec!["ad1", "ad2"]);
    assert_eq!(dead(&d, "beta"), vec!["bd1"]);
    ok(&d.run(&["check"]));
}

#[test]
fn a_layout_5_segment_imports_on_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = fixture(dir.path());
    let flags: Vec<&str> = SMALL_SEGMENT.iter().copied().chain(["--import-on-start", old.as_str()]).collect();
    let d = Daemon::builder().in_dir(dir).flags(&flags).start();
    assert_eq!(d.drain("alpha"), vec!["a1", "a2", "a3"]);
    assert_eq!(d.drain("beta"), vec!["b1", "b2"]);
    ok(&d.run(&["check"]));
}
