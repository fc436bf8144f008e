//! An empty `XTCQ_SOCKET` is unset, as xtcqd and the client library read it (proto's
//! `paths`): `xtcq` goes on to the default path. Before, clap took it for `--socket` given
//! no value: "a value is required for '--socket <PATH>'", naming a flag nobody typed (red
//! team 7).

use xtcq_testkit::*;

#[test]
fn an_empty_xtcq_socket_falls_back_to_the_default_path() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    // `$RUNTIME_DIRECTORY/xtcqd.sock` is the first default: the daemon's own socket here.
    let o = run_bounded(xtcq().env("XTCQ_SOCKET", "").env("RUNTIME_DIRECTORY", d.dir()).args(["ls"]), None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains('q'), "{}", stdout(&o));
}
