//! Who is calling. Identity is trusted context from the authenticated
//! request, never from tool arguments: arguments that carry a tenant key are
//! refused, so a model cannot talk its way into another tenant.

use serde::Serialize;
use serde_json::Value;

/// An authenticated caller: the config entry a token (or the anonymous
/// opening, or the stdio setting) mapped to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Caller {
    /// The config key (`[callers.NAME]`); the principal's id in policy.
    pub name: String,
    /// Who this is (the config's `subject`, by default the name), recorded
    /// with decisions; policy sees it as `subject`.
    pub subject: String,
    /// The caller's tenant: the only source of the tenant of its calls.
    pub tenant: String,
    /// Its roles; policy sees each as a `Role::"R"` group, and `approver`
    /// may decide approvals.
    pub roles: Vec<String>,
}

impl Caller {
    /// Whether the caller has `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// JSON pointers of every object key in `arguments`, at any depth, that
/// names a tenant: `tenant`, `tenant_id`, `tenantId`, `Tenant-ID`, … (case,
/// `_` and `-` ignored).
pub fn tenant_keys(arguments: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk(arguments, &mut String::new(), &mut found);
    found.sort();
    found
}

fn is_tenant_key(key: &str) -> bool {
    let folded: String =
        key.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect();
    folded.starts_with("tenant")
}

fn walk(value: &Value, path: &mut String, found: &mut Vec<String>) {
    let mark = path.len();
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                if is_tenant_key(key) {
                    found.push(path.clone());
                }
                walk(child, path, found);
                path.truncate(mark);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push('/');
                path.push_str(&i.to_string());
                walk(child, path, found);
                path.truncate(mark);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tenant_keys_are_found_at_any_depth_in_any_spelling() {
        let args = json!({
            "to": "a@example.test",
            "tenant": "x",
            "meta": {"Tenant_ID": 1, "list": [{"tenantId": "y"}, {"TENANT-KEY": "z"}]},
            "contenant": "not a tenant key",
            "note": "tenant in a value is fine"
        });
        assert_eq!(
            tenant_keys(&args),
            vec!["/meta/Tenant_ID", "/meta/list/0/tenantId", "/meta/list/1/TENANT-KEY", "/tenant"]
        );
        assert!(tenant_keys(&json!({"to": "t", "body": "tenant"})).is_empty());
    }
}
