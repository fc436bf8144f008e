//! Shell completions and man pages, made from the clap definitions: `xtcq completions SHELL`
//! prints a script the shell accepts, `xtcq man --dir DIR` writes pages for xtcq, each of
//! its subcommands and xtcqd. The internal subcommands are offered nowhere.

use xtcq_testkit::*;

use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

#[test]
fn completions_for_bash_zsh_and_fish_offer_the_subcommands_and_no_internal_one() {
    for (shell, marker) in [("bash", "_xtcq()"), ("zsh", "#compdef xtcq"), ("fish", "complete -c xtcq")] {
        let o = run_bounded(Command::new(xtcq_exe()).args(["completions", shell]), None);
        let script = ok(&o);
        assert!(script.contains(marker), "{shell}: {script}");
        for sub in ["create", "push", "steal", "dead", "work", "completions"] {
            assert!(script.contains(sub), "{shell} offers {sub}");
        }
        assert!(!script.contains("__xtcqd") && !script.contains("__demo-role"), "{shell}: internal offered");
        if have(shell) && shell != "fish" {
            let check = run_bounded(Command::new(shell).args(["-n", "-c", &script]), None);
            assert_eq!(code(&check), 0, "{shell} -n: {}", stderr(&check));
        }
    }
    // Loaded into bash, it registers a completion for `xtcq`.
    let line = format!("source <({} completions bash); complete -p xtcq", xtcq_exe().display());
    let o = run_bounded(Command::new("bash").args(["-c", &line]), None);
    assert!(ok(&o).contains("_xtcq"), "{}", stderr(&o));
    let o = run_bounded(Command::new(xtcq_exe()).args(["completions", "tcsh"]), None);
    assert_eq!(code(&o), 2, "an unknown shell is a usage error: {}", stderr(&o));
}

#[test]
fn man_pages_of_xtcq_its_subcommands_and_xtcqd_are_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = dir.path().join("man1");
    ok(&run_bounded(Command::new(xtcq_exe()).arg("man").arg("--dir").arg(&pages), None));
    for page in ["xtcq.1", "xtcq-dead.1", "xtcq-work.1", "xtcq-completions.1", "xtcqd.1"] {
        let text = std::fs::read_to_string(pages.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page} is a man page: {text}");
    }
    assert!(!pages.join("xtcq-__xtcqd.1").exists() && !pages.join("xtcq-__demo-role.1").exists());
    let xtcqd = std::fs::read_to_string(pages.join("xtcqd.1")).expect("xtcqd.1");
    assert!(xtcqd.contains("lease\\-scan\\-interval"), "{xtcqd}");
    if have("man") {
        let o = run_bounded(
            Command::new("man").arg("-l").arg(pages.join("xtcq-dead.1")).env("MANPAGER", "cat"),
            None,
        );
        assert!(ok(&o).contains("dead"), "{}", stderr(&o));
    }
}
