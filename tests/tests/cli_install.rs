//! `make install` (the repository's Makefile) into a temporary `DESTDIR`, honouring
//! `PREFIX`: both binaries, the systemd unit pointing at the installed `xtcqd`, the sysusers
//! entry, the man pages and the completions; then `systemd-analyze verify` of the unit
//! against the installed paths there (`--root`), and `systemd-sysusers` of the entry.
//! Uses the binaries this test run built (`NO_BUILD=1 BIN=...`); skipped, loudly, without
//! make, or without the `xtcqd` binary beside `xtcq`.

use xtcq_testkit::*;

use std::path::Path;
use std::process::Command;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

fn make_install(destdir: &Path, prefix: Option<&str>) {
    let built = xtcq_testkit::exe::installable_binaries();
    let bin = built.path();
    let mut cmd = Command::new("make");
    cmd.current_dir(WORKSPACE).arg("install").arg("NO_BUILD=1");
    cmd.arg(format!("BIN={}", bin.display())).arg(format!("DESTDIR={}", destdir.display()));
    if let Some(p) = prefix {
        cmd.arg(format!("PREFIX={p}"));
    }
    let o = run_bounded(&mut cmd, None);
    assert_eq!(code(&o), 0, "make install: {}{}", stdout(&o), stderr(&o));
}

#[test]
fn make_install_lays_out_everything_and_the_unit_verifies_against_it() {
    if !have("make") {
        xtcq_testkit::skipped("needs make");
        return;
    }
    for (prefix, bindir) in [(Some("/usr"), "/usr/bin"), (None, "/usr/local/bin")] {
        let dest = tempfile::tempdir().expect("tempdir");
        make_install(dest.path(), prefix);
        let root = dest.path();
        let p = prefix.unwrap_or("/usr/local");
        let files = [
            format!("{bindir}/xtcq"),
            format!("{bindir}/xtcqd"),
            format!("{p}/lib/systemd/system/xtcqd.service"),
            format!("{p}/lib/sysusers.d/xtcq.conf"),
            format!("{p}/share/man/man1/xtcq.1"),
            format!("{p}/share/man/man1/xtcq-work.1"),
            format!("{p}/share/man/man1/xtcqd.1"),
            format!("{p}/share/bash-completion/completions/xtcq"),
            format!("{p}/share/zsh/site-functions/_xtcq"),
            format!("{p}/share/fish/vendor_completions.d/xtcq.fish"),
            format!("{p}/share/doc/xtcq/README.md"),
        ];
        for f in &files {
            assert!(root.join(&f[1..]).is_file(), "{f} not installed under {}", root.display());
        }
        let unit = std::fs::read_to_string(root.join(&files[2][1..])).expect("unit");
        assert!(unit.contains(&format!("ExecStart={bindir}/xtcqd ")), "{unit}");
        assert!(unit.contains(&format!("Documentation=file://{p}/share/doc/xtcq/README.md")), "{unit}");
        // The installed xtcqd runs.
        let o =
            run_bounded(Command::new(root.join(format!("{}/xtcqd", &bindir[1..]))).arg("--version"), None);
        assert!(ok(&o).starts_with("xtcqd "), "{}", stdout(&o));
        if !have("systemd-analyze") {
            xtcq_testkit::skipped("systemd-analyze verify (apt-get install systemd)");
            continue;
        }
        let o = run_bounded(
            Command::new("systemd-analyze")
                .arg("verify")
                .arg("--recursive-errors=no")
                .arg(format!("--root={}", root.display()))
                .arg("xtcqd.service"),
            None,
        );
        assert_eq!(code(&o), 0, "systemd-analyze verify: {}{}", stdout(&o), stderr(&o));
        assert!(stderr(&o).trim().is_empty(), "{}", stderr(&o));
        // And the check can fail: without the installed binary it complains.
        std::fs::remove_file(root.join(format!("{}/xtcqd", &bindir[1..]))).expect("rm");
        let o = run_bounded(
            Command::new("systemd-analyze")
                .arg("verify")
                .arg("--recursive-errors=no")
                .arg(format!("--root={}", root.display()))
                .arg("xtcqd.service"),
            None,
        );
        assert_ne!(code(&o), 0, "verify did not notice the missing binary");
        // The sysusers entry creates the service's user and group in that root.
        std::fs::create_dir_all(root.join("etc")).expect("mkdir etc");
        let o = run_bounded(Command::new("systemd-sysusers").arg(format!("--root={}", root.display())), None);
        assert_eq!(code(&o), 0, "systemd-sysusers: {}", stderr(&o));
        let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
        assert!(passwd.lines().any(|l| l.starts_with("xtcq:")), "{passwd}");
    }
}
