//! `toolgate audit --suggest` against the real tools of the official MCP
//! reference servers (`fixtures/reference_tools.json`: each definition as
//! its server listed it, the class a careful operator would give it, and
//! why). Prints precision and recall per class and every miss, with the
//! audit's reasons and the operator's; the overall precision must stay at
//! or above its floor, and every miss where the audit is laxer than the
//! operator must be one this file lists and explains.

use std::collections::BTreeMap;

use serde_json::Value;
use toolgate_core::AuthorityClass;
use toolgate_core::audit::{Entry, Inventory, audit};

const CORPUS: &str = include_str!("fixtures/reference_tools.json");

/// The share of tools whose suggested class is the operator's. The code
/// measures 91.7 % (111 of 121; 79.3 % before the audit read past a
/// server's prefix): a change that loses one tool falls below the floor.
const PRECISION_FLOOR: f64 = 0.91;

/// Tools where the audit suggests a laxer class than the operator gives,
/// each with why the audit cannot see it from the definition. A new laxer
/// miss fails the test; so does one listed here that no longer misses
/// (take it off the list).
const LAXER_MISSES: &[(&str, &str)] = &[
    (
        "everything__get-env",
        "a read by its name and its hints; that what it reads is the server's secrets is only in the description's prose",
    ),
    (
        "postgres__query",
        "the server calls its SQL read-only, and the escape (COMMIT; …) is in its code, not its definition",
    ),
];

fn rank(c: AuthorityClass) -> u8 {
    match c {
        AuthorityClass::Automatic => 0,
        AuthorityClass::RequiresApproval => 1,
        AuthorityClass::Prohibited => 2,
    }
}

struct Case {
    name: String,
    expected: AuthorityClass,
    why: String,
}

fn corpus() -> (Inventory, Vec<Case>) {
    let corpus: Value = serde_json::from_str(CORPUS).unwrap();
    let mut inventory = Inventory::default();
    let mut cases = Vec::new();
    for server in corpus["servers"].as_array().unwrap() {
        let name = server["server"].as_str().unwrap();
        for t in ["package", "version", "command", "listed"] {
            assert!(!server[t].is_null(), "{name}: say where its definitions came from ({t})");
        }
        for tool in server["tools"].as_array().unwrap() {
            let definition = tool["definition"].clone();
            let tool_name = definition["name"].as_str().unwrap().to_string();
            let exposed = format!("{name}__{tool_name}");
            let expected: AuthorityClass = tool["expected"]
                .as_str()
                .unwrap_or_else(|| panic!("{exposed}: no expected class: judge it"))
                .parse()
                .unwrap();
            let why = tool["why"].as_str().unwrap_or_default().to_string();
            assert!(!why.is_empty(), "{exposed}: say why it is {}", expected.as_str());
            inventory.tools.push(Entry {
                name: exposed.clone(),
                server: name.into(),
                tool: tool_name,
                definition,
                pinned: None,
                registry_class: None,
                labels: vec![],
            });
            cases.push(Case { name: exposed, expected, why });
        }
    }
    (inventory, cases)
}

#[test]
fn the_audit_suggests_the_class_a_careful_operator_gives_the_reference_servers_tools() {
    let (inventory, cases) = corpus();
    assert!(
        cases.len() >= 100,
        "the corpus holds every tool of the reference servers: {}",
        cases.len()
    );
    let report = audit(&inventory);
    let by_name: BTreeMap<&str, _> = report.regret.iter().map(|r| (r.tool.as_str(), r)).collect();
    let classes =
        [AuthorityClass::Automatic, AuthorityClass::RequiresApproval, AuthorityClass::Prohibited];
    // Per class: (true positives, false negatives, false positives).
    let mut counts: BTreeMap<u8, (usize, usize, usize)> = BTreeMap::new();
    let (mut right, mut laxer, mut stricter) = (0, Vec::new(), Vec::new());
    let mut per_server: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for case in &cases {
        let r = by_name[case.name.as_str()];
        let suggested = r.suggested_class;
        let server = case.name.split("__").next().unwrap();
        let s = per_server.entry(server).or_default();
        s.1 += 1;
        if suggested == case.expected {
            right += 1;
            s.0 += 1;
            counts.entry(rank(suggested)).or_default().0 += 1;
            continue;
        }
        counts.entry(rank(case.expected)).or_default().1 += 1;
        counts.entry(rank(suggested)).or_default().2 += 1;
        let line = format!(
            "{}: expected {}, suggested {} (regret {}: {})\n      operator: {}",
            case.name,
            case.expected.as_str(),
            suggested.as_str(),
            r.score,
            r.reasons.join("; "),
            case.why
        );
        if rank(suggested) < rank(case.expected) {
            laxer.push((case.name.as_str(), line))
        } else {
            stricter.push(line)
        }
    }
    println!(
        "{:<18} {:>4} {:>4} {:>4} {:>9} {:>7}",
        "class", "tp", "fn", "fp", "precision", "recall"
    );
    for c in classes {
        let (t, n, p) = counts.get(&rank(c)).copied().unwrap_or_default();
        let pct = |a: usize, b: usize| {
            if b == 0 { "-".to_string() } else { format!("{:.0}%", a as f64 * 100.0 / b as f64) }
        };
        println!(
            "{:<18} {t:>4} {n:>4} {p:>4} {:>9} {:>7}",
            c.as_str(),
            pct(t, t + p),
            pct(t, t + n)
        );
    }
    let precision = right as f64 / cases.len() as f64;
    println!(
        "{:<18} {right:>4} of {} tools suggested as the operator classes them: precision {:.1}% (floor {:.0}%)",
        "all",
        cases.len(),
        precision * 100.0,
        PRECISION_FLOOR * 100.0
    );
    println!(
        "by server: {}",
        per_server.iter().map(|(s, (r, n))| format!("{s} {r}/{n}")).collect::<Vec<_>>().join(", ")
    );
    println!("misses where the audit is laxer than the operator ({}):", laxer.len());
    laxer.iter().for_each(|(_, l)| println!("  {l}"));
    println!("misses where the audit is stricter than the operator ({}):", stricter.len());
    stricter.iter().for_each(|l| println!("  {l}"));

    assert!(
        precision >= PRECISION_FLOOR,
        "precision {:.1}% fell below its floor {:.0}%",
        precision * 100.0,
        PRECISION_FLOOR * 100.0
    );
    let unlisted: Vec<&String> = laxer
        .iter()
        .filter(|(n, _)| !LAXER_MISSES.iter().any(|(l, _)| l == n))
        .map(|(_, l)| l)
        .collect();
    assert!(
        unlisted.is_empty(),
        "the audit is laxer than the operator on tools this test does not list and explain: {unlisted:#?}"
    );
    let fixed: Vec<&str> = LAXER_MISSES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !laxer.iter().any(|(l, _)| l == n))
        .collect();
    assert!(
        fixed.is_empty(),
        "no longer laxer than the operator (take them off LAXER_MISSES): {fixed:?}"
    );
}

/// The lead verb is never a server's name or a prefix its tools share, and
/// a `target` that names a revision or a path is not a recipient.
#[test]
fn the_verb_is_read_past_the_servers_prefix_and_a_revision_is_no_recipient() {
    let (inventory, _) = corpus();
    let report = audit(&inventory);
    for r in &report.regret {
        let (server, tool) = r.tool.split_once("__").unwrap();
        let verb = r.reasons[0].split('`').nth(1).unwrap_or_default();
        let words: Vec<&str> = tool.split(['_', '-']).collect();
        let siblings: Vec<&Entry> = inventory.tools.iter().filter(|e| e.server == server).collect();
        let shared = siblings.len() > 1
            && siblings.iter().all(|e| e.tool.split(['_', '-']).next() == Some(words[0]));
        if words.len() > 1 && (server.split('-').any(|w| w == words[0]) || shared) {
            assert_ne!(
                verb, words[0],
                "{}: the prefix `{verb}` read as the verb: {:?}",
                r.tool, r.reasons
            );
        }
    }
    let diff = report.regret.iter().find(|r| r.tool == "git__git_diff").unwrap();
    assert!(
        !diff.reasons.iter().any(|x| x.contains("recipient")),
        "git_diff's `target` is a branch or commit: {:?}",
        diff.reasons
    );
    assert_eq!(diff.suggested_class, AuthorityClass::Automatic, "{:?}", diff.reasons);
    let status = report.regret.iter().find(|r| r.tool == "git__git_status").unwrap();
    assert!(status.reasons[0].contains("`status`"), "{:?}", status.reasons);
}
