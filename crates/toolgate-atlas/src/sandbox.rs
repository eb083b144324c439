//! The sandbox: the only place an Atlas server writes. Each kind of write is
//! an append-only JSON-lines file under the state directory; nothing is ever
//! edited, and nothing leaves the machine.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

/// Notes appended by `post_ticket_update`.
pub const NOTES: &str = "notes.jsonl";
/// Orders recorded by `raise_parts_order`.
pub const ORDERS: &str = "orders.jsonl";
/// Bundles "sent" by `export_service_records`: they stop here.
pub const OUTBOX: &str = "outbox.jsonl";

pub struct Sandbox {
    dir: PathBuf,
    /// Keeps the default temporary directory alive as long as the server.
    _temp: Option<tempfile::TempDir>,
    /// One writer at a time, so sequence numbers and lines never interleave.
    lock: Mutex<()>,
}

impl Sandbox {
    /// Opens (creating if needed) `dir`, or a fresh temporary directory.
    pub fn open(dir: Option<&Path>) -> std::io::Result<Self> {
        let (dir, temp) = match dir {
            Some(d) => {
                fs::create_dir_all(d)?;
                (d.to_path_buf(), None)
            }
            None => {
                let temp = tempfile::Builder::new().prefix("toolgate-atlas-").tempdir()?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        Ok(Self { dir, _temp: temp, lock: Mutex::new(()) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one record and returns its 1-based sequence number in the
    /// file. `build` receives that number, so ids derive from it. The line is
    /// flushed to disk before the call returns: an acknowledged write is kept.
    pub fn append(&self, file: &str, build: impl FnOnce(u64) -> Value) -> std::io::Result<Value> {
        let _guard = self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let path = self.dir.join(file);
        let seq = self.count_lines(&path)? + 1;
        let record = build(seq);
        let mut line = serde_json::to_vec(&record)?;
        line.push(b'\n');
        let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
        f.write_all(&line)?;
        f.sync_data()?;
        Ok(record)
    }

    /// Every record of `file` for which `keep` holds, oldest first.
    pub fn read(&self, file: &str, keep: impl Fn(&Value) -> bool) -> std::io::Result<Vec<Value>> {
        let path = self.dir.join(file);
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for line in BufReader::new(f).lines() {
            let line = line?;
            // A torn last line (power loss mid-write) is skipped, not fatal.
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if keep(&v) {
                    out.push(v);
                }
            }
        }
        Ok(out)
    }

    fn count_lines(&self, path: &Path) -> std::io::Result<u64> {
        match File::open(path) {
            Ok(f) => Ok(BufReader::new(f).lines().count() as u64),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }
}
