//! Red-team pass 5 on the segment's size flags: what an operator types is either used or
//! refused, never dropped unseen. Real xtcqd.

use xtcq_testkit::*;

/// `--payload-blocks 128=10 --payload-blocks 256=10` gives only the 256-byte class: the
/// daemon's flags override themselves (`args_override_self`: a later flag replaces an
/// earlier one), and the first spec is dropped without a word, while the same two classes
/// in one spec are refused as given twice.
#[test]
#[ignore = "red-team break: a repeated --payload-blocks silently drops the earlier classes; \
            every xtcqd flag overrides itself by design (args_override_self, which the test \
            harness relies on), so refusing or merging this one is a design question for the lead"]
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
