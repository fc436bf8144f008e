//! The README's "A shell session", run as written on a fresh temporary directory with the
//! binaries installed the way its set-up says (`cargo install --locked --path daemon` and
//! `--path cli`, into a temporary `--root`).
//!
//! By default the install is the already-built `xtcq` and `xtcqd` copied into `ROOT/bin`,
//! as `cargo install` lays them out (a real install builds the workspace again in release
//! mode, minutes on a small machine); `XTCQ_TEST_CARGO_INSTALL=1` runs the README's own
//! `cargo install` lines instead. Either way the session's commands are the README's,
//! unedited; only the environment points the default socket and segment into the temporary
//! directory (`XTCQ_SOCKET`, `XTCQ_SEGMENT`), never at the user's own.

use xtcq_testkit::*;

use std::path::{Path, PathBuf};
use std::process::Command;

const README: &str = include_str!("../../README.md");
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The lines of the first ```sh block after the heading `heading`.
fn sh_block(heading: &str) -> Vec<String> {
    let after = README.split_once(&format!("\n{heading}\n")).map(|(_, a)| a).expect(heading);
    let body = after.split_once("```sh\n").map(|(_, b)| b).expect("a ```sh block");
    let body = body.split_once("```").map(|(b, _)| b).expect("the block's end");
    body.lines().map(str::to_string).collect()
}

/// The README's install commands (`cargo install ...` lines of its set-up), with `--root`.
fn install_commands() -> Vec<String> {
    let cmds: Vec<String> = sh_block("### Installing the binaries")
        .into_iter()
        .filter(|l| l.starts_with("cargo install "))
        .map(|l| l.split('#').next().unwrap_or_default().trim().to_string())
        .collect();
    assert!(
        cmds.iter().any(|c| c.contains("--path daemon")) && cmds.iter().any(|c| c.contains("--path cli")),
        "the README's set-up installs both binaries: {cmds:?}"
    );
    cmds
}

/// Installs both binaries under `root/bin` as the README says.
fn install(root: &Path) -> PathBuf {
    let bin = root.join("bin");
    let cmds = install_commands();
    if std::env::var_os("XTCQ_TEST_CARGO_INSTALL").is_some() {
        for c in &cmds {
            let line = format!("{c} --root {}", root.display());
            let o = run_bounded(Command::new("sh").args(["-c", &line]).current_dir(WORKSPACE), None);
            assert_eq!(code(&o), 0, "{line}: {}", stderr(&o));
        }
    } else {
        // What each `cargo install --path` puts in ROOT/bin: the package's binaries.
        std::fs::create_dir_all(&bin).expect("mkdir");
        let built = xtcq_testkit::exe::installable_binaries();
        let built = built.path();
        for (package, name) in [("cli", "xtcq"), ("daemon", "xtcqd")] {
            assert!(cmds.iter().any(|c| c.contains(&format!("--path {package}"))), "{cmds:?}");
            let manifest =
                std::fs::read_to_string(format!("{WORKSPACE}/{package}/Cargo.toml")).expect("manifest");
            assert!(manifest.contains(&format!("[[bin]]\nname = \"{name}\"")), "{package} builds {name}");
            std::fs::copy(built.join(name), bin.join(name)).expect("copy the built binary");
        }
    }
    assert!(bin.join("xtcq").is_file() && bin.join("xtcqd").is_file(), "both installed in {}", bin.display());
    bin
}

#[test]
fn the_readme_shell_session_runs_as_written_with_the_installed_binaries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin = install(&tmp.path().join("root"));
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    let session = sh_block("## A shell session").join("\n");
    // Stop the background daemon whatever happens; `shutdown` is the clean way.
    let script = format!(
        "set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n{session}\nxtcq shutdown\nwait\n"
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let o = run_bounded(
        Command::new("bash")
            .args(["-c", &script])
            .current_dir(&home)
            .env("PATH", path)
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", &home)
            .env("XTCQ_SOCKET", tmp.path().join("xtcqd.sock"))
            .env("XTCQ_SEGMENT", tmp.path().join("segment")),
        None,
    );
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(code(&o), 0, "the session failed:\n{script}\nstdout:\n{out}\nstderr:\n{err}");
    // What its comments say it prints: `steal --count 2` prints a and b, then the stats.
    assert!(out.contains("a\nb\n"), "{out}");
    assert!(out.contains("queue jobs") && out.contains("1 queued"), "{out}");
    assert!(!err.contains("panicked"), "{err}");
}
