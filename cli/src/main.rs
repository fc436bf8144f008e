//! `xtcq`: the command line of the xtcq job queue (see `xtcq_cli`).

fn main() {
    xtcq_cli::main()
}
