//! `xtcq export` and `xtcq import`: every queue, queued job and dead letter of a segment into a dump file
//! (JSON lines, `xtcq_dump`), for `xtcqd --import-on-start` after a reboot or upgrade.
//!
//! Rules kept:
//! - the segment is mapped read-only: an export changes nothing, and reads a segment of
//!   this or an older readable layout version (one a newer build refuses to adopt);
//! - with a daemon running, the copy is racy (jobs move while it is taken): stop producers
//!   and consumers first, or use `xtcqd --export-on-stop`;
//! - an import renames FILE to FILE.importing, then FILE.imported (`xtcq_dump::claim`):
//!   a file is imported once, and an interrupted import is refused, not guessed at;
//! - before the rename, the dump is checked against the daemon's stats, an injector is
//!   attached to each existing queue it has jobs for, and its missing queues are created
//!   with their limits (deleted again on a refusal): a dump this user cannot import whole
//!   (a queue or quota past its share included) is refused with nothing written.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::exit;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The dump file to write (replaced if it exists).
    output: PathBuf,
    /// Read this segment file instead of the running daemon's (e.g. one an older xtcqd left).
    #[arg(long, value_name = "PATH")]
    segment: Option<PathBuf>,
}

pub fn export(socket: Option<&std::path::Path>, args: ExportArgs) -> Result<i32> {
    let path = match args.segment {
        Some(p) => p,
        None => crate::cmd::connect(socket)?.stats(None)?.segment.path,
    };
    let (queues, jobs, skipped) = xtcq_dump::export_file(&path, &args.output)
        .with_context(|| format!("cannot export the segment {}", path.display()))?;
    eprintln!("xtcq export: {queues} queue(s), {jobs} job(s) written to {}", args.output.display());
    if skipped > 0 {
        eprintln!("xtcq export: {skipped} job(s) kept changing while copied and were left out; stop producers and consumers first");
    }
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A dump (`xtcq export`, `xtcqd --export-on-stop`) or a segment file of this or an
    /// older layout version; renamed FILE.imported once every job is in.
    file: PathBuf,
}

/// Refuses `d` before anything is written when the daemon's segment, as its stats say,
/// cannot take it (`xtcq_dump::check`).
fn check_room(client: &xtcq_client::Client, d: &xtcq_dump::Dump) -> Result<(), xtcq_dump::DumpError> {
    let stats = client
        .stats(None)
        .map_err(|e| xtcq_dump::DumpError::Import(format!("cannot read the daemon's stats: {e}")))?;
    // A queue being deleted holds a table entry that stats do not show: the create's own
    // refusal stays the last word for those.
    let room = xtcq_dump::check::room_of(&stats);
    xtcq_dump::check::check(d, &room)
}

/// Refuses a dump of the very segment the daemon serves: it holds those jobs already, or
/// what became of them (run, acked), and an import would run each a second time.
fn refuse_same_segment(
    client: &xtcq_client::Client,
    d: &xtcq_dump::Dump,
) -> Result<(), xtcq_dump::DumpError> {
    let seg = client
        .segment()
        .map_err(|e| xtcq_dump::DumpError::Import(format!("cannot map the daemon's segment: {e}")))?;
    if d.segment == Some(xtcq_dump::SegmentId::of(&seg)) {
        return Err(xtcq_dump::DumpError::Import(
            "the dump was taken of the segment this daemon serves now, which still holds its jobs (or \
             what became of them): importing it would run them twice; nothing was imported. Import it \
             only into another segment (after a reboot, or into a daemon started with --recreate)"
                .into(),
        ));
    }
    Ok(())
}

/// Attaches an injector to each queue of `d`'s jobs that the segment has, before anything
/// is written: a queue this user may not use refuses the import whole (before, the jobs
/// ahead of it were in and the file stayed `.importing`). The dump's own new queues are
/// attached to after their creation.
fn attach_existing(
    client: &xtcq_client::Client,
    d: &xtcq_dump::Dump,
    injectors: &mut Vec<(String, xtcq_client::InjectorHandle)>,
) -> Result<(), xtcq_dump::DumpError> {
    for j in &d.jobs {
        if injectors.iter().any(|(name, _)| *name == j.queue) {
            continue;
        }
        match client.attach_injector(&j.queue) {
            Ok(inj) => injectors.push((j.queue.clone(), inj)),
            Err(xtcq_client::Error::NoSuchQueue(_)) if d.queues.iter().any(|q| q.name == j.queue) => {}
            Err(e) => {
                return Err(xtcq_dump::DumpError::Import(format!(
                    "queue {}: {e}; nothing was imported",
                    j.queue
                )))
            }
        }
    }
    Ok(())
}

/// Creates the queues of `d` the segment lacks, with their limits, before the file is
/// claimed: the daemon refuses what this user may not have (a quota past its
/// `--records-per-uid`, a queue past `--queues-per-uid`) only when asked, and a refusal
/// after the claim left the file `.importing` and a queue without its jobs. On a refusal
/// the queues made so far are deleted again. A dump's "no quota" (0) keeps the quota the
/// daemon gives a new queue of this user.
fn create_queues(client: &xtcq_client::Client, d: &xtcq_dump::Dump) -> Result<(), xtcq_dump::DumpError> {
    let mut created = Vec::new();
    let refused = |q: &str, e: &dyn std::fmt::Display, created: &[String]| {
        remove_created(client, created);
        xtcq_dump::DumpError::Import(format!("queue {q}: {e}; nothing was imported"))
    };
    for q in &d.queues {
        match client.create_queue(&xtcq_dump::params(q)) {
            Ok(_) => created.push(q.name.clone()),
            Err(xtcq_client::Error::QueueExists(_)) => continue,
            Err(e) => return Err(refused(&q.name, &e, &created)),
        }
        let max_records = Some(q.max_records).filter(|&n| n != 0);
        if let Err(e) = client.set_queue_limits(&q.name, max_records, Some(q.max_dead)) {
            return Err(refused(&q.name, &e, &created));
        }
        if q.max_running != 0 {
            if let Err(e) = client.set_max_running(&q.name, q.max_running) {
                return Err(refused(&q.name, &e, &created));
            }
        }
        if let Some(r) = q.max_rate {
            if let Err(e) = client.set_max_rate(&q.name, r) {
                return Err(refused(&q.name, &e, &created));
            }
        }
        if q.paused {
            if let Err(e) = client.pause_queue(&q.name) {
                return Err(refused(&q.name, &e, &created));
            }
        }
    }
    Ok(())
}

/// Deletes the queues an import that was then refused had created (empty: no job was
/// written); one that cannot be is left, and said so.
fn remove_created(client: &xtcq_client::Client, created: &[String]) {
    for q in created {
        if let Err(e) = client.delete_queue(q, false) {
            eprintln!("xtcq import: the empty queue {q} this import created could not be deleted: {e}");
        }
    }
}

/// Creates the dump's missing queues (with its limits), then writes each job with its
/// attempts and last error through an injector of its queue.
pub fn import(socket: Option<&std::path::Path>, args: ImportArgs) -> Result<i32> {
    let client = crate::cmd::connect(socket)?;
    let mut injectors: Vec<(String, xtcq_client::InjectorHandle)> = Vec::new();
    let claimed = xtcq_dump::claim::claim_file(&args.file, |d| {
        refuse_same_segment(&client, d)?;
        check_room(&client, d)?;
        attach_existing(&client, d, &mut injectors)?;
        create_queues(&client, d)
    })?;
    let Some((_, d)) = claimed else {
        let mut done = args.file.clone().into_os_string();
        done.push(".imported");
        if std::path::Path::new(&done).exists() {
            anyhow::bail!(
                "{} was imported already (it is now {}); a file is imported once",
                args.file.display(),
                std::path::Path::new(&done).display()
            );
        }
        anyhow::bail!("{}: no such file", args.file.display());
    };
    for (n, j) in d.jobs.iter().enumerate() {
        if !injectors.iter().any(|(name, _)| *name == j.queue) {
            let inj = client.attach_injector(&j.queue).with_context(|| format!("queue {}", j.queue))?;
            injectors.push((j.queue.clone(), inj));
        }
        let Some((_, inj)) = injectors.iter().find(|(name, _)| *name == j.queue) else { continue };
        let payload = j
            .payload_bytes()
            .with_context(|| format!("job {} of the dump has no payload, or bad hex", n + 1))?;
        let key = j.key_bytes().map_err(|e| anyhow::anyhow!("job {} of the dump: {e}", n + 1))?;
        inj.import(
            &payload,
            j.attempts,
            &j.last_error,
            j.state == xtcq_dump::JobState::Dead,
            j.priority,
            key.as_deref(),
        )
        .with_context(|| format!("job {} of the dump (queue {})", n + 1, j.queue))?;
    }
    let done = xtcq_dump::claim::finish_file(&args.file)?;
    eprintln!(
        "xtcq import: {} job(s) imported; {} renamed {}",
        d.jobs.len(),
        args.file.display(),
        done.display()
    );
    Ok(exit::OK)
}
