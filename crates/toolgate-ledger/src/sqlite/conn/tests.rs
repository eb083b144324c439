use std::sync::Arc;

use rusqlite::params;
use toolgate_core::receipt::{self, Draft, LoggedReceipt, Receipt, ReceiptKey};

use super::*;

#[test]
fn a_ledger_an_earlier_release_left_world_readable_is_made_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    drop(Connection::open(&path).unwrap());
    let sequence = sequence_path(&path);
    std::fs::write(&sequence, b"").unwrap();
    for p in [&path, &sequence] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let conn = open(&path).unwrap();
    let wal = dir.path().join("ledger.sqlite3-wal");
    for p in [&path, &sequence, &wal] {
        assert_eq!(
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777,
            0o600,
            "{}",
            p.display()
        );
    }
    drop(conn);
}

fn receipt(key: &ReceiptKey, v: u32, tool: &str) -> Receipt {
    Receipt {
        v,
        kid: key.kid().into(),
        log_index: 0,
        issued_at: "2026-11-30T00:00:00.000Z".into(),
        tenant: "atlas".into(),
        caller: "agent".into(),
        server: "support".into(),
        tool: tool.into(),
        tool_definition_sha256: "d".repeat(64),
        proposal_sha256: "a".repeat(64),
        decision: "allow".into(),
        reason: "automatic".into(),
        rules: vec![],
        policy_version: "p".into(),
        approval: None,
        operation: None,
        execution_status: "dispatched".into(),
        result_status: "ok".into(),
        result_sha256: None,
        arguments_hash: "0".repeat(64),
        result_hash: None,
        arguments: None,
        result: None,
        sandbox: None,
        config_version: None,
        identity: None,
    }
}

/// A ledger written before the compact form (schema 7, signed JSON text
/// per row) keeps every receipt byte for byte, and its guards, after
/// the migration; new receipts follow it compactly.
#[test]
fn receipts_of_the_text_form_survive_the_move_to_the_compact_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite3");
    let key = ReceiptKey::new(ed25519_dalek::SigningKey::from_bytes(&[4; 32]));
    let old = receipt::sign(receipt(&key, 1, "get_ticket"), key.signing_key()).unwrap();
    let old_text = old.to_json();
    let old_leaf = toolgate_core::merkle::leaf_hash(old_text.as_bytes());
    {
        let conn = Connection::open(&path).unwrap();
        for (_, sql) in &MIGRATIONS[..7] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 7).unwrap();
        conn.execute(
            "INSERT INTO receipts (log_index, kid, leaf_hash, signed, salt, proposal, created_ms) VALUES (0, ?1, ?2, ?3, ?4, '{}', 5)",
            params![key.kid(), &old_leaf[..], old_text, &[1u8; 32][..]],
        )
        .unwrap();
    }
    let conn = open(&path).unwrap();
    let version: i64 =
        conn.query_row("PRAGMA user_version", [], |r| r.get("user_version")).unwrap();
    assert_eq!(version as usize, MIGRATIONS.len());
    let draft = Draft {
        receipt: receipt(&key, receipt::RECEIPT_VERSION, "close_ticket"),
        salt: [2; 32],
        asked: None,
        key: Arc::new(ReceiptKey::new(key.signing_key().clone())),
        sign_each: false,
        placement: Default::default(),
    };
    let digests = crate::digests::Dictionary::default();
    assert_eq!(super::super::receipts::append(&conn, &digests, vec![draft]).unwrap(), vec![1]);
    let rows = super::super::receipts::list(&conn, &digests, 0, 10).unwrap();
    assert_eq!(
        (rows[0].logged.as_str(), rows[0].leaf_hash, rows[0].salt, rows[0].asked.as_deref()),
        (old_text.as_str(), old_leaf, [1; 32], Some("{}"))
    );
    let new = LoggedReceipt::from_json(rows[1].logged.as_bytes(), Default::default()).unwrap();
    assert_eq!(
        (new.receipt.log_index, new.receipt.tool.as_str(), new.signature.is_none()),
        (1, "close_ticket", true)
    );
    assert_eq!(rows[1].leaf_hash, toolgate_core::merkle::leaf_hash(rows[1].entry().as_bytes()));
    let body: Vec<u8> = conn
        .query_row("SELECT body FROM receipts WHERE log_index = 1", [], |r| r.get("body"))
        .unwrap();
    assert_eq!(body[0], receipt::compact::FORMAT);
    assert!(
        body.len() * 3 < rows[1].logged.len(),
        "{} bytes for a {}-byte leaf",
        body.len(),
        rows[1].logged.len()
    );
    // The guards came back with the table.
    let refused = |sql: &str| conn.execute_batch(sql).unwrap_err().to_string();
    assert!(refused("DELETE FROM receipts").contains("append-only"));
    assert!(refused("UPDATE receipts SET proposal = 'x'").contains("append-only"));
    assert!(
        refused("INSERT INTO receipts (log_index, body, salt) VALUES (5, x'01', zeroblob(32))")
            .contains("next log index")
    );
    assert!(refused("INSERT INTO checkpoints (size, root, note, created_ms) VALUES (3, zeroblob(32), 'n', 0)").contains("cannot cover"));
}
