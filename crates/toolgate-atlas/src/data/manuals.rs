//! Manual passages: operator and field-maintenance manuals for every family,
//! in two revisions, with variant-specific procedures where the machines
//! differ. Figures differ between families, variants and revisions on
//! purpose: a passage from the wrong one reads plausibly and is wrong.

use serde::Serialize;

use super::domain::{CATEGORIES, FAMILIES, FAULTS, S_SPECIFIC};
use super::rng::Rng;

#[derive(Debug, Clone, Serialize)]
pub struct Passage {
    pub document: String,
    pub product_family: &'static str,
    /// `None` when the passage applies to every variant of the family.
    pub variant: Option<&'static str>,
    pub revision: &'static str,
    /// Whether a newer revision of the same document exists.
    pub superseded: bool,
    pub page: u32,
    pub section: String,
    pub text: String,
}

/// Older first; the last one is current.
const REVISIONS: [&str; 2] = ["Rev C (2024-03)", "Rev D (2025-09)"];

fn family_number(family: &str) -> u32 {
    family.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Torque, in N·m, for a category on a family. Revision D corrected some
/// figures, which is why the revision travels with every passage.
fn torque(category_index: usize, family: &str, s_variant: bool, revision: usize) -> u32 {
    let base = 8 + (category_index as u32 * 7 + family_number(family) / 10) % 40;
    let enclosure = if s_variant { 4 } else { 0 };
    let correction = if revision == 1 && category_index % 3 == 0 { 2 } else { 0 };
    base + enclosure + correction
}

fn procedure(
    category: &str,
    family: &str,
    variant: Option<&str>,
    torque_nm: u32,
    rng: &mut Rng,
) -> String {
    let part = category.replace('-', " ");
    let isolate = "Isolate the electrical supply, lock off, and vent the receiver to zero pressure before opening the enclosure.";
    let specific = match (category, variant) {
        ("thermostatic-valve", Some("S")) => " On -S machines the valve opens at 71 °C; do not fit \
            the 82 °C standard-enclosure valve, which causes high discharge temperature \
            trips.".to_string(),
        ("thermostatic-valve", _) => " The standard valve opens at 82 °C.".to_string(),
        ("fan-blade", Some("S")) => " The -S enclosure uses the 9-blade low-noise fan; check the shroud clearance is at least 6 mm.".to_string(),
        ("mount-kit", Some("S")) => " -S machines use the 45 Shore A mounts; harder mounts transmit noise into the enclosure.".to_string(),
        ("intake-filter", Some("S")) => " The -S intake is ducted through the acoustic baffle; reseat the baffle seal after fitting.".to_string(),
        _ => String::new(),
    };
    let check = rng.pick(&[
        "Run the machine loaded for fifteen minutes and check for leaks.",
        "Check the discharge temperature settles within twenty minutes.",
        "Record the work and the part number in the service log.",
        "Confirm the controller shows no active alarm before handing back.",
    ]);
    format!(
        "Replacing the {part} on the {family}. {isolate} Remove the access panel and the {part}. \
            Fit the new {part}, tighten the fixings to {torque_nm} N·m in a cross \
            pattern.{specific} {check}"
    )
}

fn specification(
    category: &str,
    family: &str,
    variant: Option<&str>,
    torque_nm: u32,
    interval_hours: u32,
) -> String {
    let part = category.replace('-', " ");
    let scope = variant.map_or_else(|| "all variants".to_string(), |v| format!("variant {v}"));
    format!(
        "Specification, {part}, {family} ({scope}): fixing torque {torque_nm} N·m; inspect \
            every {interval_hours} running hours; replace on condition or at twice the inspection \
            interval."
    )
}

pub fn generate(rng: &mut Rng) -> Vec<Passage> {
    let mut passages = Vec::new();
    for family in FAMILIES {
        for (revision_index, revision) in REVISIONS.iter().enumerate() {
            let superseded = revision_index + 1 < REVISIONS.len();
            let maintenance = format!("{family} Field Maintenance Manual");
            let mut page = 12;
            for (category_index, (category, _)) in CATEGORIES.iter().enumerate() {
                // Variant-specific procedures where the part differs; one
                // family-wide procedure everywhere else.
                let variants: Vec<Option<&'static str>> =
                    if S_SPECIFIC.contains(category) { vec![None, Some("S")] } else { vec![None] };
                for variant in variants {
                    let s_variant = variant == Some("S");
                    let torque_nm = torque(category_index, family, s_variant, revision_index);
                    let section = format!(
                        "{}.{} {}",
                        4 + category_index / 6,
                        category_index % 6 + 1,
                        category.replace('-', " ")
                    );
                    let replacement = procedure(category, family, variant, torque_nm, rng);
                    let spec = specification(
                        category,
                        family,
                        variant,
                        torque_nm,
                        500 * rng.range(1, 8) as u32,
                    );
                    for (offset, kind, text) in
                        [(0, "replacement", replacement), (1, "specification", spec)]
                    {
                        passages.push(Passage {
                            document: maintenance.clone(),
                            product_family: family,
                            variant,
                            revision,
                            superseded,
                            page: page + offset,
                            section: match variant {
                                Some(v) => format!("{section}: {kind} (-{v} variant)"),
                                None => format!("{section}: {kind}"),
                            },
                            text,
                        });
                    }
                    page += 2;
                }
            }
            let operator = format!("{family} Operator Manual");
            for (i, fault) in FAULTS.iter().enumerate() {
                passages.push(Passage {
                    document: operator.clone(),
                    product_family: family,
                    variant: None,
                    revision,
                    superseded,
                    page: 40 + i as u32,
                    section: format!("Fault table: {}", fault.code),
                    text: format!(
                        "Fault {} ({}) on the {family}. Typical reports: {}. Likely cause: {}. \
                            Operator action: stop the machine, note the display message and call \
                            service; do not reset more than twice.",
                        fault.code,
                        fault.title,
                        fault.phrases.iter().take(2).copied().collect::<Vec<_>>().join("; "),
                        fault.finding
                    ),
                });
            }
        }
    }
    passages
}
