//! `xtcq-bridge` for this package's tests: the bridge's own `main`, built as a binary of this
//! package so that cargo builds it for these tests.

fn main() -> std::process::ExitCode {
    xtcq_bridge::main()
}
