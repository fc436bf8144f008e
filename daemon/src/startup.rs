//! Start-up: everything the daemon does before it serves, synchronously, before the async
//! runtime exists.
//!
//! - [`entry`]: the one entry point (`xtcqd`, `xtcq __xtcqd`): the config file folded into
//!   the flags, logging installed, the daemon run;
//! - [`config`], [`config_file`], [`payload_blocks`]: the command line, `--config FILE` and
//!   `--payload-blocks`, resolved into a [`config::Config`];
//! - [`prepare`]: the socket directory, the single-daemon checks, the segment (create or
//!   adopt) and the listening socket;
//! - [`segment_size`]: refusing a segment too large to create, or to fit where it goes;
//! - [`paths_secure`]: no-follow, owner-checked opens under shared directories;
//! - [`fdstore`]: the sealed memfd segment kept in systemd's fd store;
//! - [`logging`]: the log subscriber (text or JSON);
//! - [`notify`]: systemd's readiness notification.

pub mod config;
pub mod config_file;
pub mod entry;
pub mod fdstore;
pub mod logging;
pub mod notify;
pub mod paths_secure;
pub mod payload_blocks;
pub mod prepare;
pub mod segment_size;

pub use prepare::{prepare, remove_socket, Prepared};
