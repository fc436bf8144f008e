//! The idempotent create: a second create of the same queue with `exist_ok`
//! succeeds, and one that asks for other settings is refused, naming each of them, from the
//! Rust client and from the CLI (C: tests/c/status_codes.c; Python: python/tests).

use xtcq_client::{CreateOptions, Error, Flavor, QueueParams};
use xtcq_testkit::*;

fn params(name: &str) -> QueueParams {
    QueueParams {
        name: name.into(),
        deques: 2,
        capacity: 64,
        flavor: Flavor::Fifo,
        max_attempts: 3,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    }
}

const EXIST_OK: CreateOptions =
    CreateOptions { exist_ok: true, allow_uids: Vec::new(), allow_gids: Vec::new() };

#[test]
fn exist_ok_creates_once_then_finds_the_same_queue() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    let first = c.create_queue_with(&params("jobs"), &EXIST_OK).unwrap();
    let again = c.create_queue_with(&params("jobs"), &EXIST_OK).unwrap();
    assert_eq!(first, again, "the second create answers with the queue the first made");
    assert_eq!(c.list_queues().unwrap().len(), 1);
    // Without exist_ok it is still an error.
    let e = c.create_queue_with(&params("jobs"), &CreateOptions::default()).unwrap_err();
    assert!(matches!(&e, Error::QueueExists(n) if n == "jobs"), "{e:?}");
}

#[test]
fn exist_ok_refuses_each_setting_that_differs_and_names_it() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    c.create_queue(&params("jobs")).unwrap();
    let cases: [(QueueParams, &str); 5] = [
        (QueueParams { flavor: Flavor::Lifo, ..params("jobs") }, "flavor is fifo, not lifo"),
        (QueueParams { deques: 1, ..params("jobs") }, "deques is 2, not 1"),
        (QueueParams { capacity: 32, ..params("jobs") }, "capacity is 64, not 32"),
        (QueueParams { max_attempts: 0, ..params("jobs") }, "max_attempts is 3, not 0"),
        (QueueParams { lease_ms: 500, ..params("jobs") }, "lease_ms is 0, not 500"),
    ];
    for (asked, named) in cases {
        let e = c.create_queue_with(&asked, &EXIST_OK).unwrap_err();
        match &e {
            Error::QueueMismatch { queue, message } => {
                assert_eq!(queue, "jobs");
                assert!(message.contains(named) && message.contains("xtcq delete"), "{message}");
            }
            other => panic!("{asked:?}: want QueueMismatch, got {other:?}"),
        }
        assert_eq!(e.code(), Some(xtcq_client::proto::ErrorCode::QueueMismatch));
    }
    // Two settings at once: both named.
    let both = QueueParams { deques: 1, flavor: Flavor::Lifo, ..params("jobs") };
    let e = c.create_queue_with(&both, &EXIST_OK).unwrap_err().to_string();
    assert!(e.contains("flavor is fifo, not lifo, deques is 2, not 1"), "{e}");
}

#[test]
fn exist_ok_refuses_other_permissions() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    let shared = CreateOptions { exist_ok: true, allow_uids: vec![4242], allow_gids: vec![] };
    c.create_queue_with(&params("shared"), &shared).unwrap();
    c.create_queue_with(&params("shared"), &shared).unwrap();
    let e = c.create_queue_with(&params("shared"), &EXIST_OK).unwrap_err().to_string();
    assert!(e.contains("its allowed uids are [4242], not []"), "{e}");
}

#[test]
fn the_cli_exist_ok_refuses_a_mismatch_with_what_to_change() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let args = ["create", "jobs", "--deques", "2", "--capacity", "64", "--flavor", "fifo"];
    ok(&d.run(&args));
    ok(&d.run(&[&args[..], &["--exist-ok"]].concat()));
    let lifo = d.run(&["create", "jobs", "--deques", "2", "--capacity", "64", "--exist-ok"]);
    assert_eq!(code(&lifo), 1, "{}", stderr(&lifo));
    assert!(
        stderr(&lifo).contains("queue jobs exists with other settings: flavor is fifo, not lifo"),
        "{}",
        stderr(&lifo)
    );
    // The queue is as the first create made it.
    let ls = ok(&d.run(&["ls", "--json"]));
    assert!(ls.contains("\"Fifo\""), "{ls}");
}
