//! `-h` and `--help` of both programs open with the program's own description (the first
//! paragraph of its doc comment), not a crate's package description.

use xtcq_testkit::*;

fn first_line(o: &std::process::Output) -> String {
    assert_eq!(code(o), 0, "{}", stderr(o));
    stdout(o).lines().next().unwrap_or_default().to_string()
}

#[test]
fn xtcq_and_xtcqd_help_open_with_the_programs_description() {
    let cases = [
        (
            run_bounded(std::process::Command::new(xtcq_exe()).arg("-h"), None),
            "xtcq: a job queue for processes",
        ),
        (
            run_bounded(std::process::Command::new(xtcq_exe()).arg("--help"), None),
            "xtcq: a job queue for processes",
        ),
        (run_bounded(xtcqd().arg("-h"), None), "xtcqd: the xtcq shared-memory job-queue daemon"),
        (run_bounded(xtcqd().arg("--help"), None), "xtcqd: the xtcq shared-memory job-queue daemon"),
    ];
    for (o, want) in &cases {
        let line = first_line(o);
        assert!(line.starts_with(want), "help opens with {line:?}, not {want:?}");
    }
    // Neither is a package description (Cargo.toml's, shared with the library crates).
    for (o, _) in &cases {
        let text = stdout(o);
        assert!(!text.contains("the command line of the xtcq"), "{text}");
        assert!(!text.contains("segment owner, control-channel server"), "{text}");
    }
}
