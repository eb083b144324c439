//! The stages of the call pipeline, one module each; `pipeline.rs` reads them
//! in order.

pub(crate) mod admit;
pub(crate) mod approve;
pub(crate) mod check;
pub mod decide;
pub(crate) mod dispatch;
pub(crate) mod present;
pub(crate) mod preview;
pub(crate) mod record;
pub(crate) mod reserve;
pub(crate) mod resolve;
#[cfg(test)]
pub(crate) mod testing;
pub mod validate;
