//! Budgets kept in this gateway's memory: each subject's rate (`governor`,
//! keyed by tenant and subject — not by credential, so a second token of
//! the same person or agent shares the first's rate — on the gateway's one
//! clock) and
//! each limited tool's calls at once. A run's call budget is counted in the
//! ledger instead (`runs`), since a run spans restarts and replicas.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{Quota, RateLimiter, state::keyed::HashMapStateStore};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolgate_core::budget::Over;
use toolgate_core::{Action, Caller, Clock, Reason, Refusal, Verdict};

use crate::call::Stop;
use crate::catalog::ExposedTool;
use crate::config::BudgetsConfig;

/// How long a call refused for a tool's concurrency is told to wait: about
/// one short call's time; the slot frees as soon as any call ends.
pub const CONCURRENCY_RETRY_MS: i64 = 250;

/// The gateway's clock as `governor` reads it, so rates follow the one
/// clock (and tests can move it).
struct OneClock(Arc<dyn Clock>);

impl governor::clock::Clock for OneClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        Duration::from_millis(self.0.now_ms().max(0) as u64)
    }
}

/// A rate's key: the tenant and the subject.
type Principal = (String, String);

type Limiter = RateLimiter<Principal, HashMapStateStore<Principal>, OneClock, governor::middleware::NoOpMiddleware<Duration>>;

/// The in-memory budgets, as configured.
pub struct Budgets {
    rate: Option<(u32, Limiter)>,
    concurrency: HashMap<String, Arc<Semaphore>>,
}

impl Budgets {
    /// From `[budgets]` (validated with the config).
    pub fn new(config: &BudgetsConfig, clock: Arc<dyn Clock>) -> Self {
        let rate = NonZeroU32::new(config.rate_per_minute).map(|per_minute| {
            let burst = config.rate_burst.and_then(NonZeroU32::new).unwrap_or(NonZeroU32::new((per_minute.get() / 10).max(1)).expect("at least 1"));
            (per_minute.get(), RateLimiter::hashmap_with_clock(Quota::per_minute(per_minute).allow_burst(burst), OneClock(clock)))
        });
        let concurrency = config.concurrency.iter().map(|(tool, n)| (tool.clone(), Arc::new(Semaphore::new(*n as usize)))).collect();
        Self { rate, concurrency }
    }

    /// Spends one of the rate of `caller`'s subject; `Over` if it has none left.
    pub fn spend(&self, caller: &Caller) -> Option<Over> {
        let (per_minute, limiter) = self.rate.as_ref()?;
        let refused = limiter.check_key(&(caller.tenant.clone(), caller.subject.clone())).err()?;
        let wait = refused.wait_time_from(governor::clock::Clock::now(limiter.clock()));
        Some(Over::Rate { per_minute: *per_minute, retry_after_ms: wait.as_millis().max(1) as i64 })
    }

    /// A slot to run `tool` in, held until its dispatch ends; the refusal if
    /// all its slots are taken. Tools without a limit need none.
    pub fn slot(&self, tool: &ExposedTool) -> Result<Option<OwnedSemaphorePermit>, Stop> {
        let Some(slots) = self.concurrency.get(&tool.exposed_name) else { return Ok(None) };
        slots.clone().try_acquire_owned().map(Some).map_err(|_| {
            Stop::Refused(
                Refusal::new(
                    Verdict::Allow,
                    Reason::ConcurrencyLimited,
                    Action::Retry,
                    format!("{} is running as many calls at once as it may here; nothing was run, retry in {CONCURRENCY_RETRY_MS} ms", tool.exposed_name),
                )
                .with_retry_after(CONCURRENCY_RETRY_MS),
            )
        })
    }
}
