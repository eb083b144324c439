//! Telemetry as an observer of the pipeline: one child span per stage, and
//! what each stage concluded recorded on the request's SERVER span and in
//! the metrics (by the MCP and GenAI conventions, docs/TELEMETRY.md). The
//! pipeline tells it what happened; it never changes what happens.

use opentelemetry::KeyValue;
use serde_json::Value;
use toolgate_core::{Decision, Proposal, Reason, Verdict};

use crate::call::{Answer, Context, Stop};
use crate::catalog::ExposedTool;
use crate::telemetry::{INSTRUMENTS, Redactor, TARGET, metrics_on};

/// Watches one call.
pub(crate) struct Observer<'a> {
    /// The request's SERVER span: stages record what they concluded on it.
    server: tracing::Span,
    /// Set when tool content is captured (`telemetry.capture_content`).
    capture: Option<&'a Redactor>,
}

impl<'a> Observer<'a> {
    /// An observer of the call running in the current span.
    pub(crate) fn new(capture: Option<&'a Redactor>) -> Self {
        Self { server: tracing::Span::current(), capture }
    }

    /// The child span of one stage, so a trace shows where the time went.
    pub(crate) fn stage(&self, name: &'static str) -> tracing::Span {
        tracing::info_span!(target: TARGET, "toolgate.stage", otel.name = name, toolgate.stage = name)
    }

    pub(crate) fn resolved(&self, cx: &Context, tool: &ExposedTool) {
        let s = &self.server;
        // The GenAI conventions describe tool calls; a prompt get or a
        // resource read carries only the MCP and toolgate attributes.
        if tool.kind == toolgate_mcp::upstream::Kind::Tool {
            s.record("gen_ai.operation.name", "execute_tool");
            s.record("gen_ai.tool.type", "function");
            s.record("gen_ai.provider.name", tool.server.as_str());
            s.record("gen_ai.system", tool.server.as_str());
            if let Some(d) = tool.tool.definition.get("description").and_then(Value::as_str) {
                s.record("gen_ai.tool.description", d);
            }
            if let (Some(id), false) = (&cx.request_id, s.is_disabled()) {
                s.record(
                    "gen_ai.tool.call.id",
                    serde_json::to_string(id).unwrap_or_default().trim_matches('"'),
                );
            }
        }
        s.record(
            "toolgate.authority.registry_class",
            tool.view.registry_class.map_or("none", |c| c.as_str()),
        );
        s.record("toolgate.authority.implied_class", tool.view.implied_class.as_str());
    }

    pub(crate) fn validated(&self, proposal: &Proposal) {
        self.server.record("toolgate.proposal_sha256", proposal.sha256.as_str());
        if let Some(redactor) = self.capture {
            self.server.record(
                "gen_ai.tool.call.arguments",
                redactor.redact(&proposal.arguments).to_string(),
            );
        }
    }

    pub(crate) fn decided(&self, tool: &ExposedTool, decision: &Decision, policy_version: &str) {
        self.server.record("toolgate.policy_version", policy_version);
        self.verdict(
            decision.verdict,
            &decision.reason,
            &decision.rules,
            tool.view.effective_class.as_str(),
        );
        match decision.reason {
            Reason::RateLimited => self.budget("rate"),
            Reason::RunBudgetExhausted => self.budget("run"),
            _ => {}
        }
    }

    /// A stage before decide refused the call (`tool`: as far as it was
    /// resolved): the refusal is the call's decision, seen as any other.
    pub(crate) fn refused_early(&self, stop: &Stop, tool: Option<&ExposedTool>) {
        if let Stop::Refused(r) = stop {
            self.verdict(
                r.verdict,
                &r.reason,
                &r.rules,
                tool.map_or("none", |t| t.view.effective_class.as_str()),
            );
        }
    }

    fn verdict(&self, verdict: Verdict, reason: &Reason, rules: &[String], class: &str) {
        let s = &self.server;
        // The guardrail convention's words for the verdict (`block` is its deny).
        let guardrail = match verdict {
            Verdict::Allow => "allow",
            Verdict::RequireApproval => "require_approval",
            Verdict::Deny => "block",
        };
        s.record("guardrail.name", "toolgate.policy");
        s.record("guardrail.decision", guardrail);
        // The reason's wire name only when something listens (span or metrics).
        let reason = (!s.is_disabled() || metrics_on())
            .then(|| toolgate_core::receipt::build::wire_name(reason));
        if let (Some(reason), false) = (&reason, s.is_disabled()) {
            s.record("toolgate.decision.reason", reason.as_str());
            s.record("toolgate.decision.rules", rules.join(",").as_str());
        }
        if let (Some(reason), true) = (reason, metrics_on()) {
            INSTRUMENTS.decisions.add(
                1,
                &[
                    KeyValue::new("guardrail.decision", guardrail),
                    KeyValue::new("toolgate.decision.reason", reason),
                    KeyValue::new("toolgate.authority.class", class.to_string()),
                ],
            );
        }
    }

    /// A budget refused the call: `rate`, `run` or `concurrency`.
    pub(crate) fn budget(&self, kind: &'static str) {
        self.server.record("toolgate.budget", kind);
        if metrics_on() {
            INSTRUMENTS.budget_refusals.add(1, &[KeyValue::new("toolgate.budget", kind)]);
        }
    }

    pub(crate) fn approval(&self, id: &str) {
        self.server.record("toolgate.approval.id", id);
    }

    pub(crate) fn operation(&self, id: &str) {
        self.server.record("toolgate.operation.id", id);
    }

    pub(crate) fn answered(&self, answer: &Answer) {
        if let (Some(redactor), Answer::Result(result)) = (self.capture, answer) {
            let value = serde_json::to_value(result).unwrap_or_default();
            self.server.record("gen_ai.tool.call.result", redactor.redact(&value).to_string());
        }
    }
}
