//! Opening the SQLite file: WAL, synchronous=FULL for the migrations (the
//! ledger's writer then commits NORMAL and syncs for itself: see `syncer`),
//! a busy timeout so the gateway and the CLI wait for each other instead of
//! failing, and versioned migrations applied in one transaction each.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

use crate::migrations::SQLITE as MIGRATIONS;

/// The sequence file of the ledger at `db` (see `sequence`).
pub fn sequence_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".sequence");
    PathBuf::from(name)
}

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
            Some(
                "it is read-only (the file, its folder or its filesystem); the ledger must be \
                    writable: fix its permissions or mount, then start again"
                    .into(),
            ),
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
    let applied: usize = tx.query_row("PRAGMA user_version", [], |r| r.get("user_version"))?;
    for (i, (_, sql)) in MIGRATIONS.iter().enumerate().skip(applied) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
    }
    tx.commit()
}

#[cfg(test)]
mod tests;
