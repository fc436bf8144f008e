//! Pinning a thread to one CPU, for the benches (`xtcq-benches`) and the line chain they
//! measure hand-offs against ([`crate::line_chain`]).

/// Pins the calling thread to `cpu` (modulo the CPUs online); `XTCQ_BENCH_NO_PIN=1` skips it.
pub fn pin(cpu: usize) {
    if std::env::var_os("XTCQ_BENCH_NO_PIN").is_some() {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET within its bounds; affinity of this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % ncpus(), &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// CPUs online (not `available_parallelism`, which shrinks to the affinity mask once pinned).
pub fn ncpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as usize
}
