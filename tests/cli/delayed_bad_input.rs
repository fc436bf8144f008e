//! Red-team tests of delayed jobs and retry backoff: bad input from the command line must be
//! a clear error (exit 2, naming the form wanted), never a panic; the daemon keeps serving.

use xtcq_testkit::*;

/// `--at` is split at its last six bytes to find an RFC 3339 offset; a value whose sixth
/// byte from the end falls inside a multi-byte character must be refused, not panic.
#[test]
fn push_at_with_a_multibyte_character_near_its_end_is_refused_not_a_panic() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    for bad in ["é12345", "2030-01-02T03:04:€1:00", "x€12345"] {
        let o = d.run(&["push", "q", "--at", bad, "x"]);
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "--at {bad:?} panicked: {err}");
        assert_eq!(code(&o), 2, "--at {bad:?}: {err}");
        assert!(err.contains("RFC 3339"), "--at {bad:?}: {err}");
    }
    // The daemon still serves.
    ok(&d.run(&["push", "q", "after"]));
    assert_eq!(ok(&d.run(&["steal", "q"])), "after\n");
}

/// `check` and `stats` account for every record: a delayed job is counted as delayed (the
/// operator checking after a push --delay must not see records gone from the totals).
#[test]
fn check_and_stats_count_delayed_records() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "--delay", "1h", "later"]));
    let check = ok(&d.run(&["check"]));
    assert!(check.contains("1 delayed"), "check does not count the delayed job:\n{check}");
    let stats = ok(&d.run(&["stats"]));
    assert!(stats.contains("1 delayed"), "stats does not count the delayed job:\n{stats}");
}
