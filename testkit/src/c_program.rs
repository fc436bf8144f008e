//! C programs of the tests, compiled against the C API's header and the `libxtcq.a` cargo
//! built with the tests' package.
//!
//! - `-Wall -Wextra -Werror`: a warning in a test program fails the test, as it would a
//!   user's build.
//! - `$CC`, else `cc`; a missing compiler fails the test and says what to install.
//! - The caller's flags come after the defaults, so an `-O2` there wins over `-O1` (gcc and
//!   clang take the last `-O`): a benchmark's program is compiled here too.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::child::run_within;
use crate::exe::artifact_dir;

/// The workspace's root (the parent of `testkit/`, as of every member).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// Compiles `source` (relative to the workspace root) into `dir` with `extra` compiler flags
/// (after the defaults: `-O2` there wins) and returns the program.
pub fn compile_c(source: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    // Built as a dependency of the tests' package, cargo leaves the archive in deps/.
    let lib = artifact_dir().join("deps/libxtcq.a");
    assert!(
        lib.is_file(),
        "{} not found: cargo builds it with xtcq-capi (cargo build -p xtcq-capi)",
        lib.display()
    );
    let root = workspace_root();
    let exe = dir.join(Path::new(source).file_stem().expect("file name"));
    let out = run_within(
        Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .args(extra)
            .arg("-I")
            .arg(root.join("include"))
            .arg("-o")
            .arg(&exe)
            .arg(root.join(source))
            .arg(&lib)
            .args(["-lpthread", "-ldl", "-lm"]),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "cc {source} failed (is a C compiler installed? Debian: apt-get install gcc):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}
