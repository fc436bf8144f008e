//! Fencing: the commands a worker runs for its claims, stopped before their job runs again.
//! (Filled in by the fence; for now nothing is registered, so nothing is to stop.)

/// Registered commands, by (holder slot, record index).
#[derive(Default)]
pub struct Fences {}

impl Fences {
    /// Stops whatever is registered for record `index` held by `holder`.
    pub fn fence(&self, _index: u32, _holder: u32) -> Result<(), String> {
        Ok(())
    }
}
