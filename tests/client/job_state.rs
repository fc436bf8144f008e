//! A job's state read through the injector that pushed it (`InjectorHandle::job_state`, what
//! the bridge polls): it follows the job from queued to running to finished, never reads
//! another queue's job or a reused record as this one, agrees with the daemon's answer
//! (`Client::job_state`), and answers an error, not a state, once the segment is replaced.

use xtcq_client::proto::JobState;
use xtcq_client::{Error, JobId, QueueParams};
use xtcq_testkit::*;

#[test]
fn an_injector_follows_its_job_from_queued_to_finished() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    c.create_queue(&QueueParams::new("jobs")).unwrap();
    c.create_queue(&QueueParams::new("other")).unwrap();
    let inj = c.attach_injector("jobs").unwrap();
    let other = c.attach_injector("other").unwrap();
    let room = inj.room();
    assert!(room > 0, "an empty queue's ring has room");
    let id = JobId::of_push(inj.push(b"a").unwrap());
    assert_eq!(inj.room(), room - 1, "the push took one slot of the ring");
    assert_eq!(inj.job_state(id).unwrap(), JobState::Queued { attempts: 0 });
    assert_eq!(c.job_state("jobs", id).unwrap(), JobState::Queued { attempts: 0 }, "the daemon agrees");
    assert_eq!(other.job_state(id).unwrap(), JobState::Unknown, "not the other queue's job");
    let later = JobId { birth: id.birth + 1, ..id };
    assert_eq!(inj.job_state(later).unwrap(), JobState::Unknown, "another birth is another job");

    let thief = c.attach_thief("jobs").unwrap();
    let job = thief.steal().unwrap().expect("the job");
    assert_eq!(job.id(), id);
    match inj.job_state(id).unwrap() {
        JobState::Running { pid: None, attempts: 0, .. } => {}
        s => panic!("want running (no pid from a local read), got {s:?}"),
    }
    job.fail("boom").unwrap();
    assert_eq!(inj.job_state(id).unwrap(), JobState::Queued { attempts: 1 });
    thief.steal().unwrap().expect("the job again").ack().unwrap();
    assert_eq!(inj.job_state(id).unwrap(), JobState::Finished);
    assert_eq!(c.job_state("jobs", id).unwrap(), JobState::Finished, "the daemon agrees");
}

#[test]
fn a_replaced_segment_answers_an_error_and_a_new_identity() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    c.create_queue(&QueueParams::new("jobs")).unwrap();
    let inj = c.attach_injector("jobs").unwrap();
    let before = c.segment_created_unix_ns().unwrap();
    let id = JobId::of_push(inj.push(b"a").unwrap());
    assert_eq!(inj.job_state(id).unwrap(), JobState::Queued { attempts: 0 });
    d.kill();
    d.restart_with(&[MEDIUM_SEGMENT, &["--recreate"]].concat(), |_| {});
    let e = inj.job_state(id).unwrap_err();
    assert!(matches!(e, Error::SegmentReplaced { .. } | Error::SegmentLost { .. }), "{e:?}");
    let after = d.client().segment_created_unix_ns().unwrap();
    assert_ne!(before, after, "a new segment is another identity, its ids start over");
}
