//! The tool contracts each Atlas server declares, exactly as seed `000_…`
//! gives them, in their wire form: a hint the seed marks "(default)" is absent
//! here, so clients apply the specification's defaults themselves.

use rmcp::model::Tool;
use serde::Deserialize;
use serde_json::Value;

use crate::ServerKind;

#[derive(Deserialize)]
pub struct ServerContract {
    /// Reverse-DNS identity, e.g. `atlas.field-service.tickets`.
    pub id: String,
    pub title: String,
    pub tools: Vec<Value>,
}

pub fn source(kind: ServerKind) -> &'static str {
    match kind {
        ServerKind::Tickets => include_str!("../contracts/tickets.json"),
        ServerKind::Parts => include_str!("../contracts/parts.json"),
        ServerKind::Manuals => include_str!("../contracts/manuals.json"),
        ServerKind::Notices => include_str!("../contracts/notices.json"),
        ServerKind::Support => include_str!("../contracts/support.json"),
    }
}

pub fn load(kind: ServerKind) -> ServerContract {
    serde_json::from_str(source(kind))
        .expect("embedded contracts are valid JSON (checked by tests)")
}

/// The contracts as rmcp tool definitions, in declaration order.
pub fn tools(contract: &ServerContract) -> Vec<Tool> {
    contract
        .tools
        .iter()
        .map(|t| serde_json::from_value(t.clone()).expect("embedded contract is a valid MCP tool"))
        .collect()
}

/// One violation of an input schema: where, and what is wrong — never the
/// offending value, which may be private.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub path: String,
    pub message: String,
}

/// Validates arguments against a tool's declared `inputSchema`.
pub struct ArgumentValidator(jsonschema::Validator);

impl ArgumentValidator {
    pub fn new(schema: &Value) -> Result<Self, String> {
        jsonschema::options()
            // Patterns come from the contract, but cap backtracking anyway:
            // the same code validates schemas nobody here wrote.
            .with_pattern_options(jsonschema::PatternOptions::fancy_regex().backtrack_limit(10_000))
            .should_validate_formats(true)
            .build(schema)
            .map(Self)
            .map_err(|e| e.masked().to_string())
    }

    pub fn violations(&self, arguments: &Value) -> Vec<Violation> {
        self.0
            .iter_errors(arguments)
            .map(|e| {
                let path = e.instance_path().to_string();
                Violation {
                    path: if path.is_empty() { "/".into() } else { path },
                    message: e.masked_with("the value").to_string(),
                }
            })
            .collect()
    }
}
