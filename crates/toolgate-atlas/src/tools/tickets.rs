//! `atlas.field-service.tickets`: search_tickets, get_ticket,
//! post_ticket_update, export_service_records.
//!
//! When the server verifies toolgate's identity assertion, each note and
//! export records the person who asked (`requested_by`), the agent that
//! called for them, and the tenant; `get_ticket` shows them with each note.
//! Without it the server cannot tell who asked, and records no one.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Context, Outcome, ToolError, known_variant, now_rfc3339, parse};
use crate::data::{Status, Ticket};
use crate::identity::Asserted;
use crate::sandbox::{NOTES, OUTBOX};

const DEFAULT_LIMIT: usize = 10;

#[derive(Deserialize)]
struct SearchArgs {
    model_variant: String,
    fault_code: Option<String>,
    symptom: Option<String>,
    limit: Option<usize>,
}

/// What a search shows of a ticket: enough to judge relevance, without the
/// site contacts (`get_ticket` has those) and never billing.
fn summary(ticket: &Ticket, score: Option<f64>) -> Value {
    let mut v = json!({
        "ticket_id": ticket.ticket_id,
        "model_variant": ticket.model_variant,
        "fault_code": ticket.fault_code,
        "opened": ticket.opened,
        "closed": ticket.closed,
        "symptom": ticket.symptom,
        "resolution": ticket.resolution,
        "part_fitted": ticket.part_fitted,
        "repair_hours": ticket.repair_hours,
    });
    if let Some(score) = score {
        v["score"] = json!((score * 1000.0).round() / 1000.0);
    }
    v
}

pub fn search_tickets(arguments: &Value, ctx: &Context) -> Outcome {
    let args: SearchArgs = parse(arguments)?;
    known_variant(&args.model_variant)?;
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, 25);
    let tickets = &ctx.data.tickets;
    let eligible = |i: usize| {
        let t = &tickets[i];
        t.status == Status::Closed
            && t.model_variant == args.model_variant
            && args.fault_code.as_deref().is_none_or(|f| t.fault_code == Some(f))
    };
    let symptom = args.symptom.as_deref().filter(|s| !crate::search::tokenize(s).is_empty());
    let (ranking, found): (&str, Vec<Value>) = match symptom {
        Some(symptom) => {
            let mut scored = ctx.data.symptom_index.score(symptom, eligible);
            // Ties go to the newer ticket, then the higher number: a total order.
            scored.sort_by(|a, b| {
                b.1.total_cmp(&a.1)
                    .then_with(|| tickets[b.0].closed.cmp(&tickets[a.0].closed))
                    .then_with(|| b.0.cmp(&a.0))
            });
            (
                "symptom_similarity",
                scored.iter().take(limit).map(|&(i, s)| summary(&tickets[i], Some(s))).collect(),
            )
        }
        None => {
            let mut ids: Vec<usize> = (0..tickets.len()).filter(|&i| eligible(i)).collect();
            ids.sort_by(|&a, &b| tickets[b].closed.cmp(&tickets[a].closed).then_with(|| b.cmp(&a)));
            ("newest_first", ids.iter().take(limit).map(|&i| summary(&tickets[i], None)).collect())
        }
    };
    Ok(json!({ "count": found.len(), "ranking": ranking, "tickets": found }))
}

#[derive(Deserialize)]
struct TicketArgs {
    ticket_id: String,
}

fn find_ticket<'a>(ctx: &'a Context, ticket_id: &str) -> Result<&'a Ticket, ToolError> {
    ctx.data.ticket(ticket_id).ok_or_else(|| {
        ToolError(format!("ticket {ticket_id} does not exist; find ticket ids with search_tickets"))
    })
}

pub fn get_ticket(arguments: &Value, ctx: &Context) -> Outcome {
    let args: TicketArgs = parse(arguments)?;
    let ticket = find_ticket(ctx, &args.ticket_id)?;
    let notes = ctx.sandbox.read(NOTES, |n| n["ticket_id"] == ticket.ticket_id.as_str())?;
    let mut full = serde_json::to_value(ticket).map_err(|e| ToolError(e.to_string()))?;
    full["appended_notes"] = Value::Array(notes);
    Ok(full)
}

#[derive(Deserialize)]
struct UpdateArgs {
    ticket_id: String,
    note: String,
}

/// Adds who asked, when the server knows, to a record or an answer.
fn stamped(mut record: Value, who: Option<&Asserted>) -> Value {
    if let Some(who) = who {
        who.stamp(&mut record);
    }
    record
}

pub fn post_ticket_update(arguments: &Value, ctx: &Context, who: Option<&Asserted>) -> Outcome {
    let args: UpdateArgs = parse(arguments)?;
    let ticket = find_ticket(ctx, &args.ticket_id)?;
    if ticket.status != Status::Open {
        return Err(ToolError(format!(
            "ticket {} is closed; notes can be appended only to open tickets",
            ticket.ticket_id
        )));
    }
    if args.note.trim().is_empty() {
        return Err(ToolError("note is empty; write the diagnosis to record".into()));
    }
    let record = ctx.sandbox.append(NOTES, |seq| {
        let note = json!({
            "note_id": format!("NOTE-{seq:06}"),
            "ticket_id": ticket.ticket_id,
            "note": args.note,
            "appended_at": now_rfc3339(),
        });
        stamped(note, who)
    })?;
    let notes_count =
        ctx.sandbox.read(NOTES, |n| n["ticket_id"] == ticket.ticket_id.as_str())?.len();
    let answer = json!({
        "ticket_id": ticket.ticket_id,
        "note_id": record["note_id"],
        "appended_at": record["appended_at"],
        "notes_on_ticket": notes_count,
    });
    Ok(stamped(answer, who))
}

#[derive(Deserialize)]
struct ExportArgs {
    recipient: String,
    model_variant: String,
    include_site_contacts: Option<bool>,
    reason: Option<String>,
}

pub fn export_service_records(arguments: &Value, ctx: &Context, who: Option<&Asserted>) -> Outcome {
    let args: ExportArgs = parse(arguments)?;
    known_variant(&args.model_variant)?;
    if !args.recipient.contains('@') {
        return Err(ToolError("recipient must be an email address".into()));
    }
    let with_contacts = args.include_site_contacts.unwrap_or(false);
    let records: Vec<Value> = ctx
        .data
        .tickets
        .iter()
        .filter(|t| t.status == Status::Closed && t.model_variant == args.model_variant)
        .map(|t| {
            let mut r = summary(t, None);
            if with_contacts {
                r["site"] = json!(t.site);
                r["site_contact"] = json!(t.site_contact);
            }
            r
        })
        .collect();
    let record_count = records.len();
    // The bundle stops in the sandbox outbox: no socket is opened, ever.
    let record = ctx.sandbox.append(OUTBOX, |seq| {
        let bundle = json!({
            "export_id": format!("EXP-{seq:06}"),
            "recipient": args.recipient,
            "model_variant": args.model_variant,
            "include_site_contacts": with_contacts,
            "reason": args.reason,
            "queued_at": now_rfc3339(),
            "records": records,
        });
        stamped(bundle, who)
    })?;
    let answer = json!({
        "export_id": record["export_id"],
        "recipient": args.recipient,
        "model_variant": args.model_variant,
        "record_count": record_count,
        "include_site_contacts": with_contacts,
        "delivered": false,
        "note": "written to the local sandbox outbox only; nothing was sent",
    });
    Ok(stamped(answer, who))
}
