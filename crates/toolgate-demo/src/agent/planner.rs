//! Who chooses the next tool calls: a model behind any OpenAI-compatible
//! Chat Completions endpoint (tools offered as functions), or a scripted
//! plan (`--plan FILE`) that runs the same loop without any model.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use serde::Deserialize;
use serde_json::{Value, json};

/// One call the planner wants made.
pub struct ToolCall {
    /// The model's id for it (the tool message answers it).
    pub id: String,
    /// The exposed tool name.
    pub name: String,
    /// The arguments, or the model's text when it is no JSON object.
    pub arguments: Result<Value, String>,
    /// A plan's expected outcome (`ran`, `correct`, `escalate`, …).
    pub expect: Option<String>,
}

/// The planner's next move.
pub enum Turn {
    /// Make these calls; `assistant` is the message to keep in the history.
    Calls { assistant: Value, calls: Vec<ToolCall> },
    /// The task is done: the final answer.
    Done(String),
}

pub enum Planner {
    Model(Model),
    Plan(Plan),
}

impl Planner {
    pub async fn next(&mut self, messages: &[Value], tools: &[Value]) -> anyhow::Result<Turn> {
        match self {
            Planner::Model(m) => m.next(messages, tools).await,
            Planner::Plan(p) => Ok(p.next()),
        }
    }

    /// Tokens the model has used so far (a plan uses none).
    pub fn tokens(&self) -> u64 {
        match self {
            Planner::Model(m) => m.tokens,
            Planner::Plan(_) => 0,
        }
    }
}

/// The most of a model's answer read: one turn's message and tool calls are
/// kilobytes; 8 MiB is far past any real one.
const MAX_ANSWER: usize = 8 << 20;

/// An OpenAI-compatible Chat Completions endpoint.
pub struct Model {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Option<String>,
    tokens: u64,
    /// Function names the API accepts (`^[a-zA-Z0-9_-]{1,64}$`) → exposed names.
    names: BTreeMap<String, String>,
}

impl Model {
    pub fn new(base_url: &str, model: &str, key: Option<String>) -> anyhow::Result<Self> {
        // No redirect: it would carry the API key to a place not configured.
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(300))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        Ok(Self { http, url, model: model.to_string(), key, tokens: 0, names: BTreeMap::new() })
    }

    /// The gateway's tools as the API's functions.
    fn functions(&mut self, tools: &[Value]) -> Vec<Value> {
        tools
            .iter()
            .filter_map(|t| {
                let exposed = t["name"].as_str()?;
                let mut name: String = exposed.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).take(64).collect();
                while self.names.get(&name).is_some_and(|other| other != exposed) {
                    name.pop();
                    name.push('x');
                }
                self.names.insert(name.clone(), exposed.to_string());
                let description = t["description"].as_str().unwrap_or_default();
                Some(json!({"type": "function", "function": {"name": name, "description": description, "parameters": t["inputSchema"]}}))
            })
            .collect()
    }

    async fn next(&mut self, messages: &[Value], tools: &[Value]) -> anyhow::Result<Turn> {
        let functions = self.functions(tools);
        let body = json!({"model": self.model, "messages": messages, "tools": functions, "tool_choice": "auto"});
        let mut req = self.http.post(&self.url).json(&body);
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("the model at {} cannot be reached", self.url))?;
        let status = resp.status();
        if !status.is_success() {
            let said = toolgate_mcp::body::read_head(resp, 1024).await;
            bail!(
                "the model answered HTTP {status}: {}",
                toolgate_core::visible::visible(said.trim()).chars().take(300).collect::<String>()
            );
        }
        let text = toolgate_mcp::body::read_limited(resp, MAX_ANSWER, "the model's answer").await?;
        let text = String::from_utf8(text).context("the model's answer is not UTF-8")?;
        let answer: Value =
            serde_json::from_str(&text).context("the model's answer is not JSON")?;
        self.tokens += answer["usage"]["total_tokens"].as_u64().unwrap_or(0);
        let message = answer["choices"][0]["message"].clone();
        if message.is_null() {
            bail!("the model's answer has no choices[0].message");
        }
        let calls: Vec<ToolCall> = message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let name = c["function"]["name"].as_str().unwrap_or_default();
                let raw = c["function"]["arguments"].as_str().unwrap_or("{}");
                let arguments = match serde_json::from_str::<Value>(raw) {
                    Ok(v @ Value::Object(_)) => Ok(v),
                    _ => Err(raw.to_string()),
                };
                ToolCall {
                    id: c["id"].as_str().unwrap_or_default().to_string(),
                    name: self.names.get(name).cloned().unwrap_or_else(|| name.to_string()),
                    arguments,
                    expect: None,
                }
            })
            .collect();
        if calls.is_empty() {
            return Ok(Turn::Done(message["content"].as_str().unwrap_or_default().to_string()));
        }
        Ok(Turn::Calls { assistant: message, calls })
    }
}

/// A scripted plan: the steps, each with the outcome it expects, then the answer.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The task, when `--task` is not given.
    pub task: Option<String>,
    #[serde(default, rename = "step")]
    steps: Vec<Step>,
    /// The final answer once every step ran.
    #[serde(default)]
    answer: String,
    #[serde(skip)]
    at: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    tool: String,
    #[serde(default)]
    arguments: toml::Table,
    /// `ran`, `correct`, `escalate`, `refused`, `reconcile`, `tool_error`.
    expect: Option<String>,
}

impl Plan {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the plan {}", path.display()))?;
        let plan: Plan = toml::from_str(&text).with_context(|| {
            format!("{}: not a plan ([[step]] tool, arguments, expect; answer)", path.display())
        })?;
        if plan.steps.is_empty() {
            bail!("{}: the plan has no [[step]]", path.display());
        }
        Ok(plan)
    }

    fn next(&mut self) -> Turn {
        let Some(step) = self.steps.get(self.at) else { return Turn::Done(self.answer.clone()) };
        self.at += 1;
        let id = format!("step-{}", self.at);
        let arguments = serde_json::to_value(&step.arguments).unwrap_or_default();
        let assistant = json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": step.tool, "arguments": arguments.to_string()}}]});
        Turn::Calls {
            assistant,
            calls: vec![ToolCall {
                id,
                name: step.tool.clone(),
                arguments: Ok(arguments),
                expect: step.expect.clone(),
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_become_functions_under_names_the_api_accepts_and_map_back() {
        let mut model = Model::new("http://127.0.0.1:9/v1/", "m", None).unwrap();
        assert_eq!(model.url, "http://127.0.0.1:9/v1/chat/completions");
        let tools = vec![
            json!({"name": "tickets__get_ticket", "description": "d", "inputSchema": {"type": "object"}}),
            json!({"name": "files/read.v2", "inputSchema": {"type": "object"}}),
            json!({"name": "files_read_v2", "inputSchema": {"type": "object"}}),
        ];
        let functions = model.functions(&tools);
        let names: Vec<&str> =
            functions.iter().map(|f| f["function"]["name"].as_str().unwrap()).collect();
        assert_eq!(names[0], "tickets__get_ticket");
        // Sanitized, and never two tools under one function name.
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')),
            "{names:?}"
        );
        assert_ne!(names[1], names[2]);
        assert_eq!(model.names[names[1]], "files/read.v2");
        assert_eq!(model.names[names[2]], "files_read_v2");
        assert_eq!(functions[0]["function"]["parameters"], json!({"type": "object"}));
    }

    #[test]
    fn a_plan_plays_its_steps_in_order_then_answers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.toml");
        std::fs::write(
            &path,
            "task = \"t\"\nanswer = \"done\"\n[[step]]\ntool = \"a__b\"\narguments = { x = \
                1 }\nexpect = \"correct\"\n[[step]]\ntool = \"a__c\"\n",
        )
        .unwrap();
        let mut plan = Plan::load(&path).unwrap();
        assert_eq!(plan.task.as_deref(), Some("t"));
        let Turn::Calls { assistant, calls } = plan.next() else { panic!("a step") };
        assert_eq!((calls[0].name.as_str(), calls[0].expect.as_deref()), ("a__b", Some("correct")));
        assert_eq!(calls[0].arguments.as_ref().unwrap(), &json!({"x": 1}));
        assert_eq!(assistant["tool_calls"][0]["id"], calls[0].id);
        let Turn::Calls { calls, .. } = plan.next() else { panic!("a step") };
        assert_eq!((calls[0].name.as_str(), calls[0].expect.as_deref()), ("a__c", None));
        assert!(matches!(plan.next(), Turn::Done(a) if a == "done"));
        // A plan without steps, or with an unknown key, says what a plan is.
        std::fs::write(&path, "answer = \"x\"\n").unwrap();
        assert!(Plan::load(&path).err().unwrap().to_string().contains("no [[step]]"));
        std::fs::write(&path, "[[step]]\ntool = \"a\"\nexpct = \"ran\"\n").unwrap();
        assert!(format!("{:#}", Plan::load(&path).err().unwrap()).contains("expct"));
    }
}
