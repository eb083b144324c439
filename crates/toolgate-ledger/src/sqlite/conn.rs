//! Opening the SQLite file: WAL, synchronous=FULL for the migrations (the
//! ledger's writer then commits NORMAL and syncs for itself: see `syncer`),
//! a busy timeout so the gateway and the CLI wait for each other instead of
//! failing, and versioned migrations applied in one transaction each.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

/// Each entry is one schema version; never edit a shipped one, append.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite/0001_approvals.sql"),
    include_str!("../migrations/sqlite/0002_operations.sql"),
    include_str!("../migrations/sqlite/0003_receipts.sql"),
    include_str!("../migrations/sqlite/0004_approval_subject.sql"),
    include_str!("../migrations/sqlite/0005_operation_subject.sql"),
    include_str!("../migrations/sqlite/0006_approval_operation_key.sql"),
    include_str!("../migrations/sqlite/0007_runs.sql"),
    include_str!("../migrations/sqlite/0008_compact_receipts.sql"),
    include_str!("../migrations/sqlite/0009_archives.sql"),
    include_str!("../migrations/sqlite/0010_digests.sql"),
    include_str!("../migrations/sqlite/0011_retention.sql"),
    include_str!("../migrations/sqlite/0012_fleet.sql"),
    include_str!("../migrations/sqlite/0013_connections.sql"),
];

/// How long a connection waits for another's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

pub fn open(path: &Path) -> rusqlite::Result<Connection> {
    create_owner_only(path).map_err(|e| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("cannot create it owner-only: {e}; check its folder's permissions")),
        )
    })?;
    let mut conn = Connection::open(path)?;
    // SQLite opens a file it may not write read-only, without a word, and
    // the first write fails; a ledger nobody can write is refused here, at
    // start, with what to do, rather than every call failing later.
    if conn.is_readonly(rusqlite::MAIN_DB)? {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
            Some("it is read-only (the file, its folder or its filesystem); the ledger must be writable: fix its permissions or mount, then start again".into()),
        ));
    }
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    migrate(&mut conn)?;
    Ok(conn)
}

/// Creates a new ledger file empty and owner-only (0600), before SQLite
/// opens it: SQLite would make it 0644 less the umask (readable by every
/// user: receipts, approvals, sessions), and on unix it gives the `-wal`
/// and `-shm` files it makes the main file's mode, so they are 0600 too.
/// A file already there is left as it is (not ours to `chmod`); `O_EXCL`
/// never follows a link there.
fn create_owner_only(path: &Path) -> std::io::Result<()> {
    if path.as_os_str().is_empty() || path.as_os_str() == ":memory:" {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        // Made by us just now: 0600 whatever the umask took away.
        #[cfg(unix)]
        Ok(file) => file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600)),
        #[cfg(not(unix))]
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => tighten_existing(path),
        Err(e) => Err(e),
    }
}

/// A ledger an earlier release created kept SQLite's default mode (0644):
/// readable by every user of the host. The database file and its `-wal`,
/// `-shm` and sequence files are made owner-only once more, when they are
/// real files of this user; anything else (a link, another user's file) is
/// left as it is: not ours to change.
#[cfg(unix)]
fn tighten_existing(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    for suffix in ["", "-wal", "-shm", ".sequence"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let Ok(meta) = std::fs::symlink_metadata(&name) else { continue };
        if meta.file_type().is_file() && meta.uid() == me && meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o600))?;
            tracing::warn!(target: "toolgate::ledger", file = %std::path::Path::new(&name).display(), "the ledger's file was readable by other users (an earlier release's mode); it is owner-only now");
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn tighten_existing(_: &Path) -> std::io::Result<()> {
    Ok(())
}

/// A second connection that only reads (the sequence's, for the log's
/// size): opened after `open` migrated the file.
pub fn open_reader(path: &Path) -> crate::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let applied: usize = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
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
        let sequence = super::super::sequence::path_of(&path);
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
            for sql in &MIGRATIONS[..7] {
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
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
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
            .query_row("SELECT body FROM receipts WHERE log_index = 1", [], |r| r.get(0))
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
}
