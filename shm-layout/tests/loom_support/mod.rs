//! What every loom model file shares: which thread runs first after a `spawn`, and running a
//! model under both starts with a preemption bound, collecting every outcome it produced (so a
//! test can assert that the racy outcomes were reached, not only that nothing failed).
//! `LOOM_MAX_PREEMPTIONS` (read by `Builder::new`) overrides a file's default bound.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use loom::thread;

/// Which thread the scheduler runs first after the model's `spawn`.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    MainFirst,
    SpawnedFirst,
}

impl Start {
    /// Call right after spawning.
    pub fn after_spawn(self) {
        if let Start::SpawnedFirst = self {
            thread::yield_now();
        }
    }
}

/// Checks `model` under both starts with at most `preemptions` preemptions (unless the
/// environment says otherwise) and returns every outcome seen. A failing interleaving is
/// reported with its number before the panic goes on.
pub fn explore<O, F>(name: &str, preemptions: usize, model: F) -> BTreeSet<O>
where
    O: Ord + Debug + Send + 'static,
    F: Fn(Start) -> O + Sync + Send + 'static,
{
    let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let model = std::sync::Arc::new(model);
    for start in [Start::MainFirst, Start::SpawnedFirst] {
        let iterations = std::sync::Arc::new(AtomicUsize::new(0));
        let mut b = loom::model::Builder::new();
        let bound = *b.preemption_bound.get_or_insert(preemptions);
        let t0 = std::time::Instant::now();
        {
            let (seen, model, counter) = (seen.clone(), model.clone(), iterations.clone());
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                b.check(move || {
                    counter.fetch_add(1, Ordering::Relaxed);
                    let o = model(start);
                    seen.lock().unwrap().insert(o);
                })
            }));
            if let Err(payload) = r {
                eprintln!(
                    "{name} ({start:?}): failed in interleaving {} (preemption bound {bound})",
                    iterations.load(Ordering::Relaxed)
                );
                std::panic::resume_unwind(payload);
            }
        }
        eprintln!(
            "{name} ({start:?}): {} interleavings, preemption bound {bound}, {:.2?}",
            iterations.load(Ordering::Relaxed),
            t0.elapsed()
        );
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!("{name}: outcomes {seen:?}");
    seen
}
