//! Skipped tests, said and counted: a test that cannot run here (a tool not installed, not
//! root) calls [`skipped`], which says so at once on stderr (past the harness's capture) and
//! records one line for the run; `tests/tests/zz_skip_summary.rs`, the last test binary of
//! `xtcq-tests` that cargo runs (it runs them in name order), prints them again, grouped, at
//! the end of `cargo test`, so that a skipped suite does not read as a passed one.
//!
//! The record is a file per `cargo test` run: test binaries are children of cargo, so their
//! parent pid names the run (`$TMPDIR/xtcq-test-skips-<uid>/<cargo pid>`). The summary reads
//! and removes it, and removes the files of runs whose cargo is gone.

use std::io::Write;
use std::path::PathBuf;

/// The directory of the run records.
fn dir() -> PathBuf {
    // SAFETY: getuid has no preconditions.
    std::env::temp_dir().join(format!("xtcq-test-skips-{}", unsafe { libc::getuid() }))
}

/// This run's record (named by the cargo process that started this test binary).
pub fn run_file() -> PathBuf {
    dir().join(std::os::unix::process::parent_id().to_string())
}

/// The test binary's name without cargo's hash (`cli_access-0a1b2c…` → `cli_access`).
fn suite() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe.as_ref().and_then(|e| e.file_stem()).map(|s| s.to_string_lossy().into_owned());
    let stem = stem.unwrap_or_else(|| "?".into());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
        _ => stem,
    }
}

/// Says that the calling test skips, and why (`"nats-server not installed (apt-get install
/// nats-server)"`: say what to install), and records it for the run's summary. The caller
/// then returns. A suite that must not skip in CI checks its `XTCQ_REQUIRE_*` first
/// ([`require_or_skip`]).
pub fn skipped(why: &str) {
    // libtest names each test's thread after the test.
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let line = format!("{}::{test}: {}", suite(), why.replace('\n', " "));
    let _ = writeln!(std::io::stderr(), "SKIPPED {line}");
    let _ = std::fs::create_dir_all(dir());
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(run_file()) {
        // One write of one line: appends from parallel tests do not interleave.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// [`skipped`] unless `$var` is `1`, where the skip is a failure (CI sets it where it
/// installs the tool). Returns true: the caller returns.
pub fn require_or_skip(var: &str, why: &str) -> bool {
    assert!(std::env::var(var).map_or(true, |v| v != "1"), "{var}=1 but {why}");
    skipped(why);
    true
}

/// This run's skips so far, one per line, removing the record; also removes the records of
/// runs whose cargo has exited.
pub fn take_recorded() -> Vec<String> {
    let mine = run_file();
    let text = std::fs::read_to_string(&mine).unwrap_or_default();
    let _ = std::fs::remove_file(&mine);
    for e in std::fs::read_dir(dir()).into_iter().flatten().flatten() {
        let pid = e.file_name().to_string_lossy().parse::<i32>().ok();
        // SAFETY: kill with signal 0 only checks that the process exists.
        if pid.is_some_and(|p| unsafe { libc::kill(p, 0) } != 0) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    text.lines().map(str::to_string).collect()
}
