//! A reader that closes stdout early (`xtcq dead q | head -5`) ends any subcommand quietly:
//! never a panic ("failed printing to stdout: Broken pipe", exit 101), never a backtrace.

use xtcq_testkit::*;

use std::process::{Command, Stdio};

/// A daemon with queue `q` holding queued jobs and dead letters, so every listing has lines.
/// `dead` of them (of `dead + 50` pushed), with payloads long enough that a listing of a
/// thousand outgrows a pipe's buffer.
fn daemon_with_jobs(dead: u32) -> Daemon {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-attempts", "1"]));
    let lines: String = (0..dead + 50).map(|i| format!("job-{i:0>50}\n")).collect();
    ok(&d.run_in(&["push", "q"], lines.as_bytes()));
    let n = dead.to_string();
    let o = d.run(&["work", "q", "-j", "4", "--max-jobs", &n, "--idle-exit", "200ms", "--", "false"]);
    assert_eq!(code(&o), 5, "{}", stderr(&o));
    d
}

/// Each subcommand that writes to stdout, and the statuses a closed stdout may end it with.
fn subcommands(d: &Daemon) -> Vec<(Vec<String>, &'static [i32])> {
    let seg = d.segment.display().to_string();
    let listing: &[i32] = &[0];
    let check_file = ["check", "--segment", &seg];
    let v: Vec<(&[&str], &'static [i32])> = vec![
        (&["ls"], listing),
        (&["ls", "--json"], listing),
        (&["stats"], listing),
        (&["stats", "q"], listing),
        (&["stats", "--json"], listing),
        (&["dead", "q"], listing),
        (&["dead", "q", "--json"], listing),
        (&["check"], listing),
        (&check_file, listing),
        (&["--help"], listing),
        (&["-h"], listing),
        (&["help", "work"], listing),
        (&["--version"], listing),
        // A steal that wrote nothing gives its job back and says so (exit 1), as before.
        (&["steal", "q", "-n", "3"], &[0, 1]),
        // The jobs not pushed would be dropped unsaid: an error that says how far it got.
        (&["push", "q", "--print-handle", "x", "y"], &[1]),
        (&["demo", "--jobs", "2000", "--workers", "1"], listing),
    ];
    v.into_iter().map(|(a, c)| (a.iter().map(|s| s.to_string()).collect(), c)).collect()
}

#[track_caller]
fn assert_quiet(what: &str, o: &std::process::Output, allowed: &[i32]) {
    let e = stderr(o);
    assert!(!e.contains("panicked") && !e.contains("RUST_BACKTRACE"), "{what}: {e}");
    assert_ne!(code(o), 101, "{what}: {e}");
    assert!(allowed.contains(&code(o)), "{what}: exit {} not in {allowed:?}: {e}", code(o));
}

#[test]
fn every_subcommand_ends_quietly_on_a_stdout_closed_before_it_writes() {
    let d = daemon_with_jobs(150);
    for (args, allowed) in subcommands(&d) {
        // The read end closed before the command starts: its first write is EPIPE, every
        // time, however little it prints.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let child = d.xtcq().args(&args).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).spawn();
        let o = wait_bounded(child.expect("spawn"), std::time::Duration::from_secs(120), &args.join(" "));
        assert_quiet(&format!("xtcq {}", args.join(" ")), &o, allowed);
    }
    // Nothing was lost on the way: the 50 queued jobs and 150 dead letters are all there
    // (the steal gave its jobs back, the push added one).
    let s = d.stats();
    let q = &s["queues"][0]["records"];
    assert_eq!(q["dead"], 150, "{s}");
    assert_eq!(q["queued"], 51, "{s}");
}

#[test]
fn dead_letters_piped_into_head_as_the_issue_did() {
    // Listings longer than a pipe holds: `head` exits while xtcq is still writing.
    let d = daemon_with_jobs(1000);
    for args in [["dead", "q", ""], ["dead", "q", "--json"], ["stats", "--json", ""], ["ls", "--json", ""]] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let line = format!(
            "{} --socket {} {} | head -c1; echo \" rc=${{PIPESTATUS[0]}}\"",
            xtcq_exe().display(),
            d.socket.display(),
            args.join(" ")
        );
        let o = run_bounded(Command::new("bash").args(["-c", &line]).env_remove("XTCQ_SOCKET"), None);
        let out = stdout(&o);
        assert!(out.ends_with(" rc=0\n"), "xtcq {}: {out} {}", args.join(" "), stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "xtcq {}: {}", args.join(" "), stderr(&o));
    }
    // And every subcommand, literally `| head -c1` (whether head closes the pipe before or
    // after a short output is written, neither is a panic).
    for (args, _) in subcommands(&d) {
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let line = format!(
            "{} --socket {} {} | head -c1 >/dev/null; echo \"rc=${{PIPESTATUS[0]}}\"",
            xtcq_exe().display(),
            d.socket.display(),
            quoted.join(" ")
        );
        let o = run_bounded(Command::new("bash").args(["-c", &line]).env_remove("XTCQ_SOCKET"), None);
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(!out.contains("rc=101") && !err.contains("panicked"), "xtcq {}: {out} {err}", args.join(" "));
    }
}

/// What each subcommand says on stderr (a message, a progress line, a summary, an error):
/// a closed stderr is no panic either.
#[test]
fn a_closed_stderr_is_no_panic_either() {
    let d = daemon_with_jobs(20);
    let cases: &[&[&str]] = &[
        &["dead", "q", "--requeue"],
        &["work", "q", "--max-jobs", "3", "-v", "--", "true"],
        &["create", "q"],
        &["steal", "no-such-queue"],
        &["delete", "q", "--force"],
        &["push", "nope", "x"],
        &["no-such-subcommand"],
    ];
    for args in cases {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let child = d.xtcq().args(*args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(writer).spawn();
        let o = wait_bounded(child.expect("spawn"), std::time::Duration::from_secs(60), &args.join(" "));
        assert_ne!(code(&o), 101, "xtcq {} panicked on a closed stderr", args.join(" "));
    }
}
