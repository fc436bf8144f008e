//! The Python package (`python/`) as a user installs it: the wheel built by maturin,
//! installed into a fresh venv in a temporary directory, imported from outside the
//! repository with no variable set; then its pytest suite (`python/tests`) against that
//! install and a real daemon, and its type stubs checked by mypy (stubtest against the
//! built extension, and a strictly typed program).
//!
//! Without python3's venv and pip, maturin, pytest or mypy the test says what it skipped,
//! unless `XTCQ_REQUIRE_PYTHON=1` (set by CI), where that is a failure.

xtcq_testkit::test_threads_per_core!();

use std::path::Path;
use std::time::Duration;

use xtcq_testkit::python::{host_has_module, missing_python_tools, PythonEnv, WheelProfile};
use xtcq_testkit::{workspace_root, xtcqd_exe};

fn required() -> bool {
    std::env::var("XTCQ_REQUIRE_PYTHON").is_ok_and(|v| v == "1")
}

/// Whether to skip for `missing` (said; a failure when required).
fn skip_unless(missing: Option<String>, what: &str) -> bool {
    match missing {
        None => false,
        Some(why) => {
            assert!(!required(), "XTCQ_REQUIRE_PYTHON=1 but {why}");
            xtcq_testkit::skipped(&format!("{what}: {why}"));
            true
        }
    }
}

#[test]
fn the_installed_wheel_passes_the_pytest_suite_and_its_stubs_type_check() {
    let mut missing = missing_python_tools();
    if missing.is_none() && !host_has_module("pytest") {
        missing = Some("pytest not found for python3 (pip install pytest)".into());
    }
    if skip_unless(missing, "the Python package's tests") {
        return;
    }
    let env = PythonEnv::build(WheelProfile::Dev);
    let root = workspace_root();
    let found = env.xtcq_location();
    assert!(
        found.starts_with(env.dir()) && !found.starts_with(&root),
        "import xtcq found {} instead of the wheel installed in {}",
        found.display(),
        env.dir().display()
    );

    let tests = root.join("python/tests");
    let tests = tests.to_str().expect("UTF-8 path");
    let out = env.run_module(
        "pytest (python/tests)",
        &["pytest", "-q", "-p", "no:cacheprovider", tests],
        &[("XTCQ_DAEMON", &xtcqd_exe())],
        Duration::from_secs(600),
    );
    eprintln!("pytest: {}", out.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default());

    let no_mypy =
        (!host_has_module("mypy")).then(|| "mypy not found for python3 (pip install mypy)".to_string());
    if skip_unless(no_mypy, "the type check of the stubs") {
        return;
    }
    type_check(&env, &root);
}

/// stubtest: `xtcq/_xtcq.pyi` says what the built module has (names, arguments, defaults);
/// mypy --strict: a program using the whole API type-checks against the installed package.
fn type_check(env: &PythonEnv, root: &Path) {
    let out = env.run_module("mypy.stubtest xtcq", &["mypy.stubtest", "xtcq"], &[], Duration::from_secs(300));
    eprintln!("stubtest: {}", out.lines().last().unwrap_or_default());
    let typed = root.join("python/tests/typed_use.py");
    let out = env.run_module(
        "mypy --strict python/tests/typed_use.py",
        &["mypy", "--strict", "--no-incremental", typed.to_str().expect("UTF-8 path")],
        &[],
        Duration::from_secs(300),
    );
    eprintln!("mypy: {}", out.lines().last().unwrap_or_default());
}
