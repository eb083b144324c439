//! The parts catalogue: every part has an exact fitment list, and where a
//! variant needs its own part the catalogue really holds a different part
//! (other number, other specification, other price).

use std::collections::HashSet;

use serde::Serialize;

use super::domain::{B_SPECIFIC, CATEGORIES, FAMILIES, S_SPECIFIC};
use super::rng::Rng;

#[derive(Debug, Clone, Serialize)]
pub struct Part {
    pub part_no: String,
    pub category: &'static str,
    pub description: String,
    /// Exact model variants this part fits, e.g. `["AC-250-S"]`.
    pub fitment: Vec<String>,
    /// Integer minor units of `currency` (pence): money is never a float.
    pub price_minor: u64,
    pub currency: &'static str,
    pub stock: u32,
    pub lead_time_days: u32,
}

impl Part {
    pub fn fits(&self, model_variant: &str) -> bool {
        self.fitment.iter().any(|v| v == model_variant)
    }
}

/// Which variant groups of a family get their own part in `category`.
fn variant_groups(category: &str) -> Vec<(&'static [&'static str], &'static str)> {
    if S_SPECIFIC.contains(&category) {
        vec![(&["A", "B"], "standard enclosure"), (&["S"], "sound-attenuated enclosure")]
    } else if B_SPECIFIC.contains(&category) {
        vec![(&["A", "S"], "230 V single-phase"), (&["B"], "400 V three-phase")]
    } else {
        vec![(&["A", "B", "S"], "all variants")]
    }
}

/// Categories that also stock an alternative (a kit or a heavy-duty part), so
/// a lookup can return more than one candidate and the caller must choose.
const WITH_ALTERNATIVE: [&str; 5] =
    ["bearing", "belt", "oil-filter", "separator-element", "intake-filter"];

fn spec(category: &str, family_no: u32, group: &str, rng: &mut Rng) -> String {
    let s_variant = group.starts_with("sound");
    match category {
        "thermostatic-valve" => {
            let opening = if s_variant { 71 } else { 82 };
            format!("Thermostatic valve, opens at {opening} °C, {group}")
        }
        "fan-blade" => {
            let blades = if s_variant { 9 } else { 7 };
            format!(
                "Cooling fan, {blades}-blade low-noise profile, {} mm, {group}",
                250 + family_no
            )
        }
        "intake-filter" => {
            format!("Intake filter element, {} µm, {group}", if s_variant { 3 } else { 5 })
        }
        "mount-kit" => format!(
            "Anti-vibration mount kit, {} Shore A, set of 4, {group}",
            if s_variant { 45 } else { 60 }
        ),
        "starter-contactor" | "wiring-loom" | "pressure-transducer" => {
            format!("{} for {group} supply", title_case(category))
        }
        _ => format!("{}, {group}, batch {}", title_case(category), rng.range(100, 999)),
    }
}

fn title_case(category: &str) -> String {
    let text = category.replace('-', " ");
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// A part number not yet taken: `AC250-TV-4102`, with `H` for alternatives.
fn fresh_part_no(taken: &mut HashSet<String>, prefix: &str, suffix: &str, rng: &mut Rng) -> String {
    loop {
        let candidate = format!("{prefix}-{}{suffix}", rng.range(1000, 9999));
        if taken.insert(candidate.clone()) {
            return candidate;
        }
    }
}

pub fn generate(rng: &mut Rng) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut taken = HashSet::new();
    for family in FAMILIES {
        let family_no: u32 = family.split('-').nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
        let family_code = family.replace('-', "");
        for (category, code) in CATEGORIES {
            for (variants, group) in variant_groups(category) {
                let fitment: Vec<String> =
                    variants.iter().map(|v| format!("{family}-{v}")).collect();
                let base_price = rng.range(800, 48_000);
                parts.push(Part {
                    part_no: fresh_part_no(&mut taken, &format!("{family_code}-{code}"), "", rng),
                    category,
                    description: spec(category, family_no, group, rng),
                    fitment: fitment.clone(),
                    // The -S parts are the specialised ones and cost more.
                    price_minor: if group.starts_with("sound") {
                        base_price * 13 / 10
                    } else {
                        base_price
                    },
                    currency: "GBP",
                    stock: if rng.chance(25) { 0 } else { rng.range(1, 40) as u32 },
                    lead_time_days: rng.range(2, 35) as u32,
                });
                if WITH_ALTERNATIVE.contains(&category) {
                    parts.push(Part {
                        part_no: fresh_part_no(
                            &mut taken,
                            &format!("{family_code}-{code}"),
                            "H",
                            rng,
                        ),
                        category,
                        description: format!(
                            "{} (heavy-duty alternative), {group}",
                            title_case(category)
                        ),
                        fitment,
                        price_minor: base_price * 3 / 2,
                        currency: "GBP",
                        stock: if rng.chance(40) { 0 } else { rng.range(1, 12) as u32 },
                        lead_time_days: rng.range(5, 60) as u32,
                    });
                }
            }
        }
    }
    parts
}
