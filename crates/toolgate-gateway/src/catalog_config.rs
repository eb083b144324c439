//! `[registry."SERVER{sep}TOOL"]`, `[registry_prompts."SERVER{sep}PROMPT"]`
//! and `[[registry_resources]]`: the host's own word on a tool, a prompt or
//! resources, which the catalog puts over what a server's annotations say.

use serde::Deserialize;
use toolgate_core::AuthorityClass;

use crate::reconcile_config::ReconcileConfig;

/// A `[registry]` entry: the host's word on one tool, which a server's
/// annotations cannot override.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryEntry {
    /// The tool's authority class; it runs over what the annotations imply.
    pub class: AuthorityClass,
    /// Free labels (e.g. `private_data`, `exfiltration`) for policy and guards.
    #[serde(default)]
    pub labels: Vec<String>,
    /// The host's word that this tool changes nothing: its calls are not
    /// operations (no ledger record, a lost answer may be retried).
    #[serde(default)]
    pub(crate) read_only: bool,
    /// How to find this write's effect when its outcome is unknown.
    pub(crate) reconcile: Option<ReconcileConfig>,
}

/// A `[registry_prompts]` entry: the host's word on a prompt. Getting a
/// prompt or reading a resource changes nothing, so the class is
/// `automatic` or `prohibited`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContentEntry {
    /// `automatic` or `prohibited`.
    pub class: AuthorityClass,
    /// Free labels (e.g. `private_data`) for the guards, as for tools.
    #[serde(default)]
    pub labels: Vec<String>,
}

/// A `[[registry_resources]]` entry: the resources of `server` whose URI
/// (a template's `uriTemplate`) matches `uri`, where `*` stands for any run
/// of characters.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceEntry {
    /// The configured server.
    pub server: String,
    /// The URI pattern, on the upstream's own URIs (`manual://*`).
    pub uri: String,
    /// `automatic` or `prohibited`.
    pub class: AuthorityClass,
    /// Free labels, as for tools.
    #[serde(default)]
    pub labels: Vec<String>,
}

impl ResourceEntry {
    /// Whether this entry names `uri` of `server`.
    pub fn names(&self, server: &str, uri: &str) -> bool {
        self.server == server && glob(&self.uri, uri)
    }
}

/// `*` matches any run of characters (none included); all else is literal.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A prompt get or a resource read (`what`) changes nothing: its class is
/// `automatic` or `prohibited`, never `requires_approval`.
pub(crate) fn reads_only(what: String, class: AuthorityClass) -> Result<(), String> {
    match class {
        AuthorityClass::RequiresApproval => Err(format!(
            "{what}: class `requires_approval` is for tools; a prompt or resource read is `automatic` or `prohibited`"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use toolgate_core::AuthorityClass;

    use crate::config::tests::parse;

    #[test]
    fn prompts_and_resources_are_classed_by_name_and_by_uri_pattern() {
        let c = parse(
            "[servers.parts]\ncommand = \"x\"\n[registry_prompts.\"parts__diagnose\"]\nclass = \
                \"automatic\"\n[[registry_resources]]\nserver = \"parts\"\nuri = \
                \"manual://*/secret*\"\nclass = \"prohibited\"\n",
        )
        .unwrap();
        assert_eq!(c.registry_prompts["parts__diagnose"].class, AuthorityClass::Automatic);
        let entry = &c.registry_resources[0];
        assert!(
            entry.names("parts", "manual://ac250/secret")
                && entry.names("parts", "manual://x/y/secret-2")
        );
        assert!(
            !entry.names("parts", "manual://ac250/public")
                && !entry.names("other", "manual://a/secret")
                && !entry.names("parts", "xmanual://a/secret")
        );
        assert!(
            super::glob("*", "")
                && super::glob("a*", "a")
                && !super::glob("a*b", "ab-")
                && super::glob("a*b*b", "abb")
        );
        // Exposed URIs name their server, and route back by it.
        assert_eq!(
            c.exposed_uri("parts", "manual://ac250/{section}"),
            "toolgate://parts/manual://ac250/{section}"
        );
        assert_eq!(
            c.split_uri("toolgate://parts/manual://ac250/intro"),
            Some(("parts", "manual://ac250/intro"))
        );
        assert_eq!(c.split_uri("toolgate://nobody/x"), None);
        assert_eq!(c.split_uri("manual://ac250/intro"), None);
        // A read cannot wait for a human; the servers must exist.
        let err = |t: &str| parse(t).unwrap_err().to_string();
        assert!(
            err("[servers.parts]\ncommand = \"x\"\n[registry_prompts.\"parts__p\"]\nclass = \
                \"requires_approval\"")
            .contains("`automatic` or `prohibited`")
        );
        assert!(
            err("[servers.parts]\ncommand = \"x\"\n[[registry_resources]]\nserver = \
                \"tickets\"\nuri = \"*\"\nclass = \"automatic\"")
            .contains("`tickets`, which is not configured")
        );
        assert!(
            err("[servers.parts]\ncommand = \"x\"\n[registry_prompts.\"other__p\"]\nclass = \
                \"automatic\"")
            .contains("names no configured server")
        );
    }
}
