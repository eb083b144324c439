//! Agent runs: which run a call is part of, what decide learns of it (the
//! calls that brought each leg of the trifecta in, and whether the run has
//! used its call budget), and the legs a call's answer brings in.
//!
//! A run is the caller's own (tenant and subject), named by
//! `_meta["io.toolgate/run"]`, else the MCP session (stdio: the
//! connection), else the trace id the call carries, else it is the
//! caller's one standing run — the strictest reading: every call of that
//! caller counts toward it. Its state lives in the ledger, so it survives a
//! restart and replicas on PostgreSQL share it; it ends `[runs] ttl_ms`
//! after its first call.

use std::collections::HashMap;
use std::sync::Mutex;

use toolgate_core::budget::Over;
use toolgate_core::trifecta::{self, Leg, LegCall};
use toolgate_core::{Action, Proposal, Reason, Refusal, Verdict};
use toolgate_ledger::{Ledger, RunKey};

use crate::call::{Call, Context, Stop};
use crate::catalog::ExposedTool;
use crate::config::Config;
use crate::stages::decide::Situation;

/// `_meta` key naming the agent run a call is part of.
pub const RUN_META: &str = "io.toolgate/run";

/// What this gateway keeps of runs between calls: the config, and which
/// legs it has already written for which run (until the run ends), so a
/// run reading untrusted content all day writes each leg once.
pub struct Runs {
    ttl_ms: i64,
    trifecta: bool,
    run_calls: u64,
    written: Mutex<HashMap<(RunKey, Leg), i64>>,
}

impl Runs {
    /// From `[runs]`, `[guards.trifecta]` and `[budgets]`.
    pub fn new(config: &Config) -> Self {
        Self {
            ttl_ms: config.runs.ttl_ms.min(i64::MAX as u64) as i64,
            trifecta: config.guards.trifecta.enabled,
            run_calls: config.budgets.run_calls,
            written: Mutex::default(),
        }
    }

    /// The run `call` is part of: the one it names (admit checked it), its
    /// session's, its trace's, or its caller's standing run.
    pub fn key(cx: &Context, call: &Call) -> RunKey {
        let trace = || {
            cx.trace
                .get("traceparent")
                .and_then(|t| t.split('-').nth(1))
                .filter(|id| id.len() == 32)
                .map(|id| format!("trace-{id}"))
        };
        let run = match call.named_run() {
            Ok(Some(named)) => named.to_string(),
            _ => call
                .session
                .as_deref()
                .map(str::to_string)
                .or_else(trace)
                .unwrap_or_else(|| "standing".to_string()),
        };
        RunKey { tenant: cx.caller.tenant.clone(), subject: cx.caller.subject.clone(), run }
    }

    /// What decide needs of the run, before it decides: the legs, for a
    /// call to an egress tool while the trifecta guard is on; and, with a
    /// run budget, the call counted (a preview counts nothing) and whether
    /// the run is over it. Nothing is read when neither applies. A ledger
    /// that cannot answer refuses the call: the guards cannot judge what
    /// they cannot see.
    pub async fn view(
        &self,
        ledger: &dyn Ledger,
        now_ms: i64,
        key: RunKey,
        egress: bool,
        preview: bool,
    ) -> Result<Situation, Stop> {
        let count = self.run_calls > 0 && !preview;
        let legs = self.trifecta && egress;
        if !count && !legs {
            return Ok(Situation { run: key.run, ..Situation::default() });
        }
        let state = ledger.run(&key, count, now_ms, self.ttl_ms).await.map_err(|e| {
            unavailable(&e, "so the run's guards cannot judge this call; nothing was run")
        })?;
        let over = (count && state.calls > self.run_calls).then(|| Over::Run {
            run: key.run.clone(),
            limit: self.run_calls,
            retry_after_ms: state.expires_ms - now_ms,
        });
        Ok(Situation { run: key.run, legs: if legs { state.legs } else { Vec::new() }, over })
    }

    /// A call's answer came back: the legs its tool brings in join the run
    /// (`trifecta::legs_of`), before the caller hears the answer — if they
    /// cannot be written, the answer is withheld, or the run's next call
    /// out could pass unseen.
    pub async fn took_in(
        &self,
        ledger: &dyn Ledger,
        now_ms: i64,
        key: &RunKey,
        tool: &ExposedTool,
        proposal: &Proposal,
    ) -> Result<(), Stop> {
        if !self.trifecta {
            return Ok(());
        }
        for leg in trifecta::legs_of(&tool.labels, tool.view.server_trusted) {
            let slot = (key.clone(), leg);
            if self
                .written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&slot)
                .is_some_and(|until| *until > now_ms)
            {
                continue;
            }
            let call = LegCall {
                leg,
                tool: tool.exposed_name.clone(),
                proposal_sha256: proposal.sha256.clone(),
                at_ms: now_ms,
            };
            let until = ledger
                .add_run_leg(key, call, self.ttl_ms)
                .await
                .map_err(|e| unavailable(&e, "so what this call brought into the run cannot be noted and its answer is withheld"))?;
            let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
            // Ended runs leave; the map holds at most the runs alive.
            if written.len() > 10_000 {
                written.retain(|_, until| *until > now_ms);
            }
            written.insert(slot, until);
        }
        Ok(())
    }
}

fn unavailable(e: &toolgate_ledger::LedgerError, so: &str) -> Stop {
    tracing::error!(target: "toolgate::runs", error = %e, "the ledger could not read or write a run");
    Stop::Refused(Refusal::new(
        Verdict::Allow,
        Reason::LedgerUnavailable,
        Action::Retry,
        format!("the ledger is unavailable, {so}; retry later"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::testing::{call, split};
    use serde_json::json;

    fn key_of(
        run: Option<serde_json::Value>,
        session: Option<&str>,
        traceparent: Option<&str>,
    ) -> String {
        let mut request = call("parts__find_part", json!({}));
        request.call.run = run;
        request.call.session = session.map(Into::into);
        if let Some(t) = traceparent {
            request.trace.insert("traceparent".into(), t.into());
        }
        let (cx, call) = split(&request);
        let key = Runs::key(&cx, &call);
        assert_eq!(
            (key.tenant.as_str(), key.subject.as_str()),
            ("atlas", "agent-7"),
            "a run is its caller's own"
        );
        key.run
    }

    #[test]
    fn a_run_is_named_then_the_session_then_the_trace_then_the_callers_standing_run() {
        let trace = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert_eq!(key_of(Some(json!("r-1")), Some("stdio-s"), trace), "r-1");
        assert_eq!(key_of(None, Some("stdio-s"), trace), "stdio-s");
        assert_eq!(key_of(None, None, trace), "trace-0af7651916cd43dd8448eb211c80319c");
        assert_eq!(key_of(None, None, Some("not a traceparent")), "standing");
        assert_eq!(key_of(None, None, None), "standing");
    }

    #[test]
    fn a_run_id_that_cannot_be_one_is_refused_before_anything_runs() {
        for bad in [json!(""), json!(7), json!("a\nb"), json!("x".repeat(201))] {
            let mut request = call("parts__find_part", json!({}));
            request.call.run = Some(bad.clone());
            let refusal = request.call.named_run().expect_err("refused");
            assert_eq!(
                (refusal.reason, refusal.action),
                (toolgate_core::Reason::InvalidArguments, toolgate_core::Action::Correct),
                "{bad}"
            );
        }
    }
}
