//! The Python package (`python/`) over the real `libxtcq.so` and a real daemon: runs its
//! pytest suite. Without python3 and pytest the test says it was skipped, unless
//! `XTCQ_REQUIRE_PYTHON=1` (set by CI), where that is a failure.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use xtcq_testkit::{artifact_dir, run_within, xtcqd_exe};

#[test]
fn the_python_package_passes_its_pytest_suite() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let required = std::env::var("XTCQ_REQUIRE_PYTHON").is_ok_and(|v| v == "1");
    let probe = Command::new("python3").args(["-c", "import pytest"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        assert!(!required, "XTCQ_REQUIRE_PYTHON=1 but python3 with pytest is missing (pip install pytest)");
        eprintln!("skipped: python3 with pytest not found (pip install pytest)");
        return;
    }
    // Built as a dependency of this package, cargo leaves the shared library in deps/.
    let lib = artifact_dir().join("deps/libxtcq.so");
    assert!(lib.is_file(), "{} not found (cargo build -p xtcq-capi)", lib.display());
    let out = run_within(
        Command::new("python3")
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests"])
            .current_dir(root)
            .env("XTCQ_LIB", &lib)
            .env("XTCQ_DAEMON", xtcqd_exe())
            .env_remove("XTCQ_SOCKET"),
        Duration::from_secs(300),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "pytest failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", stdout.lines().last().unwrap_or_default());
}
