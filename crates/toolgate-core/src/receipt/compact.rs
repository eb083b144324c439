//! The stored form of a logged receipt: what the ledger keeps of a leaf, from
//! which its exact bytes come back. The leaf stays JCS (it is what the log
//! commits to and what a bundle carries); only the row is compact. A digest
//! is kept as its raw 32 or 16 bytes rather than 64 or 32 hex digits, a
//! time as its milliseconds, a common word (a verdict, a reason, a status)
//! as one byte, a signature as its raw 64 bytes; anything else as its text.
//! The log index is the row's key, so it is not repeated here.
//!
//! Every value that is not in the expected form falls back to its text, so
//! any receipt round-trips: `decode(encode(r)) == r` (a property test holds
//! it, and the stores check the leaf hash of what they decode when the log
//! is verified).
//!
//! The first byte is the format, [`FORMAT`], never `{`: a store tells a
//! compact row from an older one holding the leaf's JSON text by it.
//!
//! The digests that recur receipt after receipt — the signing key's id, the
//! tool's definition, the policy version — are named by a number once the
//! ledger's dictionary of digests holds them ([`Digests`]): a row then keeps
//! one or two bytes for each rather than 17 or 33. The ledger gives the
//! encoder only numbers it has committed, so a row never names one that a
//! crash could lose.
//!
//! This is a storage format, not a wire format: it never leaves the ledger.
//! It is frozen once written all the same — [`WORDS`] only ever grows at its
//! end, a digest's tags only gain new ones — since old rows must decode.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::{
    ApprovalRef, LoggedReceipt, OperationRef, Receipt, ReceiptError, UpstreamIdentity, rfc3339_ms,
    rfc3339_ms_bytes,
};

/// The first byte of a compact row.
pub const FORMAT: u8 = 1;

/// The first byte of a compact row whose receipt names the box its server
/// ran in (`sandbox`), which follows the signature. A row of [`FORMAT`] has
/// none, as every row written before boxes had: so a row cut where the box
/// would start is still refused.
pub const FORMAT_BOXED: u8 = 2;

/// The first byte of a compact row whose receipt has members after the
/// signature, each marked in one byte of flags that follows it:
/// [`TAIL_SANDBOX`] the box (`sandbox`), [`TAIL_CONFIG`] the config's
/// version (`config_version`), each a recurring digest, and
/// [`TAIL_IDENTITY`] as whom the call reached its server (`identity`), in
/// that order.
pub const FORMAT_TAIL: u8 = 3;

/// A [`FORMAT_TAIL`] row names the box.
const TAIL_SANDBOX: u8 = 1;
/// A [`FORMAT_TAIL`] row names the config's version.
const TAIL_CONFIG: u8 = 2;
/// A [`FORMAT_TAIL`] row names the upstream identity: its mode (a word),
/// audience (optional text), credential (optional digest) and subject
/// (optional text).
const TAIL_IDENTITY: u8 = 4;

/// Words written as one byte (their index, odd-tagged). Append only.
const WORDS: &[&str] = &[
    // Verdicts.
    "allow",
    "require_approval",
    "deny",
    // Reasons.
    "automatic",
    "approval_required",
    "prohibited",
    "untrusted_unregistered",
    "annotations_imply_prohibited",
    "unknown_tool",
    "invalid_arguments",
    "arguments_too_large",
    "contract_changed",
    "contract_unpinned",
    "contract_invalid",
    "upstream_unavailable",
    "upstream_timeout",
    "outcome_unknown",
    "invalid_result",
    "policy_permits",
    "policy_forbids",
    "policy_requires_approval",
    "policy_error",
    "tenant_in_arguments",
    "approval_pending",
    "approval_denied",
    "approval_expired",
    "approval_missing_or_mismatched",
    "approval_used",
    "request_state_invalid",
    "operation_conflict",
    "operation_in_progress",
    "ledger_unavailable",
    "reconciled",
    "egress_restricted",
    "egress_confidential",
    "lethal_trifecta",
    "rate_limited",
    "run_budget_exhausted",
    "concurrency_limited",
    "too_many_pending_approvals",
    // Execution and result statuses, operation states.
    "authorized",
    "dispatched",
    "not_dispatched",
    "replayed",
    "pending",
    "ok",
    "tool_error",
    "not_applied",
    "unknown",
    "awaiting_approval",
    "refused",
    "applied",
    "reserved",
    "completed",
    "reconciled_applied",
    "reconciled_not_applied",
    // Rules and tenants that recur.
    "registry",
    "default",
    // Upstream identity modes.
    "shared",
    "assertion",
    "exchange",
    "oauth",
    // Reasons added later.
    "credential_withheld",
    "identity_unavailable",
    "connect_required",
];

/// The ledger's dictionary of digests: a number for each raw digest it has
/// made durable, and the way back. Numbers start at 1.
#[derive(Debug, Clone, Default)]
pub struct Digests {
    ids: std::collections::HashMap<Vec<u8>, u64>,
    raw: std::collections::HashMap<u64, Vec<u8>>,
    max: u64,
}

impl Digests {
    /// Learns that `id` names `raw` (as the ledger stored it).
    pub fn insert(&mut self, id: u64, raw: Vec<u8>) {
        self.max = self.max.max(id);
        self.ids.insert(raw.clone(), id);
        self.raw.insert(id, raw);
    }

    /// The largest number known: the ledger reads only those above it.
    pub fn max_id(&self) -> u64 {
        self.max
    }

    /// The raw digests of `r` that recur and this dictionary lacks: the
    /// ledger adds them, and later rows name them by number.
    pub fn missing(&self, r: &Receipt) -> Vec<Vec<u8>> {
        recurring(r)
            .into_iter()
            .filter_map(raw_digest)
            .filter(|raw| !self.ids.contains_key(raw.bytes()))
            .map(|raw| raw.bytes().to_vec())
            .collect()
    }
}

/// The fields that recur from one receipt to the next.
fn recurring(r: &Receipt) -> [&str; 5] {
    [
        &r.kid,
        &r.tool_definition_sha256,
        &r.policy_version,
        r.sandbox.as_deref().unwrap_or_default(),
        r.config_version.as_deref().unwrap_or_default(),
    ]
}

/// A digest as its raw bytes: 64 or 32 lower-case hex digits (upper case
/// would not come back as it was). On the stack: every receipt's five
/// digests pass here.
fn raw_digest(s: &str) -> Option<RawDigest> {
    let hex = s.as_bytes();
    if !matches!(hex.len(), 64 | 32) {
        return None;
    }
    let mut raw = RawDigest { bytes: [0; 32], len: hex.len() / 2 };
    for (byte, pair) in raw.bytes.iter_mut().zip(hex.chunks_exact(2)) {
        let (high, low) = (HEX_DIGIT[usize::from(pair[0])], HEX_DIGIT[usize::from(pair[1])]);
        if (high | low) > 0xf {
            return None;
        }
        *byte = high << 4 | low;
    }
    Some(raw)
}

/// 32 or 16 bytes of a digest.
struct RawDigest {
    bytes: [u8; 32],
    len: usize,
}

impl RawDigest {
    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Each byte's value as a lower-case hex digit, or 0xff.
const HEX_DIGIT: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut i = 0;
    while i < 16 {
        table[b"0123456789abcdef"[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// Encodes a logged receipt (its `log_index` aside) as a compact row,
/// naming each recurring digest `digests` holds by its number.
pub fn encode(logged: &LoggedReceipt, digests: &Digests) -> Vec<u8> {
    let r = &logged.receipt;
    let mut out = Vec::with_capacity(320);
    // A receipt without a config version is written as rows were before
    // it existed, so those rows keep their bytes.
    out.push(match (&r.sandbox, r.config_version.is_some() || r.identity.is_some()) {
        (_, true) => FORMAT_TAIL,
        (Some(_), false) => FORMAT_BOXED,
        (None, false) => FORMAT,
    });
    varint(&mut out, u64::from(r.v));
    recurring_digest(&mut out, &r.kid, digests);
    time(&mut out, &r.issued_at);
    for s in [&r.tenant, &r.caller, &r.server, &r.tool] {
        text(&mut out, s);
    }
    recurring_digest(&mut out, &r.tool_definition_sha256, digests);
    digest(&mut out, Some(&r.proposal_sha256));
    text(&mut out, &r.decision);
    text(&mut out, &r.reason);
    varint(&mut out, r.rules.len() as u64);
    r.rules.iter().for_each(|rule| text(&mut out, rule));
    recurring_digest(&mut out, &r.policy_version, digests);
    match &r.approval {
        None => out.push(0),
        Some(a) => {
            out.push(1);
            text(&mut out, &a.approver);
            time(&mut out, &a.decided_at);
            text(&mut out, &a.id);
        }
    }
    match &r.operation {
        None => out.push(0),
        Some(o) => {
            out.push(1);
            text(&mut out, &o.key);
            text(&mut out, &o.state);
        }
    }
    text(&mut out, &r.execution_status);
    text(&mut out, &r.result_status);
    digest(&mut out, r.result_sha256.as_deref());
    digest(&mut out, Some(&r.arguments_hash));
    digest(&mut out, r.result_hash.as_deref());
    for value in [&r.arguments, &r.result] {
        match value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                text(&mut out, &crate::proposal::canonical_json(v));
            }
        }
    }
    match logged.signature.as_deref() {
        None => out.push(0),
        Some(sig) => match STANDARD
            .decode(sig)
            .ok()
            .filter(|raw| raw.len() == 64 && STANDARD.encode(raw) == sig)
        {
            Some(raw) => {
                out.push(1);
                out.extend_from_slice(&raw);
            }
            None => {
                out.push(2);
                text(&mut out, sig);
            }
        },
    }
    if out[0] == FORMAT_TAIL {
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        out.push(
            flag(r.sandbox.is_some(), TAIL_SANDBOX)
                | flag(r.config_version.is_some(), TAIL_CONFIG)
                | flag(r.identity.is_some(), TAIL_IDENTITY),
        );
    }
    if let Some(sandbox) = &r.sandbox {
        recurring_digest(&mut out, sandbox, digests);
    }
    if let Some(version) = &r.config_version {
        recurring_digest(&mut out, version, digests);
    }
    if let Some(identity) = &r.identity {
        text(&mut out, &identity.mode);
        optional_text(&mut out, identity.audience.as_deref());
        digest(&mut out, identity.credential_sha256.as_deref());
        optional_text(&mut out, identity.subject.as_deref());
    }
    out
}

/// 0, or 1 and the text.
fn optional_text(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            text(out, s);
        }
    }
}

/// The logged receipt a compact row holds, placed at `log_index`; the
/// numbers it names digests by are read in `digests` (a number it lacks is
/// an error: the ledger reads its dictionary after the rows).
pub fn decode(
    bytes: &[u8],
    log_index: u64,
    digests: &Digests,
) -> Result<LoggedReceipt, ReceiptError> {
    let mut r = Reader { bytes, at: 0, digests };
    let format = r.byte()?;
    if !matches!(format, FORMAT | FORMAT_BOXED | FORMAT_TAIL) {
        return Err(r.bad("not a compact receipt row"));
    }
    let v = u32::try_from(r.varint()?).map_err(|_| r.bad("version out of range"))?;
    let kid = r.digest()?.unwrap_or_default();
    let issued_at = r.time()?;
    let (tenant, caller, server, tool) = (r.text()?, r.text()?, r.text()?, r.text()?);
    let tool_definition_sha256 = r.digest()?.unwrap_or_default();
    let proposal_sha256 = r.digest()?.unwrap_or_default();
    let (decision, reason) = (r.text()?, r.text()?);
    let n = r.varint()?;
    let rules = (0..n).map(|_| r.text()).collect::<Result<Vec<_>, _>>()?;
    let policy_version = r.digest()?.unwrap_or_default();
    let approval = match r.byte()? {
        0 => None,
        1 => Some(ApprovalRef { approver: r.text()?, decided_at: r.time()?, id: r.text()? }),
        _ => return Err(r.bad("approval tag")),
    };
    let operation = match r.byte()? {
        0 => None,
        1 => Some(OperationRef { key: r.text()?, state: r.text()? }),
        _ => return Err(r.bad("operation tag")),
    };
    let (execution_status, result_status) = (r.text()?, r.text()?);
    let result_sha256 = r.digest()?;
    let arguments_hash = r.digest()?.unwrap_or_default();
    let result_hash = r.digest()?;
    let mut captured = [None, None];
    for slot in &mut captured {
        *slot = match r.byte()? {
            0 => None,
            1 => Some(
                serde_json::from_str(&r.text()?)
                    .map_err(|e| r.bad(&format!("captured value: {e}")))?,
            ),
            _ => return Err(r.bad("captured value tag")),
        };
    }
    let [arguments, result] = captured;
    let signature = match r.byte()? {
        0 => None,
        1 => Some(STANDARD.encode(r.take(64)?)),
        2 => Some(r.text()?),
        _ => return Err(r.bad("signature tag")),
    };
    let tail = match format {
        FORMAT => 0,
        FORMAT_BOXED => TAIL_SANDBOX,
        // A tail row names the config or the identity (a box alone is a
        // boxed row), and nothing unknown.
        _ => match r.byte()? {
            flags
                if flags & (TAIL_CONFIG | TAIL_IDENTITY) != 0
                    && flags & !(TAIL_SANDBOX | TAIL_CONFIG | TAIL_IDENTITY) == 0 =>
            {
                flags
            }
            _ => return Err(r.bad("tail flags")),
        },
    };
    let sandbox = match tail & TAIL_SANDBOX {
        0 => None,
        _ => Some(r.digest()?.ok_or_else(|| r.bad("a boxed row names no box"))?),
    };
    let config_version = match tail & TAIL_CONFIG {
        0 => None,
        _ => Some(r.digest()?.ok_or_else(|| r.bad("a tail row names no config version"))?),
    };
    let identity = match tail & TAIL_IDENTITY {
        0 => None,
        _ => Some(UpstreamIdentity {
            mode: r.text()?,
            audience: r.optional_text()?,
            credential_sha256: r.digest()?,
            subject: r.optional_text()?,
        }),
    };
    if r.at != bytes.len() {
        return Err(r.bad("trailing bytes"));
    }
    let receipt = Receipt {
        v,
        kid,
        log_index,
        issued_at,
        tenant,
        caller,
        server,
        tool,
        tool_definition_sha256,
        proposal_sha256,
        decision,
        reason,
        rules,
        policy_version,
        approval,
        operation,
        execution_status,
        result_status,
        result_sha256,
        arguments_hash,
        result_hash,
        arguments,
        result,
        sandbox,
        config_version,
        identity,
    };
    Ok(LoggedReceipt { receipt, signature })
}

/// The pieces of the gateway's private record of what was asked (`Draft::asked`,
/// compact JSON) that recur call after call, longest first. Append only: a
/// piece's byte is its place here.
const ASKED_PIECES: &[&str] = &[
    r#","approval_state":"none","decision":{"verdict":"require_approval","reason":"approval_required","rules":["registry"]}}"#,
    r#","class_decision":{"verdict":"require_approval","reason":"approval_required","rules":["registry"]}"#,
    r#","approval_state":"none","decision":{"verdict":"allow","reason":"automatic","rules":["registry"]}}"#,
    r#","approval_state":"none","decision":{"verdict":"deny","reason":"prohibited","rules":["registry"]}}"#,
    r#","class_decision":{"verdict":"allow","reason":"automatic","rules":["registry"]}"#,
    r#","class_decision":{"verdict":"deny","reason":"prohibited","rules":["registry"]}"#,
    r#"","class":"requires_approval","labels":["#,
    r#"","class":"automatic","labels":["#,
    r#","class_decision":{"verdict":""#,
    r#"]},"tool":{"exposed_name":""#,
    r#"","decision":{"verdict":""#,
    r#","approval_state":""#,
    r#"{"caller":{"name":""#,
    r#"]},"arguments":"#,
    r#"","subject":""#,
    r#"","labels":["#,
    r#"","tenant":""#,
    r#"","server":""#,
    r#"","reason":""#,
    r#"","roles":["#,
    r#"","rules":["#,
    r#"","class":""#,
    r#"","name":""#,
    r#""registry""#,
];

/// The byte of `ASKED_PIECES[i]`: the control characters compact JSON text
/// never holds raw (JSON escapes them in strings; whitespace is left out),
/// but for [`REF_BYTES`], [`ESCAPE`] and [`PACKED`]. A text's own control
/// characters are escaped, so every one in a packed record is one of these.
fn piece_byte(i: usize) -> u8 {
    const FREE: [u8; 24] =
        [1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27];
    FREE[i]
}

/// The bytes of the receipt's own values when the record names them: its
/// caller, tenant, server, tool, and `server__tool` (the exposed name).
const REF_BYTES: [u8; 5] = [9, 10, 13, 28, 29];

/// The receipt's values a record of what was asked may repeat, in
/// [`REF_BYTES`] order: caller, tenant, server, tool.
pub type AskedRefs<'a> = [&'a str; 4];

/// Before a control character of the text itself (so any text packs).
const ESCAPE: char = '\u{1e}';
/// The first character of a packed record; an unpacked one (written before
/// packing) begins with `{`.
const PACKED: char = '\u{1f}';

/// The values of `refs` as [`REF_BYTES`] stands for them.
fn ref_values<'a>(refs: &AskedRefs<'a>) -> [std::borrow::Cow<'a, str>; 5] {
    let [caller, tenant, server, tool] = *refs;
    [caller.into(), tenant.into(), server.into(), tool.into(), format!("{server}__{tool}").into()]
}

/// The private record of what was asked, as a row keeps it: [`PACKED`], then
/// the text with each recurring piece as one control character, and each
/// string that is one of the receipt's own values (`refs`) as another.
pub fn pack_asked(text: &str, refs: &AskedRefs<'_>) -> String {
    let values = ref_values(refs);
    // Longest first: the exposed name before the server it begins with.
    let mut order: Vec<usize> = (0..values.len()).filter(|&i| !values[i].is_empty()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(values[i].len()));
    let mut out = String::with_capacity(text.len() / 3);
    out.push(PACKED);
    let mut rest = text;
    let mut opened = false;
    'scan: while let Some(c) = rest.chars().next() {
        // A string's first characters: one of the receipt's values, whole?
        if opened {
            for &i in &order {
                if rest.strip_prefix(&*values[i]).is_some_and(|after| after.starts_with('"')) {
                    out.push(char::from(REF_BYTES[i]));
                    rest = &rest[values[i].len()..];
                    opened = false;
                    continue 'scan;
                }
            }
        }
        if matches!(c, '{' | ',' | '"' | ']') {
            for (i, piece) in ASKED_PIECES.iter().enumerate() {
                if rest.starts_with(piece) {
                    out.push(char::from(piece_byte(i)));
                    rest = &rest[piece.len()..];
                    opened = piece.ends_with('"');
                    continue 'scan;
                }
            }
        }
        if c < ' ' {
            out.push(ESCAPE);
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
        opened = c == '"';
    }
    out
}

/// The record [`pack_asked`] packed with the same `refs` (or one stored
/// unpacked), as it was.
pub fn unpack_asked(stored: &str, refs: &AskedRefs<'_>) -> String {
    let Some(packed) = stored.strip_prefix(PACKED) else { return stored.to_string() };
    let values = ref_values(refs);
    let mut out = String::with_capacity(packed.len() * 3);
    let mut chars = packed.chars();
    while let Some(c) = chars.next() {
        if c == ESCAPE {
            out.extend(chars.next());
        } else if let Some(i) =
            (0..ASKED_PIECES.len()).find(|&i| u32::from(piece_byte(i)) == u32::from(c))
        {
            out.push_str(ASKED_PIECES[i]);
        } else if let Some(i) = REF_BYTES.iter().position(|&b| u32::from(b) == u32::from(c)) {
            out.push_str(&values[i]);
        } else {
            out.push(c);
        }
    }
    out
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A word of [`WORDS`] as `index * 2 + 1`; any other text as `len * 2`, then its bytes.
fn text(out: &mut Vec<u8>, s: &str) {
    match WORDS.iter().position(|w| *w == s) {
        Some(i) => varint(out, i as u64 * 2 + 1),
        None => {
            varint(out, s.len() as u64 * 2);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// Tags of a digest: absent (`None`), 32 or 16 raw bytes of lower-case hex,
/// text, or the number of a digest in the ledger's dictionary.
const NONE: u8 = 0;
const HEX32: u8 = 1;
const HEX16: u8 = 2;
const TEXT: u8 = 3;
const NAMED: u8 = 4;

/// A recurring digest: by its number when `digests` holds it.
fn recurring_digest(out: &mut Vec<u8>, s: &str, digests: &Digests) {
    match raw_digest(s).and_then(|raw| digests.ids.get(raw.bytes()).copied()) {
        Some(id) => {
            out.push(NAMED);
            varint(out, id);
        }
        None => digest(out, Some(s)),
    }
}

fn digest(out: &mut Vec<u8>, s: Option<&str>) {
    let Some(s) = s else { return out.push(NONE) };
    match raw_digest(s) {
        Some(raw) => {
            out.push(if raw.len == 32 { HEX32 } else { HEX16 });
            out.extend_from_slice(raw.bytes());
        }
        None => {
            out.push(TEXT);
            text(out, s);
        }
    }
}

/// A time in the gateway's own form (`rfc3339_ms`) as 1 and its
/// milliseconds (zigzag); any other text as 0 and the text.
fn time(out: &mut Vec<u8>, s: &str) {
    match parse_rfc3339_ms(s)
        .filter(|&ms| rfc3339_ms_bytes(ms).is_some_and(|text| text == s.as_bytes()))
    {
        Some(ms) => {
            out.push(1);
            varint(out, ((ms << 1) ^ (ms >> 63)) as u64);
        }
        None => {
            out.push(0);
            text(out, s);
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` as ms since the Unix epoch (days from civil,
/// H. Hinnant); the caller checks that it prints back the same.
fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 24
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return None;
    }
    let num = |from: usize, to: usize| {
        s.get(from..to)?
            .bytes()
            .try_fold(0i64, |n, c| c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0')))
    };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hh, mm, ss, milli) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1000) + milli)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    digests: &'a Digests,
}

impl Reader<'_> {
    fn bad(&self, what: &str) -> ReceiptError {
        ReceiptError::Malformed(format!("compact receipt row, byte {}: {what}", self.at))
    }

    fn take(&mut self, n: usize) -> Result<&[u8], ReceiptError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| self.bad("cut short"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, ReceiptError> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Result<u64, ReceiptError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(n);
            }
        }
        Err(self.bad("varint too long"))
    }

    fn text(&mut self) -> Result<String, ReceiptError> {
        let n = self.varint()?;
        if n & 1 == 1 {
            return WORDS
                .get((n >> 1) as usize)
                .map(|w| (*w).to_string())
                .ok_or_else(|| self.bad("unknown word"));
        }
        let len = usize::try_from(n >> 1).map_err(|_| self.bad("length"))?;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| self.bad("text is not UTF-8"))
    }

    fn optional_text(&mut self) -> Result<Option<String>, ReceiptError> {
        match self.byte()? {
            0 => Ok(None),
            1 => self.text().map(Some),
            _ => Err(self.bad("optional text tag")),
        }
    }

    fn digest(&mut self) -> Result<Option<String>, ReceiptError> {
        Ok(match self.byte()? {
            NONE => None,
            HEX32 => Some(crate::proposal::hex(self.take(32)?)),
            HEX16 => Some(crate::proposal::hex(self.take(16)?)),
            TEXT => Some(self.text()?),
            NAMED => {
                let id = self.varint()?;
                let raw = self.digests.raw.get(&id).ok_or_else(|| {
                    self.bad(&format!("digest #{id} is not in the ledger's dictionary"))
                })?;
                Some(crate::proposal::hex(raw))
            }
            _ => return Err(self.bad("digest tag")),
        })
    }

    fn time(&mut self) -> Result<String, ReceiptError> {
        match self.byte()? {
            1 => {
                let z = self.varint()?;
                Ok(rfc3339_ms((z >> 1) as i64 ^ -((z & 1) as i64)))
            }
            0 => self.text(),
            _ => Err(self.bad("time tag")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::leaf_bytes;
    use proptest::prelude::*;
    use serde_json::json;

    fn sample(signed: bool) -> LoggedReceipt {
        let receipt = Receipt {
            v: 2,
            kid: "0123456789abcdef0123456789abcdef".into(),
            log_index: 9,
            issued_at: rfc3339_ms(1_796_060_144_999),
            tenant: "default".into(),
            caller: "agent-7".into(),
            server: "parts".into(),
            tool: "find_part".into(),
            tool_definition_sha256: "ab".repeat(32),
            proposal_sha256: "cd".repeat(32),
            decision: "allow".into(),
            reason: "automatic".into(),
            rules: vec!["registry".into()],
            policy_version: "ef".repeat(32),
            approval: None,
            operation: None,
            execution_status: "dispatched".into(),
            result_status: "ok".into(),
            result_sha256: Some("01".repeat(32)),
            arguments_hash: "23".repeat(32),
            result_hash: Some("45".repeat(32)),
            arguments: None,
            result: None,
            sandbox: None,
            config_version: None,
            identity: None,
        };
        LoggedReceipt { receipt, signature: signed.then(|| STANDARD.encode([7u8; 64])) }
    }

    /// A dictionary that holds nothing: rows as the ledger wrote them before it had one.
    static NONE_KNOWN: std::sync::LazyLock<Digests> = std::sync::LazyLock::new(Digests::default);

    #[test]
    fn a_read_s_receipt_is_a_fraction_of_its_leaf() {
        let logged = sample(false);
        let row = encode(&logged, &NONE_KNOWN);
        assert_eq!(decode(&row, 9, &&NONE_KNOWN).unwrap(), logged);
        let leaf = leaf_bytes(&logged).len();
        assert!(row.len() * 3 < leaf, "{} bytes stored for a {leaf}-byte leaf", row.len());
        assert!(row.len() <= 264, "{} bytes", row.len());
        let signed = sample(true);
        assert_eq!(encode(&signed, &&NONE_KNOWN).len(), row.len() + 64);
        assert_eq!(decode(&encode(&signed, &NONE_KNOWN), 9, &&NONE_KNOWN).unwrap(), signed);
    }

    /// Once the dictionary holds the key's id, the tool's definition and the
    /// policy version, a row names them by number: 77 bytes fewer, the same leaf.
    #[test]
    fn recurring_digests_are_named_by_number() {
        let logged = sample(false);
        let mut digests = Digests::default();
        let missing = digests.missing(&logged.receipt);
        assert_eq!(missing.len(), 3, "the kid, the definition, the policy version");
        for (id, raw) in (1..).zip(missing) {
            digests.insert(id, raw);
        }
        assert!(digests.missing(&logged.receipt).is_empty());
        let (plain, named) = (encode(&logged, &NONE_KNOWN), encode(&logged, &digests));
        assert_eq!(plain.len() - named.len(), 77, "17 + 33 + 33 bytes became 2 + 2 + 2");
        assert_eq!(decode(&named, 9, &digests).unwrap(), logged);
        // A row read without its dictionary says which number it lacks.
        let err = decode(&named, 9, &&NONE_KNOWN).unwrap_err().to_string();
        assert!(err.contains("digest #1 is not in the ledger's dictionary"), "{err}");
        // Rows written before the dictionary still decode with it.
        assert_eq!(decode(&plain, 9, &digests).unwrap(), logged);
        // Text that is not a digest is never named.
        let mut other = sample(false);
        other.receipt.policy_version = "v1".into();
        assert_eq!(digests.missing(&other.receipt).len(), 0);
        assert_eq!(decode(&encode(&other, &digests), 9, &digests).unwrap(), other);
    }

    #[test]
    fn the_first_byte_is_never_the_brace_of_a_json_row() {
        assert_ne!(encode(&sample(false), &NONE_KNOWN)[0], b'{');
    }

    #[test]
    fn times_round_trip_across_the_calendar() {
        for ms in
            [0, -1, 951_782_400_123, 1_796_060_144_999, 253_402_300_799_999, -62_135_596_800_000]
        {
            assert_eq!(parse_rfc3339_ms(&rfc3339_ms(ms)), Some(ms), "{}", rfc3339_ms(ms));
        }
        let mut out = Vec::new();
        time(&mut out, "2026-05-01T12:00:00Z");
        assert_eq!(out[0], 0, "another form is kept as text");
    }

    #[test]
    fn a_cut_or_padded_row_is_refused() {
        let mut boxed = sample(true);
        boxed.receipt.sandbox = Some("9f".repeat(32));
        let mut versioned = boxed.clone();
        versioned.receipt.config_version = Some("5e".repeat(32));
        let mut unboxed = sample(true);
        unboxed.receipt.config_version = Some("5e".repeat(32));
        for logged in [sample(true), boxed, versioned, unboxed] {
            let row = encode(&logged, &NONE_KNOWN);
            for cut in 0..row.len() {
                assert!(decode(&row[..cut], 9, &&NONE_KNOWN).is_err(), "cut at {cut}");
            }
            let mut padded = row.clone();
            padded.push(0);
            assert!(decode(&padded, 9, &&NONE_KNOWN).is_err());
        }
    }

    /// The box a call ran in is one of the digests that recur: once the
    /// dictionary holds it, two bytes name it.
    #[test]
    fn a_boxed_receipt_names_its_box_by_number() {
        let mut logged = sample(false);
        logged.receipt.sandbox = Some("9f".repeat(32));
        let plain = encode(&logged, &NONE_KNOWN);
        assert_eq!(plain[0], FORMAT_BOXED);
        assert_eq!(plain.len(), encode(&sample(false), &NONE_KNOWN).len() + 33);
        assert_eq!(decode(&plain, 9, &&NONE_KNOWN).unwrap(), logged);
        let mut digests = Digests::default();
        for (id, raw) in (1..).zip(digests.missing(&logged.receipt)) {
            digests.insert(id, raw);
        }
        let named = encode(&logged, &digests);
        assert_eq!(named.len(), encode(&sample(false), &digests).len() + 2);
        assert_eq!(decode(&named, 9, &digests).unwrap(), logged);
        let off = LoggedReceipt {
            receipt: Receipt { sandbox: Some("off".into()), ..logged.receipt.clone() },
            signature: None,
        };
        assert_eq!(decode(&encode(&off, &digests), 9, &digests).unwrap(), off);
    }

    /// The config's version recurs like the box: a row names it by number
    /// once the dictionary holds it; a receipt without one keeps the bytes
    /// of rows written before versions existed.
    #[test]
    fn a_receipt_names_its_config_version_by_number() {
        for sandbox in [None, Some("9f".repeat(32))] {
            let mut logged = sample(false);
            logged.receipt.sandbox = sandbox.clone();
            let before = encode(&logged, &NONE_KNOWN);
            logged.receipt.config_version = Some("5e".repeat(32));
            let plain = encode(&logged, &NONE_KNOWN);
            assert_eq!((plain[0], plain.len()), (FORMAT_TAIL, before.len() + 1 + 33));
            assert_eq!(decode(&plain, 9, &&NONE_KNOWN).unwrap(), logged);
            let mut digests = Digests::default();
            for (id, raw) in (1..).zip(digests.missing(&logged.receipt)) {
                digests.insert(id, raw);
            }
            let named = encode(&logged, &digests);
            assert_eq!(decode(&named, 9, &digests).unwrap(), logged);
            assert!(named.len() < plain.len() - 60, "{} vs {}", named.len(), plain.len());
        }
        // Flags that name neither member, or one unknown, are refused.
        let mut logged = sample(false);
        logged.receipt.config_version = Some("5e".repeat(32));
        let row = encode(&logged, &NONE_KNOWN);
        let flags_at = row.len() - 34;
        for bad in [0u8, 1, 8, 10] {
            let mut odd = row.clone();
            odd[flags_at] = bad;
            assert!(decode(&odd, 9, &&NONE_KNOWN).is_err(), "flags {bad}");
        }
    }

    /// As whom a call ran: its mode is a word, a shared one is three bytes,
    /// a person's keeps its subject, audience and the credential's digest;
    /// it rides with or without a box and a config version.
    #[test]
    fn a_receipt_names_as_whom_its_call_ran() {
        let shared = UpstreamIdentity {
            mode: "shared".into(),
            audience: None,
            credential_sha256: None,
            subject: None,
        };
        let person = UpstreamIdentity {
            mode: "assertion".into(),
            audience: Some("tickets".into()),
            credential_sha256: Some("c4".repeat(32)),
            subject: Some("tech-jane".into()),
        };
        for (sandbox, config) in [
            (None, None),
            (Some("9f".repeat(32)), None),
            (None, Some("5e".repeat(32))),
            (Some("9f".repeat(32)), Some("5e".repeat(32))),
        ] {
            let mut logged = sample(false);
            (logged.receipt.sandbox, logged.receipt.config_version) = (sandbox, config);
            let before = encode(&logged, &NONE_KNOWN);
            for identity in [&shared, &person] {
                logged.receipt.identity = Some(identity.clone());
                let row = encode(&logged, &NONE_KNOWN);
                assert_eq!(row[0], FORMAT_TAIL);
                assert_eq!(decode(&row, 9, &&NONE_KNOWN).unwrap(), logged);
                if identity == &shared {
                    let flags = usize::from(before[0] != FORMAT_TAIL);
                    assert_eq!(
                        row.len(),
                        before.len() + flags + 4,
                        "the mode as one word, three empty slots"
                    );
                }
                for cut in 0..row.len() {
                    assert!(decode(&row[..cut], 9, &&NONE_KNOWN).is_err(), "cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn a_record_of_what_was_asked_packs_to_its_own_values() {
        let asked = r#"{"caller":{"name":"agent","subject":"agent","tenant":"atlas","roles":["agent"]},"tool":{"exposed_name":"desk__lookup","server":"desk","name":"lookup","class":"automatic","labels":[]},"arguments":{"q":"gate"},"class_decision":{"verdict":"allow","reason":"automatic","rules":["registry"]},"approval_state":"none","decision":{"verdict":"allow","reason":"automatic","rules":["registry"]}}"#;
        let refs = ["agent", "atlas", "desk", "lookup"];
        let packed = pack_asked(asked, &refs);
        assert_eq!(unpack_asked(&packed, &refs), asked);
        assert!(packed.len() <= 36, "{} bytes: {packed:?}", packed.len());
        // Other refs (another call's) pack less, never wrongly.
        let other = ["x", "", "de", "look"];
        assert_eq!(unpack_asked(&pack_asked(asked, &other), &other), asked);
        // Text with control characters of its own comes back too, and a
        // record stored before packing is read as it is.
        for odd in ["{\"a\":\"\u{1}\u{1e}\u{1f}\"}", "\u{1f}\u{1}\t\n", ""] {
            assert_eq!(unpack_asked(&pack_asked(odd, &refs), &refs), odd);
        }
        assert_eq!(unpack_asked(asked, &refs), asked);
        assert_eq!(
            ASKED_PIECES.len(),
            ASKED_PIECES.iter().collect::<std::collections::HashSet<_>>().len()
        );
    }

    fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![
            "\\PC{0,12}",
            "[0-9a-f]{64}",
            "[0-9A-F]{64}",
            "[0-9a-f]{32}",
            Just("allow".to_string()),
            Just(String::new())
        ]
    }

    proptest! {
        /// Any record of what was asked comes back exactly, pieces or not.
        #[test]
        fn every_record_of_what_was_asked_round_trips(parts in proptest::collection::vec(prop_oneof![
            proptest::sample::select(ASKED_PIECES.to_vec()).prop_map(str::to_string),
            "\\PC{0,8}",
            "[\u{0}-\u{1f}]{0,3}",
            Just("\"ab\"".to_string()),
            Just("\"a__b\"".to_string()),
        ], 0..12), refs in proptest::collection::vec(prop_oneof![Just("a".to_string()), Just("ab".to_string()), Just(String::new()), "\\PC{0,3}"], 4)) {
            let text: String = parts.concat();
            let refs = [refs[0].as_str(), refs[1].as_str(), refs[2].as_str(), refs[3].as_str()];
            prop_assert_eq!(unpack_asked(&pack_asked(&text, &refs), &refs), text);
        }

        /// Any receipt comes back exactly, whatever its strings hold.
        #[test]
        fn every_receipt_round_trips(
            texts in proptest::collection::vec(any_text(), 20),
            rules in proptest::collection::vec(any_text(), 0..4),
            ms in -62_135_596_800_000i64..253_402_300_799_999,
            flags in any::<(bool, bool, bool, bool, bool)>(),
            config in proptest::option::of(prop_oneof![any_text(), Just("5e".repeat(32))]),
            identity in proptest::option::of((prop_oneof![Just("shared".to_string()), Just("assertion".to_string()), any_text()], proptest::option::of(any_text()), proptest::option::of(any_text()), proptest::option::of(any_text()))),
            v in any::<u32>(),
            index in any::<u64>(),
            sig in proptest::option::of(prop_oneof![Just(STANDARD.encode([9u8; 64])), "\\PC{0,10}"]),
        ) {
            let t = |i: usize| texts[i].clone();
            let time = |i: usize, as_text: bool| if as_text { t(i) } else { rfc3339_ms(ms + i as i64) };
            let receipt = Receipt {
                v,
                kid: t(0),
                log_index: index,
                issued_at: time(1, flags.0),
                tenant: t(2),
                caller: t(3),
                server: t(4),
                tool: t(5),
                tool_definition_sha256: t(6),
                proposal_sha256: t(7),
                decision: t(8),
                reason: t(9),
                rules,
                policy_version: t(10),
                approval: flags.1.then(|| ApprovalRef { approver: t(11), decided_at: time(12, flags.0), id: t(13) }),
                operation: flags.2.then(|| OperationRef { key: t(14), state: t(15) }),
                execution_status: t(16),
                result_status: t(17),
                result_sha256: flags.3.then(|| t(18)),
                arguments_hash: t(19),
                result_hash: flags.4.then(|| t(6)),
                arguments: flags.3.then(|| json!({"part": t(2), "n": 1.5, "big": 9_007_199_254_740_993u64, "list": [null, true]})),
                result: flags.4.then(|| json!(null)),
                sandbox: flags.2.then(|| if flags.0 { t(7) } else { "ab".repeat(32) }),
                config_version: config.clone(),
                identity: identity.clone().map(|(mode, audience, credential, subject)| UpstreamIdentity { mode, audience, credential_sha256: credential, subject }),
            };
            let logged = LoggedReceipt { receipt, signature: sig };
            let back = decode(&encode(&logged, &NONE_KNOWN), index, &&NONE_KNOWN).unwrap();
            prop_assert_eq!(leaf_bytes(&back), leaf_bytes(&logged));
            // With a dictionary that holds its recurring digests, too.
            let mut digests = Digests::default();
            for (id, raw) in (1..).zip(digests.missing(&logged.receipt)) {
                digests.insert(id, raw);
            }
            let back = decode(&encode(&logged, &digests), index, &digests).unwrap();
            prop_assert_eq!(leaf_bytes(&back), leaf_bytes(&logged));
        }
    }
}
