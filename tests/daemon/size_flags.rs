//! Red-team pass 5 on the segment's size flags: what an operator types is either used or
//! refused, never dropped unseen. Real xtcqd.

use xtcq_testkit::*;

/// `--payload-blocks 128=10 --payload-blocks 256=10` gave only the 256-byte class: the
/// daemon's flags override themselves (a later flag replaces an earlier one), and the first
/// list was dropped without a word. The lists of repeated flags now add up (a size in two of
/// them is refused: `cli_large_payloads.rs`).
#[test]
fn a_repeated_payload_blocks_flag_is_refused_or_merged_not_dropped() {
    let d = Daemon::start_with(&[
        "--payload-bytes",
        "256",
        "--payload-blocks",
        "128=10",
        "--payload-blocks",
        "256=10",
    ]);
    let classes: Vec<u64> = d.stats()["payload_blocks"]
        .as_array()
        .expect("payload_blocks")
        .iter()
        .map(|c| c["size"].as_u64().expect("size"))
        .collect();
    assert_eq!(classes, vec![128, 256], "the first --payload-blocks was dropped");
}

/// A config-file value that starts with `-` (`records = -5`, a path like `-dumps/x`) was
/// passed as its own argument after the flag, so the daemon's parser took it for a flag:
/// "unexpected argument '-5' found", naming neither the key nor the file. It must be read
/// as the value of its key.
#[test]
fn a_config_value_starting_with_a_dash_is_that_keys_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("xtcqd.toml");
    std::fs::write(&conf, "records = -5\n").expect("config");
    let (status, err) = run_daemon_once(
        &dir.path().join("s"),
        &dir.path().join("seg"),
        &["--config", conf.to_str().expect("utf-8")],
    );
    assert!(!status.success(), "{err}");
    assert!(err.contains("--records") && err.contains("-5"), "the error names the key and its value: {err}");
    assert!(!dir.path().join("seg").exists(), "a refused start created the segment");
}

/// A tmpfs of `mb` MiB mounted at `dir` (as root), unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, mb: u32) -> Option<Tmpfs> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `--recreate` of a 12 MiB segment on a 20 MiB tmpfs while a client still maps the old
/// one: the size check counted the old file's blocks as freed by its removal, but the
/// client's mapping keeps them, so the removal freed nothing, the creation failed with
/// ENOSPC, and the old segment and its jobs were gone with no daemon started. The start must
/// be refused before anything is removed.
#[test]
fn recreate_while_a_client_maps_the_old_segment_removes_nothing_it_cannot_replace() {
    use std::io::Write;
    if !is_root() {
        xtcq_testkit::skipped("needs root to mount a small tmpfs");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(_mnt) = Tmpfs::mount(dir.path(), 20) else {
        xtcq_testkit::skipped("cannot mount a tmpfs here");
        return;
    };
    let sizes = [
        "--records",
        "24000",
        "--inline-bytes",
        "448",
        "--payload-bytes",
        "448",
        "--queues",
        "2",
        "--process-slots",
        "16",
        "--overflow-capacity",
        "1024",
        "--deque-capacity",
        "1024",
        "--deques-per-queue",
        "2",
    ];
    let mut d = Daemon::builder().at(dir.path()).flags(sizes).start();
    let work = tempfile::tempdir().expect("tempdir");
    let exe = compile_c("tests/c/push_batch.c", work.path(), &[]);
    let mut holder = std::process::Command::new(&exe)
        .arg(&d.socket)
        .args(["hold", "held5"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the holder");
    assert!(first_line_seen(&mut holder), "the holder exited early: {}", d.log_text());
    d.kill();
    let mut flags: Vec<&str> = SMALL_SEGMENT.to_vec();
    flags.extend(sizes);
    flags.push("--recreate");
    let (status, err) = run_daemon_once(&d.socket, &d.segment, &flags);
    holder.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let _ = wait_bounded(holder, std::time::Duration::from_secs(60), "the holder");
    assert!(!status.success(), "a second 12 MiB segment fit a 20 MiB tmpfs? {err}");
    assert!(d.segment.exists(), "--recreate removed the old segment, then could not create one: {err}");
    assert!(err.contains("available") || err.contains("maps"), "the refusal says why: {err}");
}
