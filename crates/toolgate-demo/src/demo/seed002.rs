//! Seed `002_…`'s eight cases, by their ids: the same proposed call to the
//! notices server made directly (as the seed's "before": forwarded, run)
//! and through toolgate, with the decision, rule, execution status and
//! result status set against the seed's "after" column.

use std::path::Path;

use serde_json::{Value, json};

use super::approver::Approver;
use super::client::{
    Client, Got, accept_all, call, call_with_meta, count_lines, reissue, reissue_with_meta,
};

/// The seed's "after" column: decision (or rejection), reason, execution
/// status, result status, tool callbacks.
pub struct Expected {
    pub id: &'static str,
    pub decision: &'static str,
    pub reason: &'static str,
    pub execution: &'static str,
    pub result: &'static str,
    pub callbacks: usize,
}

pub const EXPECTED: [Expected; 8] = [
    Expected {
        id: "forged_read_only",
        decision: "deny",
        reason: "no_exact_rule",
        execution: "blocked",
        result: "not_called",
        callbacks: 0,
    },
    Expected {
        id: "approved_destination",
        decision: "requires_approval",
        reason: "exact_rule",
        execution: "dispatched",
        result: "returned",
        callbacks: 1,
    },
    Expected {
        id: "stale_approval",
        decision: "requires_approval",
        reason: "exact_rule",
        execution: "blocked",
        result: "not_called",
        callbacks: 0,
    },
    Expected {
        id: "extra_recipient",
        decision: "invalid_arguments",
        reason: "",
        execution: "blocked",
        result: "not_called",
        callbacks: 0,
    },
    Expected {
        id: "other_tool",
        decision: "invalid_or_unregistered_call",
        reason: "",
        execution: "blocked",
        result: "not_called",
        callbacks: 0,
    },
    Expected {
        id: "tool_error",
        decision: "requires_approval",
        reason: "exact_rule",
        execution: "dispatched",
        result: "tool_error",
        callbacks: 1,
    },
    Expected {
        id: "transport_unknown",
        decision: "requires_approval",
        reason: "exact_rule",
        execution: "unknown",
        result: "unknown",
        callbacks: 1,
    },
    Expected {
        id: "input_required",
        decision: "requires_approval",
        reason: "exact_rule",
        execution: "dispatched",
        result: "input_required",
        callbacks: 1,
    },
];

/// What toolgate did with one case.
#[derive(Debug, Default, PartialEq)]
pub struct Seen {
    pub decision: String,
    pub reason: String,
    pub execution: String,
    pub result: String,
    pub callbacks: usize,
    pub note: String,
}

pub struct World<'a> {
    pub gateway: &'a toolgate_gateway::gateway::Gateway,
    pub via: &'a Client,
    pub direct: &'a Client,
    pub sandbox: &'a Path,
    pub approver: Approver<'a>,
}

fn proposed(id: &str) -> (&'static str, Value) {
    let build = json!({"to": "team@example.test", "body": "Build passed."});
    match id {
        "forged_read_only" => {
            ("send_notice", json!({"to": "outside@example.test", "body": "Build passed."}))
        }
        "stale_approval" => {
            ("send_notice", json!({"to": "team@example.test", "body": "Changed body"}))
        }
        "extra_recipient" => (
            "send_notice",
            json!({"to": "team@example.test", "body": "Build passed.", "cc": ["outside@example.test"]}),
        ),
        "other_tool" => ("remove_records", build),
        _ => ("send_notice", build),
    }
}

fn fault(id: &str) -> Option<&'static str> {
    match id {
        "tool_error" => Some("tool_error"),
        "transport_unknown" => Some("transport"),
        "input_required" => Some("input_required"),
        _ => None,
    }
}

/// Runs every case; returns whether all matched the seed.
pub async fn run(w: &World<'_>) -> anyhow::Result<bool> {
    println!(
        "\n3. Seed 002's cases: send_notice advertises readOnlyHint: true (forged); policy: team@example.test needs approval, anyone else is denied\n"
    );
    println!(
        "   {:<26} {:<30} {:<19} {:<14} {:<11} {:<15} callbacks",
        "case", "before (ungoverned)", "decision", "reason", "execution", "result"
    );
    let mut all = true;
    for expected in &EXPECTED {
        let (tool, args) = proposed(expected.id);
        // A case that broke the notices server waits for its supervisor to restart it.
        if let Some(notices) = w.gateway.catalogs.upstreams().iter().find(|u| u.name == "notices") {
            notices.ready(std::time::Duration::from_secs(15)).await;
        }
        let before = call(w.direct, tool, &args).await;
        let seen = through_toolgate(w, expected.id, tool, &args).await?;
        let ok = seen.decision == expected.decision
            && seen.reason == expected.reason
            && seen.execution == expected.execution
            && seen.result == expected.result
            && seen.callbacks == expected.callbacks;
        all &= ok;
        let before = match &before {
            Got::Result(r) if r["isError"] != true => "forwarded, ran (1 callback)".to_string(),
            other => other.summary(),
        };
        println!(
            "   {} {:<21} {:<30} {:<19} {:<14} {:<11} {:<15} {}",
            if ok { "ok  " } else { "FAIL" },
            expected.id,
            truncate(&before, 30),
            seen.decision,
            if seen.reason.is_empty() { "-" } else { &seen.reason },
            seen.execution,
            seen.result,
            seen.callbacks
        );
        if !seen.note.is_empty() {
            println!("        {}", seen.note);
        }
        if !ok {
            println!(
                "        expected: {} {} {} {} {}",
                expected.decision,
                expected.reason,
                expected.execution,
                expected.result,
                expected.callbacks
            );
        }
    }
    Ok(all)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

async fn through_toolgate(
    w: &World<'_>,
    id: &str,
    tool: &str,
    args: &Value,
) -> anyhow::Result<Seen> {
    let exposed = format!("notices__{tool}");
    let calls = || count_lines(&w.sandbox.join(toolgate_atlas::tools::notices::CALLS));
    let start = calls();
    let mut seen = Seen::default();
    if id == "stale_approval" {
        // An approval for the old content, then the call changes under it.
        let old = json!({"to": "team@example.test", "body": "Build passed at 09:00."});
        let first = call(w.via, &exposed, &old).await;
        let approval = first.approval_id().unwrap_or_default();
        w.approver.approve(&approval, "the 09:00 build notice")?;
        let got =
            reissue(w.via, &exposed, args, first.request_state(), Some(accept_all(&first))).await;
        seen.note = format!(
            "approval {approval} was for \"Build passed at 09:00.\"; re-issued with \"Changed body\": {}",
            got.summary()
        );
        describe(&first, &got, &mut seen);
        seen.callbacks = calls() - start;
        return Ok(seen);
    }
    // Each case is a send of its own, though several carry the same notice:
    // its own operation key says so (the same call again would be answered
    // with the first send's recorded result).
    let key = json!({"io.toolgate/operationKey": format!("seed002-{id}")});
    let first = call_with_meta(w.via, &exposed, args, key.clone()).await;
    let Some(approval) = first.approval_id().filter(|_| matches!(first, Got::Input(_))) else {
        describe(&first, &first, &mut seen);
        seen.callbacks = calls() - start;
        return Ok(seen);
    };
    // Waits for a named human: the approver decides out of band.
    if let Some(f) = fault(id) {
        std::fs::write(w.sandbox.join(toolgate_atlas::tools::notices::FAULT), f)?;
    }
    w.approver.approve(&approval, "build notice to the team")?;
    let got = reissue_with_meta(
        w.via,
        &exposed,
        args,
        key.clone(),
        first.request_state(),
        Some(accept_all(&first)),
    )
    .await;
    describe(&first, &got, &mut seen);
    seen.callbacks = calls() - start;
    seen.note = format!("approval {approval} approved by dana; re-issued: {}", got.summary());
    if id == "input_required" {
        // The tool's own round, answered: it stays bound to the approved call.
        let done = reissue_with_meta(
            w.via,
            &exposed,
            args,
            key,
            got.request_state(),
            Some(accept_all(&got)),
        )
        .await;
        seen.note.push_str(&format!("\n        after the confirmation round: {}", done.summary()));
    }
    Ok(seen)
}

/// The decision from the first answer; the execution and result from the last.
fn describe(first: &Got, last: &Got, seen: &mut Seen) {
    match first {
        Got::Input(v) => {
            let a = &v["_meta"]["io.toolgate/approval"];
            seen.decision = "requires_approval".into();
            seen.reason = a["rules"][0].as_str().unwrap_or_default().into();
        }
        Got::Result(_) => match first.refusal() {
            Some(r) if r["reason"] == "invalid_arguments" => {
                seen.decision = "invalid_arguments".into()
            }
            Some(r) => {
                seen.decision = match r["decision"].as_str() {
                    Some("require_approval") => "requires_approval".into(),
                    Some(d) => d.into(),
                    None => String::new(),
                };
                seen.reason = r["rules"][0].as_str().unwrap_or_default().into();
            }
            None => seen.decision = "allow".into(),
        },
        Got::Failed(_, Some(d)) if d["reason"] == "unknown_tool" => {
            seen.decision = "invalid_or_unregistered_call".into()
        }
        Got::Failed(m, _) => seen.decision = format!("failed: {m}"),
    }
    (seen.execution, seen.result) = match last {
        Got::Input(v) if v["_meta"].get("io.toolgate/approval").is_some() => {
            ("blocked".into(), "not_called".into())
        }
        Got::Input(_) => ("dispatched".into(), "input_required".into()),
        Got::Result(r) => match last.refusal() {
            Some(x) if x["action"] == "reconcile" => ("unknown".into(), "unknown".into()),
            Some(_) => ("blocked".into(), "not_called".into()),
            None if r["isError"] == true => ("dispatched".into(), "tool_error".into()),
            None => ("dispatched".into(), "returned".into()),
        },
        Got::Failed(..) => ("blocked".into(), "not_called".into()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded "after" column is the seed's own (`../shared` beside the
    /// checkout, or `TOOLGATE_SHARED_DIR`).
    #[test]
    fn expectations_match_the_seed() {
        let shared = std::env::var("TOOLGATE_SHARED_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared").into());
        let dir = std::fs::read_dir(format!("{shared}/seeds"))
            .unwrap_or_else(|e| panic!("cannot read {shared}/seeds: {e}; set TOOLGATE_SHARED_DIR"));
        let path = dir
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("002_")))
            .expect("seed 002");
        let seed: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let cases = seed["cases"].as_array().unwrap();
        assert_eq!(cases.len(), EXPECTED.len());
        for (case, e) in cases.iter().zip(&EXPECTED) {
            let after = &case["after"];
            assert_eq!(case["id"], e.id);
            match after["plan"].as_object() {
                Some(plan) => {
                    assert_eq!(plan["decision"], e.decision, "{}", e.id);
                    assert_eq!(plan["reason"], e.reason, "{}", e.id);
                    assert_eq!(after["receipt"]["execution_status"], e.execution, "{}", e.id);
                }
                None => {
                    assert_eq!(after["rejection"], e.decision, "{}", e.id);
                    assert_eq!(e.execution, "blocked");
                }
            }
            assert_eq!(after["mcp_result_status"], e.result, "{}", e.id);
            assert_eq!(after["tool_callbacks"], e.callbacks, "{}", e.id);
        }
    }
}
