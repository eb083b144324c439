//! WAL checkpoints, off the writer thread.
//!
//! SQLite's automatic checkpoint runs inside the COMMIT that crosses its
//! threshold, so one request in a few thousand waited for a thousand pages
//! to be copied into the database and two fsyncs: that was the ledger's
//! p99 (at 1,000 appends/s: 0.77–0.88 ms with it, 0.27–0.29 ms with this
//! thread; `cargo bench -p toolgate-ledger --bench receipts`). Here a
//! thread with its own connection runs PASSIVE checkpoints, which never
//! wait for the writer nor make it wait, and the writer's connection has
//! automatic checkpoints off.
//!
//! A PASSIVE checkpoint copies what the WAL holds when it starts; SQLite
//! rewinds the WAL when a transaction begins after everything was copied.
//! Under endless load that moment may not come, so past `CAP` frames a
//! RESTART checkpoint waits (by a short busy timeout) for a gap between the
//! writer's transactions and rewinds it then. A RESTART holds new writers
//! back while it waits, so it is only tried when no reader pins old frames
//! (a long `toolgate export`, say): then the wait is for the writer's
//! current batch alone, and the WAL grows until such a reader is done, as
//! it would under SQLite's own checkpoints.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;

use super::Synchronous;
use crate::{LedgerError, Result};

/// How often the WAL is copied into the database.
const EVERY: Duration = Duration::from_millis(250);
/// WAL frames (pages) past which the checkpoint waits to rewind it: 64 MiB.
const CAP: i64 = 16_384;
/// The longest a RESTART may hold the writer back.
const REWIND_WAIT: Duration = Duration::from_millis(200);

/// Starts the checkpointer; it stops when `stop`'s sender is dropped.
pub fn spawn(path: &Path, sync: Synchronous, stop: mpsc::Receiver<()>) -> Result<()> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(REWIND_WAIT)?;
    // A checkpoint fsyncs the WAL before and the database after copying,
    // under NORMAL and FULL alike; the setting only has to be one of them.
    conn.pragma_update(
        None,
        "synchronous",
        if sync == Synchronous::Full { "FULL" } else { "NORMAL" },
    )?;
    std::thread::Builder::new()
        .name("toolgate-ledger-checkpointer".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(EVERY) {
                if let Err(e) = checkpoint(&conn, CAP) {
                    // The next round tries again; the WAL only grows meanwhile.
                    tracing::warn!(target: "toolgate::ledger", error = %e, "WAL checkpoint failed");
                }
            }
        })
        .map_err(|e| LedgerError::Store(format!("cannot start the ledger checkpointer: {e}")))?;
    Ok(())
}

/// One round; past `cap` frames, a rewind.
fn checkpoint(conn: &Connection, cap: i64) -> rusqlite::Result<()> {
    // After a checkpoint in `mode`: the WAL's frames, and how many of them
    // are in the database.
    let frames = |mode: &str| {
        conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            Ok((r.get::<_, i64>("log")?, r.get::<_, i64>("checkpointed")?))
        })
    };
    let (mut log, mut copied) = frames("PASSIVE")?;
    if log <= cap {
        return Ok(());
    }
    // Catch up without blocking anyone until little arrives during a round,
    // so the rewind blocks the writer only for the last few frames.
    for _ in 0..4 {
        let before = log;
        (log, copied) = frames("PASSIVE")?;
        if log - before < 64 {
            break;
        }
    }
    // Frames left uncopied beyond the last few mean a reader still needs them.
    if log > cap && log - copied < 64 {
        frames("RESTART")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new database and a connection like the writer's (WAL, no
    /// automatic checkpoints) that has written `pages` pages.
    fn written(pages: usize) -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.sqlite3");
        let c = Connection::open(&path).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        c.execute_batch("CREATE TABLE IF NOT EXISTS t (b BLOB)").unwrap();
        write_pages(&c, pages);
        (dir, path, c)
    }

    fn write_pages(c: &Connection, n: usize) {
        for _ in 0..n {
            c.execute("INSERT INTO t VALUES (zeroblob(4000))", []).unwrap();
        }
    }

    /// WAL frames after one more small write: few once the WAL was rewound.
    fn frames_after_a_write(c: &Connection) -> i64 {
        write_pages(c, 1);
        c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get("log")).unwrap()
    }

    fn checkpointer(path: &Path) -> Connection {
        let c = Connection::open(path).unwrap();
        c.busy_timeout(REWIND_WAIT).unwrap();
        c
    }

    #[test]
    fn past_the_cap_the_wal_is_copied_and_rewound() {
        let (_dir, path, w) = written(200);
        checkpoint(&checkpointer(&path), 100).unwrap();
        assert!(frames_after_a_write(&w) < 10, "the WAL starts over after a rewind");
    }

    #[test]
    fn a_reader_on_old_frames_is_not_waited_for_and_the_rewind_follows_it() {
        let (_dir, path, w) = written(50);
        // A long read (an export) pins the frames of its snapshot.
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader.query_row("SELECT count(*) AS n FROM t", [], |r| r.get("n")).unwrap();
        write_pages(&w, 200);
        let started = std::time::Instant::now();
        checkpoint(&checkpointer(&path), 100).unwrap();
        assert!(
            started.elapsed() < REWIND_WAIT,
            "no RESTART waited for the reader: {:?}",
            started.elapsed()
        );
        assert!(frames_after_a_write(&w) > 200, "the WAL is kept for the reader");
        reader.execute_batch("COMMIT").unwrap();
        checkpoint(&checkpointer(&path), 100).unwrap();
        assert!(frames_after_a_write(&w) < 10, "rewound once the reader is done");
    }
}
