//! `xtcqd --log-format json`: every log line is one JSON object with its timestamp, level
//! and the event's fields at the top level; the default stays text.

use xtcq_testkit::*;

#[test]
fn json_logs_are_one_object_per_line_with_the_fields_at_the_top() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--log-format", "json"]).start();
    d.client().create_queue(&xtcq_client::QueueParams::new("q")).expect("create");
    assert!(d.stop().success());
    let text = d.log_text();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\n{text}")))
        .collect();
    assert!(!lines.is_empty(), "no log");
    for l in &lines {
        assert!(l["timestamp"].is_string() && l["level"].is_string() && l["message"].is_string(), "{l}");
    }
    let ready = lines.iter().find(|l| l["message"] == "xtcqd ready").unwrap_or_else(|| panic!("{text}"));
    assert_eq!(ready["socket"], d.socket.display().to_string(), "{ready}");
    assert!(lines.iter().any(|l| l["message"] == "queue created" && l["queue"] == "q"), "{text}");

    // The default is the text form, not JSON.
    let mut t = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    assert!(t.stop().success());
    let first = t.log_text().lines().next().unwrap_or_default().to_string();
    assert!(serde_json::from_str::<serde_json::Value>(&first).is_err() && first.contains("INFO"), "{first}");
    let bad = xtcqd().args(["--log-format", "xml"]).output().expect("xtcqd");
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
}
