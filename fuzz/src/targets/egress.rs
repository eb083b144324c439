//! The egress scanner (`toolgate_core::egress`) over a call's arguments:
//! every marker points at a string or a number of the arguments (a card
//! number sent as a JSON number is still a card), or at an object one of
//! whose keys holds it (withheld as `~key`); no pointer carries a control
//! character; and the scan's class is the worst of its markers.

use std::sync::OnceLock;

use serde_json::Value;
use toolgate_core::egress::{self, CustomPattern, EgressClass};
use toolgate_core::strict_json::{self, JsonLimits};

fn custom() -> &'static [CustomPattern] {
    static CUSTOM: OnceLock<Vec<CustomPattern>> = OnceLock::new();
    CUSTOM.get_or_init(|| {
        vec![CustomPattern {
            name: "order".into(),
            regex: regex::Regex::new("PO-[0-9]{6}").expect("valid"),
            class: EgressClass::Confidential,
        }]
    })
}

pub(crate) fn run(data: &[u8]) {
    let Ok(arguments) = strict_json::parse(data, JsonLimits::default()) else { return };
    let scan = egress::scan(&arguments, custom());
    for m in &scan.markers {
        // A key that holds a marker is withheld (`~key`): what comes before
        // it is an object; otherwise the marker is in a string or a number.
        // A tamed key (an escape written for a control character, or cut
        // short) does not resolve: such a pointer is only checked below.
        let tamed = m.path.contains("\\u") || m.path.contains('…');
        match m.path.split_once("/~key") {
            _ if tamed => {}
            Some((object, _)) => assert!(
                matches!(arguments.pointer(object), Some(Value::Object(_))),
                "marker {} in a key of {object:?}, not an object",
                m.kind
            ),
            None => assert!(
                matches!(arguments.pointer(&m.path), Some(Value::String(_) | Value::Number(_))),
                "marker {} points at {:?}, not a string or a number",
                m.kind,
                m.path
            ),
        }
        assert!(
            !m.path.chars().any(|c| c.is_control()),
            "a pointer with a control character: {:?}",
            m.path
        );
        assert!(m.class <= scan.class, "a marker worse than the scan's class");
    }
    assert_eq!(
        scan.class,
        scan.markers.iter().map(|m| m.class).max().unwrap_or(EgressClass::NoMarkersFound)
    );
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    [
        r#"{"card":"4111 1111 1111 1111","ssn":"078-05-1120","nested":{"a/b~c":["AKIAIOSFODNN7EXAMPLE"]}}"#,
        r#"{"note":"-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----"}"#,
        r#"{"t":"ghp_0123456789abcdefghijklmnopqrstuvwxyzAB","s":"xoxb-1234-5678-abcdefghij","j":"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"}"#,
        r#"{"b64":"NDExMSAxMTExIDExMTEgMTExMQ==","pct":"4111%201111%201111%201111","pw":"password=hunter2"}"#,
        r#"{"isbn":"978-3-16-148410-0","order":"PO-123456","nino":"AB 12 34 56 C"}"#,
        r#"{"meta":{"4111111111111111":{"x\r":"CC4111111111111111"}},"k":"keyAKIAIOSFODNN7EXAMPLE","w":"４１１１ １１１１ １１１１ １１１１","a":"٤١١١١١١١١١١١١١١١"}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
