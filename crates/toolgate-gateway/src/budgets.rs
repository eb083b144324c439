//! Budgets kept in this gateway's memory: each subject's rate (`governor`,
//! keyed by tenant and subject — not by credential, so a second token of
//! the same person or agent shares the first's rate — on the gateway's one
//! clock) and
//! each limited tool's calls at once. A run's call budget is counted in the
//! ledger instead (`runs`), since a run spans restarts and replicas.
//!
//! Across a fleet, each replica enforces its share: with `n` replicas alive
//! (the ledger's heartbeats, see `fleet`), a rate of `r` a minute with a
//! burst of `b` is `r / n` with a burst of `b / n` (at least 1) here, and a
//! tool's `k` calls at once are `k / n` (at least 1). No call costs a
//! database round trip; the shares change when the count does. The error
//! bound is in docs/RELIABILITY.md, *Replicas*.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
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

type Limiter = RateLimiter<
    Principal,
    HashMapStateStore<Principal>,
    OneClock,
    governor::middleware::NoOpMiddleware<Duration>,
>;

/// The in-memory budgets, as configured, at this replica's share.
pub struct Budgets {
    /// The fleet's rate a minute and burst, when there is a rate.
    rate: Option<(u32, u32)>,
    /// This replica's limiter, at its share (rebuilt when the share changes).
    limiter: RwLock<Option<Arc<Limiter>>>,
    /// Each limited tool's calls at once across the fleet.
    configured: Vec<(String, u32)>,
    /// This replica's slots of each, at its share.
    concurrency: RwLock<HashMap<String, Arc<Semaphore>>>,
    /// How many replicas share the budgets now.
    replicas: AtomicU32,
    clock: Arc<dyn Clock>,
}

/// A limiter of `per_minute / replicas` calls a minute and `burst /
/// replicas` at once (at least 1).
fn share_of_rate(
    (per_minute, burst): (u32, u32),
    replicas: u32,
    clock: &Arc<dyn Clock>,
) -> Limiter {
    let replicas = replicas.max(1);
    let period = Duration::from_nanos(
        (60_000_000_000u64 * u64::from(replicas) / u64::from(per_minute.max(1))).max(1),
    );
    let burst = NonZeroU32::new((burst / replicas).max(1)).expect("at least 1");
    let quota = Quota::with_period(period).expect("a period of at least 1 ns").allow_burst(burst);
    RateLimiter::hashmap_with_clock(quota, OneClock(clock.clone()))
}

/// This replica's slots of `k` calls at once: `k / replicas`, at least 1.
fn share_of_slots(k: u32, replicas: u32) -> usize {
    (k / replicas.max(1)).max(1) as usize
}

impl Budgets {
    /// From `[budgets]` (validated with the config), as the only replica
    /// until the fleet says otherwise.
    pub fn new(config: &BudgetsConfig, clock: Arc<dyn Clock>) -> Self {
        let rate = (config.rate_per_minute > 0).then(|| {
            (
                config.rate_per_minute,
                config
                    .rate_burst
                    .filter(|b| *b > 0)
                    .unwrap_or((config.rate_per_minute / 10).max(1)),
            )
        });
        let configured: Vec<(String, u32)> =
            config.concurrency.iter().map(|(tool, n)| (tool.clone(), *n)).collect();
        let budgets = Self {
            rate,
            limiter: RwLock::new(None),
            configured,
            concurrency: RwLock::default(),
            replicas: AtomicU32::new(0),
            clock,
        };
        budgets.share(1);
        budgets
    }

    /// How many replicas share the budgets now.
    pub fn replicas(&self) -> u32 {
        self.replicas.load(Ordering::Relaxed)
    }

    /// Takes this replica's share among `replicas` (from the fleet's
    /// heartbeats), when that count changed. A caller's count so far in
    /// the old share is not carried over: the new share starts full.
    pub fn share(&self, replicas: u32) {
        let replicas = replicas.max(1);
        if self.replicas.swap(replicas, Ordering::Relaxed) == replicas {
            return;
        }
        if let Some(rate) = self.rate {
            *self.limiter.write().unwrap_or_else(|p| p.into_inner()) =
                Some(Arc::new(share_of_rate(rate, replicas, &self.clock)));
        }
        let slots = self
            .configured
            .iter()
            .map(|(tool, k)| (tool.clone(), Arc::new(Semaphore::new(share_of_slots(*k, replicas)))))
            .collect();
        *self.concurrency.write().unwrap_or_else(|p| p.into_inner()) = slots;
    }

    /// Spends one of the rate of `caller`'s subject; `Over` if it has none left.
    pub fn spend(&self, caller: &Caller) -> Option<Over> {
        let (per_minute, _) = self.rate?;
        let limiter = self.limiter.read().unwrap_or_else(|p| p.into_inner());
        let limiter = limiter.as_ref()?;
        let refused = limiter.check_key(&(caller.tenant.clone(), caller.subject.clone())).err()?;
        let wait = refused.wait_time_from(governor::clock::Clock::now(limiter.clock()));
        Some(Over::Rate { per_minute, retry_after_ms: wait.as_millis().max(1) as i64 })
    }

    /// A slot to run `tool` in, held until its dispatch ends; the refusal if
    /// all its slots are taken. Tools without a limit need none.
    pub fn slot(&self, tool: &ExposedTool) -> Result<Option<OwnedSemaphorePermit>, Stop> {
        let Some(slots) = self
            .concurrency
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tool.exposed_name)
            .cloned()
        else {
            return Ok(None);
        };
        slots.try_acquire_owned().map(Some).map_err(|_| {
            Stop::Refused(
                Refusal::new(
                    Verdict::Allow,
                    Reason::ConcurrencyLimited,
                    Action::Retry,
                    format!(
                        "{} is running as many calls at once as it may here; nothing was run, \
                            retry in {CONCURRENCY_RETRY_MS} ms",
                        tool.exposed_name
                    ),
                )
                .with_retry_after(CONCURRENCY_RETRY_MS),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::clock::FixedClock;

    fn caller(subject: &str) -> Caller {
        Caller {
            name: subject.into(),
            subject: subject.into(),
            tenant: "atlas".into(),
            roles: vec!["agent".into()],
        }
    }

    /// Calls admitted for `subject` in `ms` of the clock, offered every millisecond.
    fn admitted(b: &Budgets, clock: &FixedClock, subject: &str, ms: i64) -> u32 {
        let c = caller(subject);
        let mut n = 0;
        for _ in 0..ms {
            n += u32::from(b.spend(&c).is_none());
            clock.advance(1);
        }
        n
    }

    #[test]
    fn each_replica_takes_its_share_of_the_rate_and_the_fleet_adds_up_to_it() {
        let config =
            BudgetsConfig { rate_per_minute: 600, rate_burst: Some(30), ..Default::default() };
        let clock = Arc::new(FixedClock::new(0));
        let alone = Budgets::new(&config, clock.clone());
        // Alone: the burst, then 10 a second.
        assert_eq!(admitted(&alone, &clock, "a", 60_000), 30 + 600 - 1);
        // Three replicas, each offered everything: each admits a third.
        let fleet: Vec<Budgets> = (0..3).map(|_| Budgets::new(&config, clock.clone())).collect();
        fleet.iter().for_each(|b| b.share(3));
        let mut total = 0;
        for _ in 0..60_000 {
            for b in &fleet {
                total += u32::from(b.spend(&caller("b")).is_none());
            }
            clock.advance(1);
        }
        let limit = 600 + 30;
        assert!(total <= limit && total >= limit - 3, "the fleet admitted {total} against {limit}");
        assert_eq!(fleet[0].replicas(), 3);
    }

    #[test]
    fn slots_are_shared_out_and_never_fewer_than_one() {
        let mut config = BudgetsConfig::default();
        config.concurrency.insert("parts__raise_parts_order".into(), 4);
        assert_eq!(
            (
                share_of_slots(4, 1),
                share_of_slots(4, 2),
                share_of_slots(4, 3),
                share_of_slots(4, 8)
            ),
            (4, 2, 1, 1)
        );
        let b = Budgets::new(&config, Arc::new(FixedClock::new(0)));
        b.share(2);
        let held = b.concurrency.read().unwrap()["parts__raise_parts_order"].available_permits();
        assert_eq!(held, 2);
    }
}
