//! `xtcqd`: the xtcq daemon (see `xtcqd::startup::entry`).

fn main() {
    xtcqd::startup::entry::main()
}
