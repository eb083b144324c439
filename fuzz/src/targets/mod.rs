//! The targets, by name, and the seed inputs each starts from.

pub(crate) mod bundle;
pub(crate) mod config;
pub(crate) mod edge;
pub(crate) mod egress;
pub(crate) mod json;
pub(crate) mod note;
pub(crate) mod schema;
pub(crate) mod seal;
pub(crate) mod sse;

/// One fuzz target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The strict JSON reader: limits, duplicate keys, UTF-8.
    Json,
    /// A whole HTTP request at the downstream edge (method, headers, body),
    /// through to its answer, with two Atlas upstreams behind it.
    Edge,
    /// Argument validation against a hostile upstream schema.
    Schema,
    /// Opening a client-supplied `requestState`.
    Seal,
    /// C2SP signed notes and checkpoints.
    Note,
    /// Export bundles: parsing and the offline verification.
    Bundle,
    /// The config file.
    Config,
    /// The egress scanner over a call's arguments.
    Egress,
    /// The event-stream writer of the console and the MCP edge.
    Sse,
}

/// Every target, with the name `scripts/fuzz` and the corpus folders use.
pub const TARGETS: [(&str, Target); 9] = [
    ("json", Target::Json),
    ("edge", Target::Edge),
    ("schema", Target::Schema),
    ("seal", Target::Seal),
    ("note", Target::Note),
    ("bundle", Target::Bundle),
    ("config", Target::Config),
    ("egress", Target::Egress),
    ("sse", Target::Sse),
];

impl Target {
    /// The target named `name`.
    pub fn named(name: &str) -> Option<Self> {
        TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }
}

/// The seed inputs of `target`, made from the same code the tests use, so
/// they follow the formats as they change.
pub fn seeds(target: Target) -> Vec<Vec<u8>> {
    match target {
        Target::Json => json::seeds(),
        Target::Edge => edge::seeds(),
        Target::Schema => schema::seeds(),
        Target::Seal => seal::seeds(),
        Target::Note => note::seeds(),
        Target::Bundle => bundle::seeds(),
        Target::Config => config::seeds(),
        Target::Egress => egress::seeds(),
        Target::Sse => sse::seeds(),
    }
}
