//! `xtcqd --config FILE`: the daemon's options from a TOML file; flags on the command line
//! and the environment variables flags read override it; a bad file is exit 2, naming the
//! key and what was wrong.

use xtcq_testkit::*;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn config(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("xtcqd.toml");
    let text = format!(
        "# xtcqd's options\nsocket = \"{0}/from-file.sock\"\nsegment = \"{0}/segment\"\n\
         records = 1024\npayload-bytes = 64\nqueues = 2\nprocess_slots = 16\n\
         idle-timeout = \"2m\"\nlease-scan-interval = \"50ms\"\nlog-format = \"json\"\n",
        dir.display()
    );
    std::fs::write(&p, text).expect("write config");
    p
}

fn start(cmd: &mut Command, socket: &Path, log: &Path) -> Killed {
    let child = cmd
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("spawn xtcqd");
    let mut k = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if let Ok(Some(st)) = k.0.try_wait() {
            panic!("xtcqd exited ({st}): {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        assert!(
            Instant::now() < deadline,
            "xtcqd not ready: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    k
}

fn records(socket: &Path) -> u32 {
    let c = xtcq_client::Client::connect(Some(socket)).expect("connect");
    c.stats(None).expect("stats").segment.job_records
}

#[test]
fn options_come_from_the_file_and_flags_and_the_environment_override_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = config(dir.path());
    let log = dir.path().join("log");
    let socket = dir.path().join("from-file.sock");
    let d = start(
        xtcqd().arg("--config").arg(&file).env_remove("XTCQ_SOCKET").env_remove("XTCQ_SEGMENT"),
        &socket,
        &log,
    );
    assert_eq!(records(&socket), 1024);
    let text = std::fs::read_to_string(&log).expect("log");
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or_default()).expect("JSON log");
    assert!(first["message"].is_string(), "{text}");
    // Killed: its socket file stays; removed, so that a second daemon's use of it would show.
    drop(d);
    std::fs::remove_file(&socket).expect("rm socket");

    // A flag beats the file; so does the environment variable a flag reads.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let env_socket = dir2.path().join("from-env.sock");
    let _d = start(
        xtcqd()
            .arg("--config")
            .arg(&file)
            .args(["--records", "2048", "--recreate"])
            .arg("--segment")
            .arg(dir2.path().join("segment"))
            .env("XTCQ_SOCKET", &env_socket),
        &env_socket,
        &dir2.path().join("log"),
    );
    assert_eq!(records(&env_socket), 2048);
    assert!(!socket.exists(), "the file's socket was not used");
}

#[test]
fn a_bad_file_is_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("bad.toml");
    for (text, says) in [
        ("recordz = 5\n", "unknown option \"recordz\""),
        ("io-timeout = true\n", "io-timeout: expected a string or a number"),
        ("lease-scan-interval = \"20\"\n", "say 20ms or 20s"),
    ] {
        std::fs::write(&p, text).expect("write");
        let o = xtcqd().arg("--config").arg(&p).output().expect("xtcqd");
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{text}: {e}");
        assert!(e.contains(says), "{text}: {e}");
    }
    let o = xtcqd().arg("--config").arg(dir.path().join("absent.toml")).output().expect("xtcqd");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read the config file"));
}
