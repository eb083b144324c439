//! `atlas.field-service.manuals`: search_manual, returning evidence passages
//! (document, page, revision), never a synthesised answer.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Context, Outcome, ToolError, parse};
use crate::data::domain::FAMILIES;

const DEFAULT_K: usize = 5;
/// Names the ranking method in every result, as the contract's `backend` field promises.
pub const BACKEND: &str = "bm25-lexical";
const VARIANT_BOOST: f64 = 1.5;

#[derive(Deserialize)]
struct SearchArgs {
    query: String,
    product_family: Option<String>,
    variant: Option<String>,
    k: Option<usize>,
}

pub fn search_manual(arguments: &Value, ctx: &Context) -> Outcome {
    let args: SearchArgs = parse(arguments)?;
    if let Some(family) = &args.product_family {
        if !FAMILIES.contains(&family.as_str()) {
            return Err(ToolError(format!(
                "unknown product_family `{family}`; the manuals cover: {}",
                FAMILIES.join(", ")
            )));
        }
    }
    let k = args.k.unwrap_or(DEFAULT_K).clamp(1, 10);
    let passages = &ctx.data.passages;
    // A passage with no variant applies to every variant of its family.
    let keep = |i: usize| {
        let p = &passages[i];
        args.product_family.as_deref().is_none_or(|f| p.product_family == f)
            && args.variant.as_deref().is_none_or(|v| p.variant.is_none_or(|pv| pv == v))
    };
    let mut scored = ctx.data.passage_index.score(&args.query, keep);
    // Asked for a variant: its own procedure outranks the family-wide one,
    // which is the whole point of naming the variant.
    if let Some(v) = args.variant.as_deref() {
        for (i, score) in scored.iter_mut() {
            if passages[*i].variant == Some(v) {
                *score *= VARIANT_BOOST;
            }
        }
    }
    // Equal scores: the current revision first, then document order.
    scored.sort_by(|a, b| {
        let (pa, pb) = (&passages[a.0], &passages[b.0]);
        b.1.total_cmp(&a.1)
            .then_with(|| pa.superseded.cmp(&pb.superseded))
            .then_with(|| pa.document.cmp(&pb.document))
            .then_with(|| pa.page.cmp(&pb.page))
    });
    let found: Vec<Value> = scored
        .iter()
        .take(k)
        .map(|&(i, score)| {
            let mut v = serde_json::to_value(&passages[i]).unwrap_or_default();
            v["score"] = json!((score * 1000.0).round() / 1000.0);
            v
        })
        .collect();
    Ok(json!({ "backend": BACKEND, "count": found.len(), "passages": found }))
}
