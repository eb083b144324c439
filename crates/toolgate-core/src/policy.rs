//! Argument-level policy in Cedar. The host writes policies and a schema;
//! both are validated together when the gateway starts, so a policy that
//! names an attribute the schema does not have never reaches a call.
//!
//! The request toolgate asks Cedar about one call:
//! - principal `Caller::"NAME"` {subject, tenant}, member of `Role::"R"` for
//!   each of its roles;
//! - action `Action::"call_tool"`;
//! - resource `Tool::"EXPOSED_NAME"` {server, name, class, labels}, where
//!   class is the registry's (or the annotations') class;
//! - context {arguments, approval}: the call's arguments — cut to the
//!   attributes the schema declares, the only ones a validated policy can
//!   read (`policy_arguments`) — and the state of the approval the call
//!   presents (`none` when it presents none).
//!
//! How Cedar's answer maps to a verdict (`Outcome`):
//! - a satisfied `forbid` without an `@approval` annotation → deny;
//! - satisfied `forbid`s that all carry `@approval("why")` → require_approval;
//! - Allow (a satisfied `permit`, no `forbid`) → allow;
//! - nothing satisfied → not applicable: the registry class decides;
//! - a policy that fails to evaluate → deny (fail closed).
//!
//! A policy's rule id is its `@id("…")` annotation, else Cedar's own id.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Effect, Entities, Entity, EntityId,
    EntityTypeName, EntityUid, PolicyId, PolicySet, Request, RestrictedExpression, Schema,
    SchemaFragment, ValidationMode, Validator,
};
use serde_json::Value;

use crate::identity::Caller;
use crate::policy_arguments::{Cut, Readable};
use crate::proposal::{canonical_json, sha256_hex};

/// The id of the one Cedar action every call is asked as: `Action::"call_tool"`.
pub(crate) const ACTION: &str = "call_tool";

/// Why a policy set and its schema cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy set does not parse.
    #[error("the policy set does not parse: {0}")]
    Policies(String),
    /// The schema does not parse.
    #[error("the policy schema does not parse: {0}")]
    Schema(String),
    /// The policies do not validate against the schema (strict mode).
    #[error("the policies do not validate against the schema:\n{0}")]
    Invalid(String),
}

/// The tool a call names, as policy sees it.
pub struct ToolFacts<'a> {
    /// The name the caller calls it by: the resource's id (`Tool::"…"`).
    pub exposed_name: &'a str,
    /// The upstream server's configured name.
    pub server: &'a str,
    /// The tool's name on that upstream.
    pub name: &'a str,
    /// The tool's effective authority class, by its snake_case name.
    pub class: &'a str,
    /// The registry's labels for the tool.
    pub labels: &'a [String],
}

/// What the policy set concluded about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A satisfied `permit` and no satisfied `forbid`: allow.
    Permit {
        /// The ids of the satisfied `permit`s.
        rules: Vec<String>,
    },
    /// A satisfied `forbid` without an `@approval` annotation: deny.
    Forbid {
        /// The ids of the satisfied `forbid`s.
        rules: Vec<String>,
    },
    /// Forbidden unless a named human approves; `why` from the annotations.
    RequireApproval {
        /// The ids of the satisfied `forbid`s.
        rules: Vec<String>,
        /// Their `@approval` texts, sorted, without repeats, joined with `; `.
        why: String,
    },
    /// No policy is satisfied: the tool's class decides.
    NotApplicable,
    /// A policy failed to evaluate; the call is denied.
    Error {
        /// The ids of the rules that failed to evaluate (none when the request
        /// could not be built).
        rules: Vec<String>,
        /// What failed.
        message: String,
    },
}

/// A validated policy set and its schema.
pub struct PolicyEngine {
    policies: PolicySet,
    /// What of `context.arguments` the schema lets a policy read.
    readable: Readable,
    version: String,
}

impl PolicyEngine {
    /// Parses and validates (strict mode). Any error stops here.
    pub fn load(policies: &str, schema: &str) -> Result<Self, PolicyError> {
        let set = PolicySet::from_str(policies).map_err(|e| PolicyError::Policies(render(&e)))?;
        let (fragment, _) = SchemaFragment::from_cedarschema_str(schema)
            .map_err(|e| PolicyError::Schema(render(&e)))?;
        let (compiled, _) =
            Schema::from_cedarschema_str(schema).map_err(|e| PolicyError::Schema(render(&e)))?;
        let result = Validator::new(compiled).validate(&set, ValidationMode::Strict);
        if !result.validation_passed() {
            let errors: Vec<String> =
                result.validation_errors().map(|e| format!("- {}", render(e))).collect();
            return Err(PolicyError::Invalid(errors.join("\n")));
        }
        let schema = fragment.to_json_value().map_err(|e| PolicyError::Schema(e.to_string()))?;
        let readable = Readable::of_arguments(&schema, ACTION);
        let canonical = serde_json::json!({
            "policies": set.clone().to_json().map_err(|e| PolicyError::Policies(e.to_string()))?,
            "schema": schema,
        });
        let version = sha256_hex(canonical_json(&canonical).as_bytes());
        Ok(Self { policies: set, readable, version })
    }

    /// An engine with no policies: every call is not applicable.
    pub fn empty() -> Self {
        let version = sha256_hex(
            canonical_json(&serde_json::json!({"policies": {}, "schema": {}})).as_bytes(),
        );
        Self { policies: PolicySet::new(), readable: Readable::Whole, version }
    }

    /// sha256 of the canonical policy set and schema, recorded with every decision.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// What the policy set concludes about `caller` calling `tool` with
    /// `arguments`; `approval` is the state of the approval the call presents
    /// (`none` when it presents none). Fails closed: an error is an
    /// [`Outcome::Error`].
    pub fn evaluate(
        &self,
        caller: &Caller,
        tool: &ToolFacts<'_>,
        arguments: &Value,
        approval: &str,
    ) -> Outcome {
        // No policies, nothing can apply: skip building the request.
        if self.policies.is_empty() {
            return Outcome::NotApplicable;
        }
        match self.try_evaluate(caller, tool, arguments, approval) {
            Ok(outcome) => outcome,
            Err(message) => Outcome::Error { rules: Vec::new(), message },
        }
    }

    fn try_evaluate(
        &self,
        caller: &Caller,
        tool: &ToolFacts<'_>,
        arguments: &Value,
        approval: &str,
    ) -> Result<Outcome, String> {
        let principal = uid("Caller", &caller.name)?;
        let resource = uid("Tool", tool.exposed_name)?;
        let action = uid("Action", ACTION)?;
        let roles: HashSet<EntityUid> =
            caller.roles.iter().map(|r| uid("Role", r)).collect::<Result<_, _>>()?;
        let mut entities: Vec<Entity> =
            roles.iter().map(|r| Entity::new_no_attrs(r.clone(), HashSet::new())).collect();
        let caller_attrs = HashMap::from([
            ("subject".to_string(), RestrictedExpression::new_string(caller.subject.clone())),
            ("tenant".to_string(), RestrictedExpression::new_string(caller.tenant.clone())),
        ]);
        entities
            .push(Entity::new(principal.clone(), caller_attrs, roles).map_err(|e| e.to_string())?);
        let labels = RestrictedExpression::new_set(
            tool.labels.iter().map(|l| RestrictedExpression::new_string(l.clone())),
        );
        let tool_attrs = HashMap::from([
            ("server".to_string(), RestrictedExpression::new_string(tool.server.to_string())),
            ("name".to_string(), RestrictedExpression::new_string(tool.name.to_string())),
            ("class".to_string(), RestrictedExpression::new_string(tool.class.to_string())),
            ("labels".to_string(), labels),
        ]);
        entities.push(
            Entity::new(resource.clone(), tool_attrs, HashSet::new()).map_err(|e| e.to_string())?,
        );
        let entities = Entities::from_entities(entities, None).map_err(|e| e.to_string())?;
        let context = Context::from_pairs([
            ("arguments".to_string(), restricted(self.readable.cut(arguments))?),
            ("approval".to_string(), RestrictedExpression::new_string(approval.to_string())),
        ])
        .map_err(|e| e.to_string())?;
        let request =
            Request::new(principal, action, resource, context, None).map_err(|e| e.to_string())?;
        let response = Authorizer::new().is_authorized(&request, &self.policies, &entities);
        let errors: Vec<String> = response.diagnostics().errors().map(|e| e.to_string()).collect();
        if !errors.is_empty() {
            let rules = response
                .diagnostics()
                .errors()
                .map(|cedar_policy::AuthorizationError::PolicyEvaluationError(e)| {
                    self.rule_id(e.policy_id())
                })
                .collect();
            return Ok(Outcome::Error { rules, message: errors.join("; ") });
        }
        let determining: Vec<&PolicyId> = response.diagnostics().reason().collect();
        if determining.is_empty() {
            return Ok(Outcome::NotApplicable);
        }
        let mut rules: Vec<String> = determining.iter().map(|id| self.rule_id(id)).collect();
        rules.sort();
        if response.decision() == CedarDecision::Allow {
            return Ok(Outcome::Permit { rules });
        }
        let approvals: Vec<&str> = determining
            .iter()
            .filter_map(|id| self.policies.policy(id))
            .filter(|p| p.effect() == Effect::Forbid)
            .map(|p| p.annotation("approval"))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        if approvals.len() == determining.len() {
            let mut why: Vec<&str> = approvals.into_iter().filter(|w| !w.is_empty()).collect();
            why.sort();
            why.dedup();
            return Ok(Outcome::RequireApproval { rules, why: why.join("; ") });
        }
        Ok(Outcome::Forbid { rules })
    }

    fn rule_id(&self, id: &PolicyId) -> String {
        self.policies
            .policy(id)
            .and_then(|p| p.annotation("id"))
            .map_or_else(|| id.to_string(), str::to_string)
    }
}

fn uid(kind: &str, id: &str) -> Result<EntityUid, String> {
    let kind = EntityTypeName::from_str(kind).map_err(|e| e.to_string())?;
    Ok(EntityUid::from_type_name_and_id(kind, EntityId::new(id)))
}

/// JSON → a Cedar value, built directly (never through Cedar's JSON form,
/// whose `__entity`/`__extn` keys an argument could otherwise forge).
/// Numbers that are not 64-bit integers become strings: Cedar has no floats.
fn restricted(cut: Cut<'_>) -> Result<RestrictedExpression, String> {
    Ok(match cut {
        Cut::Whole(value) => whole(value)?,
        Cut::Record(attrs) => RestrictedExpression::new_record(
            attrs
                .into_iter()
                .map(|(k, v)| Ok((k.to_string(), restricted(v)?)))
                .collect::<Result<Vec<_>, String>>()?,
        )
        .map_err(|e| e.to_string())?,
        Cut::Set(items) => RestrictedExpression::new_set(
            items.into_iter().map(restricted).collect::<Result<Vec<_>, _>>()?,
        ),
    })
}

fn whole(value: &Value) -> Result<RestrictedExpression, String> {
    Ok(match value {
        Value::Null => {
            RestrictedExpression::new_record(std::iter::empty()).map_err(|e| e.to_string())?
        }
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => RestrictedExpression::new_long(i),
            None => RestrictedExpression::new_string(n.to_string()),
        },
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Array(items) => {
            RestrictedExpression::new_set(items.iter().map(whole).collect::<Result<Vec<_>, _>>()?)
        }
        Value::Object(map) => RestrictedExpression::new_record(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), whole(v)?)))
                .collect::<Result<Vec<_>, String>>()?,
        )
        .map_err(|e| e.to_string())?,
    })
}

/// Cedar's diagnostics, with their help text, on one line each.
fn render(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub const SCHEMA: &str = r#"
        entity Role;
        entity Caller in [Role] = { subject: String, tenant: String };
        entity Tool = { server: String, name: String, class: String, labels: Set<String> };
        type Arguments = { to?: String, body?: String, quantity?: Long };
        action call_tool appliesTo { principal: [Caller], resource: [Tool], context: { arguments: Arguments, approval: String } };
    "#;

    const POLICIES: &str = r#"
        @id("exact_rule") @approval("a notice to the team address")
        forbid (principal, action == Action::"call_tool", resource == Tool::"notices__send_notice")
        when { context.arguments has to && context.arguments.to == "team@example.test" };

        @id("no_exact_rule")
        forbid (principal, action == Action::"call_tool", resource == Tool::"notices__send_notice")
        unless { context.arguments has to && context.arguments.to == "team@example.test" };

        @id("small_orders")
        permit (principal in Role::"agent", action == Action::"call_tool", resource == Tool::"parts__raise_parts_order")
        when { context.arguments has quantity && context.arguments.quantity <= 5 };
    "#;

    fn agent() -> Caller {
        Caller {
            name: "agent".into(),
            subject: "agent-7".into(),
            tenant: "atlas".into(),
            roles: vec!["agent".into()],
        }
    }

    fn tool(exposed: &'static str) -> ToolFacts<'static> {
        let (server, name) = exposed.split_once("__").unwrap();
        ToolFacts { exposed_name: exposed, server, name, class: "requires_approval", labels: &[] }
    }

    #[test]
    fn each_cedar_answer_maps_to_its_outcome() {
        let engine = PolicyEngine::load(POLICIES, SCHEMA).unwrap();
        let eval =
            |t: &'static str, args: Value| engine.evaluate(&agent(), &tool(t), &args, "none");
        assert_eq!(
            eval("notices__send_notice", json!({"to": "team@example.test", "body": "x"})),
            Outcome::RequireApproval {
                rules: vec!["exact_rule".into()],
                why: "a notice to the team address".into()
            }
        );
        assert_eq!(
            eval("notices__send_notice", json!({"to": "outside@example.test", "body": "x"})),
            Outcome::Forbid { rules: vec!["no_exact_rule".into()] }
        );
        assert_eq!(
            eval("parts__raise_parts_order", json!({"quantity": 2})),
            Outcome::Permit { rules: vec!["small_orders".into()] }
        );
        assert_eq!(
            eval("parts__raise_parts_order", json!({"quantity": 9})),
            Outcome::NotApplicable
        );
        assert_eq!(
            eval("tickets__get_ticket", json!({"ticket_id": "SR-1"})),
            Outcome::NotApplicable
        );
        // A role the caller lacks: the permit does not apply.
        let mut other = agent();
        other.roles = vec!["auditor".into()];
        assert_eq!(
            engine.evaluate(
                &other,
                &tool("parts__raise_parts_order"),
                &json!({"quantity": 2}),
                "none"
            ),
            Outcome::NotApplicable
        );
    }

    #[test]
    fn an_argument_cannot_forge_an_entity_or_break_evaluation_open() {
        let engine = PolicyEngine::load(POLICIES, SCHEMA).unwrap();
        // Cedar's JSON escape as an argument value is just a record here.
        let forged = json!({"to": {"__entity": {"type": "Tool", "id": "x"}}, "body": "x"});
        assert!(matches!(
            engine.evaluate(&agent(), &tool("notices__send_notice"), &forged, "none"),
            Outcome::Forbid { .. }
        ));
        // A wrong type where a policy compares: the policy errors, the call is denied.
        let wrong = json!({"quantity": "two"});
        assert!(matches!(
            engine.evaluate(&agent(), &tool("parts__raise_parts_order"), &wrong, "none"),
            Outcome::Error { .. }
        ));
    }

    #[test]
    fn policies_read_the_declared_arguments_at_any_depth_and_nothing_else() {
        let schema = r#"
            entity Role;
            entity Caller in [Role] = { subject: String, tenant: String };
            entity Tool = { server: String, name: String, class: String, labels: Set<String> };
            type Line = { part_no: String };
            type Arguments = { lines?: Set<Line>, note?: String, extra?: { open: String } };
            action call_tool appliesTo { principal: [Caller], resource: [Tool], context: { arguments: Arguments, approval: String } };
        "#;
        let policies = r#"
            @id("no_valves") forbid (principal, action, resource)
            when { context.arguments has lines && context.arguments.lines.contains({part_no: "TV-1"}) };
            @id("noted") permit (principal, action, resource) when { context.arguments has note };
        "#;
        let engine = PolicyEngine::load(policies, schema).unwrap();
        // The nested common type is resolved: lines are a set of closed records.
        let Readable::Record(attrs) = &engine.readable else { panic!("{:?}", engine.readable) };
        assert!(
            matches!(attrs.get("lines"), Some(Readable::Set(line)) if matches!(&**line, Readable::Record(l) if l.contains_key("part_no"))),
            "{attrs:?}"
        );
        let eval = |args: Value| {
            engine.evaluate(&agent(), &tool("parts__raise_parts_order"), &args, "none")
        };
        // An undeclared attribute beside a declared one is dropped, so a set
        // element still equals the record the policy names.
        assert_eq!(
            eval(json!({"lines": [{"part_no": "TV-1", "colour": "red"}]})),
            Outcome::Forbid { rules: vec!["no_valves".into()] }
        );
        assert_eq!(
            eval(json!({"lines": [{"part_no": "TV-2", "colour": "red"}]})),
            Outcome::NotApplicable
        );
        // Undeclared top-level attributes are not there for `has`, as the validator typed them.
        assert_eq!(eval(json!({"visits": [1, 2, 3]})), Outcome::NotApplicable);
        assert_eq!(
            eval(json!({"note": "x", "visits": [1, 2, 3]})),
            Outcome::Permit { rules: vec!["noted".into()] }
        );
        // A declared attribute of the wrong type still fails closed.
        assert!(matches!(eval(json!({"lines": "TV-1"})), Outcome::Error { .. }));
    }

    #[test]
    fn a_policy_that_does_not_validate_is_refused_with_cedars_message() {
        let bad = r#"permit (principal, action == Action::"call_tool", resource) when { context.arguments.recipient == "x" };"#;
        let err = PolicyEngine::load(bad, SCHEMA).err().expect("must not validate").to_string();
        assert!(err.contains("recipient"), "{err}");
        assert!(PolicyEngine::load("permit (principal, action, resource", SCHEMA).is_err());
        assert!(PolicyEngine::load(POLICIES, "entity Broken = {").is_err());
    }

    #[test]
    fn the_version_follows_content_not_layout() {
        let a = PolicyEngine::load(POLICIES, SCHEMA).unwrap();
        let b = PolicyEngine::load(&POLICIES.replace("        ", "  "), SCHEMA).unwrap();
        let c = PolicyEngine::load(&POLICIES.replace("<= 5", "<= 6"), SCHEMA).unwrap();
        assert_eq!(a.version(), b.version());
        assert_ne!(a.version(), c.version());
        assert_eq!(a.version().len(), 64);
        assert_ne!(PolicyEngine::empty().version(), a.version());
        let empty = PolicyEngine::empty();
        assert_eq!(
            empty.evaluate(&agent(), &tool("notices__send_notice"), &json!({}), "none"),
            Outcome::NotApplicable
        );
    }
}
