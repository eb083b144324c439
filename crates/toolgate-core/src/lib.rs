//! toolgate-core: the sans-I/O heart of toolgate — contracts, authority,
//! proposals and canonical JSON, validation, policy, approval binding,
//! receipts and Merkle-log maths, bundle and pack verification. No tokio,
//! no sockets, no files: every function here is a function of its inputs,
//! tested fast. It uses no other toolgate crate; every other one may use it.

#![warn(missing_docs)]

pub mod answer;
pub mod approval;
pub mod audit;
pub mod authority;
pub mod budget;
pub mod bundle;
pub mod clock;
pub mod contract;
pub mod credentials;
pub mod decision;
pub mod egress;
pub mod entropy;
pub mod identity;
mod jcs;
mod jcs_scan;
pub mod log_verify;
pub mod merkle;
pub mod note;
pub mod operation;
pub mod pack;
pub mod pointer;
pub mod policy;
mod policy_arguments;
pub mod proposal;
pub mod receipt;
pub mod schema;
pub mod strict_json;
pub mod tiles;
pub mod trifecta;
pub mod visible;

pub use authority::{AuthorityClass, AuthorityView, ClassSource, Hint, Hints};
pub use clock::{Clock, FixedClock, SystemClock};
pub use decision::{Action, Decision, Reason, Refusal, Verdict};
pub use entropy::{Entropy, SeededEntropy, SystemEntropy};
pub use identity::Caller;
pub use proposal::Proposal;
