//! One duration syntax in both programs: `xtcqd`'s `--idle-timeout`, `--io-timeout` and
//! `--lease-scan-interval` take the humantime form `xtcq` takes (`500ms`, `5s`, `2m`); a bare
//! number where its unit was milliseconds is refused with a message that says the form.

use xtcq_testkit::*;

#[test]
fn xtcqd_takes_humantime_durations_and_refuses_a_unitless_scan_interval() {
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--idle-timeout", "2m", "--io-timeout", "1500ms", "--lease-scan-interval", "50ms"]);
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q", "--lease", "200ms"]));
    ok(&d.run(&["push", "q", "x", "--timeout", "5s"]));
    drop(d);

    let dir = tempfile::tempdir().expect("tempdir");
    let o = run_bounded(
        xtcqd()
            .arg("--socket")
            .arg(dir.path().join("s"))
            .arg("--segment")
            .arg(dir.path().join("g"))
            .args(["--lease-scan-interval", "20"]),
        None,
    );
    let e = stderr(&o);
    assert_eq!(code(&o), 2, "{e}");
    assert!(e.contains("say 20ms or 20s"), "{e}");
    // Neither binary documents a bare unit any more.
    for help in [run_bounded(xtcqd().arg("--help"), None), d_help()] {
        let t = stdout(&help);
        assert!(!t.contains("<SECS>") && !t.contains("<MS>"), "{t}");
    }
    let t = stdout(&run_bounded(xtcqd().arg("--help"), None));
    assert!(t.contains("--io-timeout <DURATION>") && t.contains("--lease-scan-interval <DURATION>"), "{t}");
}

fn d_help() -> std::process::Output {
    run_bounded(std::process::Command::new(xtcq_exe()).args(["help", "work"]), None)
}
