//! The config file (`toolgate_gateway::config`): any text parses to a
//! config or to an error that names the file; a config that parses also
//! gives the guards the gateway builds from it at start.

use std::path::Path;

use toolgate_gateway::config::{Config, ConfigError};
use toolgate_gateway::stages::decide::Guards;

pub(crate) fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new("/nonexistent/toolgate.toml");
    match Config::parse(text, path) {
        Ok(config) => {
            let _ = Guards::new(&config.guards);
            let _ = (config.state_dir(), config.ledger_location());
        }
        Err(e @ ConfigError::Invalid { .. }) => assert!(
            e.to_string().contains("/nonexistent/toolgate.toml"),
            "an error that does not name the file"
        ),
        Err(e) => panic!("parsing text gave a non-parse error: {e}"),
    }
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    [
        r#"[gateway]
listen = "127.0.0.1:8700"
max_body_bytes = 1048576
[servers.tickets]
command = "toolgate-atlas"
args = ["tickets"]
[servers.parts]
url = "http://127.0.0.1:8701/mcp"
trusted = false
headers_env = { Authorization = "PARTS_TOKEN" }
[registry."parts__raise_parts_order"]
class = "requires_approval"
labels = ["money"]
[registry."parts__raise_parts_order".reconcile]
tool = "check_availability"
arguments = { part_number = "part_number" }
[[registry_resources]]
server = "tickets"
uri = "atlas://tickets/*"
class = "automatic"
[callers.agent]
tenant = "atlas"
roles = ["agent"]
token_env = "TOOLGATE_AGENT_TOKEN"
[callers.dana]
tenant = "atlas"
roles = ["approver"]
token_file = "dana.token"
[approvals]
hold_ms = 30000
max_pending_per_caller = 100
[guards.egress]
enabled = true
patterns = [{ name = "order", regex = "PO-[0-9]{6}", class = "confidential" }]
[policy]
policies = "policy.cedar"
schema = "policy.cedarschema"
"#,
        "[gateway]\nlisten = \"[::1]:0\"\nnamespace = false\n[oauth]\nissuer = \"https://issuer.example\"\nresource = \"https://gw.example/mcp\"\n",
        "[servers.a]\nurl = \"https://x.example/mcp\"\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
