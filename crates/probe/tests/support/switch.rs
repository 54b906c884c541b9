//! A probe that passes or fails as the test says, counting its runs: for engine tests on paused
//! time, where what matters is what the engine makes of results, not how they are obtained.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use probe::outcome::{CheckResult, Failure, FailureReason};
use probe::tier::Probe;

#[derive(Default)]
pub struct Switch {
    pub down: AtomicBool,
    pub runs: AtomicUsize,
}

#[async_trait::async_trait]
impl Probe for Switch {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            CheckResult::failed(Failure::new(FailureReason::Refused, "switched off"))
        } else {
            CheckResult::up()
        }
    }
}
