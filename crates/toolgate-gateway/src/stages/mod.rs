//! The stages of the call pipeline, one module each; `pipeline.rs` reads them
//! in order.

pub mod admit;
pub mod approve;
pub mod check;
pub mod decide;
pub mod dispatch;
pub mod record;
pub mod reserve;
pub mod resolve;
#[cfg(test)]
pub(crate) mod testing;
pub mod validate;
