//! `xtcqd` for this package's tests: the daemon's one entry point, built as a binary of this
//! package so that cargo builds it (with the fail points) for these tests; cargo builds the
//! binaries of a package only for that package's own tests.

fn main() {
    xtcqd::startup::entry::main()
}
