//! The log's readers: programs that read a published log from outside, as
//! any third party would, and import nothing of the running log — only the
//! log's files (`/log/`, a mirror, an archive folder) and the keys they are
//! given.
//!
//! - `source`: where the published log is read from (HTTP(S) or a folder),
//!   each file under a limit.
//! - `verify_answer`: `toolgate verify --answer`, the proof of an answer's
//!   receipt.
//! - `monitor`: `toolgate log watch`, which alerts when the log forks or
//!   shrinks.

pub mod monitor;
pub mod source;
pub mod verify_answer;
