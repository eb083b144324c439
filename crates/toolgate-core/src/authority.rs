//! Authority: the class a tool's annotations would imply, under the
//! specification's pessimistic defaults. Annotations are hints from the
//! server; the host registry decides (that lands with the gateway). This
//! module only says what the hints imply, and which of them were declared.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What may happen to a call of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthorityClass {
    /// Runs without a human, unless a policy decides otherwise.
    Automatic,
    /// Every call waits for a named approver, unless a policy decides otherwise.
    RequiresApproval,
    /// Not listed, and refused unless a policy permits the call.
    Prohibited,
}

impl std::str::FromStr for AuthorityClass {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "automatic" => Ok(AuthorityClass::Automatic),
            "requires_approval" => Ok(AuthorityClass::RequiresApproval),
            "prohibited" => Ok(AuthorityClass::Prohibited),
            other => Err(format!(
                "unknown class `{other}`; use automatic, requires_approval or prohibited"
            )),
        }
    }
}

impl AuthorityClass {
    /// The snake_case name, as in config and as policy sees it (`class`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuthorityClass::Automatic => "automatic",
            AuthorityClass::RequiresApproval => "requires_approval",
            AuthorityClass::Prohibited => "prohibited",
        }
    }
}

/// One annotation hint: its effective value and whether the server declared
/// it (a hint not declared takes the specification's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hint {
    /// The effective value: the declared one, else the default.
    pub value: bool,
    /// Whether the server declared it as a JSON boolean.
    pub declared: bool,
}

/// The four behavioural hints of an MCP tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hints {
    /// `readOnlyHint`: the tool changes nothing.
    pub read_only_hint: Hint,
    /// `destructiveHint`: a write may destroy or overwrite, not only add.
    pub destructive_hint: Hint,
    /// `idempotentHint`: repeating a call with the same arguments has no
    /// further effect.
    pub idempotent_hint: Hint,
    /// `openWorldHint`: the tool may reach an open world of outside entities
    /// (the web, other parties).
    pub open_world_hint: Hint,
}

/// The specification's defaults: silence is not permission.
pub(crate) const DEFAULT_READ_ONLY: bool = false;
/// `destructiveHint` when undeclared: a write may destroy.
pub(crate) const DEFAULT_DESTRUCTIVE: bool = true;
/// `idempotentHint` when undeclared: a repeat may act again.
pub(crate) const DEFAULT_IDEMPOTENT: bool = false;
/// `openWorldHint` when undeclared: the tool may reach anything.
pub(crate) const DEFAULT_OPEN_WORLD: bool = true;

impl Hints {
    /// Reads the hints from a tool's `annotations` object (absent, `null` or
    /// any shape). A hint whose value is not a JSON boolean counts as not
    /// declared: a malformed hint must not loosen anything.
    pub fn from_annotations(annotations: Option<&Value>) -> Self {
        let hint = |key: &str, default: bool| match annotations.and_then(|a| a.get(key)) {
            Some(Value::Bool(value)) => Hint { value: *value, declared: true },
            _ => Hint { value: default, declared: false },
        };
        Hints {
            read_only_hint: hint("readOnlyHint", DEFAULT_READ_ONLY),
            destructive_hint: hint("destructiveHint", DEFAULT_DESTRUCTIVE),
            idempotent_hint: hint("idempotentHint", DEFAULT_IDEMPOTENT),
            open_world_hint: hint("openWorldHint", DEFAULT_OPEN_WORLD),
        }
    }

    /// The class these hints would imply on their own: read-only and
    /// closed-world → automatic; a non-destructive closed-world write →
    /// requires approval; anything else → prohibited.
    pub fn implied_class(&self) -> AuthorityClass {
        let closed_world = !self.open_world_hint.value;
        if self.read_only_hint.value && closed_world {
            AuthorityClass::Automatic
        } else if !self.read_only_hint.value && !self.destructive_hint.value && closed_world {
            AuthorityClass::RequiresApproval
        } else {
            AuthorityClass::Prohibited
        }
    }
}

/// Where a tool's effective class came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassSource {
    /// The host registry names the tool: its word runs.
    Registry,
    /// Not in the registry, from a trusted server: the hints decide.
    Annotations,
    /// Not in the registry, from an untrusted server: prohibited.
    UntrustedServer,
}

/// The authority view of one tool: hints as declared or defaulted, the
/// class they imply, the registry's class, and the one that runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorityView {
    /// The annotation hints, as declared or defaulted.
    pub hints: Hints,
    /// The class the hints imply on their own ([`Hints::implied_class`]).
    pub implied_class: AuthorityClass,
    /// The class the host registry names, if it names the tool.
    pub registry_class: Option<AuthorityClass>,
    /// The class that runs: the registry's, else the implied one for a trusted
    /// server, else prohibited.
    pub effective_class: AuthorityClass,
    /// Where `effective_class` came from.
    pub source: ClassSource,
    /// The registry names a class other than the hints imply.
    pub disagrees: bool,
    /// Whether the server's hints may be believed at all.
    pub server_trusted: bool,
}

impl AuthorityView {
    /// The view of a tool with these hints, the registry's class (if any) and
    /// its server's trust.
    pub fn new(hints: Hints, registry_class: Option<AuthorityClass>, server_trusted: bool) -> Self {
        let implied_class = hints.implied_class();
        let (effective_class, source) = match (registry_class, server_trusted) {
            (Some(class), _) => (class, ClassSource::Registry),
            (None, true) => (implied_class, ClassSource::Annotations),
            (None, false) => (AuthorityClass::Prohibited, ClassSource::UntrustedServer),
        };
        AuthorityView {
            hints,
            implied_class,
            registry_class,
            effective_class,
            source,
            disagrees: registry_class.is_some_and(|c| c != implied_class),
            server_trusted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_registry_word_runs_and_untrusted_silence_is_prohibited() {
        let read =
            Hints::from_annotations(Some(&json!({"readOnlyHint": true, "openWorldHint": false})));
        let forged = AuthorityView::new(read, Some(AuthorityClass::RequiresApproval), false);
        assert_eq!(
            (forged.effective_class, forged.source, forged.disagrees),
            (AuthorityClass::RequiresApproval, ClassSource::Registry, true)
        );
        let trusted = AuthorityView::new(read, None, true);
        assert_eq!(
            (trusted.effective_class, trusted.source, trusted.disagrees),
            (AuthorityClass::Automatic, ClassSource::Annotations, false)
        );
        let untrusted = AuthorityView::new(read, None, false);
        assert_eq!(
            (untrusted.effective_class, untrusted.source),
            (AuthorityClass::Prohibited, ClassSource::UntrustedServer)
        );
        let agreeing = AuthorityView::new(read, Some(AuthorityClass::Automatic), true);
        assert!(!agreeing.disagrees);
    }

    #[test]
    fn an_unannotated_tool_is_prohibited_and_nothing_is_declared() {
        let hints = Hints::from_annotations(None);
        assert_eq!(hints.implied_class(), AuthorityClass::Prohibited);
        assert!(!hints.read_only_hint.declared && !hints.open_world_hint.declared);
        assert!(hints.destructive_hint.value && hints.open_world_hint.value);
    }

    #[test]
    fn the_three_classes() {
        let read = json!({"readOnlyHint": true, "openWorldHint": false});
        let additive = json!({"destructiveHint": false, "openWorldHint": false});
        let open_read = json!({"readOnlyHint": true});
        assert_eq!(Hints::from_annotations(Some(&read)).implied_class(), AuthorityClass::Automatic);
        assert_eq!(
            Hints::from_annotations(Some(&additive)).implied_class(),
            AuthorityClass::RequiresApproval
        );
        assert_eq!(
            Hints::from_annotations(Some(&open_read)).implied_class(),
            AuthorityClass::Prohibited
        );
    }

    #[test]
    fn a_non_boolean_hint_is_not_a_declaration() {
        let forged = json!({"readOnlyHint": "true", "openWorldHint": 0});
        let hints = Hints::from_annotations(Some(&forged));
        assert!(!hints.read_only_hint.declared);
        assert_eq!(hints.implied_class(), AuthorityClass::Prohibited);
    }
}
