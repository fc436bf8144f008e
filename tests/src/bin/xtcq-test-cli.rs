//! `xtcq` for this package's tests: the command line's own `main`, built as a binary of this
//! package so that cargo builds it for these tests.

fn main() {
    xtcq_cli::main()
}
