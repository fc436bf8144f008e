//! A job has one id a user can follow through `push`, `work` (its messages and the
//! command's `$XTCQ_JOB`) and `dead`, across all its attempts.

use xtcq_testkit::*;

#[test]
fn a_job_keeps_one_id_across_its_attempts() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-attempts", "3"]));
    let pushed = ok(&d.run(&["push", "q", "--print-handle", "flaky", "doomed"]));
    let ids: Vec<&str> = pushed.lines().collect();
    assert_eq!(ids.len(), 2, "{pushed}");
    let log = d.dir().join("runs");
    // "flaky" fails on its first two attempts, "doomed" on every one.
    let script = format!(
        r#"echo "$XTCQ_PAYLOAD $XTCQ_JOB $XTCQ_ATTEMPT" >> {log}
           [ "$XTCQ_PAYLOAD" = flaky ] && [ "$XTCQ_ATTEMPT" -ge 2 ] && exit 0; exit 1"#,
        log = log.display()
    );
    let o = d.run(&["work", "q", "-v", "--idle-exit", "300ms", "--", "sh", "-c", &script]);
    let err = stderr(&o);
    let runs = std::fs::read_to_string(&log).expect("runs");
    for (payload, id) in [("flaky", ids[0]), ("doomed", ids[1])] {
        let mine: Vec<&str> = runs.lines().filter(|l| l.starts_with(&format!("{payload} "))).collect();
        assert_eq!(mine.len(), 3, "{payload} runs three times: {runs}");
        for (attempt, l) in mine.iter().enumerate() {
            assert_eq!(*l, format!("{payload} {id} {attempt}"), "$XTCQ_JOB is the pushed id: {runs}");
        }
    }
    // Every "job X" in work's messages is one of the two pushed ids.
    for w in err.split("job ").skip(1) {
        let named = w.split_whitespace().next().unwrap_or("");
        assert!(ids.contains(&named), "work names job {named:?}, not a pushed id: {err}");
    }
    assert!(err.contains(&format!("job {} attempt 3 of q: exit 1", ids[1])), "{err}");
    // And `dead` lists it under the same id (its handle, for --requeue, has moved on).
    let dead: serde_json::Value = serde_json::from_str(&ok(&d.run(&["dead", "q", "--json"]))).expect("json");
    assert_eq!(dead[0]["id"], ids[1], "{dead}");
    // The table shows that id too, and --requeue takes it.
    let table = ok(&d.run(&["dead", "q"]));
    assert!(table.lines().nth(1).is_some_and(|l| l.starts_with(&format!("{} ", ids[1]))), "{table}");
    ok(&d.run(&["dead", "q", "--requeue", ids[1]]));
    assert_eq!(code(&d.run(&["dead", "q"])), 3, "re-queued by its id");
}
