use super::*;
use crate::stages::testing::{call, passed, refused, split};
use serde_json::json;

fn limited_to(max_argument_bytes: usize) -> GatewaySettings {
    GatewaySettings { max_argument_bytes, ..Default::default() }
}

#[test]
fn counts_what_serde_json_writes() {
    let v = json!({"a": [1, "é", null], "b": {"c": true}});
    assert_eq!(serialized_len(&v), serde_json::to_string(&v).unwrap().len());
}

#[test]
fn the_context_is_built_once_from_the_request_and_the_one_clock() {
    let clock = toolgate_core::FixedClock::new(1_780_272_000_123);
    let mut request = call("parts__find_part", json!({"part_no": "P-1"}));
    request.trace.insert(
        "traceparent".into(),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
    );
    let (cx, call) = context(request, &clock);
    assert_eq!(
        (cx.caller.name.as_str(), cx.era, cx.began_ms),
        ("agent", toolgate_mcp::wire::Era::Modern, 1_780_272_000_123)
    );
    assert_eq!(cx.trace.len(), 1);
    assert!(matches!(cx.request_id, Some(toolgate_mcp::wire::Id::Number(7))));
    assert_eq!(
        (call.name.as_str(), &call.arguments),
        ("parts__find_part", &json!({"part_no": "P-1"}))
    );
    assert!(cx.started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn ordinary_arguments_are_admitted() {
    // "tenant" in a value is not a tenant key: only keys name a tenant.
    let arguments = json!({"part_no": "P-1", "quantity": 2, "note": "for the tenant in flat 4", "lines": [{"sku": "x"}]});
    passed(admit(
        &GatewaySettings::default(),
        &split(&call("parts__raise_parts_order", arguments)).1,
    ));
}

#[test]
fn arguments_over_the_limit_are_refused_and_at_the_limit_admitted() {
    let arguments = json!({"note": "x".repeat(40)});
    let size = serde_json::to_string(&arguments).unwrap().len();
    passed(admit(
        &limited_to(size),
        &split(&call("parts__raise_parts_order", arguments.clone())).1,
    ));
    let r = refused(admit(
        &limited_to(size - 1),
        &split(&call("parts__raise_parts_order", arguments)).1,
    ));
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Deny, Reason::ArgumentsTooLarge, Action::Correct)
    );
    assert!(
        r.message.contains(&format!("{size} bytes"))
            && r.message.contains(&format!("limit is {}", size - 1)),
        "{}",
        r.message
    );
}

#[test]
fn tenant_keys_are_refused_each_by_its_path_without_its_value() {
    let arguments = json!({"part_no": "P-1", "tenant_id": "globex", "lines": [{"sku": "x", "Tenant-ID": "initech"}], "meta": {"tenantId": "umbrella"}});
    let r = refused(admit(
        &GatewaySettings::default(),
        &split(&call("parts__raise_parts_order", arguments)).1,
    ));
    assert_eq!(
        (r.verdict, r.reason, r.action),
        (Verdict::Deny, Reason::TenantInArguments, Action::Correct)
    );
    let paths: Vec<&str> = r.violations.iter().map(|v| v.path.as_str()).collect();
    assert_eq!(paths, ["/lines/0/Tenant-ID", "/meta/tenantId", "/tenant_id"]);
    let told = serde_json::to_string(&r).unwrap();
    for value in ["globex", "initech", "umbrella"] {
        assert!(!told.contains(value), "the refusal repeats {value}: {told}");
    }
}
