//! `xtcqd`: the xtcq daemon (see `xtcqd::entry`).

fn main() {
    xtcqd::entry::main()
}
