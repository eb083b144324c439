//! The part of a call's arguments the policies can read, by the schema.
//!
//! Policies are validated in strict mode, so none can read an attribute of
//! `context.arguments` the schema does not declare. Building Cedar values
//! for the rest is pure cost — on a 4 KiB argument object it was most of a
//! decision — and it also made `has` answer `true` for an attribute the
//! validator had typed as absent. So the request carries the declared
//! attributes only, at every depth the schema closes; where the schema
//! leaves a record open (`additionalAttributes`) or names a type this
//! reading does not resolve, the value is carried whole, as before.

use std::collections::HashMap;

use serde_json::Value;

/// How much of a value a policy can read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Readable {
    /// All of it.
    Whole,
    /// A closed record: only these attributes, each as far as its own shape.
    Record(HashMap<String, Readable>),
    /// A set whose elements are read as far as this.
    Set(Box<Readable>),
}

/// Type references deeper than this are carried whole (Cedar forbids cyclic
/// common types; this only bounds the walk).
const MAX_DEPTH: usize = 32;

impl Readable {
    /// The shape of `context.arguments` of `action` in a schema fragment's
    /// JSON form; `Whole` where it cannot be read from it.
    pub(crate) fn of_arguments(schema: &Value, action: &str) -> Self {
        let Some(namespaces) = schema.as_object() else { return Self::Whole };
        for (ns, body) in namespaces {
            let Some(context) = body.pointer(&format!(
                "/actions/{}/appliesTo/context",
                action.replace('~', "~0").replace('/', "~1")
            )) else {
                continue;
            };
            let common = |name: &str| common_type(namespaces, ns, name);
            return match resolve(context, &common, 0) {
                Self::Record(attrs) => attrs.get("arguments").cloned().unwrap_or(Self::Whole),
                _ => Self::Whole,
            };
        }
        Self::Whole
    }

    /// `value` cut to what this shape reads: undeclared attributes of closed
    /// records are dropped; a value of another type than declared is left as
    /// it is (the policy's evaluation then fails closed, as it would have).
    pub(crate) fn cut<'v>(&self, value: &'v Value) -> Cut<'v> {
        match (self, value) {
            (Self::Record(attrs), Value::Object(map)) => Cut::Record(
                map.iter()
                    .filter_map(|(k, v)| attrs.get(k).map(|shape| (k.as_str(), shape.cut(v))))
                    .collect(),
            ),
            (Self::Set(element), Value::Array(items)) => {
                Cut::Set(items.iter().map(|v| element.cut(v)).collect())
            }
            _ => Cut::Whole(value),
        }
    }
}

/// A value cut to what policies read.
pub(crate) enum Cut<'v> {
    /// Carried whole.
    Whole(&'v Value),
    /// A record of the declared attributes present.
    Record(Vec<(&'v str, Cut<'v>)>),
    /// A set of cut elements.
    Set(Vec<Cut<'v>>),
}

/// A common type by the name a schema uses for it: `Name` in the namespace
/// of the reference, or `Ns::Name` written out.
fn common_type<'s>(
    namespaces: &'s serde_json::Map<String, Value>,
    ns: &str,
    name: &str,
) -> Option<&'s Value> {
    let (ns, name) = match name.rsplit_once("::") {
        Some((ns, name)) => (ns, name),
        None => (ns, name),
    };
    namespaces.get(ns)?.get("commonTypes")?.get(name)
}

fn resolve<'s>(
    ty: &'s Value,
    common: &dyn Fn(&str) -> Option<&'s Value>,
    depth: usize,
) -> Readable {
    if depth > MAX_DEPTH {
        return Readable::Whole;
    }
    match ty.get("type").and_then(Value::as_str) {
        Some("Record") => {
            if ty.get("additionalAttributes").and_then(Value::as_bool).unwrap_or(false) {
                return Readable::Whole;
            }
            let Some(attrs) = ty.get("attributes").and_then(Value::as_object) else {
                return Readable::Whole;
            };
            Readable::Record(
                attrs.iter().map(|(k, v)| (k.clone(), resolve(v, common, depth + 1))).collect(),
            )
        }
        Some("Set") => match ty.get("element") {
            Some(element) => Readable::Set(Box::new(resolve(element, common, depth + 1))),
            None => Readable::Whole,
        },
        // A name: a common type resolves to its definition; a primitive,
        // an entity or an extension type is read whole.
        Some(kind) => {
            let name = ty.get("name").and_then(Value::as_str).unwrap_or(kind);
            match common(name) {
                Some(def) => resolve(def, common, depth + 1),
                None => Readable::Whole,
            }
        }
        None => Readable::Whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shape(schema: &str) -> Readable {
        let (fragment, _) = cedar_policy::SchemaFragment::from_cedarschema_str(schema).unwrap();
        Readable::of_arguments(&fragment.to_json_value().unwrap(), "call_tool")
    }

    fn attrs(r: &Readable) -> Vec<&str> {
        let Readable::Record(a) = r else { panic!("{r:?}") };
        let mut names: Vec<&str> = a.keys().map(String::as_str).collect();
        names.sort();
        names
    }

    #[test]
    fn the_arguments_type_is_found_inline_by_common_type_and_in_a_namespace() {
        let inline = "entity T; action call_tool appliesTo { principal: [T], resource: [T], context: { arguments: { a: String, b?: Long } } };";
        assert_eq!(attrs(&shape(inline)), ["a", "b"]);
        let named = "namespace Atlas { entity T; type Args = { to: String }; action call_tool \
            appliesTo { principal: [T], resource: [T], context: { arguments: Args } }; }";
        assert_eq!(attrs(&shape(named)), ["to"]);
        assert_eq!(
            shape(include_str!("../../toolgate-demo/demo/policy.cedarschema"))
                .cut(&json!({"to": "x", "visits": []}))
                .names(),
            ["to"]
        );
    }

    #[test]
    fn what_the_schema_leaves_open_or_does_not_say_is_carried_whole() {
        // No context, or no `arguments` in it: whole.
        assert_eq!(
            shape("entity T; action call_tool appliesTo { principal: [T], resource: [T] };"),
            Readable::Whole
        );
        // An entity-typed or primitive `arguments`: whole.
        assert_eq!(
            shape(
                "entity T; action call_tool appliesTo { principal: [T], resource: [T], context: { arguments: String } };"
            ),
            Readable::Whole
        );
        // An open record, in the JSON form that can say so.
        let open = json!({"": {"entityTypes": {}, "actions": {"call_tool": {"appliesTo": {"context": {"type": "Record", "attributes": {
            "arguments": {"type": "Record", "attributes": {"a": {"type": "String"}}, "additionalAttributes": true}}}}}}}});
        assert_eq!(Readable::of_arguments(&open, "call_tool"), Readable::Whole);
        assert_eq!(Readable::of_arguments(&json!("not a schema"), "call_tool"), Readable::Whole);
    }

    impl Cut<'_> {
        fn names(&self) -> Vec<&str> {
            match self {
                Cut::Record(a) => a.iter().map(|(k, _)| *k).collect(),
                _ => panic!("not a record"),
            }
        }
    }
}
