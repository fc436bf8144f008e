//! Whom a client trusts to be its daemon.
//!
//! Whoever listens at the socket path receives every payload the client pushes and chooses
//! the jobs it is served, so before saying a word (the handshake) a client checks:
//! - the daemon's uid from the kernel (`SO_PEERCRED`, not anything the daemon says), and
//! - the owner of the directory the socket sits in (whoever owns it can replace the socket),
//!
//! each against the trusted uids: the client's own (real and effective), root, the uids it
//! is configured to trust ([`crate::ConnectOptions::trusted_uids`], `$XTCQ_TRUST_UID`), and,
//! for the system daemon's socket [`SYSTEM_SOCKET`] only, the owner of its directory if only
//! root could have put it there (every directory above it root-owned and writable by no one
//! else: `/run/xtcq`, made by systemd for the `xtcq` service user). Root also makes home
//! directories and `/run/user/UID` for their users, so that rule vouches for nothing else.
//! Anything else is [`Error::UntrustedDaemon`], which names the uid found.

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use xtcq_proto::names;
use xtcq_proto::paths::SYSTEM_SOCKET;

use crate::Error;

/// The environment variable listing extra uids (names or numbers) a client trusts.
pub const TRUST_ENV: &str = "XTCQ_TRUST_UID";

/// The uids in `$XTCQ_TRUST_UID` (comma- or space-separated names or numbers).
pub(crate) fn env_trusted_uids() -> Result<Vec<u32>, Error> {
    match std::env::var_os(TRUST_ENV) {
        Some(v) => parse_trusted(&v.to_string_lossy()),
        None => Ok(Vec::new()),
    }
}

/// `v`'s comma- or space-separated names or numbers as uids.
fn parse_trusted(v: &str) -> Result<Vec<u32>, Error> {
    v.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| names::resolve_uid(s).map_err(|source| Error::TrustSetting { var: TRUST_ENV, source }))
        .collect()
}

/// The directory `socket` sits in.
fn socket_dir(socket: &Path) -> &Path {
    socket.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// The owner of `dir` if only root could have put `dir` where it is: every directory
/// above it (after resolving links) is root-owned and writable by no one else.
fn placed_by_root(dir: &Path) -> Option<u32> {
    let real = std::fs::canonicalize(dir).ok()?;
    let owner = std::fs::metadata(&real).ok()?.uid();
    let mut up = real.parent();
    while let Some(p) = up {
        let md = std::fs::metadata(p).ok()?;
        if md.uid() != 0 || md.mode() & 0o022 != 0 {
            return None;
        }
        up = p.parent();
    }
    Some(owner)
}

/// Refuses `stream` (connected to `socket`) unless the daemon and the socket's directory
/// belong to a trusted uid (see the module doc); `extra` are the configured ones.
pub(crate) fn check_daemon(stream: &UnixStream, socket: &Path, extra: &[u32]) -> Result<(), Error> {
    let dir = socket_dir(socket);
    let mut trusted = vec![0, rustix::process::getuid().as_raw(), rustix::process::geteuid().as_raw()];
    trusted.extend_from_slice(extra);
    if socket == Path::new(SYSTEM_SOCKET) {
        trusted.extend(placed_by_root(dir));
    }
    let refuse = |what: String, uid: u32| Error::UntrustedDaemon {
        path: socket.to_path_buf(),
        what,
        uid,
        found: names::uid_label(uid),
        trusted: names::uid_list_label(&dedup(trusted.clone())),
    };
    let dir_uid =
        std::fs::metadata(dir).map_err(|source| Error::Connect { path: socket.to_path_buf(), source })?.uid();
    if !trusted.contains(&dir_uid) {
        return Err(refuse(format!("its directory {} is owned by", dir.display()), dir_uid));
    }
    let cred = rustix::net::sockopt::socket_peercred(stream)
        .map_err(|e| Error::Connect { path: socket.to_path_buf(), source: e.into() })?;
    let uid = cred.uid.as_raw();
    if !trusted.contains(&uid) {
        let pid = cred.pid.as_raw_nonzero().get();
        return Err(refuse(format!("the process listening there (pid {pid}) runs as"), uid));
    }
    Ok(())
}

fn dedup(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_directory_below_root_only_directories_vouches_for_its_owner() {
        // `/` has no parent to ask: only root made it.
        assert_eq!(placed_by_root(Path::new("/")), Some(0));
        // Below a sticky, world-writable directory anyone may have made it.
        let tmp = tempfile::tempdir().unwrap();
        let world = std::fs::metadata(std::env::temp_dir()).unwrap().mode() & 0o002 != 0;
        if world {
            assert_eq!(placed_by_root(&tmp.path().join(".")), None);
        }
        assert_eq!(placed_by_root(Path::new("/no/such/dir")), None);
    }

    #[test]
    fn the_environment_list_takes_names_and_numbers() {
        assert_eq!(parse_trusted("root, 1234").unwrap(), vec![0, 1234]);
        assert_eq!(parse_trusted(" ").unwrap(), Vec::<u32>::new());
        let e = parse_trusted("0,no-such-user-xyz").unwrap_err().to_string();
        assert!(e.starts_with("XTCQ_TRUST_UID: no such user"), "{e}");
    }
}
