//! The daemon's files as a trust boundary (docs/src/guarantees/threat-model.md): symbolic links and
//! files planted by another local user in the socket directory or at the segment path are
//! refused, and nothing is written through them.
//!
//! Cross-user tests create their own unprivileged user when run as root and print
//! "skipped" otherwise. The symbolic-link tests turn `fs.protected_symlinks` and
//! `fs.protected_regular` off while they run (restored after), so that what refuses the
//! link is the daemon, not the kernel.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use xtcq_testkit::*;

/// A user created for one test (as root), removed when dropped.
struct SystemUser {
    user: String,
}

impl SystemUser {
    fn create(tag: &str) -> SystemUser {
        let user = format!("xtq{tag}{}", std::process::id() % 100_000);
        let s = Command::new("useradd").args(["-M", "-U", "-s", "/bin/false", &user]).status();
        assert!(s.expect("useradd").success(), "useradd {user}");
        SystemUser { user }
    }

    fn id(&self, flag: &str) -> u32 {
        let o = Command::new("id").args([flag, &self.user]).output().expect("id");
        String::from_utf8_lossy(&o.stdout).trim().parse().expect("id prints a number")
    }

    fn uid(&self) -> u32 {
        self.id("-u")
    }

    fn gid(&self) -> u32 {
        self.id("-g")
    }
}

impl Drop for SystemUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.user).status();
        let _ = Command::new("groupdel").arg(&self.user).stderr(std::process::Stdio::null()).status();
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Serialises the tests that change the kernel's link protections, which are global.
static SYSCTL: Mutex<()> = Mutex::new(());

/// Sets `fs.protected_symlinks` and `fs.protected_regular` to 0 while alive (where this
/// process may), and restores them on drop.
struct KernelGuardsOff {
    saved: Vec<(&'static str, String)>,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl KernelGuardsOff {
    fn new() -> KernelGuardsOff {
        let lock = SYSCTL.lock().unwrap_or_else(|p| p.into_inner());
        let mut saved = Vec::new();
        for p in ["/proc/sys/fs/protected_symlinks", "/proc/sys/fs/protected_regular"] {
            if let Ok(v) = std::fs::read_to_string(p) {
                if std::fs::write(p, "0").is_ok() {
                    saved.push((p, v));
                } else {
                    eprintln!("note: cannot set {p} to 0 (it is {}); the kernel may guard too", v.trim());
                }
            }
        }
        KernelGuardsOff { saved, _lock: lock }
    }
}

impl Drop for KernelGuardsOff {
    fn drop(&mut self) {
        for (p, v) in &self.saved {
            let _ = std::fs::write(p, v.trim());
        }
    }
}

/// A directory like `/tmp`: root-owned, world-writable, sticky.
fn shared_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

fn lchown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).expect("lchown");
}

fn refused(socket: &Path, segment: &Path, extra: &[&str]) -> String {
    let (st, err) = run_daemon_once(socket, segment, &[MEDIUM_SEGMENT, extra].concat());
    assert!(!st.success(), "xtcqd should refuse; stderr:\n{err}");
    err
}

#[test]
fn a_symlinked_socket_directory_is_refused() {
    let _k = KernelGuardsOff::new();
    let shared = shared_dir();
    let target = shared_dir();
    // `/tmp/xtcq-$UID -> /tmp`: the target is root-owned and sticky, which passed before.
    let link = shared.path().join("xtcq-0");
    std::os::unix::fs::symlink(target.path(), &link).unwrap();
    let err = refused(&link.join("xtcqd.sock"), &shared.path().join("seg"), &[]);
    assert!(err.contains("symbolic link"), "{err}");
    assert!(err.contains(&link.display().to_string()), "{err}");
    let left: Vec<_> = std::fs::read_dir(target.path()).unwrap().collect();
    assert!(left.is_empty(), "files created through the link: {left:?}");
    assert!(!shared.path().join("seg").exists(), "a segment was created after the refusal");
}

#[test]
fn a_planted_lock_file_link_is_refused_and_its_target_untouched() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to plant a link as another user");
        return;
    }
    let _k = KernelGuardsOff::new();
    let mallory = SystemUser::create("l");
    let shared = shared_dir();
    let private = tempfile::tempdir().unwrap();
    let victim = private.path().join("victim");
    std::fs::write(&victim, "root-only secret\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let socket = shared.path().join("xtcqd.sock");
    let lock = shared.path().join("xtcqd.sock.lock");
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    lchown(&lock, mallory.uid(), mallory.gid());
    let err = refused(&socket, &shared.path().join("seg"), &[]);
    assert!(err.contains("xtcqd.sock.lock") && err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root-only secret\n", "victim overwritten");
    assert!(!socket.exists() && !shared.path().join("seg").exists());
}

#[test]
fn a_planted_lock_file_of_another_user_is_refused_unwritten() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to plant a file as another user");
        return;
    }
    let _k = KernelGuardsOff::new();
    let mallory = SystemUser::create("f");
    let shared = shared_dir();
    let lock = shared.path().join("xtcqd.sock.lock");
    std::fs::write(&lock, "mallory's\n").unwrap();
    std::os::unix::fs::chown(&lock, Some(mallory.uid()), Some(mallory.gid())).unwrap();
    let err = refused(&shared.path().join("xtcqd.sock"), &shared.path().join("seg"), &[]);
    assert!(err.contains(&format!("owned by uid {} ({})", mallory.uid(), mallory.user)), "{err}");
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), "mallory's\n");
}

#[test]
fn a_group_writable_socket_directory_needs_to_be_the_configured_group() {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().join("run");
    std::fs::create_dir(&sock_dir).unwrap();
    std::fs::set_permissions(&sock_dir, std::fs::Permissions::from_mode(0o770)).unwrap();
    let gid = std::fs::metadata(&sock_dir).unwrap().gid();
    let socket = sock_dir.join("xtcqd.sock");
    let segment = dir.path().join("seg");
    let err = refused(&socket, &segment, &[]);
    assert!(err.contains("group-writable") && err.contains("--group"), "{err}");
    assert!(!segment.exists());
    // With that group configured, the same directory is accepted for the socket; the
    // daemon-private state file may not live where group members can replace it.
    let gid = gid.to_string();
    let err = refused(&socket, &segment, &["--group", &gid]);
    assert!(err.contains("--state"), "{err}");
    let state = dir.path().join("xtcqd.state");
    let log = dir.path().join("log");
    let mut child = spawn_daemon(
        &socket,
        &segment,
        &log,
        &[MEDIUM_SEGMENT, &["--group", &gid, "--state", state.to_str().unwrap()]].concat(),
        &[],
    );
    let up = (0..1000).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "xtcqd did not start with --group {gid}: {}", std::fs::read_to_string(&log).unwrap());
}

/// A real segment (made by a daemon that then stopped) at `dir/segment`, so that only the
/// ownership and mode checks can refuse to adopt it.
fn stopped_daemon_segment(dir: &Path) -> std::path::PathBuf {
    let mut d = Daemon::builder().at(dir).flags(MEDIUM_SEGMENT).start();
    assert!(d.stop().success());
    d.segment.clone()
}

#[test]
fn a_segment_with_modes_wider_than_configured_is_not_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let segment = stopped_daemon_segment(dir.path());
    std::fs::set_permissions(&segment, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = refused(&dir.path().join("xtcqd.sock"), &segment, &[]);
    assert!(err.contains("mode 0644") && err.contains("wider than the configured 0600"), "{err}");
    assert!(err.contains("chmod 600"), "says what to do: {err}");
    assert!(err.contains("--recreate") || err.contains("remove it"), "{err}");
    // Put back to its mode, it is adopted as before.
    std::fs::set_permissions(&segment, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut d = Daemon::builder().at(dir.path()).flags(MEDIUM_SEGMENT).start();
    assert!(d.log_text().contains("segment adopted"), "{}", d.log_text());
    assert!(d.stop().success());
}

#[test]
fn a_segment_planted_by_another_user_is_not_adopted() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to create a user who plants the segment");
        return;
    }
    let mallory = SystemUser::create("s");
    let dir = tempfile::tempdir().unwrap();
    let segment = stopped_daemon_segment(dir.path());
    let before = std::fs::read(&segment).unwrap();
    for mode in [0o666, 0o600] {
        std::os::unix::fs::chown(&segment, Some(mallory.uid()), Some(mallory.gid())).unwrap();
        std::fs::set_permissions(&segment, std::fs::Permissions::from_mode(mode)).unwrap();
        for extra in [&[][..], &["--recreate"][..]] {
            let err = refused(&dir.path().join("xtcqd.sock"), &segment, extra);
            let owner = format!("owned by uid {} ({})", mallory.uid(), mallory.user);
            assert!(err.contains(&owner) && err.contains("not by the daemon's uid 0 (root)"), "{err}");
            assert!(err.contains("remove it"), "says what to do: {err}");
            assert_eq!(std::fs::read(&segment).unwrap(), before, "the planted file was written");
        }
    }
}

/// A child killed when dropped (before the user it runs as is removed).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `xtcqd` as `user` on `dir/xtcqd.sock`, as an impostor at a victim's socket path
/// would (allowing root in, so that only the client's own check refuses it).
fn spawn_daemon_as(user: &SystemUser, dir: &Path) -> Killed {
    use std::os::unix::process::CommandExt;
    let socket = dir.join("xtcqd.sock");
    let child = xtcqd()
        .arg("--socket")
        .arg(&socket)
        .arg("--segment")
        .arg(dir.join("segment"))
        .args(MEDIUM_SEGMENT)
        .args(["--allow-uid", "0", "--group", &user.gid().to_string()])
        .uid(user.uid())
        .gid(user.gid())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn xtcqd as another user");
    let child = Killed(child);
    let up = (0..1000).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    assert!(up, "{}'s xtcqd did not start", user.user);
    child
}

#[test]
fn a_client_refuses_a_daemon_run_by_a_user_it_does_not_trust() {
    if !is_root() {
        xtcq_testkit::skipped("needs root to run a daemon as another user");
        return;
    }
    let mallory = SystemUser::create("d");
    let label = format!("uid {} ({})", mallory.uid(), mallory.user);
    // A shared, root-owned sticky directory (like /tmp): only the peer's uid gives it away.
    let shared = shared_dir();
    // A directory mallory owns: its owner gives it away before we even look at the peer.
    let owned = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(owned.path(), Some(mallory.uid()), Some(mallory.gid())).unwrap();
    // A directory of mallory's that root made, below root-only directories (a home
    // directory, /run/user/UID): that root placed it vouches for nothing but the system
    // daemon's own /run/xtcq.
    let root_only = tempfile::Builder::new().prefix("xtcq-trust-test-").tempdir_in("/run").unwrap();
    std::fs::set_permissions(root_only.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = root_only.path().join("mallory");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(mallory.uid()), Some(mallory.gid())).unwrap();
    for (dir, what) in
        [(shared.path(), "(pid "), (owned.path(), "is owned by"), (home.as_path(), "is owned by")]
    {
        let impostor = spawn_daemon_as(&mallory, dir);
        let socket = dir.join("xtcqd.sock");
        let e = xtcq_client::Client::connect(Some(&socket)).expect_err("an untrusted daemon is refused");
        let text = e.to_string();
        assert!(matches!(e, xtcq_client::Error::UntrustedDaemon { .. }), "{e:?}");
        assert!(e.is_unreachable(), "maps to the CLI's exit 4");
        assert!(text.contains(&label) && text.contains(what), "{text}");
        assert!(text.contains(&format!("XTCQ_TRUST_UID={}", mallory.uid())), "says what to do: {text}");
        // Trusted by configuration, the same daemon is used.
        let opts = xtcq_client::ConnectOptions {
            socket: Some(socket.clone()),
            trusted_uids: vec![mallory.uid()],
            ..Default::default()
        };
        let c = xtcq_client::Client::connect_with(opts).expect("a trusted uid is accepted");
        assert!(c.list_queues().is_ok());
        drop(c);
        drop(impostor);
    }
}

#[test]
fn bad_flags_and_an_over_long_socket_path_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("run");
    let segment = dir.path().join("seg");
    let long = sub.join(format!("{}.sock", "s".repeat(120)));
    let err = refused(&long, &segment, &[]);
    assert!(err.contains("at most 107"), "{err}");
    let err = refused(&sub.join("xtcqd.sock"), &segment, &["--allow-uid", "0"]);
    assert!(err.contains("without --group") && err.contains("Add --group"), "{err}");
    assert!(!sub.exists(), "the socket directory was created");
    assert!(!segment.exists(), "the segment was created");
}

#[test]
fn the_daemon_creates_only_portable_queue_names() {
    use xtcq_proto::{
        frame, ErrorCode, Hello, HelloReply, QueueParams, Request, RequestFrame, ServerMessage,
    };
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    // A raw client, so that only the daemon's own check stands in the way.
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    frame::write_frame(&mut s, &Hello::new("raw", std::process::id())).unwrap();
    assert!(matches!(frame::read_frame(&mut s).unwrap(), HelloReply::Ok(_)));
    let long = "x".repeat(65);
    for (id, name) in
        [(10, "\u{1b}[2J"), (11, "../../etc"), (12, "pay\u{202e}lpt"), (13, "zero\u{200b}"), (14, &*long)]
    {
        let req = RequestFrame { id, request: Request::CreateQueue(QueueParams::new(name)) };
        frame::write_frame(&mut s, &req).unwrap();
        match frame::read_frame(&mut s).unwrap() {
            ServerMessage::Reply { result: Err(e), .. } => {
                assert_eq!(e.code, ErrorCode::BadRequest, "{name:?}: {e:?}");
                assert!(e.message.contains("letters, digits"), "{e:?}");
                assert!(!e.message.contains('\u{1b}'), "the refusal echoes the escape: {e:?}");
            }
            other => panic!("{name:?} was not refused: {other:?}"),
        }
    }
    let c = d.client();
    assert!(c.list_queues().unwrap().is_empty());
    // The client refuses first, with the same words, and a good name still works.
    let e = c.create_queue(&QueueParams::new("a/b")).unwrap_err();
    assert!(matches!(e, xtcq_client::Error::BadQueueName(_)), "{e:?}");
    c.create_queue(&QueueParams::new("jobs.high-prio_2")).unwrap();
}

#[test]
fn a_path_below_a_directory_others_may_change_is_refused() {
    let top = tempfile::tempdir().unwrap();
    // Writable by everyone, no sticky bit: anyone may rename what is in it.
    let open = top.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let safe_seg = top.path().join("seg");
    let err = refused(&open.join("run").join("xtcqd.sock"), &safe_seg, &[]);
    assert!(err.contains(&format!("{} above it is world-writable", open.display())), "{err}");
    assert!(!open.join("run").exists() && !safe_seg.exists(), "created below the unsafe directory");
    let err = refused(&top.path().join("xtcqd.sock"), &open.join("seg"), &[]);
    assert!(err.contains("above it is world-writable"), "{err}");
    assert!(!open.join("seg").exists());
    if is_root() {
        // Owned by another user, who may swap its contents whatever its mode.
        let mallory = SystemUser::create("a");
        let theirs = top.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(mallory.uid()), Some(mallory.gid())).unwrap();
        let err = refused(&theirs.join("run").join("xtcqd.sock"), &safe_seg, &[]);
        assert!(err.contains(&format!("is owned by uid {} ({})", mallory.uid(), mallory.user)), "{err}");
    }
}
