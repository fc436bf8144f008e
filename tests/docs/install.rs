//! `make install` (the repository's Makefile) into a temporary `DESTDIR`, honouring
//! `PREFIX`: both binaries, the systemd unit pointing at the installed `xtcqd`, the sysusers
//! entry, the man pages and the completions; then `systemd-analyze verify` of the unit
//! against the installed paths there (`--root`), and `systemd-sysusers` of the entry.
//! Uses the binaries this test run built (`NO_BUILD=1 BIN=...`); skipped, loudly, without
//! make, or without the `xtcqd` binary beside `xtcq`.
//!
//! And the C library as a C user installs it: `make install PREFIX=<temporary>`, then
//! `examples/c` built by its Makefile through `pkg-config --cflags --libs xtcq` and run
//! against a real daemon with no `LD_LIBRARY_PATH`, linked to the installed `libxtcq.so.0`.

use xtcq_testkit::*;

use std::path::Path;
use std::process::Command;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

fn make_install(destdir: &Path, prefix: Option<&str>) {
    make_install_with(destdir, prefix, &[]);
}

fn make_install_with(destdir: &Path, prefix: Option<&str>, more: &[String]) {
    let built = xtcq_testkit::exe::installable_binaries();
    let bin = built.path();
    let mut cmd = Command::new("make");
    cmd.current_dir(WORKSPACE).arg("install").arg("NO_BUILD=1");
    cmd.arg(format!("BIN={}", bin.display())).arg(format!("DESTDIR={}", destdir.display()));
    if let Some(p) = prefix {
        cmd.arg(format!("PREFIX={p}"));
    }
    cmd.args(more);
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
            format!("{p}/lib/systemd/system/xtcq-bridge.service"),
            format!("{bindir}/xtcq-bridge"),
            format!("{p}/lib/libxtcq.so.0"),
            format!("{p}/lib/libxtcq.so"),
            format!("{p}/lib/libxtcq.a"),
            format!("{p}/include/xtcq.h"),
            format!("{p}/lib/pkgconfig/xtcq.pc"),
            format!("{p}/lib/sysusers.d/xtcq.conf"),
            format!("{p}/share/man/man1/xtcq.1"),
            format!("{p}/share/man/man1/xtcq-work.1"),
            format!("{p}/share/man/man1/xtcqd.1"),
            format!("{p}/share/bash-completion/completions/xtcq"),
            format!("{p}/share/zsh/site-functions/_xtcq"),
            format!("{p}/share/fish/vendor_completions.d/xtcq.fish"),
            format!("{p}/share/doc/xtcq/README.md"),
            format!("{p}/share/doc/xtcq/CHANGELOG.md"),
            format!("{p}/share/doc/xtcq/guarantees/promises.md"),
        ];
        for f in &files {
            assert!(root.join(&f[1..]).is_file(), "{f} not installed under {}", root.display());
        }
        let unit = std::fs::read_to_string(root.join(&files[2][1..])).expect("unit");
        assert!(unit.contains(&format!("ExecStart={bindir}/xtcqd ")), "{unit}");
        assert!(unit.contains(&format!("Documentation=file://{p}/share/doc/xtcq/README.md")), "{unit}");
        let bridge_unit = std::fs::read_to_string(root.join(&files[3][1..])).expect("bridge unit");
        assert!(bridge_unit.contains(&format!("ExecStart={bindir}/xtcq-bridge ")), "{bridge_unit}");
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

#[test]
fn the_c_example_builds_through_pkg_config_against_the_install_and_runs() {
    for tool in ["make", "pkg-config", "cc", "readelf"] {
        if !have(tool) {
            xtcq_testkit::skipped(&format!("needs {tool} (apt-get install make pkg-config gcc binutils)"));
            return;
        }
    }
    let prefix = tempfile::tempdir().expect("tempdir");
    let p = prefix.path().to_str().expect("UTF-8 temporary path").to_string();
    // No DESTDIR: installed where it will be used, as `make install PREFIX=$HOME/.local` is.
    make_install_with(Path::new(""), Some(&p), &[]);
    let lib = prefix.path().join("lib");
    // The versioned file, its soname link and the development link.
    assert_eq!(
        std::fs::read_link(lib.join("libxtcq.so")).expect("libxtcq.so link"),
        Path::new("libxtcq.so.0")
    );
    let real = std::fs::read_link(lib.join("libxtcq.so.0")).expect("libxtcq.so.0 link");
    assert!(real.to_string_lossy().starts_with("libxtcq.so.0."), "{}", real.display());
    let dynamic = ok(&run_bounded(Command::new("readelf").arg("-d").arg(lib.join(&real)), None));
    assert!(dynamic.contains("Library soname: [libxtcq.so.0]"), "{dynamic}");

    // The examples' own Makefile, pkg-config finding the install.
    let examples = tempfile::tempdir().expect("tempdir");
    for f in ["Makefile", "pool/pool.c", "epoll_wait/epoll_wait.c"] {
        let to = examples.path().join(f);
        std::fs::create_dir_all(to.parent().expect("a folder")).expect("example folder");
        std::fs::copy(Path::new(WORKSPACE).join("examples/c").join(f), to).expect("copy example");
    }
    let mut make = Command::new("make");
    make.current_dir(examples.path()).arg("pool/pool").env("PKG_CONFIG_PATH", lib.join("pkgconfig"));
    make.env_remove("LD_LIBRARY_PATH").env_remove("LIBRARY_PATH").env_remove("C_INCLUDE_PATH");
    let built = run_bounded(&mut make, None);
    assert_eq!(code(&built), 0, "make pool: {}{}", stdout(&built), stderr(&built));
    let line = stdout(&built);
    assert!(line.contains(&format!("-I{p}/include")) && line.contains("-lxtcq"), "{line}");

    let pool = examples.path().join("pool/pool");
    let ldd = ok(&run_bounded(Command::new("ldd").arg(&pool).env_remove("LD_LIBRARY_PATH"), None));
    assert!(ldd.contains(&format!("libxtcq.so.0 => {p}/lib/libxtcq.so.0")), "{ldd}");

    let daemon = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let o = run_bounded(
        Command::new(&pool).arg(&daemon.socket).args(["10000", "3"]).env_remove("LD_LIBRARY_PATH"),
        None,
    );
    assert_eq!(code(&o), 0, "pool against the installed library: {}{}", stdout(&o), stderr(&o));
}
