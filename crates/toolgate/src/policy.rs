//! `toolgate policy check|test`: the Cedar policy set on its own, offline.
//! `check` validates policies against the schema (as the gateway's start
//! does); `test` runs table-driven decision cases through the same decide
//! step the gateway uses, and fails if any case decides otherwise.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::Deserialize;
use serde_json::Value;
use toolgate_core::decision::decide;
use toolgate_core::policy::ToolFacts;
use toolgate_core::{AuthorityClass, AuthorityView, Caller, Hints, Verdict};
use toolgate_gateway::config::Config;
use toolgate_gateway::process::load_policy;

#[derive(clap::Subcommand)]
pub enum Action {
    /// Validate the policy set against its schema; print its version.
    Check {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Run decision cases (a TOML file of [[case]] tables) and report each.
    Test {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        cases: PathBuf,
    },
}

/// One decision test.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    /// A [callers] key.
    caller: String,
    /// The exposed name, SERVER__TOOL.
    tool: String,
    #[serde(default = "empty_object")]
    arguments: Value,
    /// The tool's class when the registry does not name it.
    class: Option<AuthorityClass>,
    /// `context.approval` (default `none`).
    #[serde(default = "none")]
    approval: String,
    expect: Verdict,
    /// The deciding rules, when the case pins them.
    rules: Option<Vec<String>>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn none() -> String {
    "none".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cases {
    case: Vec<Case>,
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::Check { config } => {
            let config = crate::serve::load_config(&config, None)?;
            let engine = load_policy(&config)?;
            match &config.policy {
                Some(p) => println!(
                    "policy OK: {} validates against {}",
                    p.policies.display(),
                    p.schema.display()
                ),
                None => println!("no [policy] configured: the registry decides every call"),
            }
            println!("policy version: {}", engine.version());
            Ok(())
        }
        Action::Test { config, cases } => test(&config, &cases),
    }
}

fn test(config: &Path, cases: &Path) -> anyhow::Result<()> {
    let config = crate::serve::load_config(config, None)?;
    let engine = load_policy(&config)?;
    let text = std::fs::read_to_string(cases)
        .with_context(|| format!("cannot read {}", cases.display()))?;
    let cases: Cases = toml::from_str(&text)
        .with_context(|| format!("{} is not a cases file ([[case]] tables)", cases.display()))?;
    let mut failed = 0;
    for case in &cases.case {
        let got = evaluate(&config, &engine, case);
        let ok = match &got {
            Ok(d) => d.verdict == case.expect && case.rules.as_ref().is_none_or(|r| *r == d.rules),
            Err(_) => false,
        };
        failed += usize::from(!ok);
        let what = match &got {
            Ok(d) => format!(
                "{} ({})",
                serde_json::to_value(d.verdict)?.as_str().unwrap_or("?"),
                d.rules.join(", ")
            ),
            Err(e) => format!("error: {e:#}"),
        };
        let want = serde_json::to_value(case.expect)?;
        println!(
            "{} {:<44} expected {:<17} got {what}",
            if ok { "ok  " } else { "FAIL" },
            case.name,
            want.as_str().unwrap_or("?")
        );
    }
    println!(
        "\n{} cases, {} failed (policy version {})",
        cases.case.len(),
        failed,
        engine.version()
    );
    if failed > 0 {
        bail!("{failed} policy case(s) failed");
    }
    Ok(())
}

fn evaluate(
    config: &Config,
    engine: &toolgate_core::policy::PolicyEngine,
    case: &Case,
) -> anyhow::Result<toolgate_core::Decision> {
    let Some(c) = config.callers.get(&case.caller) else {
        bail!("caller `{}` is not a [callers] entry", case.caller)
    };
    let caller = Caller {
        name: case.caller.clone(),
        subject: c.subject.clone().unwrap_or_else(|| case.caller.clone()),
        tenant: c.tenant.clone(),
        roles: c.roles.clone(),
    };
    let Some((server, name)) = config.split_exposed(&case.tool) else {
        bail!("`{}` names no configured server", case.tool)
    };
    let entry = config.registry.get(&case.tool);
    let registry = entry.map(|e| e.class).or(case.class);
    let trusted = config.servers.get(server).is_some_and(|s| s.trusted);
    if registry.is_none() && trusted {
        bail!(
            "`{}` is not in the registry and its server is trusted: give the case a `class` (its hints are only known live)",
            case.tool
        );
    }
    let view = AuthorityView::new(Hints::from_annotations(None), registry, trusted);
    let labels = entry.map(|e| e.labels.clone()).unwrap_or_default();
    let facts = ToolFacts {
        exposed_name: &case.tool,
        server,
        name,
        class: view.effective_class.as_str(),
        labels: &labels,
    };
    Ok(decide(&view, &engine.evaluate(&caller, &facts, &case.arguments, &case.approval)))
}
