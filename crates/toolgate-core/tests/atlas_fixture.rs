//! Level 1: the authority maths reproduce seed `000_…`'s table. For each of
//! the eight Atlas tools, the hints read from the fixture's wire form (only
//! declared hints present) give the declared/defaulted flags and the
//! annotation-implied class the seed records.

use std::path::Path;

use serde_json::{Map, Value};
use toolgate_core::Hints;

fn fixture() -> Value {
    let dir = std::env::var("TOOLGATE_SHARED_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let path = dir.join("fixtures/atlas-contracts.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; set TOOLGATE_SHARED_DIR", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn implied_classes_match_the_seed() {
    let mut seen = 0;
    for server in fixture()["servers"].as_array().unwrap() {
        for tool in server["tools"].as_array().unwrap() {
            let name = tool["name"].as_str().unwrap();
            // The wire form: only what the server declared.
            let mut wire = Map::new();
            for (hint, v) in tool["annotations"].as_object().unwrap() {
                if v["declared"] == Value::Bool(true) {
                    wire.insert(hint.clone(), v["value"].clone());
                }
            }
            let hints = Hints::from_annotations(Some(&Value::Object(wire)));
            let as_json = serde_json::to_value(hints).unwrap();
            assert_eq!(
                as_json, tool["annotations"],
                "{name}: effective hints differ from the seed"
            );
            assert_eq!(
                hints.implied_class().as_str(),
                tool["annotation_implied_class"].as_str().unwrap(),
                "{name}: implied class"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 8);
}
