//! `atlas.field-service.parts`: find_part, check_availability,
//! raise_parts_order.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Context, Outcome, ToolError, known_variant, now_rfc3339, parse};
use crate::data::Part;
use crate::sandbox::ORDERS;

#[derive(Deserialize)]
struct FindArgs {
    model_variant: String,
    category: String,
    in_stock_only: Option<bool>,
}

pub fn find_part(arguments: &Value, ctx: &Context) -> Outcome {
    let args: FindArgs = parse(arguments)?;
    known_variant(&args.model_variant)?;
    let in_stock_only = args.in_stock_only.unwrap_or(false);
    let parts: Vec<&Part> = ctx
        .data
        .parts
        .iter()
        .filter(|p| p.category == args.category && p.fits(&args.model_variant))
        .filter(|p| !in_stock_only || p.stock > 0)
        .collect();
    Ok(json!({ "count": parts.len(), "parts": parts }))
}

#[derive(Deserialize)]
struct PartArgs {
    part_no: String,
}

fn find<'a>(ctx: &'a Context, part_no: &str) -> Result<&'a Part, ToolError> {
    ctx.data.part(part_no).ok_or_else(|| {
        ToolError(format!(
            "part {part_no} is not in the catalogue; find part numbers with find_part"
        ))
    })
}

pub fn check_availability(arguments: &Value, ctx: &Context) -> Outcome {
    let args: PartArgs = parse(arguments)?;
    let part = find(ctx, &args.part_no)?;
    Ok(json!({
        "part_no": part.part_no,
        "stock": part.stock,
        "in_stock": part.stock > 0,
        "lead_time_days": part.lead_time_days,
    }))
}

#[derive(Deserialize)]
struct OrderArgs {
    part_no: String,
    quantity: u64,
    ticket_id: String,
    justification: Option<String>,
}

/// Records the order. Whether it *should* be raised is not this server's
/// call (that is the gateway's job); whether it *can* be is: the part must
/// exist and fit the machine on the ticket.
pub fn raise_parts_order(arguments: &Value, ctx: &Context) -> Outcome {
    let args: OrderArgs = parse(arguments)?;
    let part = find(ctx, &args.part_no)?;
    let ticket = ctx.data.ticket(&args.ticket_id).ok_or_else(|| {
        ToolError(format!(
            "ticket {} does not exist; orders must reference a real ticket",
            args.ticket_id
        ))
    })?;
    if !part.fits(&ticket.model_variant) {
        return Err(ToolError(format!(
            "part {} does not fit {} (ticket {}); fitment: {}. Use find_part with the exact variant",
            part.part_no,
            ticket.model_variant,
            ticket.ticket_id,
            part.fitment.join(", ")
        )));
    }
    let record = ctx.sandbox.append(ORDERS, |seq| {
        json!({
            "order_id": format!("PO-{seq:06}"),
            "part_no": part.part_no,
            "quantity": args.quantity,
            "ticket_id": ticket.ticket_id,
            "customer": ticket.customer,
            "justification": args.justification,
            "unit_price_minor": part.price_minor,
            "total_minor": part.price_minor * args.quantity,
            "currency": part.currency,
            "status": "recorded",
            "recorded_at": now_rfc3339(),
        })
    })?;
    Ok(record)
}
