//! Whether `xtcq work`'s command can be started at all, checked before any job is taken.
//!
//! - A command that cannot start is not the job's fault: without this check each job was
//!   claimed, failed with "cannot run" and counted an attempt, until the queue's jobs were
//!   all dead letters.
//! - The check is execvp's lookup: a name with a `/` is that file; a bare name is looked for
//!   in each directory of `PATH` (`/bin:/usr/bin` when `PATH` is unset). It must be a regular
//!   file with an execute bit.
//! - It cannot see everything `exec` will (an interpreter line naming a missing program, a
//!   file removed meanwhile): a spawn that fails later gives its job back uncounted and stops
//!   the worker (`work::start_registered`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// The file `exec` would run for `program` (looked up once: a lookup in every spawn tries
/// each `PATH` directory with an `execve` of its own); refused, with what was looked at,
/// when there is none.
pub fn resolve(program: &str) -> Result<PathBuf> {
    if program.is_empty() {
        bail!("the command to run is empty: give it after `--`, e.g. `xtcq work QUEUE -- sh -c '...'`");
    }
    if program.contains('/') {
        return match kind(Path::new(program)) {
            Ok(()) => Ok(PathBuf::from(program)),
            Err(why) => bail!("cannot run {program:?}: {why}"),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    if let Some(found) = dirs.iter().map(|d| d.join(program)).find(|p| kind(p).is_ok()) {
        return Ok(found);
    }
    bail!(
        "cannot run {program:?}: no executable of that name in PATH ({}); give its full path, \
         or fix PATH",
        std::env::join_paths(&dirs).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
    )
}

/// `Ok` for an executable regular file, else why not.
fn kind(p: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(p).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!(
            "{} is a {}, not a program",
            p.display(),
            xtcq_proto::paths::file_kind(meta.file_type())
        ));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{} is not executable (chmod +x it)", p.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::resolve as check;

    #[test]
    fn programs_are_found_as_exec_finds_them() {
        assert!(check("sh").is_ok());
        assert!(check("/bin/sh").is_ok());
        let e = check("no-such-program-xtcq").unwrap_err().to_string();
        assert!(e.contains("no executable of that name in PATH"), "{e}");
        let e = check("/nonexistent/x").unwrap_err().to_string();
        assert!(e.contains("No such file"), "{e}");
        let e = check("/").unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "echo hi\n").unwrap();
        let e = check(plain.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("not executable"), "{e}");
        assert!(check("").is_err());
    }
}
