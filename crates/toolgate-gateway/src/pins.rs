//! Contract pins: the lock file beside the config records, per exposed tool,
//! the SHA-256 of the definition first accepted and the definition itself
//! (so a change can be shown as a diff). A running gateway pins tools it sees
//! for the first time; a changed definition stays refused until an operator
//! accepts it with `toolgate tools --accept NAME`, which rewrites the pin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool's accepted contract, as the lock file records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    sha256: String,
    /// The accepted definition, kept so a change can be shown as a diff.
    pub definition: Value,
    /// Seconds since the Unix epoch.
    accepted_at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct LockFile {
    version: u32,
    tools: BTreeMap<String, Pin>,
}

/// How a tool's live definition compares with its pin.
#[derive(Debug, Clone, PartialEq)]
pub enum PinStatus {
    /// The live definition is the pinned one.
    Pinned,
    /// Never seen before.
    New,
    /// The live definition differs from the pinned one.
    Changed(Pin),
}

impl PinStatus {
    /// The accepted definition the live one drifted from, if it did.
    pub fn drifted_from(&self) -> Option<&Value> {
        match self {
            PinStatus::Changed(pin) => Some(&pin.definition),
            _ => None,
        }
    }
}

/// The lock file's pins, cached; every write merges with the file first,
/// since the CLI and replicas write it too.
#[derive(Debug)]
pub struct PinStore {
    path: PathBuf,
    pins: Mutex<BTreeMap<String, Pin>>,
    clock: std::sync::Arc<dyn toolgate_core::Clock>,
}

/// A lock file that cannot be read, parsed or written.
#[derive(Debug, thiserror::Error)]
#[error("pin lock file {path}: {message}")]
pub struct PinError {
    path: PathBuf,
    message: String,
}

impl PinStore {
    /// The lock file at `path`; `clock` dates what is accepted.
    pub fn open(
        path: &Path,
        clock: std::sync::Arc<dyn toolgate_core::Clock>,
    ) -> Result<Self, PinError> {
        let pins = read(path)?;
        Ok(Self { path: path.to_path_buf(), pins: Mutex::new(pins), clock })
    }

    #[cfg(test)]
    fn get(&self, exposed: &str) -> Option<Pin> {
        self.lock().get(exposed).cloned()
    }

    pub(crate) fn status(&self, exposed: &str, sha256: &str) -> PinStatus {
        match self.lock().get(exposed) {
            None => PinStatus::New,
            Some(pin) if pin.sha256 == sha256 => PinStatus::Pinned,
            Some(pin) => PinStatus::Changed(pin.clone()),
        }
    }

    /// The status a running gateway acts on: new tools are pinned now; a
    /// mismatch is checked against the file once more, since an operator may
    /// have accepted the change meanwhile.
    pub(crate) fn check_and_pin(
        &self,
        exposed: &str,
        sha256: &str,
        definition: &Value,
    ) -> Result<PinStatus, PinError> {
        match self.status(exposed, sha256) {
            PinStatus::Pinned => Ok(PinStatus::Pinned),
            PinStatus::New => {
                self.write(exposed, sha256, definition)?;
                Ok(PinStatus::Pinned)
            }
            PinStatus::Changed(_) => {
                let on_disk = read(&self.path)?;
                let status = match on_disk.get(exposed) {
                    Some(pin) if pin.sha256 == sha256 => PinStatus::Pinned,
                    Some(pin) => PinStatus::Changed(pin.clone()),
                    None => PinStatus::New,
                };
                *self.lock() = on_disk;
                Ok(status)
            }
        }
    }

    /// Records `definition` as the accepted one for `exposed`.
    pub fn accept(&self, exposed: &str, sha256: &str, definition: &Value) -> Result<(), PinError> {
        self.write(exposed, sha256, definition)
    }

    fn write(&self, exposed: &str, sha256: &str, definition: &Value) -> Result<(), PinError> {
        let mut pins = self.lock();
        // Merge with the file: another process (the CLI, a replica) may have written.
        let mut merged = read(&self.path)?;
        let accepted_at = (self.clock.now_ms() / 1000).max(0) as u64;
        merged.insert(
            exposed.to_string(),
            Pin { sha256: sha256.to_string(), definition: definition.clone(), accepted_at },
        );
        write_atomically(&self.path, &LockFile { version: 1, tools: merged.clone() })?;
        *pins = merged;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Pin>> {
        self.pins.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn read(path: &Path) -> Result<BTreeMap<String, Pin>, PinError> {
    let err = |message: String| PinError { path: path.to_path_buf(), message };
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let file: LockFile = serde_json::from_str(&text)
                .map_err(|e| err(format!("unreadable ({e}); fix or remove it")))?;
            Ok(file.tools)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(err(e.to_string())),
    }
}

/// Write to a new temporary file (a fresh name for each write: the gateway
/// and the CLI may write at once), sync, then rename: a crash leaves the
/// old file or the new one, never half of one; owner-only, and never
/// through a link planted beside the config.
fn write_atomically(path: &Path, file: &LockFile) -> Result<(), PinError> {
    let err = |message: String| PinError { path: path.to_path_buf(), message };
    let text = serde_json::to_string_pretty(file).map_err(|e| err(e.to_string()))? + "\n";
    toolgate_mcp::owner_only::write_owner_only(path, text.as_bytes())
        .map_err(|e| err(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn first_sight_pins_a_change_is_held_until_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolgate.lock");
        let store = PinStore::open(&path, std::sync::Arc::new(toolgate_core::SystemClock)).unwrap();
        let v1 = json!({"name": "t", "description": "one"});
        let v2 = json!({"name": "t", "description": "two"});
        assert_eq!(store.check_and_pin("s__t", "h1", &v1).unwrap(), PinStatus::Pinned);
        assert_eq!(store.check_and_pin("s__t", "h1", &v1).unwrap(), PinStatus::Pinned);
        let PinStatus::Changed(old) = store.check_and_pin("s__t", "h2", &v2).unwrap() else {
            panic!("change not held")
        };
        assert_eq!(old.definition, v1);
        // Another process (the CLI) accepts the change; the running store sees it.
        PinStore::open(&path, std::sync::Arc::new(toolgate_core::SystemClock))
            .unwrap()
            .accept("s__t", "h2", &v2)
            .unwrap();
        assert_eq!(store.check_and_pin("s__t", "h2", &v2).unwrap(), PinStatus::Pinned);
        assert_eq!(
            PinStore::open(&path, std::sync::Arc::new(toolgate_core::SystemClock))
                .unwrap()
                .get("s__t")
                .unwrap()
                .sha256,
            "h2"
        );
    }

    #[test]
    fn a_corrupt_lock_file_is_an_error_not_an_empty_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolgate.lock");
        std::fs::write(&path, "{not json").unwrap();
        assert!(
            PinStore::open(&path, std::sync::Arc::new(toolgate_core::SystemClock))
                .unwrap_err()
                .to_string()
                .contains("unreadable")
        );
    }
}
