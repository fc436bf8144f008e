//! `xtcqd` for the benches: the daemon's one entry point, built as a binary of this package
//! (without the tests' fail points) so that cargo builds it for `cargo bench -p xtcq-benches`.

fn main() {
    xtcqd::startup::entry::main()
}
