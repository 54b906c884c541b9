//! Client-side balancing over a pool of the engine (feature `tower`).
//!
//! - [`BalanceLayer`] (in `layer`): a tower layer that sends each request to a member the engine
//!   picks, fails fast when none can take it, reports every outcome, and retries on another
//!   member within a budget;
//! - `retry`: which requests may be retried, and the budget that keeps retries from multiplying
//!   load on a struggling pool.

mod layer;
mod retry;

pub use layer::{Balance, BalanceLayer, BoxError, NoAddress};
pub use retry::{RetryBudget, RetryBudgetError, is_retryable};
