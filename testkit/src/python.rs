//! The Python package as a user gets it: the wheel maturin builds from `python/`, installed
//! with pip into a fresh virtual environment in a temporary directory, run from a directory
//! outside the repository with no variable pointing anywhere.
//!
//! - What it needs from the host: `python3` with `venv`, `pip` and `maturin` (the build
//!   backend, from PyPI: `pip install maturin`), and the Rust toolchain. The environment is
//!   made with `--system-site-packages` so that the host's pytest and mypy run in it (no
//!   index is needed); the package itself comes only from the wheel, which
//!   [`PythonEnv::xtcq_location`] lets a test check.
//! - The wheel's crate is built in `python` under the target directory (its own cargo
//!   workspace and lock, `--locked`), so a rebuild is incremental.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::child::run_within;
use crate::exe::artifact_dir;
use crate::workspace_root;

/// The cargo profile the wheel is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WheelProfile {
    /// Quick to build, debug assertions on: for the tests.
    Dev,
    /// As `pip install ./python` builds it (fat LTO): for timings.
    Release,
}

/// A fresh venv with the xtcq wheel installed.
pub struct PythonEnv {
    dir: tempfile::TempDir,
    /// The venv's interpreter.
    pub python: PathBuf,
}

/// Why the host cannot build and install the wheel (what to install), or `None`.
pub fn missing_python_tools() -> Option<String> {
    let ok = |args: &[&str]| Command::new("python3").args(args).output().is_ok_and(|o| o.status.success());
    if !ok(&["-c", "import venv, pip"]) {
        return Some(
            "python3 with venv and pip not found (Debian: apt-get install python3-venv python3-pip)".into(),
        );
    }
    if !ok(&["-m", "maturin", "--version"]) {
        return Some("maturin not found for python3 (pip install maturin)".into());
    }
    None
}

/// Whether the host's python3 can import `module` (pytest, mypy): the venv sees it too.
pub fn host_has_module(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn checked(what: &str, cmd: &mut Command, limit: Duration) -> String {
    let out = run_within(cmd, limit);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{text}", out.status);
    text
}

impl PythonEnv {
    /// Builds the wheel with `profile`, makes a venv in a new temporary directory and
    /// installs the wheel into it. Call [`missing_python_tools`] first.
    pub fn build(profile: WheelProfile) -> PythonEnv {
        let dir = tempfile::Builder::new().prefix("xtcq-python-").tempdir().expect("temporary directory");
        let wheels = dir.path().join("wheels");
        let mut build = Command::new("python3");
        build
            .args(["-m", "maturin", "build", "--locked", "--quiet", "--manifest-path"])
            .arg(workspace_root().join("python/Cargo.toml"))
            .arg("--out")
            .arg(&wheels)
            .env("CARGO_TARGET_DIR", artifact_dir().parent().expect("target directory").join("python"));
        if profile == WheelProfile::Release {
            build.arg("--release");
        }
        checked("maturin build (python/)", &mut build, Duration::from_secs(1200));
        let wheel = std::fs::read_dir(&wheels)
            .expect("the wheels directory")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .expect("maturin made no wheel");
        let venv = dir.path().join("venv");
        checked(
            "python3 -m venv",
            Command::new("python3")
                .args(["-m", "venv", "--without-pip", "--system-site-packages"])
                .arg(&venv),
            Duration::from_secs(120),
        );
        let python = venv.join("bin/python");
        checked(
            "pip install (the wheel)",
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-index",
                    "--no-deps",
                    "--disable-pip-version-check",
                ])
                .arg(&wheel),
            Duration::from_secs(300),
        );
        PythonEnv { dir, python }
    }

    /// The temporary directory (outside the repository): run Python from here.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A command of the venv's interpreter, run from [`dir`](Self::dir), with no variable
    /// that could lead it to the source tree or another install.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.current_dir(self.dir())
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        // Python makes SIGINT a KeyboardInterrupt only if SIGINT is not ignored when it starts,
        // and an ignored signal stays ignored across exec: `cargo test` run in the background
        // by a non-interactive shell (`cargo test &`, nohup) ignores it, and the suite's Ctrl-C
        // tests failed there.
        // SAFETY: signal(2) is async-signal-safe, and the closure touches nothing else.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            })
        };
        cmd
    }

    /// Where `import xtcq` finds the package in the venv.
    pub fn xtcq_location(&self) -> PathBuf {
        let text = checked(
            "import xtcq",
            self.command().args(["-c", "import xtcq, xtcq._xtcq; print(xtcq.__file__)"]),
            Duration::from_secs(60),
        );
        PathBuf::from(text.trim())
    }

    /// Runs `python -m ARGS` in the venv (bounded by `limit`); panics with its output when it
    /// fails, else returns it.
    pub fn run_module(&self, what: &str, args: &[&str], envs: &[(&str, &Path)], limit: Duration) -> String {
        let mut cmd = self.command();
        cmd.arg("-m").args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        checked(what, &mut cmd, limit)
    }
}
