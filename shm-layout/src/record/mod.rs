//! Job records: the state word and its transitions (`state`, model-checked with loom), the
//! arena of records in the segment (`arena`) and the payload blocks they hold (`blocks`).

#[cfg(not(xtcq_loom))]
pub mod arena;
pub mod block_owner;
#[cfg(not(xtcq_loom))]
pub mod blocks;
pub mod state;
