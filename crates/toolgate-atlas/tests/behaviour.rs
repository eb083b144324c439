//! Level 2: each tool behaves as its contract declares, called in process
//! through the same validation and dispatch the transports use.

mod common;

use std::collections::HashSet;

use common::*;
use serde_json::{Value, json};
use toolgate_atlas::data::domain::{CATEGORIES, S_SPECIFIC, model_variants};
use toolgate_atlas::data::{Dataset, SEED, Status};
use toolgate_atlas::{ServerKind, dataset};

fn tickets_of(r: &Called) -> Vec<Value> {
    assert!(!r.is_error, "unexpected tool error: {}", r.text);
    r.structured["tickets"].as_array().unwrap().clone()
}

fn output_schema(kind: ServerKind, tool: &str) -> Option<Value> {
    let server = fixture_server(kind);
    let t = server["tools"].as_array().unwrap().iter().find(|t| t["name"] == tool).unwrap();
    (!t["outputSchema"].is_null()).then(|| t["outputSchema"].clone())
}

/// Every successful result carries structured content valid against the
/// declared outputSchema, and a text block with the same JSON.
fn assert_well_formed(kind: ServerKind, tool: &str, r: &Called) {
    assert!(!r.is_error, "{tool}: {}", r.text);
    if let Some(schema) = output_schema(kind, tool) {
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(
            validator.is_valid(&r.structured),
            "{tool}: structuredContent violates outputSchema"
        );
    }
    assert_eq!(
        serde_json::from_str::<Value>(&r.text).unwrap(),
        r.structured,
        "{tool}: text block mirrors structuredContent"
    );
}

#[test]
fn the_data_set_is_deterministic_and_large_enough() {
    let a = Dataset::generate(SEED);
    let b = Dataset::generate(SEED);
    let json_of =
        |d: &Dataset| serde_json::to_string(&(&d.tickets, &d.parts, &d.passages)).unwrap();
    assert_eq!(json_of(&a), json_of(&b), "same seed, same bytes");
    assert_ne!(json_of(&a), json_of(&Dataset::generate(SEED + 1)), "the seed matters");

    let closed = a.tickets.iter().filter(|t| t.status == Status::Closed).count();
    assert!(closed >= 2_000, "{closed} closed tickets");
    let variants: HashSet<&str> = a.tickets.iter().map(|t| t.model_variant.as_str()).collect();
    assert_eq!(variants.len(), 9, "three families × A/B/S");
    assert!(a.tickets.iter().all(|t| t.ticket_id.len() == 8 && t.ticket_id.starts_with("SR-")));
    assert!(a.ticket("SR-20031").is_some(), "the seed's example ticket exists");
    let categories: HashSet<&str> = a.parts.iter().map(|p| p.category).collect();
    assert_eq!(categories.len(), 22);
    assert!(a.passages.len() >= 300, "{} passages", a.passages.len());
    assert!(
        a.passages.iter().all(|p| !p.document.is_empty() && p.page > 0 && !p.revision.is_empty())
    );
    let open_s =
        a.tickets.iter().any(|t| t.status == Status::Open && t.model_variant == "AC-250-S");
    assert!(open_s, "the demo needs an open AC-250-S ticket");
}

#[test]
fn search_tickets_returns_only_the_exact_variant_closed_and_at_most_limit() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Tickets, dir.path());
    for limit in [1, 7, 25] {
        let r = run(&s, "search_tickets", json!({"model_variant": "AC-250-S", "limit": limit}));
        assert_well_formed(ServerKind::Tickets, "search_tickets", &r);
        let found = tickets_of(&r);
        assert_eq!(found.len(), limit, "limit {limit}");
        assert_eq!(r.structured["count"], json!(limit));
        for t in &found {
            assert_eq!(t["model_variant"], "AC-250-S");
            let ticket = dataset().ticket(t["ticket_id"].as_str().unwrap()).unwrap().clone();
            assert_eq!(ticket.status, Status::Closed);
        }
    }
    let too_many = run(&s, "search_tickets", json!({"model_variant": "AC-250-S", "limit": 26}));
    assert!(too_many.is_error && too_many.text.contains("/limit"), "{}", too_many.text);
}

#[test]
fn search_tickets_without_symptom_is_newest_first_and_filters_fault_code() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Tickets, dir.path());
    let found = tickets_of(&run(
        &s,
        "search_tickets",
        json!({"model_variant": "RS-90-B", "fault_code": "F-103", "limit": 25}),
    ));
    assert!(!found.is_empty());
    assert!(found.iter().all(|t| t["fault_code"] == "F-103" && t["model_variant"] == "RS-90-B"));
    let closed: Vec<&str> = found.iter().map(|t| t["closed"].as_str().unwrap()).collect();
    assert!(closed.windows(2).all(|w| w[0] >= w[1]), "newest first: {closed:?}");
    let expected = dataset()
        .tickets
        .iter()
        .filter(|t| {
            t.status == Status::Closed
                && t.model_variant == "RS-90-B"
                && t.fault_code == Some("F-103")
        })
        .count()
        .min(25);
    assert_eq!(found.len(), expected);
}

#[test]
fn search_tickets_ranks_by_symptom_similarity() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Tickets, dir.path());
    let r = run(
        &s,
        "search_tickets",
        json!({"model_variant": "AC-250-S", "symptom": "oil in the air line, oily mist from the drops", "limit": 10}),
    );
    assert_eq!(r.structured["ranking"], "symptom_similarity");
    let found = tickets_of(&r);
    let scores: Vec<f64> = found.iter().map(|t| t["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "descending scores: {scores:?}");
    let top: Vec<&str> = found.iter().take(5).map(|t| t["fault_code"].as_str().unwrap()).collect();
    assert!(top.iter().all(|f| *f == "F-102"), "oil carry-over ranks first: {top:?}");

    let heat = tickets_of(&run(
        &s,
        "search_tickets",
        json!({"model_variant": "AC-250-S", "symptom": "trips on high temperature", "limit": 3}),
    ));
    assert!(heat.iter().all(|t| t["fault_code"] == "F-101"), "{heat:?}");
    // The order differs from the date order: ranking really happened.
    let by_date =
        tickets_of(&run(&s, "search_tickets", json!({"model_variant": "AC-250-S", "limit": 3})));
    assert_ne!(heat, by_date);
}

#[test]
fn search_tickets_never_returns_payment_contract_or_contact_data() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Tickets, dir.path());
    let r = run(&s, "search_tickets", json!({"model_variant": "AC-180-A", "limit": 25}));
    for t in tickets_of(&r) {
        let ticket = dataset().ticket(t["ticket_id"].as_str().unwrap()).unwrap().clone();
        assert!(!r.text.contains(&ticket.billing.contract_no), "contract number leaked");
        assert!(!r.text.contains(&ticket.site_contact.phone), "site contact leaked");
        for key in ["billing", "contract_no", "payment_terms", "card_last4", "site_contact"] {
            assert!(t.get(key).is_none(), "{key} present");
        }
    }
}

#[test]
fn get_ticket_returns_the_full_ticket_or_a_tool_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Tickets, dir.path());
    let r = run(&s, "get_ticket", json!({"ticket_id": "SR-20031"}));
    assert!(!r.is_error);
    assert_eq!(r.structured["ticket_id"], "SR-20031");
    assert!(
        r.structured["engineer_notes"].is_string()
            && r.structured["site_contact"]["email"].is_string()
    );
    assert!(!r.text.contains(&dataset().ticket("SR-20031").unwrap().billing.contract_no));

    let missing = run(&s, "get_ticket", json!({"ticket_id": "SR-99999"}));
    assert!(
        missing.is_error
            && missing.text.contains("SR-99999")
            && missing.text.contains("search_tickets"),
        "{}",
        missing.text
    );
    let malformed = run(&s, "get_ticket", json!({"ticket_id": "SR-1"}));
    assert!(malformed.is_error && malformed.text.contains("/ticket_id"), "{}", malformed.text);
    assert!(
        !malformed.text.contains("SR-1\""),
        "the offending value is redacted: {}",
        malformed.text
    );
    let absent = run(&s, "get_ticket", json!({}));
    assert!(absent.is_error && absent.text.contains("ticket_id"), "{}", absent.text);
}

#[test]
fn post_ticket_update_appends_and_never_edits() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Tickets, dir.path());
    let open =
        dataset().tickets.iter().find(|t| t.status == Status::Open).unwrap().ticket_id.clone();
    let first =
        run(&s, "post_ticket_update", json!({"ticket_id": open, "note": "first diagnosis"}));
    assert!(!first.is_error, "{}", first.text);
    let before = std::fs::read_to_string(dir.path().join("notes.jsonl")).unwrap();
    let second =
        run(&s, "post_ticket_update", json!({"ticket_id": open, "note": "second thoughts"}));
    assert_ne!(first.structured["note_id"], second.structured["note_id"]);
    assert_eq!(second.structured["notes_on_ticket"], 2);
    let after = std::fs::read_to_string(dir.path().join("notes.jsonl")).unwrap();
    assert!(after.starts_with(&before), "earlier notes are untouched");
    let notes =
        run(&s, "get_ticket", json!({"ticket_id": open})).structured["appended_notes"].clone();
    let texts: Vec<&str> =
        notes.as_array().unwrap().iter().map(|n| n["note"].as_str().unwrap()).collect();
    assert_eq!(texts, ["first diagnosis", "second thoughts"]);

    let closed = run(&s, "post_ticket_update", json!({"ticket_id": "SR-20031", "note": "x"}));
    assert!(closed.is_error && closed.text.contains("closed"), "{}", closed.text);
    let long = run(&s, "post_ticket_update", json!({"ticket_id": open, "note": "x".repeat(2001)}));
    assert!(long.is_error && long.text.contains("/note"), "{}", long.text);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.jsonl")).unwrap(),
        after,
        "refused calls write nothing"
    );
}

#[test]
fn export_service_records_appends_to_the_sandbox_outbox_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Tickets, dir.path());
    let r = run(
        &s,
        "export_service_records",
        json!({"recipient": "a@outside.example", "model_variant": "RS-90-S"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["delivered"], false);
    let expected = dataset()
        .tickets
        .iter()
        .filter(|t| t.status == Status::Closed && t.model_variant == "RS-90-S")
        .count();
    assert_eq!(r.structured["record_count"], json!(expected));
    run(
        &s,
        "export_service_records",
        json!({"recipient": "b@outside.example", "model_variant": "RS-90-S", "include_site_contacts": true}),
    );
    let outbox: Vec<Value> = std::fs::read_to_string(dir.path().join("outbox.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(outbox.len(), 2);
    assert!(outbox[0]["records"][0].get("site_contact").is_none(), "contacts only on request");
    assert!(outbox[1]["records"][0]["site_contact"]["phone"].is_string());
    let unknown = run(
        &s,
        "export_service_records",
        json!({"recipient": "a@b.example", "model_variant": "ZZ-1"}),
    );
    assert!(unknown.is_error && unknown.text.contains("model_variant"), "{}", unknown.text);
}

#[test]
fn find_part_only_returns_parts_fitting_the_exact_variant() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Parts, dir.path());
    let mut saw_stock_filter_bite = false;
    for variant in model_variants() {
        for (category, _) in CATEGORIES {
            let r = run(&s, "find_part", json!({"model_variant": variant, "category": category}));
            assert_well_formed(ServerKind::Parts, "find_part", &r);
            let parts = r.structured["parts"].as_array().unwrap().clone();
            assert!(!parts.is_empty(), "{variant} {category}: the catalogue covers every category");
            for p in &parts {
                assert_eq!(p["category"], category);
                assert!(
                    p["fitment"].as_array().unwrap().contains(&json!(variant)),
                    "{variant}: {p}"
                );
                assert!(p["price_minor"].is_u64() && p["currency"] == "GBP");
            }
            let stocked = run(
                &s,
                "find_part",
                json!({"model_variant": variant, "category": category, "in_stock_only": true}),
            );
            let stocked = stocked.structured["parts"].as_array().unwrap().clone();
            assert!(stocked.iter().all(|p| p["stock"].as_u64().unwrap() > 0));
            saw_stock_filter_bite |= stocked.len() < parts.len();
        }
    }
    assert!(saw_stock_filter_bite, "in_stock_only must filter something somewhere");
}

#[test]
fn variant_specific_parts_really_differ() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Parts, dir.path());
    for category in S_SPECIFIC {
        let part_nos = |variant: &str| -> HashSet<String> {
            run(&s, "find_part", json!({"model_variant": variant, "category": category})).structured
                ["parts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["part_no"].as_str().unwrap().to_string())
                .collect()
        };
        assert!(
            part_nos("AC-250-S").is_disjoint(&part_nos("AC-250-A")),
            "{category}: -S and -A share a part"
        );
    }
}

#[test]
fn check_availability_reads_stock_and_refuses_unknown_parts() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Parts, dir.path());
    let part = &dataset().parts[3];
    let r = run(&s, "check_availability", json!({"part_no": part.part_no}));
    assert!(!r.is_error);
    assert_eq!(r.structured["stock"], json!(part.stock));
    assert_eq!(r.structured["lead_time_days"], json!(part.lead_time_days));
    let unknown = run(&s, "check_availability", json!({"part_no": "NO-SUCH-PART"}));
    assert!(unknown.is_error && unknown.text.contains("NO-SUCH-PART"), "{}", unknown.text);
}

#[test]
fn raise_parts_order_records_an_order_and_refuses_what_cannot_be_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Parts, dir.path());
    let ticket = dataset().tickets.iter().find(|t| t.model_variant == "AC-250-S").unwrap().clone();
    let fits = dataset()
        .parts
        .iter()
        .find(|p| p.fits("AC-250-S") && p.category == "thermostatic-valve")
        .unwrap()
        .clone();
    let wrong =
        dataset().parts.iter().find(|p| p.fits("AC-250-A") && !p.fits("AC-250-S")).unwrap().clone();
    let r = run(
        &s,
        "raise_parts_order",
        json!({"part_no": fits.part_no, "quantity": 3, "ticket_id": ticket.ticket_id}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["order_id"], "PO-000001");
    assert_eq!(r.structured["total_minor"], json!(fits.price_minor * 3));
    let again = run(
        &s,
        "raise_parts_order",
        json!({"part_no": fits.part_no, "quantity": 3, "ticket_id": ticket.ticket_id}),
    );
    assert_eq!(
        again.structured["order_id"], "PO-000002",
        "the server does not deduplicate: that is the gateway's job"
    );

    let mismatch = run(
        &s,
        "raise_parts_order",
        json!({"part_no": wrong.part_no, "quantity": 1, "ticket_id": ticket.ticket_id}),
    );
    assert!(mismatch.is_error && mismatch.text.contains("does not fit"), "{}", mismatch.text);
    let too_many = run(
        &s,
        "raise_parts_order",
        json!({"part_no": fits.part_no, "quantity": 21, "ticket_id": ticket.ticket_id}),
    );
    assert!(too_many.is_error && too_many.text.contains("/quantity"), "{}", too_many.text);
    let lines = std::fs::read_to_string(dir.path().join("orders.jsonl")).unwrap().lines().count();
    assert_eq!(lines, 2, "refused orders are not recorded");
}

#[test]
fn search_manual_filters_by_family_and_variant_and_names_its_backend() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(ServerKind::Manuals, dir.path());
    let r = run(
        &s,
        "search_manual",
        json!({"query": "replacing the thermostatic valve", "product_family": "AC-250", "variant": "S", "k": 10}),
    );
    assert_well_formed(ServerKind::Manuals, "search_manual", &r);
    assert_eq!(r.structured["backend"], "bm25-lexical");
    let passages = r.structured["passages"].as_array().unwrap();
    assert_eq!(passages.len(), 10);
    for p in passages {
        assert_eq!(p["product_family"], "AC-250");
        assert!(p["variant"].is_null() || p["variant"] == "S", "{p}");
        assert!(p["document"].is_string() && p["page"].is_u64() && p["revision"].is_string());
    }
    assert_eq!(passages[0]["variant"], "S", "the variant's own procedure ranks first");
    assert!(passages[0]["text"].as_str().unwrap().contains("71 °C"));

    let k = run(&s, "search_manual", json!({"query": "torque", "k": 3}));
    assert_eq!(k.structured["passages"].as_array().unwrap().len(), 3);
    let unknown = run(&s, "search_manual", json!({"query": "torque", "product_family": "ZZ-99"}));
    assert!(unknown.is_error && unknown.text.contains("AC-250"), "{}", unknown.text);
    let bad = run(&s, "search_manual", json!({"query": "torque", "variant": "X"}));
    assert!(bad.is_error && bad.text.contains("/variant"), "{}", bad.text);
}
