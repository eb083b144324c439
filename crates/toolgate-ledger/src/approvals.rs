//! The approvals table. Every change is one SQL statement or one immediate
//! transaction, so two gateways' re-issues, or a re-issue racing an
//! approver, cannot both win: `consume` succeeds for exactly one caller.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, Row, params};
use toolgate_core::approval::{Approval, ApprovalState, Binding};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the approvals store failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("the approvals store failed: {0}")]
    Internal(String),
    #[error("no approval `{0}`; `toolgate approvals list` shows them")]
    NotFound(String),
    #[error("approval `{id}` is {state}, not pending; it can no longer be decided")]
    NotPending { id: String, state: &'static str },
    #[error("approval `{id}` is {state}, not approved; it cannot be used")]
    NotApproved { id: String, state: &'static str },
    #[error("approval `{0}` expired before it was decided")]
    Expired(String),
    #[error("`{approver}` asked for this call and cannot approve or deny it; another approver must")]
    SelfApproval { approver: String },
}

pub struct ApprovalStore {
    conn: Mutex<Connection>,
}

const COLUMNS: &str = "id, tenant, caller, server, tool, proposal_sha256, policy_version, arguments, reason, rules, state, \
                       created_ms, expires_ms, decided_by, decision_reason, decided_ms, used_ms";

fn row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let text = |i: usize| r.get::<_, String>(i);
    let json = |i: usize| -> rusqlite::Result<serde_json::Value> {
        serde_json::from_str(&text(i)?).map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e)))
    };
    let state = text(10)?;
    Ok(Approval {
        id: text(0)?,
        binding: Binding {
            tenant: text(1)?,
            caller: text(2)?,
            server: text(3)?,
            tool: text(4)?,
            proposal_sha256: text(5)?,
            policy_version: text(6)?,
        },
        arguments: json(7)?,
        reason: text(8)?,
        rules: serde_json::from_value(json(9)?).unwrap_or_default(),
        state: ApprovalState::parse(&state).ok_or_else(|| rusqlite::Error::InvalidColumnType(10, state, rusqlite::types::Type::Text))?,
        created_ms: r.get(11)?,
        expires_ms: r.get(12)?,
        decided_by: r.get(13)?,
        decision_reason: r.get(14)?,
        decided_ms: r.get(15)?,
        used_ms: r.get(16)?,
    })
}

/// What a new approval asks for.
pub struct Request<'a> {
    pub id: &'a str,
    pub binding: &'a Binding,
    pub arguments: &'a serde_json::Value,
    pub reason: &'a str,
    pub rules: &'a [String],
    pub now_ms: i64,
    pub ttl_ms: i64,
}

impl ApprovalStore {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Ok(Self { conn: Mutex::new(crate::sqlite::open(path)?) })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (every
        // change is a statement or a transaction): keep using it.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn create(&self, req: &Request<'_>) -> Result<Approval, StoreError> {
        let b = req.binding;
        let rules = serde_json::to_string(req.rules).expect("strings serialise");
        self.conn().execute(
            &format!("INSERT INTO approvals ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', ?11, ?12, NULL, NULL, NULL, NULL)"),
            params![req.id, b.tenant, b.caller, b.server, b.tool, b.proposal_sha256, b.policy_version, req.arguments.to_string(), req.reason, rules, req.now_ms, req.now_ms + req.ttl_ms],
        )?;
        self.get(req.id)
    }

    pub fn get(&self, id: &str) -> Result<Approval, StoreError> {
        self.find(id)?.ok_or_else(|| StoreError::NotFound(id.to_string()))
    }

    pub fn find(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        Ok(self.conn().query_row(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"), [id], row).optional()?)
    }

    /// The newest approval with exactly this binding.
    pub fn latest(&self, b: &Binding) -> Result<Option<Approval>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM approvals WHERE tenant = ?1 AND caller = ?2 AND server = ?3 AND tool = ?4 \
                     AND proposal_sha256 = ?5 AND policy_version = ?6 ORDER BY created_ms DESC, rowid DESC LIMIT 1"
                ),
                params![b.tenant, b.caller, b.server, b.tool, b.proposal_sha256, b.policy_version],
                row,
            )
            .optional()?)
    }

    /// Marks undecided or unused approvals past their expiry as expired.
    pub fn expire_due(&self, now_ms: i64) -> Result<usize, StoreError> {
        Ok(self.conn().execute("UPDATE approvals SET state = 'expired' WHERE state IN ('pending', 'approved') AND expires_ms <= ?1", [now_ms])?)
    }

    /// How many approvals are in `state` (as stored; expiry is noted by `list`).
    pub fn count(&self, state: ApprovalState) -> Result<u64, StoreError> {
        Ok(self.conn().query_row("SELECT count(*) FROM approvals WHERE state = ?1", [state.as_str()], |r| r.get::<_, i64>(0))? as u64)
    }

    /// Newest first; only `state` when given.
    pub fn list(&self, state: Option<ApprovalState>, now_ms: i64) -> Result<Vec<Approval>, StoreError> {
        self.expire_due(now_ms)?;
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM approvals WHERE ?1 IS NULL OR state = ?1 ORDER BY created_ms DESC, rowid DESC"))?;
        let rows = stmt.query_map([state.map(ApprovalState::as_str)], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// An approver's decision on a pending approval. The caller who asked
    /// can never decide its own call.
    pub fn decide(&self, id: &str, approve: bool, approver: &str, reason: &str, now_ms: i64) -> Result<Approval, StoreError> {
        {
            let mut conn = self.conn();
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let current = tx
                .query_row(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"), [id], row)
                .optional()?
                .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
            if current.binding.caller == approver {
                return Err(StoreError::SelfApproval { approver: approver.to_string() });
            }
            match current.state_at(now_ms) {
                ApprovalState::Pending => {}
                ApprovalState::Expired => {
                    tx.execute("UPDATE approvals SET state = 'expired' WHERE id = ?1 AND state = 'pending'", [id])?;
                    tx.commit()?;
                    return Err(StoreError::Expired(id.to_string()));
                }
                state => return Err(StoreError::NotPending { id: id.to_string(), state: state.as_str() }),
            }
            let state = if approve { "approved" } else { "denied" };
            tx.execute(
                "UPDATE approvals SET state = ?2, decided_by = ?3, decision_reason = ?4, decided_ms = ?5 WHERE id = ?1 AND state = 'pending'",
                params![id, state, approver, reason, now_ms],
            )?;
            tx.commit()?;
        }
        self.get(id)
    }

    /// Uses an approved approval for its one dispatch. Exactly one of any
    /// number of concurrent callers succeeds.
    pub fn consume(&self, id: &str, now_ms: i64) -> Result<Approval, StoreError> {
        let changed = self.conn().execute(
            "UPDATE approvals SET state = 'consumed', used_ms = ?2 WHERE id = ?1 AND state = 'approved' AND expires_ms > ?2",
            params![id, now_ms],
        )?;
        let current = self.get(id)?;
        if changed == 1 {
            return Ok(current);
        }
        Err(StoreError::NotApproved { id: id.to_string(), state: current.state_at(now_ms).as_str() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn binding(proposal: char) -> Binding {
        Binding {
            tenant: "atlas".into(),
            caller: "agent".into(),
            server: "parts".into(),
            tool: "raise_parts_order".into(),
            proposal_sha256: proposal.to_string().repeat(64),
            policy_version: "v1".into(),
        }
    }

    fn store() -> (tempfile::TempDir, ApprovalStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = ApprovalStore::open(&dir.path().join("ledger.sqlite3")).unwrap();
        (dir, store)
    }

    fn ask(store: &ApprovalStore, id: &str, b: &Binding, now: i64) -> Approval {
        let args = json!({"quantity": 8});
        store.create(&Request { id, binding: b, arguments: &args, reason: "over five", rules: &["r".into()], now_ms: now, ttl_ms: 1000 }).unwrap()
    }

    #[test]
    fn an_approval_lives_pending_approved_consumed_once() {
        let (_d, s) = store();
        let a = ask(&s, "apr_1", &binding('a'), 0);
        assert_eq!(a.state, ApprovalState::Pending);
        assert_eq!(s.latest(&binding('a')).unwrap().unwrap().id, "apr_1");
        assert!(s.latest(&binding('b')).unwrap().is_none());
        assert!(matches!(s.consume("apr_1", 10), Err(StoreError::NotApproved { state: "pending", .. })));
        let a = s.decide("apr_1", true, "dana", "ok for the fleet", 10).unwrap();
        assert_eq!((a.state, a.decided_by.as_deref()), (ApprovalState::Approved, Some("dana")));
        assert!(matches!(s.decide("apr_1", false, "dana", "changed my mind", 11), Err(StoreError::NotPending { state: "approved", .. })));
        assert_eq!(s.consume("apr_1", 20).unwrap().state, ApprovalState::Consumed);
        assert!(matches!(s.consume("apr_1", 21), Err(StoreError::NotApproved { state: "consumed", .. })));
    }

    #[test]
    fn the_caller_cannot_decide_its_own_call_and_expiry_is_final() {
        let (_d, s) = store();
        ask(&s, "apr_1", &binding('a'), 0);
        assert!(matches!(s.decide("apr_1", true, "agent", "me", 10), Err(StoreError::SelfApproval { .. })));
        assert!(matches!(s.decide("apr_1", true, "dana", "late", 1000), Err(StoreError::Expired(_))));
        assert_eq!(s.get("apr_1").unwrap().state, ApprovalState::Expired);
        ask(&s, "apr_2", &binding('b'), 0);
        s.decide("apr_2", true, "dana", "ok", 10).unwrap();
        assert!(matches!(s.consume("apr_2", 1000), Err(StoreError::NotApproved { state: "expired", .. })));
        assert!(matches!(s.decide("nope", true, "dana", "x", 0), Err(StoreError::NotFound(_))));
    }

    #[test]
    fn the_store_itself_refuses_illegal_transitions_and_rewrites() {
        let (_d, s) = store();
        ask(&s, "apr_1", &binding('a'), 0);
        s.decide("apr_1", false, "dana", "no", 10).unwrap();
        let conn = s.conn();
        let err = conn.execute("UPDATE approvals SET state = 'approved' WHERE id = 'apr_1'", []).unwrap_err();
        assert!(err.to_string().contains("illegal approval transition"), "{err}");
        let err = conn.execute("UPDATE approvals SET arguments = '{}' WHERE id = 'apr_1'", []).unwrap_err();
        assert!(err.to_string().contains("immutable"), "{err}");
        assert!(conn.execute("DELETE FROM approvals", []).is_err());
    }

    #[test]
    fn concurrent_consumers_win_exactly_once_across_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite3");
        let s = ApprovalStore::open(&path).unwrap();
        ask(&s, "apr_1", &binding('a'), 0);
        s.decide("apr_1", true, "dana", "ok", 1).unwrap();
        // Separate connections, as two gateway processes would have.
        let stores: Vec<Arc<ApprovalStore>> = (0..8).map(|_| Arc::new(ApprovalStore::open(&path).unwrap())).collect();
        let wins: usize = stores
            .into_iter()
            .map(|s| std::thread::spawn(move || s.consume("apr_1", 5).is_ok()))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap() as usize)
            .sum();
        assert_eq!(wins, 1);
    }

    #[test]
    fn list_filters_by_state_and_notes_expiry() {
        let (_d, s) = store();
        ask(&s, "apr_1", &binding('a'), 0);
        ask(&s, "apr_2", &binding('b'), 500);
        assert_eq!(s.list(Some(ApprovalState::Pending), 100).unwrap().len(), 2);
        let pending = s.list(Some(ApprovalState::Pending), 1200).unwrap();
        assert_eq!(pending.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), vec!["apr_2"]);
        assert_eq!(s.list(None, 1200).unwrap().len(), 2);
    }
}
