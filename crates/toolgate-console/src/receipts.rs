//! Receipts and the log: the signed-in person's tenant's receipts in log
//! order, filtered by tool, caller and decision; one receipt with its
//! signed body, its inclusion proof against a checkpoint that covers it and
//! the offline verifier's result on exactly that evidence; and a bundle of
//! a selection to download, which `toolgate verify` checks with no network.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;
use toolgate_core::bundle::{self, Bundle};
use toolgate_core::receipt::Receipt;
use toolgate_gateway::gateway::Gateway;
use toolgate_gateway::log::evidence;

use super::extract::Signed;
use super::page::{self, Nav, notice, pretty, short};
use super::session::Session;

/// How far back from the log's end a listing or a download reads.
const WINDOW: u64 = 2000;
/// Rows shown at most.
const SHOWN: usize = 200;

#[derive(Deserialize, Default, Clone)]
pub(crate) struct Filter {
    #[serde(default)]
    tool: String,
    #[serde(default)]
    caller: String,
    #[serde(default)]
    decision: String,
}

impl Filter {
    fn admits(&self, s: &Session, r: &Receipt) -> bool {
        let tool = format!("{}/{}", r.server, r.tool);
        r.tenant == s.caller.tenant
            && (self.tool.is_empty() || tool.contains(&self.tool))
            && (self.caller.is_empty() || r.caller == self.caller)
            && (self.decision.is_empty() || r.decision == self.decision)
    }

    fn query(&self) -> String {
        let enc = super::operations::urlencode;
        format!(
            "tool={}&caller={}&decision={}",
            enc(&self.tool),
            enc(&self.caller),
            enc(&self.decision)
        )
    }
}

/// The tenant's receipts among the last `WINDOW` of the log that `filter`
/// admits, in log order.
pub(crate) async fn recent(
    gw: &Gateway,
    s: &Session,
    filter: &Filter,
) -> anyhow::Result<Vec<Receipt>> {
    let size = gw.ledger.log_size().await?;
    let from = size.saturating_sub(WINDOW);
    let rows = gw.ledger.receipts(from, size - from).await?;
    let mut out = Vec::new();
    for row in rows {
        let r = evidence::parse(&row.logged)?.receipt;
        if filter.admits(s, &r) {
            out.push(r);
        }
    }
    Ok(out)
}

/// `GET /console/receipts[?tool=&caller=&decision=]`.
pub(crate) async fn list(
    State(gw): State<Arc<Gateway>>,
    signed: Signed,
    Query(f): Query<Filter>,
) -> Response {
    let s = &signed.session;
    let pending = super::pending_count(&gw, s).await;
    let all = match recent(&gw, s, &f).await {
        Ok(all) => all,
        Err(e) => {
            return page::page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Receipts",
                s,
                Nav::Receipts,
                pending,
                notice(false, &format!("The log could not be read ({e:#}); reload in a moment.")),
            );
        }
    };
    let shown = &all[all.len().saturating_sub(SHOWN)..];
    let body = html! {
        form.filters method="get" action="/console/receipts" {
            label { "Tool " input type="text" name="tool" value=(f.tool) placeholder="server/tool"; }
            label { "Caller " input type="text" name="caller" value=(f.caller); }
            label { "Decision "
                select name="decision" {
                    @for d in ["", "allow", "require_approval", "deny"] { option value=(d) selected[f.decision == d] { (if d.is_empty() { "any" } else { d }) } }
                }
            }
            button type="submit" { "Filter" }
        }
        p {
            (all.len()) " receipt(s) of your tenant match among the log's last " (WINDOW) "; the newest " (shown.len()) " are shown in log order. "
            @if !all.is_empty() { a.button href={ "/console/receipts/bundle?" (f.query()) } download { "Download these as a bundle" } }
        }
        @if shown.is_empty() { p.empty { "No receipts match." } } @else {
            div.scroll { table {
                thead { tr { th { "Index" } th { "Issued" } th { "Caller" } th { "Tool" } th { "Decision" } th { "Reason" } th { "Execution" } th { "Result" } } }
                tbody { @for r in shown { tr {
                    td { a href={ "/console/receipts/" (r.log_index) } { (r.log_index) } }
                    td { (r.issued_at) }
                    td { (r.caller) }
                    td { (r.server) "/" (r.tool) }
                    td { span.decision.(r.decision) { (r.decision) } }
                    td { (r.reason) }
                    td { (r.execution_status) }
                    td { (r.result_status) }
                } } }
            } }
        }
    };
    page::page(StatusCode::OK, "Receipts", s, Nav::Receipts, pending, body)
}

/// Verifies a bundle as `toolgate verify` would, trusting the log's own keys.
async fn verify(gw: &Gateway, b: &Bundle) -> anyhow::Result<bundle::Report> {
    let kids = gw.ledger.log_keys().await?.into_iter().map(|k| k.kid).collect();
    Ok(bundle::verify(
        b,
        &bundle::Options { expected_kids: kids, require_pq: true, ..Default::default() },
    ))
}

/// `GET /console/receipts/{index}`.
pub(crate) async fn show(
    State(gw): State<Arc<Gateway>>,
    signed: Signed,
    Path(index): Path<u64>,
) -> Response {
    let s = &signed.session;
    let pending = super::pending_count(&gw, s).await;
    let size = gw.ledger.log_size().await.unwrap_or(0);
    let missing = || {
        page::page(
            StatusCode::NOT_FOUND,
            "Receipt",
            s,
            Nav::Receipts,
            pending,
            notice(false, &format!("No receipt {index} of your tenant; the log holds {size}.")),
        )
    };
    if index >= size {
        return missing();
    }
    let evidence = async {
        let checkpoint = evidence::covering(&gw.log, &*gw.ledger, index + 1).await?;
        let b =
            evidence::bundle(&gw.log.archive, &*gw.ledger, &checkpoint, index, index + 1).await?;
        let report = verify(&gw, &b).await?;
        anyhow::Ok((checkpoint, b, report))
    };
    let (checkpoint, b, report) = match evidence.await {
        Ok(found)
            if found
                .1
                .receipts
                .first()
                .is_some_and(|e| e.receipt.receipt.tenant == s.caller.tenant) =>
        {
            found
        }
        Ok(_) => return missing(),
        Err(e) => {
            return page::page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Receipt",
                s,
                Nav::Receipts,
                pending,
                notice(
                    false,
                    &format!("The evidence could not be read ({e:#}); reload in a moment."),
                ),
            );
        }
    };
    let entry = &b.receipts[0];
    let signed_body = serde_json::to_value(&entry.receipt).unwrap_or_default();
    let r = &entry.receipt.receipt;
    let body = html! {
        @if report.ok() { (notice(true, &format!("Verified: included in the log of {} at tree size {}, under a checkpoint signed by the log's keys{}.", report.origin, report.tree_size, if entry.receipt.signature.is_some() { format!("; signed on its own too, by key {}", r.kid) } else { String::new() }))) }
        @else { (notice(false, "NOT VERIFIED: see the checks below.")) }
        dl.facts {
            dt { "Call" } dd { (r.server) "/" (r.tool) " by " (r.caller) }
            dt { "Decision" } dd { span.decision.(r.decision) { (r.decision) } " — " (r.reason) }
            dt { "Outcome" } dd { (r.execution_status) ", " (r.result_status) }
            @if let Some(identity) = &r.identity { dt { "Ran as" } dd { (identity.describe()) } }
            dt { "Proposal" } dd { (short(&r.proposal_sha256)) }
            @if let Some(a) = &r.approval { dt { "Approval" } dd { a href={ "/console/approvals/" (a.id) } { code { (a.id) } } } }
        }
        h2 { "Verification" }
        ul.checks { @for c in &report.checks { li.(if c.ok { "ok" } else { "fail" }) { strong { (if c.ok { "ok" } else { "FAIL" }) " " (c.name) } ": " (c.detail) } } }
        p { a.button href={ "/console/receipts/bundle?index=" (index) } download { "Download this receipt's bundle" } " — check it anywhere with " code { "toolgate verify FILE" } "." }
        h2 { "The logged receipt" }
        (pretty(&signed_body))
        h2 { "Inclusion proof (" (entry.inclusion.len()) " hashes, leaf " (index) " of " (checkpoint.size) ")" }
        ol.proof { @for h in &entry.inclusion { li { code.hash { (h) } } } }
        h2 { "Checkpoint" }
        pre.note { (checkpoint.note) }
    };
    page::page(StatusCode::OK, &format!("Receipt {index}"), s, Nav::Receipts, pending, body)
}

#[derive(Deserialize)]
pub(crate) struct Selection {
    index: Option<u64>,
    #[serde(flatten)]
    filter: Filter,
}

/// `GET /console/receipts/bundle`: one receipt (`?index=`) or the filter's
/// selection, with inclusion proofs against one covering checkpoint.
pub(crate) async fn bundle(
    State(gw): State<Arc<Gateway>>,
    signed: Signed,
    Query(q): Query<Selection>,
) -> Response {
    let s = &signed.session;
    let made = async {
        let wanted: Vec<u64> = match q.index {
            Some(i) => vec![i],
            None => recent(&gw, s, &q.filter).await?.iter().map(|r| r.log_index).collect(),
        };
        let (Some(&from), Some(&last)) = (wanted.first(), wanted.last()) else {
            anyhow::bail!("no receipts match")
        };
        let checkpoint = evidence::covering(&gw.log, &*gw.ledger, last + 1).await?;
        let mut b =
            evidence::bundle(&gw.log.archive, &*gw.ledger, &checkpoint, from, last + 1).await?;
        b.receipts.retain(|e| {
            wanted.contains(&e.receipt.receipt.log_index)
                && e.receipt.receipt.tenant == s.caller.tenant
        });
        anyhow::ensure!(!b.receipts.is_empty(), "no receipts of your tenant there");
        anyhow::Ok((b, from, last))
    };
    match made.await {
        Ok((b, from, last)) => {
            let name = format!("attachment; filename=\"toolgate-receipts-{from}-{last}.json\"");
            (
                [
                    (header::CONTENT_TYPE, "application/json".to_string()),
                    (header::CONTENT_DISPOSITION, name),
                ],
                b.to_json(),
            )
                .into_response()
        }
        Err(e) => {
            let pending = super::pending_count(&gw, s).await;
            page::page(
                StatusCode::NOT_FOUND,
                "Receipts",
                s,
                Nav::Receipts,
                pending,
                notice(false, &format!("No bundle: {e:#}.")),
            )
        }
    }
}
