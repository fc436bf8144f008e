//! The last word of `cargo test`: one line per suite (an area's module) that skipped tests in
//! this run, and why (testkit's `skip` module records them). Named `zz_` because cargo runs a
//! package's test binaries in name order, so this one runs after every other binary of
//! `xtcq-tests`, where the skips are; `cargo test --test zz_skip_summary` alone prints nothing.
//!
//! It fails nothing: a skip that must not happen is refused where it happens, by the
//! suite's `XTCQ_REQUIRE_*` variable (set by `.ci/run`).

use std::collections::BTreeMap;
use std::io::Write;

#[test]
fn say_what_this_run_skipped() {
    let mut groups: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in xtcq_testkit::skip::take_recorded() {
        let (test, why) = line.split_once(": ").unwrap_or((&line, ""));
        // `area::module::test_name`: one line per area's module.
        let suite = test.rsplit_once("::").map_or(test, |(suite, _)| suite);
        *groups.entry((suite.to_string(), why.to_string())).or_default() += 1;
    }
    let mut out = std::io::stderr();
    if groups.is_empty() {
        return;
    }
    // Straight to stderr, past the harness's capture of a passing test.
    let _ = writeln!(out, "\n=== tests skipped in this run (install what they need, see docs):");
    for ((suite, why), n) in groups {
        let _ = writeln!(out, "SKIPPED {suite}: {n} test(s): {why}");
    }
}
