//! Runnable examples of the Rust client, one folder per feature (`push_steal/`,
//! `async_wait/`), each with a README; run one with
//! `cargo run -p xtcq-examples --example NAME` against a running `xtcqd`.
