//! `xtcq-bridge`: carries jobs between xtcq queues on different hosts (see `xtcq_bridge`).

fn main() -> std::process::ExitCode {
    xtcq_bridge::main()
}
