//! Job records: the state word and its transitions (`state`, model-checked with loom), and
//! the arena of records in the segment (`arena`).

#[cfg(not(xtcq_loom))]
pub mod arena;
pub mod state;
