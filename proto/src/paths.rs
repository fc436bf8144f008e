//! Where the control socket and the segment are, resolved identically by `xtcqd` and by
//! every client.
//!
//! Socket, first match wins:
//! 1. an explicit path (`--socket PATH`);
//! 2. `$XTCQ_SOCKET`, if set and non-empty;
//! 3. `$RUNTIME_DIRECTORY/xtcqd.sock` — systemd sets `RUNTIME_DIRECTORY` for a service with
//!    `RuntimeDirectory=xtcq`, so the daemon lands in `/run/xtcq/xtcqd.sock`;
//! 4. `$XDG_RUNTIME_DIR/xtcq/xtcqd.sock` — a user's own daemon;
//! 5. `/tmp/xtcq-$UID/xtcqd.sock` when neither is set.
//!
//! A client resolving a default (steps 3–5) whose socket does not exist falls back to the
//! system daemon's [`SYSTEM_SOCKET`] if that exists ([`resolve_client_socket`]), so users of a
//! systemd-managed daemon need no flag.
//!
//! Segment (daemon only; clients learn it from the daemon): `--segment PATH`, else
//! `/dev/shm/xtcq-$UID`.
//!
//! Invariant: resolution only reads the environment; it creates nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming the socket.
pub const SOCKET_ENV: &str = "XTCQ_SOCKET";

/// The socket's file name inside its directory.
pub const SOCKET_FILE: &str = "xtcqd.sock";

/// The system daemon's socket (systemd, `RuntimeDirectory=xtcq`).
pub const SYSTEM_SOCKET: &str = "/run/xtcq/xtcqd.sock";

/// Where a resolved socket path came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketSource {
    /// Given explicitly.
    Explicit,
    /// `$XTCQ_SOCKET`.
    Env,
    /// A default (steps 3–5).
    Default,
    /// The client's fallback to [`SYSTEM_SOCKET`].
    System,
}

fn non_empty(v: Option<OsString>) -> Option<OsString> {
    v.filter(|s| !s.is_empty())
}

/// The default socket path (steps 3–5) given an environment lookup and a uid.
pub fn default_socket_path_with(env: impl Fn(&str) -> Option<OsString>, uid: u32) -> PathBuf {
    if let Some(dir) = non_empty(env("RUNTIME_DIRECTORY")) {
        // systemd joins several directories with ':'; the first is ours.
        let first = dir.to_string_lossy().split(':').next().unwrap_or("").to_string();
        if !first.is_empty() {
            return Path::new(&first).join(SOCKET_FILE);
        }
    }
    if let Some(dir) = non_empty(env("XDG_RUNTIME_DIR")) {
        return Path::new(&dir).join("xtcq").join(SOCKET_FILE);
    }
    PathBuf::from(format!("/tmp/xtcq-{uid}")).join(SOCKET_FILE)
}

/// Resolves the socket path (steps 1–5) given an environment lookup and a uid.
pub fn resolve_socket_with(
    explicit: Option<&Path>,
    env: impl Fn(&str) -> Option<OsString>,
    uid: u32,
) -> (PathBuf, SocketSource) {
    if let Some(p) = explicit.filter(|p| !p.as_os_str().is_empty()) {
        return (p.to_path_buf(), SocketSource::Explicit);
    }
    if let Some(p) = non_empty(env(SOCKET_ENV)) {
        return (PathBuf::from(p), SocketSource::Env);
    }
    (default_socket_path_with(env, uid), SocketSource::Default)
}

fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The default socket path for this process's environment (steps 3–5).
pub fn default_socket_path() -> PathBuf {
    default_socket_path_with(|k| std::env::var_os(k), uid())
}

/// The socket path the daemon uses: steps 1–5 for this process.
pub fn resolve_socket(explicit: Option<&Path>) -> PathBuf {
    resolve_socket_with(explicit, |k| std::env::var_os(k), uid()).0
}

/// The socket path a client uses: steps 1–5, then the [`SYSTEM_SOCKET`] fallback.
pub fn resolve_client_socket(explicit: Option<&Path>) -> (PathBuf, SocketSource) {
    let (p, src) = resolve_socket_with(explicit, |k| std::env::var_os(k), uid());
    if src == SocketSource::Default && !p.exists() && Path::new(SYSTEM_SOCKET).exists() {
        return (PathBuf::from(SYSTEM_SOCKET), SocketSource::System);
    }
    (p, src)
}

/// The default segment path for `uid`.
pub fn default_segment_path_for(uid: u32) -> PathBuf {
    PathBuf::from(format!("/dev/shm/xtcq-{uid}"))
}

/// The default segment path for this process.
pub fn default_segment_path() -> PathBuf {
    default_segment_path_for(uid())
}

/// What a file is, in words, for a message that refuses it: "regular file", "directory",
/// "symbolic link", "FIFO", "socket", "character device", "block device" or "special file".
///
/// ```
/// let t = std::fs::metadata("/").unwrap().file_type();
/// assert_eq!(xtcq_proto::paths::file_kind(t), "directory");
/// ```
pub fn file_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "regular file"
    } else if t.is_dir() {
        "directory"
    } else if t.is_symlink() {
        "symbolic link"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> =
            pairs.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn resolution_order() {
        let all = [
            ("XTCQ_SOCKET", "/e/s.sock"),
            ("RUNTIME_DIRECTORY", "/run/xtcq:/run/other"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ];
        assert_eq!(
            resolve_socket_with(Some(Path::new("/x.sock")), env(&all), 1000),
            (PathBuf::from("/x.sock"), SocketSource::Explicit)
        );
        assert_eq!(
            resolve_socket_with(None, env(&all), 1000),
            (PathBuf::from("/e/s.sock"), SocketSource::Env)
        );
        assert_eq!(resolve_socket_with(None, env(&all[1..]), 1000).0, PathBuf::from("/run/xtcq/xtcqd.sock"));
        assert_eq!(
            resolve_socket_with(None, env(&all[2..]), 1000).0,
            PathBuf::from("/run/user/1000/xtcq/xtcqd.sock")
        );
        assert_eq!(resolve_socket_with(None, env(&[]), 1000).0, PathBuf::from("/tmp/xtcq-1000/xtcqd.sock"));
    }

    #[test]
    fn empty_values_are_ignored() {
        let e = env(&[("XTCQ_SOCKET", ""), ("RUNTIME_DIRECTORY", ""), ("XDG_RUNTIME_DIR", "")]);
        assert_eq!(
            resolve_socket_with(Some(Path::new("")), e, 7),
            (PathBuf::from("/tmp/xtcq-7/xtcqd.sock"), SocketSource::Default)
        );
    }

    #[test]
    fn segment_default() {
        assert_eq!(default_segment_path_for(0), PathBuf::from("/dev/shm/xtcq-0"));
    }
}
