//! `toolgate config check FILE`: every problem of a config at once, each
//! with its line and what to do — the TOML, then the schema (`toolgate
//! config schema`: unknown keys with the nearest known one, wrong types and
//! values), then, once those are fixed, each refusal of the gateway's own
//! reading of it (servers the registry names, credentials in one place, …)
//! and the console's of its `[console]`.

use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;
use toolgate_console::ConsoleConfig;
use toolgate_core::visible::visible;
use toolgate_gateway::config::Config;

/// The JSON Schema of a whole config file (`toolgate config schema`): the
/// gateway's, with the console's own schema of `[console]` in the place
/// the gateway keeps for it (a table, under the name of the console's
/// definition).
pub fn schema() -> schemars::Schema {
    let mut schema = schemars::schema_for!(Config);
    let mut console = schemars::SchemaGenerator::default();
    console.subschema_for::<ConsoleConfig>();
    if let Some(defs) = schema.get_mut("$defs").and_then(Value::as_object_mut) {
        defs.extend(console.take_definitions(true));
    }
    schema
}

/// Checks `path`; `Ok(n)` is the number of problems printed.
pub fn run(path: &Path) -> anyhow::Result<usize> {
    let problems = problems(path)?;
    print!("{}", report(path, &problems));
    Ok(problems.len())
}

/// What `run` prints. A config may come from elsewhere (a cloned
/// repository): its keys, named in the messages, are shown visibly, never
/// as terminal controls.
fn report(path: &Path, problems: &[(usize, String)]) -> String {
    let shown = path.display().to_string();
    let shown = visible(&shown);
    if problems.is_empty() {
        return format!("{shown}: no problem found\n");
    }
    problems
        .iter()
        .map(|(line, message)| format!("{shown}:{line}: {}\n", visible(message)))
        .collect()
}

/// Every problem of `path`, by line.
fn problems(path: &Path) -> anyhow::Result<Vec<(usize, String)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = match toml::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            let line =
                e.span().map_or(1, |s| text[..s.start.min(text.len())].lines().count().max(1));
            return Ok(vec![(line, format!("not TOML: {}", e.message()))]);
        }
    };
    let schema = serde_json::to_value(schema())?;
    let validator = jsonschema::validator_for(&schema).context("the config's schema")?;
    let mut problems: Vec<(usize, String)> = Vec::new();
    for e in validator.iter_errors(&value) {
        let mut at: Vec<String> = e.instance_path().into_iter().map(|s| s.to_string()).collect();
        let message = match e.kind() {
            jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                let known = keys_at(&schema, &at);
                let names: Vec<String> = unexpected
                    .iter()
                    .map(|k| match nearest(k, &known) {
                        Some(n) => format!("`{k}` is not a key here; did you mean `{n}`?"),
                        None => {
                            format!("`{k}` is not a key here; the keys are: {}", known.join(", "))
                        }
                    })
                    .collect();
                at.extend(unexpected.iter().take(1).cloned());
                names.join(" ")
            }
            // The value itself is never shown: it may be a credential.
            jsonschema::error::ValidationErrorKind::Type { kind } => format!(
                "`{}` must be {}",
                at.join("."),
                match kind {
                    jsonschema::error::TypeKind::Single(t) => t.to_string(),
                    jsonschema::error::TypeKind::Multiple(ts) => ts
                        .iter()
                        .map(|t| t.to_string())
                        .filter(|t| t != "null")
                        .collect::<Vec<_>>()
                        .join(" or "),
                }
            ),
            _ => match values_at(&schema, &at) {
                allowed if !allowed.is_empty() => {
                    format!("`{}` must be one of: {}", at.join("."), allowed.join(", "))
                }
                _ => format!(
                    "`{}` does not satisfy the schema's `{}` (see `toolgate config schema` or docs/CONFIG.md)",
                    at.join("."),
                    e.kind().keyword()
                ),
            },
        };
        problems.push((line_of(&text, &at), message));
    }
    // The gateway's own reading, once the shape is right, and the console's
    // of `[console]`: each refusal.
    if problems.is_empty() {
        let gateway = Config::parse_all(&text, path).err().unwrap_or_default();
        let console = ConsoleConfig::parse(&text, path).err();
        for e in gateway.into_iter().chain(console) {
            let message = e.to_string();
            let message = message.split_once(": ").map_or(message.as_str(), |(_, m)| m).to_string();
            problems.push((line_of_message(&text, &message), message));
        }
    }
    problems.sort();
    Ok(problems)
}

/// The schema of the value at `at` (an instance path), following `$ref`s.
fn node_at<'a>(schema: &'a Value, at: &[String]) -> Option<&'a Value> {
    fn resolve<'a>(schema: &'a Value, mut node: &'a Value) -> &'a Value {
        while let Some(r) = node.get("$ref").and_then(Value::as_str) {
            let Some(name) = r.strip_prefix("#/$defs/") else { break };
            node = &schema["$defs"][name];
        }
        // `Option<T>` is `anyOf [T, null]`: the T side.
        match node
            .get("anyOf")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|s| s.get("type") != Some(&Value::from("null"))))
        {
            Some(side) if node.get("properties").is_none() => resolve(schema, side),
            _ => node,
        }
    }
    let mut node = resolve(schema, schema);
    for segment in at {
        node = resolve(
            schema,
            match (
                node.get("properties").and_then(|p| p.get(segment)),
                node.get("additionalProperties"),
                node.get("items"),
            ) {
                (Some(next), _, _) => next,
                (None, Some(next @ Value::Object(_)), _) => next,
                (None, _, Some(items)) => items,
                _ => return None,
            },
        );
    }
    Some(node)
}

/// The keys the schema allows at `at`.
fn keys_at(schema: &Value, at: &[String]) -> Vec<String> {
    node_at(schema, at)
        .and_then(|n| n.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// The values the schema allows at `at`, when it lists them (an enum).
fn values_at(schema: &Value, at: &[String]) -> Vec<String> {
    let Some(node) = node_at(schema, at) else { return Vec::new() };
    let listed =
        node.get("enum").and_then(Value::as_array).cloned().unwrap_or_default().into_iter();
    let variants =
        node.get("oneOf").and_then(Value::as_array).into_iter().flatten().flat_map(|v| {
            v.get("const")
                .cloned()
                .into_iter()
                .chain(v.get("enum").and_then(Value::as_array).cloned().unwrap_or_default())
        });
    listed.chain(variants).filter_map(|v| v.as_str().map(str::to_string)).collect()
}

/// The known key nearest to `key` (at most two edits away).
fn nearest(key: &str, known: &[String]) -> Option<String> {
    known.iter().map(|k| (edits(key, k), k)).filter(|(d, _)| *d <= 2).min().map(|(_, k)| k.clone())
}

fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut last = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(last + usize::from(ca != *cb));
            last = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The line of the key at `at` (table headers and `key =` lines; list
/// indexes are skipped), else of the nearest table it is in, else 1.
fn line_of(text: &str, at: &[String]) -> usize {
    let at: Vec<&str> =
        at.iter().map(String::as_str).filter(|s| s.parse::<usize>().is_err()).collect();
    let mut table: Vec<String> = Vec::new();
    let mut best = (0, 1);
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        let found: Vec<String> = if t.starts_with('[') {
            table = path(t.trim_start_matches('[').split(']').next().unwrap_or_default());
            table.clone()
        } else if let Some((key, _)) = t.split_once('=').filter(|_| !t.starts_with('#')) {
            table.iter().cloned().chain(path(key.trim())).collect()
        } else {
            continue;
        };
        let matched = found.iter().zip(&at).take_while(|(a, b)| a == *b).count();
        if matched == found.len() && matched > best.0 {
            best = (matched, n + 1);
        }
    }
    best.1
}

/// A dotted TOML key as its parts, quotes removed.
fn path(dotted: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut quoted = false;
    for c in dotted.chars() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(String::new()),
            c if quoted || !c.is_whitespace() => parts.last_mut().expect("one part").push(c),
            _ => {}
        }
    }
    parts
}

/// The line a gateway refusal is about: the first `servers.NAME`-like or
/// quoted name in it that the file mentions.
fn line_of_message(text: &str, message: &str) -> usize {
    let names = message
        .split(['`', ' ', ':'])
        .filter(|w| w.len() > 2 && (w.contains('.') || w.contains("__")));
    for name in names {
        let line = line_of(text, &path(name));
        if line > 1 {
            return line;
        }
        // A name the file writes as a key of a table (`[registry."a__t"]`).
        if let Some(n) =
            text.lines().position(|l| !l.trim_start().starts_with('#') && l.contains(name))
        {
            return n + 1;
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_found_with_its_line() {
        let text = "[gateway]\nlisten_addr = \"127.0.0.1:1\"\n\n[servers.a]\ncommand = \
            \"x\"\ntimeout_ms = \"soon\"\n\n[registry.\"a__t\"]\nclass = \"sometimes\"\n";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolgate.toml");
        std::fs::write(&file, text).unwrap();
        assert_eq!(run(&file).unwrap(), 3);
        let secret = dir.path().join("secret.toml");
        std::fs::write(
            &secret,
            "[servers.a]\nurl = \"http://h/mcp\"\nheaders = \"Bearer s3cret\"\n",
        )
        .unwrap();
        let found = problems(&secret).unwrap();
        assert_eq!(
            found,
            [(3, "`servers.a.headers` must be object".to_string())],
            "a value of the wrong type is named by its key, never shown"
        );
        let schema = serde_json::to_value(schema()).unwrap();
        assert_eq!(
            values_at(&schema, &["registry".into(), "a__t".into(), "class".into()]),
            ["automatic", "requires_approval", "prohibited"]
        );
        assert!(keys_at(&schema, &["tls".into()]).contains(&"cert_file".to_string()));
        assert!(
            keys_at(&schema, &["console".into()]).contains(&"session_ttl_s".to_string()),
            "the console's own schema, in the place the gateway keeps for it"
        );
        let unknown_server =
            "[servers.a]\ncommand = \"x\"\n\n[registry.\"b__t\"]\nclass = \"automatic\"\n";
        assert_eq!(
            line_of_message(unknown_server, "registry entry `b__t` names no configured server"),
            4
        );
        // The gateway's refusals, all of them.
        let refused = dir.path().join("refused.toml");
        std::fs::write(
            &refused,
            "[servers.a]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n\n[registry.\"b__t\"]\nclass = \
                \"automatic\"\n\n[runs]\nttl_ms = 0\n",
        )
        .unwrap();
        let found = problems(&refused).unwrap();
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [1, 5, 9], "{found:?}");
        assert_eq!(line_of(text, &["gateway".into(), "listen_addr".into()]), 2);
        assert_eq!(line_of(text, &["servers".into(), "a".into(), "timeout_ms".into()]), 6);
        assert_eq!(line_of(text, &["registry".into(), "a__t".into(), "class".into()]), 9);
        assert_eq!(
            nearest("listen_addr", &["listen".into(), "separator".into()]),
            None,
            "five edits away"
        );
        assert_eq!(
            nearest("lissten", &["listen".into(), "separator".into()]).as_deref(),
            Some("listen")
        );
    }

    /// `[console]` is the console's to read: the gateway keeps it unread,
    /// and what the console refuses is a problem of the file as well.
    #[test]
    fn a_console_section_the_console_refuses_is_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolgate.toml");
        std::fs::write(&file, "[console]\nenabled = false\n").unwrap();
        assert!(problems(&file).unwrap().is_empty());
        std::fs::write(&file, "[console]\nlisten = \"nowhere\"\n").unwrap();
        let found = problems(&file).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].1.contains("invalid socket address syntax"), "{found:?}");
        std::fs::write(&file, "[console]\nlisen = \"127.0.0.1:1\"\n").unwrap();
        assert_eq!(
            problems(&file).unwrap(),
            [(2, "`lisen` is not a key here; did you mean `listen`?".to_string())]
        );
    }

    #[test]
    fn a_key_holding_terminal_controls_is_reported_visibly() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolgate.toml");
        std::fs::write(&file, "[gateway]\n\"evil\\u001b[2J\\u0007\\r\\u202e\" = 1\n").unwrap();
        let shown = report(&file, &problems(&file).unwrap());
        assert!(shown.contains("evil\\u{1b}[2J\\u{7}\\u{d}\\u{202e}"), "{shown}");
        assert!(
            !shown.chars().any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{shown:?}"
        );
    }

    #[test]
    fn a_credential_written_into_a_url_is_refused_with_where_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolgate.toml");
        std::fs::write(&file, "[servers.search]\nurl = \"https://dana:s3cret@search.example/mcp?Api-Key=k3y&region=eu\"\n").unwrap();
        let found = problems(&file).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        let (line, message) = &found[0];
        assert_eq!(*line, 1);
        assert!(
            message.contains("url holds a credential")
                && message.contains("`Api-Key`")
                && message.contains("query_file")
                && message.contains("headers_file"),
            "{message}"
        );
        assert!(
            !message.contains("s3cret") && !message.contains("k3y"),
            "no value is shown: {message}"
        );
    }
}
