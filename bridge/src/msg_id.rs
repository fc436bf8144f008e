//! `out`'s message ids: HMAC-SHA256, under a secret only the bridge's user can read, of the
//! host name, the segment's creation time, and the job's record index and birth generation.
//!
//! Why keyed: the stream drops a message whose `Nats-Msg-Id` it saw within its duplicate
//! window. An id that others can compute (it used to be those four values in clear, seen by
//! every subscriber) lets anyone allowed to publish on the subject publish it first: the
//! real job is then "a duplicate", acked on the producer host and run nowhere. Under the
//! secret the id is still the same for every local attempt of a job, and across restarts of
//! `out` (the secret is kept in the `--id-secret` file), so a job re-published after a crash
//! between publish and local ack is still dropped; nobody without the secret can tell which
//! id comes next.
//!
//! The file, created on first use (random 32 bytes, mode 0600, written under a temporary
//! name and linked into place, so two bridges starting at once end with one secret):
//!
//! ```text
//! xtcq-bridge-id-secret 1
//! 64 HEX DIGITS
//! ```
//!
//! It is refused when it is a symbolic link, not a regular file, not owned by the bridge's
//! user, or readable or writable by anyone else (a secret others know or can replace is no
//! secret). Losing it (or the host name changing) changes the ids: a job re-published after
//! that, inside the duplicate window, is stored a second time.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use ring::{hmac, rand::SecureRandom};
use xtcq_client::JobId;

use crate::error::BridgeError;

const MAGIC: &str = "xtcq-bridge-id-secret 1";

/// The ids of one segment's jobs.
pub struct MsgIds {
    key: hmac::Key,
    /// Host name and the segment's creation time, the ids' context.
    context: Vec<u8>,
}

impl MsgIds {
    /// Ids under `secret` for the segment created at `segment_ns` on this host.
    pub fn new(secret: &[u8; 32], segment_ns: u64) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let mut context = b"xtcq-bridge msg id 1\0".to_vec();
        context.extend_from_slice(host.trim().as_bytes());
        context.push(0);
        context.extend_from_slice(&segment_ns.to_le_bytes());
        MsgIds { key: hmac::Key::new(hmac::HMAC_SHA256, secret), context }
    }

    /// The id of job `id`: the same for each of its attempts, 128 bits of the MAC in hex.
    pub fn id(&self, id: JobId) -> String {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(&self.context);
        ctx.update(&id.index.to_le_bytes());
        ctx.update(&id.birth.to_le_bytes());
        let tag = ctx.sign();
        tag.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// What reading the file found.
enum Found {
    Missing,
    Key([u8; 32]),
}

/// The secret in `path`, created if missing.
pub fn load_or_create(path: &Path) -> Result<[u8; 32], BridgeError> {
    let bad = |message: String| BridgeError::IdSecret { path: path.to_path_buf(), message };
    if let Found::Key(k) = read(path).map_err(bad)? {
        return Ok(k);
    }
    let mut key = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| bad("the system's random source failed".into()))?;
    match create(path, &key) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "created the message id secret (mode 0600); keep it with this host");
            Ok(key)
        }
        // Another bridge created it first: use that one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read(path).map_err(bad)? {
            Found::Key(k) => Ok(k),
            Found::Missing => Err(bad("it vanished while being created; start again".into())),
        },
        Err(e) => Err(bad(format!("cannot create it: {e}"))),
    }
}

/// Writes `key` under a temporary name of our own, then links it to `path`: `link` fails
/// when `path` exists, and nobody reads a half-written file.
fn create(path: &Path, key: &[u8; 32]) -> std::io::Result<()> {
    let mut salt = [0u8; 8];
    let _ = ring::rand::SystemRandom::new().fill(&mut salt);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.{}", std::process::id(), hex(&salt)));
    let text = format!("{MAGIC}\n{}\n", hex(key));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    written?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// The key in `path`, after checking who may read and change it.
fn read(path: &Path) -> Result<Found, String> {
    // O_NONBLOCK: a FIFO planted at the path must not hang the bridge; refused below.
    let f =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let mut f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err("is a symbolic link; give the file itself".into())
        }
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let md = f.metadata().map_err(|e| format!("cannot read its mode: {e}"))?;
    if !md.is_file() {
        return Err("is not a regular file".into());
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if md.uid() != me {
        return Err(format!(
            "is owned by uid {}, not by this bridge's user (uid {me}): whoever owns it can read or \
             replace the secret; give a file of this user's",
            md.uid()
        ));
    }
    if md.mode() & 0o077 != 0 {
        return Err(format!(
            "has mode {:04o}: other users may read or change the secret (and so pre-empt this \
             bridge's jobs); chmod 600 it",
            md.mode() & 0o7777
        ));
    }
    let mut text = String::new();
    (&mut f).take(4096).read_to_string(&mut text).map_err(|e| format!("cannot read it: {e}"))?;
    parse(&text).map(Found::Key)
}

fn parse(text: &str) -> Result<[u8; 32], String> {
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(format!("not an id secret file (its first line is not {MAGIC:?})"));
    }
    let digits = lines.next().unwrap_or_default().trim();
    let bytes: Option<Vec<u8>> = (0..digits.len())
        .step_by(2)
        .map(|i| digits.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok()))
        .collect();
    bytes
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| "its second line is not 64 hex digits".into())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_owner_only_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("id.secret");
        let k = load_or_create(&path).expect("create");
        assert_eq!(load_or_create(&path).expect("read"), k, "the same secret on the next start");
        let mode = std::fs::metadata(&path).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1, "no temporary file left");
    }

    #[test]
    fn ids_differ_by_job_segment_and_secret_and_are_stable() {
        let a = MsgIds::new(&[1; 32], 7);
        let id = JobId { index: 3, birth: 1 };
        assert_eq!(a.id(id), MsgIds::new(&[1; 32], 7).id(id));
        assert_ne!(a.id(id), a.id(JobId { index: 4, birth: 1 }));
        assert_ne!(a.id(id), a.id(JobId { index: 3, birth: 2 }));
        assert_ne!(a.id(id), MsgIds::new(&[1; 32], 8).id(id));
        assert_ne!(a.id(id), MsgIds::new(&[2; 32], 7).id(id));
        assert_eq!(a.id(id).len(), 32);
    }

    #[test]
    fn a_bad_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("id.secret");
        std::fs::write(&path, "junk\n").expect("write");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        assert!(load_or_create(&path).is_err());
        assert!(parse(&format!("{MAGIC}\n{}\n", "ab".repeat(31))).is_err());
    }
}
