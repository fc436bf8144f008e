//! The shapes of jobs beyond a payload: unique jobs (a key held while the job is live),
//! with real daemons, real pusher and consumer processes, kill -9 and daemon restarts.
//!
//! One test binary (`cargo test -p xtcq-tests --test shapes`), one module per feature: a new
//! test of this area goes into the module of its feature, or a new module declared here.
//! The modules' tests run in parallel threads of one process: no fixed names, ports or
//! users, and no `std::env::set_var`.

mod unique;
