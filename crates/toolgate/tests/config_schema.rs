//! `toolgate config schema`: the JSON Schema an editor checks toolgate.toml
//! with. Every config the docs show is valid under it (the README's is also
//! read by the gateway), as are the packages' starter configs, and the mistakes the gateway refuses (a misspelt
//! key, a class that does not exist) are invalid under it too.

mod demo_common;

use std::process::Command;

use demo_common::workspace;
use serde_json::Value;

fn schema() -> jsonschema::Validator {
    let out =
        Command::new(env!("CARGO_BIN_EXE_toolgate")).args(["config", "schema"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    jsonschema::validator_for(&schema).expect("a schema that compiles")
}

fn as_json(toml: &str) -> Value {
    toml::from_str(toml).expect("TOML")
}

#[test]
fn the_configs_the_docs_show_are_valid_and_the_mistakes_are_not() {
    let validator = schema();
    let mut checked = 0;
    for doc in [
        "README.md",
        "docs/APPROVALS.md",
        "docs/CONSOLE.md",
        "docs/IDENTITY.md",
        "docs/OPERATIONS.md",
        "docs/RECEIPTS.md",
        "docs/TELEMETRY.md",
    ] {
        let text = std::fs::read_to_string(workspace().join(doc)).unwrap();
        for block in text.split("```toml\n").skip(1).filter_map(|b| b.split("```").next()) {
            // Illustrations with placeholders (`…`) are not configs.
            let Ok(value) = toml::from_str::<Value>(block) else { continue };
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(
                errors.is_empty(),
                "{doc}: a config the docs show is invalid under the schema: {errors:?}\n{block}"
            );
            // The README's is a whole config: the gateway reads it as the schema does.
            if doc == "README.md"
                && let Err(e) = toolgate_gateway::config::Config::parse(
                    block,
                    std::path::Path::new("/nonexistent/toolgate.toml"),
                )
            {
                panic!("{doc}: a config the docs show is refused: {e}\n{block}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 3, "only {checked} configs were checked");
    // The packages' starter configs: valid, and read by the gateway as they ship.
    for file in ["packaging/toolgate.toml", "packaging/image/toolgate.toml"] {
        let text = std::fs::read_to_string(workspace().join(file)).unwrap();
        assert!(validator.is_valid(&as_json(&text)), "{file}");
        let config = toolgate_gateway::config::Config::parse(
            &text,
            std::path::Path::new("/etc/toolgate/toolgate.toml"),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(
            config.lock_path(),
            std::path::Path::new("/var/lib/toolgate/toolgate.lock"),
            "{file}: the pins where the service may write"
        );
    }
    for mistake in [
        "[gateway]\nlisten_addr = \"127.0.0.1:8700\"\n",
        "[registry.\"a__t\"]\nclass = \"sometimes\"\n",
        "[tls]\ncert = \"x.pem\"\n",
    ] {
        assert!(!validator.is_valid(&as_json(mistake)), "{mistake}");
    }
    assert!(validator.is_valid(&as_json(
        "[servers.parts]\nurl = \"https://parts.example/mcp\"\nheaders_env = { Authorization = \
            \"PARTS_TOKEN\" }\n"
    )));
}
