//! Shared fixtures for the stage tests: tools built the way the catalog
//! builds them, a caller and its call, a ledger in a temp dir with a fixed
//! clock and seeded entropy, and an MCP upstream over HTTP in this process
//! (for the stages that need a live catalog or a live dispatch).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header::CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_core::receipt::ReceiptKey;
use toolgate_core::receipt::build::{Event, Subject, build};
use toolgate_core::schema::SchemaValidator;
use toolgate_core::{
    AuthorityClass, AuthorityView, Caller, Clock, FixedClock, Hints, Refusal, SeededEntropy,
};
use toolgate_ledger::{Draft, Ledger};

use crate::call::{Call, CallRequest, Stop};
use crate::catalog::{Catalogs, ExposedTool};
use crate::config::Config;
use crate::pins::{PinStatus, PinStore};
use crate::seal::Sealer;
use toolgate_mcp::upstream::{Upstream, UpstreamTool};
use toolgate_mcp::wire::{Era, Id, RawObject, RpcError};

/// The demo's Cedar schema, cut down to what the tests' policies read.
pub const SCHEMA: &str = r#"
    entity Role;
    entity Caller in [Role] = { subject: String, tenant: String };
    entity Tool = { server: String, name: String, class: String, labels: Set<String> };
    type Arguments = { to?: String, quantity?: Long };
    action call_tool appliesTo { principal: [Caller], resource: [Tool], context: { arguments: Arguments, approval: String } };
"#;

/// A gateway that never begins to shut down.
pub fn never_draining() -> &'static CancellationToken {
    static NEVER: std::sync::LazyLock<CancellationToken> =
        std::sync::LazyLock::new(CancellationToken::new);
    &NEVER
}

/// A registry of cancellable calls no client ever cancels through.
pub(crate) fn no_cancels() -> &'static crate::cancels::Cancels {
    static NONE: std::sync::LazyLock<crate::cancels::Cancels> =
        std::sync::LazyLock::new(Default::default);
    &NONE
}

/// Where every fixed clock starts (2026-11-30T…Z): an instant, not "now".
pub const NOW_MS: i64 = 1_796_000_000_000;

/// The agent of tenant `atlas`, as its credentials map it.
pub fn agent() -> Arc<Caller> {
    Arc::new(Caller {
        name: "agent".into(),
        subject: "agent-7".into(),
        tenant: "atlas".into(),
        roles: vec!["agent".into()],
    })
}

/// A 2026-07-28 `tools/call` of `name` by the agent, presenting nothing.
pub fn call(name: &str, arguments: Value) -> CallRequest {
    let call = Call {
        kind: toolgate_mcp::upstream::Kind::Tool,
        name: name.to_string(),
        arguments,
        progress: None,
        client: None,
        input: Map::new(),
        operation_key: None,
        client_capabilities: None,
        preview: false,
        deadline_ms: None,
        run: None,
        session: None,
        inbound_token: None,
        cancelled: Default::default(),
    };
    CallRequest {
        caller: agent(),
        trace: Default::default(),
        request_id: Some(Id::Number(7)),
        era: Era::Modern,
        call,
    }
}

/// `c` split as admit splits it, on the fixed clock at `NOW_MS`.
pub fn split(c: &CallRequest) -> (crate::call::Context, crate::call::Call) {
    split_at(c, &toolgate_core::FixedClock::new(NOW_MS))
}

/// `c` split as admit splits it, beginning when `clock` says.
pub fn split_at(
    c: &CallRequest,
    clock: &dyn toolgate_core::Clock,
) -> (crate::call::Context, crate::call::Call) {
    crate::stages::admit::context(c.clone(), clock)
}

/// A tool as `Catalog::build` exposes it: `definition` as the upstream
/// lists it, `class` the registry's (`None`: not in the registry), from an
/// untrusted server, its contract pinned.
pub fn tool(server: &str, definition: Value, class: Option<AuthorityClass>) -> ExposedTool {
    let name = definition["name"].as_str().expect("a tool definition has a name").to_string();
    let compile = |schema: &Value| SchemaValidator::compile(schema).map(Arc::new).map_err(|e| e.0);
    let input = match definition.get("inputSchema") {
        Some(schema @ Value::Object(_)) => compile(schema),
        _ => Err("the tool declares no inputSchema object".into()),
    };
    let output = definition.get("outputSchema").filter(|s| s.is_object()).map(compile);
    let view =
        AuthorityView::new(Hints::from_annotations(definition.get("annotations")), class, false);
    let definition_sha256 = toolgate_core::contract::definition_sha256(&definition);
    let raw = to_raw_value(&definition).expect("a definition serialises");
    ExposedTool {
        kind: toolgate_mcp::upstream::Kind::Tool,
        exposed_name: format!("{server}__{name}"),
        server: server.to_string(),
        tool: Arc::new(UpstreamTool { name, raw, definition }),
        labels: Vec::new(),
        registry_read_only: false,
        view,
        definition_sha256,
        sandbox: None,
        pin: PinStatus::Pinned,
        input,
        output,
    }
}

/// `raise_parts_order` as the Atlas parts server lists it.
pub fn order_definition() -> Value {
    json!({
        "name": "raise_parts_order",
        "inputSchema": {
            "type": "object",
            "properties": {
                "part_no": {"type": "string", "pattern": "^P-\\d+$"},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 50},
                "reference": {"type": "integer"}
            },
            "required": ["part_no", "quantity"],
            "additionalProperties": false
        }
    })
}

/// `parts__raise_parts_order`: a write the registry says needs approval.
pub fn order_tool() -> ExposedTool {
    tool("parts", order_definition(), Some(AuthorityClass::RequiresApproval))
}

/// `find_part`, whose `part_no` also travels as `Mcp-Param-Part`.
pub fn find_definition() -> Value {
    json!({
        "name": "find_part",
        "inputSchema": {
            "type": "object",
            "properties": {"part_no": {"type": "string", "x-mcp-header": "Part"}},
            "required": ["part_no"]
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    })
}

/// `parts__find_part`: a read (`read_only = true` in the registry).
pub fn find_tool() -> ExposedTool {
    let mut t = tool("parts", find_definition(), Some(AuthorityClass::Automatic));
    t.registry_read_only = true;
    t
}

/// A raw JSON text, as an upstream sends it.
pub fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_string()).expect("valid JSON")
}

/// A raw object's field as a value.
pub fn field(object: &RawObject, name: &str) -> Value {
    object.get(name).map_or(Value::Null, |v| serde_json::from_str(v.get()).expect("valid JSON"))
}

/// What a stage concluded, or a panic that says how it stopped instead.
pub fn passed<T>(result: Result<T, Stop>) -> T {
    match result {
        Ok(value) => value,
        Err(Stop::Refused(r)) => panic!("refused ({:?}, {:?}): {}", r.reason, r.action, r.message),
        Err(Stop::Error(e)) => panic!("{e} {:?}", e.data),
        Err(Stop::Input(o)) => {
            panic!("input_required: {}", serde_json::to_string(&o).unwrap_or_default())
        }
    }
}

/// The refusal a stage stopped with.
pub fn refused<T>(result: Result<T, Stop>) -> Refusal {
    match result {
        Err(Stop::Refused(r)) => r,
        Err(Stop::Error(e)) => panic!("expected a refusal, got {e}"),
        Err(Stop::Input(_)) => panic!("expected a refusal, got input_required"),
        Ok(_) => panic!("expected a refusal, the stage passed"),
    }
}

/// The JSON-RPC error a stage stopped with.
pub fn rpc_error<T>(result: Result<T, Stop>) -> RpcError {
    match result {
        Err(Stop::Error(e)) => e,
        Err(Stop::Refused(r)) => {
            panic!("expected a JSON-RPC error, got a refusal ({:?}): {}", r.reason, r.message)
        }
        Err(Stop::Input(_)) => panic!("expected a JSON-RPC error, got input_required"),
        Ok(_) => panic!("expected a JSON-RPC error, the stage passed"),
    }
}

/// The real SQLite ledger in a temp dir, with the clock, entropy, sealer
/// and receipt key that the approve and reserve stages take.
pub struct Store {
    pub ledger: Arc<dyn Ledger>,
    pub clock: Arc<FixedClock>,
    pub entropy: SeededEntropy,
    pub sealer: Sealer,
    key: Arc<ReceiptKey>,
    // Last: the ledger closes before its directory goes.
    _dir: tempfile::TempDir,
}

impl Store {
    pub async fn open() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("ledger.sqlite3");
        let ledger =
            toolgate_ledger::open(&path.to_string_lossy()).await.expect("the SQLite ledger opens");
        let sealer = Sealer::load_or_create(
            &dir.path().join("requeststate.key"),
            Arc::new(SeededEntropy::new([2; 32])),
        )
        .expect("a sealer");
        let key = Arc::new(ReceiptKey::new(ed25519_dalek::SigningKey::from_bytes(&[3; 32])));
        Self {
            ledger,
            clock: Arc::new(FixedClock::new(NOW_MS)),
            entropy: SeededEntropy::new([1; 32]),
            sealer,
            key,
            _dir: dir,
        }
    }

    /// A receipt for the ledger to commit with an approval or an operation
    /// (its content is the record stage's business, not these tests').
    pub fn draft(&self) -> Draft {
        let salt = [0u8; 32];
        let subject = Subject {
            issued_at_ms: self.clock.now_ms(),
            tenant: "atlas",
            caller: "agent",
            server: "parts",
            tool: "raise_parts_order",
            tool_definition_sha256: "",
            proposal_sha256: "",
            decision: None,
            policy_version: "",
            operation: None,
            salt: &salt,
            arguments_hash: "",
            captured: None,
            sandbox: None,
            config_version: None,
            identity: None,
        };
        let mut receipt = build(&subject, Event::Authorized { approval: None });
        receipt.kid = self.key.kid().to_string();
        Draft {
            receipt,
            salt,
            asked: None,
            key: self.key.clone(),
            sign_each: false,
            placement: Default::default(),
        }
    }

    /// The approvals the approve stage reads and writes in these tests: the
    /// store's, decided under `policy-v1`, held for `hold_ms`.
    pub fn approvals(&self, ttl_ms: i64, hold_ms: u64) -> crate::stages::approve::Approvals<'_> {
        static OPENINGS: std::sync::LazyLock<crate::stages::approve::Openings> =
            std::sync::LazyLock::new(Default::default);
        static HOLDS: std::sync::LazyLock<crate::holds::Holds> =
            std::sync::LazyLock::new(Default::default);
        static NOTIFIER: std::sync::LazyLock<crate::notify::Notifier> =
            std::sync::LazyLock::new(crate::notify::Notifier::none);
        let hold = crate::stages::approve::Hold {
            holds: &HOLDS,
            ledger: self.ledger.as_ref(),
            clock: self.clock.as_ref(),
            hold: Duration::from_millis(hold_ms),
            max_held: 8,
            draining: never_draining(),
            cancels: no_cancels(),
        };
        crate::stages::approve::Approvals {
            ledger: self.ledger.as_ref(),
            sealer: &self.sealer,
            clock: self.clock.as_ref(),
            entropy: &self.entropy,
            policy_version: "policy-v1",
            ttl_ms,
            max_pending: 100,
            openings: &OPENINGS,
            hold,
            notifier: &NOTIFIER,
        }
    }

    /// A pending approval `id` of an order of 8 units, opened now for a minute.
    pub async fn pending_approval(&self, id: &str) -> toolgate_core::approval::Approval {
        let binding = toolgate_core::approval::Binding {
            tenant: "atlas".into(),
            caller: "agent".into(),
            server: "parts".into(),
            tool: "raise_parts_order".into(),
            proposal_sha256: "p".repeat(64),
            policy_version: "v1".into(),
        };
        let new = toolgate_ledger::NewApproval {
            id: id.into(),
            binding,
            arguments: serde_json::json!({"quantity": 8}),
            reason: "large order".into(),
            rules: vec!["order_above_five_units".into()],
            now_ms: NOW_MS,
            ttl_ms: 60_000,
            receipt: None,
            subject: "field-agent".into(),
            operation_key: None,
            notices: Vec::new(),
        };
        self.ledger.create_approval(new).await.unwrap()
    }

    /// How many receipts the ledger holds.
    pub async fn receipts(&self) -> u64 {
        self.ledger.log_size().await.expect("the log size")
    }
}

/// How the in-process upstream answers a `tools/call`.
#[derive(Clone)]
pub enum Reply {
    /// This JSON text as the result, byte for byte.
    Result(&'static str),
    /// A JSON-RPC error with this code.
    Error(i64),
    /// This HTTP status and no JSON-RPC answer.
    Status(u16),
    /// Nothing for this long, then an empty result.
    Silence(Duration),
}

/// One `tools/call` as the upstream received it.
pub struct Received {
    pub headers: HeaderMap,
    pub params: Value,
}

#[derive(Clone)]
struct Fake {
    tools: Arc<Vec<Value>>,
    reply: Reply,
    received: Arc<Mutex<Vec<Received>>>,
}

/// A 2026-07-28 MCP server over HTTP in this process: it lists `tools` and
/// answers every call with `reply`. Stops when dropped.
pub struct FakeUpstream {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    stop: CancellationToken,
}

impl FakeUpstream {
    pub async fn serve(tools: Vec<Value>, reply: Reply) -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let fake = Fake { tools: Arc::new(tools), reply, received: received.clone() };
        let router =
            axum::Router::new().route("/mcp", axum::routing::post(answer)).with_state(fake);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a local port");
        let url = format!("http://{}/mcp", listener.local_addr().expect("an address"));
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, router).with_graceful_shutdown(stopped.cancelled_owned()).await
        });
        Self { url, received, stop }
    }

    /// The `tools/call`s received so far.
    pub fn calls(&self) -> std::sync::MutexGuard<'_, Vec<Received>> {
        self.received.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn answer(
    axum::extract::State(fake): axum::extract::State<Fake>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let message: Value = serde_json::from_str(&body).unwrap_or_default();
    let id = message["id"].clone();
    if id.is_null() {
        return StatusCode::ACCEPTED.into_response();
    }
    let respond = |member: String| {
        ([(CONTENT_TYPE, "application/json")], format!(r#"{{"jsonrpc":"2.0","id":{id},{member}}}"#))
            .into_response()
    };
    let result = |text: &str| respond(format!(r#""result":{text}"#));
    match message["method"].as_str().unwrap_or_default() {
        "server/discover" => {
            result(&json!({"supportedVersions": [toolgate_mcp::wire::MODERN]}).to_string())
        }
        "tools/list" => result(&json!({"tools": *fake.tools}).to_string()),
        "tools/call" => {
            fake.received
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Received { headers, params: message["params"].clone() });
            match fake.reply {
                Reply::Result(text) => result(text),
                Reply::Error(code) => {
                    respond(format!(r#""error":{{"code":{code},"message":"from the upstream"}}"#))
                }
                Reply::Status(status) => {
                    StatusCode::from_u16(status).expect("a status").into_response()
                }
                Reply::Silence(d) => {
                    tokio::time::sleep(d).await;
                    result(r#"{"content":[]}"#)
                }
            }
        }
        _ => respond(r#""error":{"code":-32601,"message":"no such method"}"#.into()),
    }
}

/// A catalog over one server, `parts`, served by a `FakeUpstream` and
/// connected and listed; `registry` is TOML appended to the config. The
/// catalog is built on first use (as in the gateway), pinning tools on
/// first sight in `lock_path()`.
pub struct Live {
    pub config: Arc<Config>,
    pub upstream: Arc<Upstream>,
    pub catalogs: Catalogs,
    pub fake: FakeUpstream,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Live {
    pub async fn start(tools: Vec<Value>, reply: Reply, registry: &str, timeout: Duration) -> Self {
        let fake = FakeUpstream::serve(tools, reply).await;
        let dir = tempfile::tempdir().expect("a temp dir");
        let text = format!("[servers.parts]\nurl = \"{}\"\n{registry}", fake.url);
        let config = Arc::new(
            Config::parse(&text, &dir.path().join("toolgate.toml")).expect("a valid config"),
        );
        let upstream = Upstream::new(
            "parts",
            config.servers["parts"].server(),
            timeout,
            Duration::from_secs(600),
            "test",
        );
        let stop = CancellationToken::new();
        upstream.start(stop.child_token());
        assert!(
            upstream.ready(Duration::from_secs(10)).await,
            "the upstream did not list: {:?}",
            upstream.down_reason()
        );
        let pins = Arc::new(
            PinStore::open(&config.lock_path(), Arc::new(FixedClock::new(NOW_MS)))
                .expect("the lock file"),
        );
        let live = crate::catalog::Live::new(
            config.clone(),
            Arc::new(toolgate_core::policy::PolicyEngine::empty()),
            vec![(upstream.clone(), stop.clone())],
        );
        let catalogs = Catalogs::new(live, pins, true);
        Self { config, upstream, catalogs, fake, stop, _dir: dir }
    }

    pub fn lock_path(&self) -> std::path::PathBuf {
        self.config.lock_path()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The store drafts every receipt a stage commits (their content is the
/// record stage's business, tested there).
impl crate::commit::Receipts for Store {
    fn wait(&self, _: &str) -> Draft {
        self.draft()
    }

    fn decided(
        &self,
        _: Option<toolgate_core::receipt::ApprovalRef>,
        _: toolgate_core::receipt::OperationRef,
    ) -> Draft {
        self.draft()
    }

    fn outcome(
        &self,
        _: toolgate_core::operation::OperationState,
        _: Option<&str>,
        _: toolgate_core::receipt::OperationRef,
    ) -> Draft {
        self.draft()
    }

    fn committed(
        &self,
        what: crate::commit::Commit,
        _: Option<toolgate_core::receipt::Placed>,
    ) -> crate::commit::Committed {
        crate::commit::Committed::for_test(what)
    }
}
