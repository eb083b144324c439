//! The sequence: where a receipt that attests no change of state (a read, a
//! refusal, a replay) becomes durable and ordered without a SQLite
//! transaction of its own. Its sealed row is appended, with its index, to
//! a file beside the database (`<ledger>.sequence`) by one `write` on the
//! caller's thread; the ledger's next transaction — the writer's batch, a
//! timer's, or the next reader's — integrates what the file holds into the
//! `receipts` table first and then empties the file. A write's receipts do
//! not pass through here: they stay in their operation's transaction.
//!
//! Durability is the same as such a receipt's commit had before: the frame
//! is in the kernel when the answer is given, so it survives a crash of the
//! process (kill -9), and it survives power loss once the next durable
//! commit — which integrates it first — lands.
//!
//! One process at a time may hold frames in the file: the file's lock
//! (`flock`) is held while it holds any, and every transaction of every
//! process takes it before SQLite's write lock (order: this mutex, the
//! file's lock, SQLite's). So a transaction always sees the whole log, and
//! an index handed out here is never handed out by SQLite too. A process
//! that died with frames left them in the file; whoever takes the lock
//! next integrates them.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::checksum::fnv1a;
use super::conn;
use super::receipts::{insert, log_size};
use super::recent::RecentLeaves;
use crate::digests::Dictionary;
use crate::receipts::{Row, seal};
use crate::{Draft, LedgerError, Result};

/// The first byte of every frame's payload: the frame's layout.
const FORMAT: u8 = 1;

/// Frames appended since the last integration after which the appender
/// asks the writer to integrate them now rather than at its timer.
pub const INTEGRATE_EVERY: u64 = 256;

pub struct Sequence {
    file: File,
    path: PathBuf,
    /// This process holds the file's lock.
    held: bool,
    /// While `held` by appends: the next index, the file's length, and the
    /// frames in it.
    next: u64,
    len: u64,
    frames: u64,
    /// Set when the writer was asked to integrate; cleared when it did.
    asked: bool,
    /// Reads the log's size when appends take the lock (only a ledger that
    /// sequences has one): the writer's connection is the writer's.
    reader: Option<Connection>,
    /// The numbers a frame's row may name digests by: committed ones only.
    digests: Arc<Dictionary>,
    /// The leaf hashes of what was appended, for the next checkpoint.
    recent: Arc<RecentLeaves>,
}

/// What an append did: the indexes taken, or the drafts back when the
/// sequence cannot take them now (a transaction holds it; another process
/// holds the file; the file holds frames to recover first) and they must
/// go through a transaction.
pub enum Appended {
    At(Vec<u64>),
    Busy(Vec<Draft>),
}

impl Sequence {
    /// Opens (creating, owner-only) the sequence file of the ledger at `db`;
    /// `sequences`: whether this process appends to it (the gateway) or
    /// only integrates what it finds (the CLI).
    pub fn open(
        db: &Path,
        sequences: bool,
        digests: Arc<Dictionary>,
        recent: Arc<RecentLeaves>,
    ) -> Result<Self> {
        let path = conn::sequence_path(db);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| {
                LedgerError::Store(format!(
                    "cannot open the ledger's sequence file {}: {e}",
                    path.display()
                ))
            })?;
        let reader = if sequences { Some(conn::open_reader(db)?) } else { None };
        Ok(Self {
            file,
            path,
            held: false,
            next: 0,
            len: 0,
            frames: 0,
            asked: false,
            reader,
            digests,
            recent,
        })
    }

    /// Whether this process holds frames (or the lock) a transaction must integrate.
    pub fn held(&self) -> bool {
        self.held
    }

    /// Appends `drafts` at the next indexes: sealed, framed, one `write`.
    /// Returns whether the writer should be asked to integrate now.
    pub fn append(&mut self, drafts: Vec<Draft>) -> Result<(Appended, bool)> {
        let Some(reader) = &self.reader else { return Ok((Appended::Busy(drafts), false)) };
        if !self.held {
            match self.file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Ok((Appended::Busy(drafts), false)),
                Err(TryLockError::Error(e)) => return Err(self.failed("lock", e)),
            }
            // Frames of a process that died: a transaction recovers them first.
            let stale = self.file.metadata().map_err(|e| self.failed("read", e))?.len();
            let size = if stale == 0 { Some(log_size(reader)) } else { None };
            match size {
                Some(Ok(size)) => {
                    (self.held, self.next, self.len, self.frames) = (true, size, 0, 0);
                }
                other => {
                    let _ = self.file.unlock();
                    other.transpose()?;
                    return Ok((Appended::Busy(drafts), false));
                }
            }
        }
        // Seal everything before writing anything: a seal that fails leaves no frame.
        let (first, n) = (self.next, drafts.len() as u64);
        let mut bytes = Vec::with_capacity(drafts.len() * 600);
        let mut leaves = Vec::with_capacity(drafts.len());
        for (i, draft) in drafts.into_iter().enumerate() {
            let (row, leaf) = seal(draft, first + i as u64, &self.digests)?;
            frame(&mut bytes, first + i as u64, &row);
            leaves.push((row.salt, row.body, leaf));
        }
        if let Err(e) = (&self.file).write_all(&bytes) {
            // A torn frame is cut off (a reader would stop there anyway).
            let _ = self.file.set_len(self.len);
            return Err(self.failed("write", e));
        }
        for (i, (salt, body, leaf)) in leaves.into_iter().enumerate() {
            self.recent.remember(first + i as u64, &salt, &body, leaf);
        }
        self.len += bytes.len() as u64;
        self.next += n;
        self.frames += n;
        let ask = self.frames >= INTEGRATE_EVERY && !std::mem::replace(&mut self.asked, true);
        Ok((Appended::At((first..first + n).collect()), ask))
    }

    /// Before a transaction begins: takes the file's lock unless held,
    /// waiting up to `wait` for another process to give it up. False when
    /// it could not (the transaction must not begin).
    pub fn take(&mut self, wait: Duration) -> Result<bool> {
        if self.held {
            return Ok(true);
        }
        let deadline = Instant::now() + wait;
        loop {
            match self.file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                Err(TryLockError::WouldBlock) => return Ok(false),
                Err(TryLockError::Error(e)) => return Err(self.failed("lock", e)),
            }
        }
        self.held = true;
        (self.len, self.frames) = (0, 0);
        Ok(true)
    }

    /// In the transaction just begun: inserts the frames the file holds,
    /// from the log's size on, in order. Returns how many.
    pub fn integrate(&mut self, conn: &Connection) -> Result<u64> {
        let len = self.file.metadata().map_err(|e| self.failed("read", e))?.len();
        if len == 0 {
            return Ok(0);
        }
        let mut bytes = vec![0; len as usize];
        self.file.read_exact_at(&mut bytes, 0).map_err(|e| self.failed("read", e))?;
        let mut expect = log_size(conn)?;
        let mut added = 0;
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let Some((index, row, tail)) = unframe(rest) else {
                // Only a crash mid-write leaves a torn frame, and its answer was never given.
                tracing::warn!(target: "toolgate::ledger", file = %self.path.display(), bytes = rest.len(), "the ledger's sequence file ends in a torn frame; it is dropped");
                break;
            };
            rest = tail;
            if index < expect {
                continue; // integrated already: the file outlived the commit that took it
            }
            if index > expect {
                tracing::warn!(target: "toolgate::ledger", file = %self.path.display(), index, expected = expect, "the ledger's sequence file skips ahead of the log; the frames after the gap are dropped");
                break;
            }
            insert(conn, index, row)?;
            expect += 1;
            added += 1;
        }
        Ok(added)
    }

    /// After the transaction: once it committed, what it integrated is in
    /// the log and the file is emptied. Either way the lock is given up
    /// unless appends still hold frames in it (a failed commit).
    pub fn settle(&mut self, committed: bool) {
        if committed
            && (self.len > 0 || self.frames > 0 || self.file.metadata().is_ok_and(|m| m.len() > 0))
        {
            if let Err(e) = self.file.set_len(0) {
                // Harmless: the next transaction skips what is integrated.
                tracing::warn!(target: "toolgate::ledger", file = %self.path.display(), error = %e, "cannot empty the ledger's sequence file");
            }
            (self.len, self.frames) = (0, 0);
        }
        if committed || self.frames == 0 {
            let _ = self.file.unlock();
            self.held = false;
            self.asked = false;
        }
    }

    fn failed(&self, what: &str, e: std::io::Error) -> LedgerError {
        LedgerError::Store(format!(
            "cannot {what} the ledger's sequence file {}: {e}",
            self.path.display()
        ))
    }
}

/// The whole, intact frames at the start of `bytes`.
#[cfg(test)]
fn count(mut bytes: &[u8]) -> u64 {
    let mut n = 0;
    while let Some((_, _, tail)) = unframe(bytes) {
        (bytes, n) = (tail, n + 1);
    }
    n
}

/// `len (u32 LE) | payload | FNV-1a 64 of len and payload (LE)`; the
/// payload: `FORMAT | index (u64 LE) | salt (32) | body length (u32 LE) |
/// body | 0, or 1 and the record of what was asked`.
fn frame(out: &mut Vec<u8>, index: u64, row: &Row) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(FORMAT);
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&row.salt);
    out.extend_from_slice(&(row.body.len() as u32).to_le_bytes());
    out.extend_from_slice(&row.body);
    match &row.asked {
        Some(a) => {
            out.push(1);
            out.extend_from_slice(a.as_bytes());
        }
        None => out.push(0),
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    let sum = fnv1a(&out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// The first frame of `bytes`, if whole and intact, and what follows it.
fn unframe(bytes: &[u8]) -> Option<(u64, Row, &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let whole = bytes.get(..4 + len + 8)?;
    let (framed, sum) = whole.split_at(4 + len);
    if fnv1a(framed).to_le_bytes() != sum {
        return None;
    }
    let p = &framed[4..];
    if *p.first()? != FORMAT {
        return None;
    }
    let index = u64::from_le_bytes(p.get(1..9)?.try_into().ok()?);
    let salt: [u8; 32] = p.get(9..41)?.try_into().ok()?;
    let body_len = u32::from_le_bytes(p.get(41..45)?.try_into().ok()?) as usize;
    let body = p.get(45..45 + body_len)?.to_vec();
    let asked = match p.get(45 + body_len..)? {
        [0] => None,
        [1, text @ ..] => Some(String::from_utf8(text.to_vec()).ok()?),
        _ => return None,
    };
    Some((index, Row { body, salt, asked }, &bytes[whole.len()..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: u8, asked: Option<&str>) -> Row {
        Row { body: vec![i; 10 + i as usize], salt: [i; 32], asked: asked.map(str::to_string) }
    }

    #[test]
    fn frames_round_trip_and_a_torn_tail_is_refused() {
        let mut bytes = Vec::new();
        frame(&mut bytes, 7, &row(1, None));
        frame(&mut bytes, 8, &row(2, Some("asked \u{1f} packed")));
        assert_eq!(count(&bytes), 2);
        let (i, r, rest) = unframe(&bytes).unwrap();
        assert_eq!((i, r.body, r.salt, r.asked), (7, vec![1; 11], [1; 32], None));
        let (i, r, rest) = unframe(rest).unwrap();
        assert_eq!((i, r.asked.as_deref(), rest.len()), (8, Some("asked \u{1f} packed"), 0));
        // Every cut short of the whole: the whole frames before it, no more.
        let first = bytes.len() - unframe(&bytes).unwrap().2.len();
        for cut in 0..bytes.len() {
            assert_eq!(count(&bytes[..cut]), u64::from(cut >= first), "cut at {cut}");
        }
        // One flipped bit anywhere in a frame refuses it.
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(count(&bad) < 2, "bit flipped at {at}");
        }
    }
}
