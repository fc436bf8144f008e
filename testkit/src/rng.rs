//! xorshift64*: the deterministic random source of the tests that scribble garbage into a
//! segment or kill processes at random; one seed, one sequence, so a failure replays.
//!
//! - Self-contained (no `crate::` path, no dependency): the engine's own tests in
//!   `shm-layout/tests` include this file by path, since they cannot link testkit (testkit
//!   links the engine, through the client).
//! - Not random enough for anything but tests.

/// xorshift64* (Vigna): 64 bits a step, never stuck (the state is never 0).
pub struct Rng(u64);

impl Rng {
    /// The generator for `seed`, made odd: a zero state would stay zero.
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
