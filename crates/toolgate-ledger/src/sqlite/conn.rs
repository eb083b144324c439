//! Opening the SQLite file: durable by default (WAL, synchronous=FULL), a
//! busy timeout so the gateway and the CLI wait for each other instead of
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
];

/// How long a connection waits for another's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

pub fn open(path: &Path) -> rusqlite::Result<Connection> {
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

fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let applied: usize = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
    }
    tx.commit()
}
