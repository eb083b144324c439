//! `atlas.support`, the support desk of seed `001_…`: search_customers,
//! create_ticket, get_ticket.
//!
//! Searching by name may match several customers; the result says
//! `ambiguous` so that the caller asks which one is meant. create_ticket takes
//! a `client_reference` chosen by the caller and creates at most one ticket
//! per reference: a retry with the same request gets the same ticket back
//! (`deduplicated: true`), the same reference with other content is refused.
//! get_ticket finds a ticket by id or by reference — `found: false` tells a
//! reconciler that a create never took effect.
//!
//! A fault switch for the demo and tests: a file `support.fault` in the state
//! dir makes the next create_ticket (only that one; the file is removed when
//! taken) misbehave:
//! - `stall` or `stall:MILLIS` — the call takes effect (the ticket is appended
//!   and fsynced) and the answer is then held back MILLIS ms (default 5000):
//!   a reply lost after the commit, as a caller with a deadline sees it.
//! - `tool_error` — refused with a tool error; nothing is written.
//!
//! Every create_ticket invocation that passes schema validation, whatever its
//! outcome, is logged to `support-calls.jsonl`, so tests can count upstream
//! invocations apart from effects (`support-tickets.jsonl`).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Context, Outcome, ToolError, now_rfc3339, parse};
use crate::data::support::{self as customers, Customer};
use crate::sandbox::Appended;

/// Tickets created: one line each, never edited.
pub const TICKETS: &str = "support-tickets.jsonl";
/// Every create_ticket invocation.
pub const CALLS: &str = "support-calls.jsonl";
/// The one-shot fault switch.
pub const FAULT: &str = "support.fault";
/// How long `stall` holds the answer back when no duration is given.
pub const DEFAULT_STALL_MS: u64 = 5000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Stall(Duration),
    ToolError,
}

/// Takes the pending fault, if any (one call only). Unreadable content is
/// dropped with a warning rather than guessed at.
pub fn take_fault(ctx: &Context) -> Option<Fault> {
    let path = ctx.sandbox.dir().join(FAULT);
    let content = std::fs::read_to_string(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    let text = content.trim();
    let fault = match text.split_once(':') {
        None if text == "stall" => Some(Fault::Stall(Duration::from_millis(DEFAULT_STALL_MS))),
        None if text == "tool_error" => Some(Fault::ToolError),
        Some(("stall", ms)) => {
            ms.trim().parse().ok().map(|ms| Fault::Stall(Duration::from_millis(ms)))
        }
        _ => None,
    };
    if fault.is_none() {
        tracing::warn!(content = text, "ignoring unknown {FAULT}");
    }
    fault
}

impl Fault {
    /// As written in the fault file, for the call log.
    fn label(self) -> String {
        match self {
            Fault::Stall(delay) => format!("stall:{}", delay.as_millis()),
            Fault::ToolError => "tool_error".into(),
        }
    }
}

#[derive(Deserialize)]
struct SearchArgs {
    query: String,
}

pub fn search_customers(arguments: &Value, _ctx: &Context) -> Outcome {
    let args: SearchArgs = parse(arguments)?;
    let words = customers::words(&args.query);
    if words.is_empty() {
        return Err(ToolError(
            "the query has no letters or digits; give part of the customer's name".into(),
        ));
    }
    let found = customers::search(&words);
    let status = match found.len() {
        0 => "none",
        1 => "complete",
        // Never resolved here: which one is meant is the user's call.
        _ => "ambiguous",
    };
    let list: Vec<Value> = found
        .iter()
        .map(|c| json!({"customer_id": c.customer_id, "display_name": c.display_name}))
        .collect();
    Ok(
        json!({"status": status, "customers": list, "returned": found.len(), "observed_at": now_rfc3339()}),
    )
}

#[derive(Deserialize)]
struct CreateArgs {
    customer_id: String,
    subject: String,
    priority: String,
    client_reference: String,
}

/// The fields that make two requests "the same ticket" for deduplication.
fn same_request(ticket: &Value, args: &CreateArgs) -> bool {
    ticket["customer_id"] == args.customer_id.as_str()
        && ticket["subject"] == args.subject.as_str()
        && ticket["priority"] == args.priority.as_str()
}

pub fn create_ticket(arguments: &Value, ctx: &Context) -> Outcome {
    let args: CreateArgs = parse(arguments)?;
    let fault = take_fault(ctx);
    ctx.sandbox.append(CALLS, |seq| {
        json!({"seq": seq, "client_reference": args.client_reference, "fault": fault.map(Fault::label), "at": now_rfc3339()})
    })?;
    if fault == Some(Fault::ToolError) {
        return Err(ToolError(
            "the ticket service refused the request (a simulated fault); no ticket was created"
                .into(),
        ));
    }
    let outcome = create(&args, ctx);
    if let Some(Fault::Stall(delay)) = fault {
        // Committed (or refused) already; only the answer is late. This runs
        // on a blocking thread (see `AtlasServer::call_tool`).
        std::thread::sleep(delay);
    }
    outcome
}

fn create(args: &CreateArgs, ctx: &Context) -> Outcome {
    let Some(customer) = customers::customer(&args.customer_id) else {
        return Err(ToolError(format!(
            "unknown customer_id `{}`; search for the customer with search_customers first and use a customer_id it returns",
            args.customer_id
        )));
    };
    if args.subject.trim().is_empty() {
        return Err(ToolError(
            "the subject is blank; give a one-line summary of the problem".into(),
        ));
    }
    let appended = ctx.sandbox.append_unless(
        TICKETS,
        ("client_reference", &args.client_reference),
        |seq| new_ticket(seq, customer, args),
    )?;
    let (mut ticket, deduplicated) = match appended {
        Appended::New(ticket) => (ticket, false),
        Appended::Existing(ticket) if same_request(&ticket, args) => (ticket, true),
        Appended::Existing(_) => {
            return Err(ToolError(format!(
                "client_reference `{}` is already used for another ticket with a different customer, subject or priority; \
                 use a new client_reference for a new ticket (get_ticket with this reference shows the existing one)",
                args.client_reference
            )));
        }
    };
    ticket["deduplicated"] = json!(deduplicated);
    Ok(ticket)
}

fn new_ticket(seq: u64, customer: &Customer, args: &CreateArgs) -> Value {
    json!({
        "ticket_id": format!("SUP-{seq:06}"),
        "customer_id": customer.customer_id,
        "subject": args.subject,
        "priority": args.priority,
        "client_reference": args.client_reference,
        "status": "open",
        "created_at": now_rfc3339(),
    })
}

#[derive(Deserialize)]
struct GetArgs {
    ticket_id: Option<String>,
    client_reference: Option<String>,
}

pub fn get_ticket(arguments: &Value, ctx: &Context) -> Outcome {
    let args: GetArgs = parse(arguments)?;
    // The schema admits exactly one of the two keys.
    let (key, wanted) = match (&args.ticket_id, &args.client_reference) {
        (Some(id), None) => ("ticket_id", id),
        (None, Some(reference)) => ("client_reference", reference),
        _ => return Err(ToolError("give exactly one of ticket_id or client_reference".into())),
    };
    let ticket = ctx.sandbox.first_where(TICKETS, key, wanted)?;
    // Not found is an answer, not a failure: the create never happened.
    Ok(json!({"found": ticket.is_some(), "ticket": ticket}))
}
