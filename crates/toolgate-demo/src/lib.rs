//! toolgate-demo: what `toolgate demo`, `toolgate agent` and `toolgate
//! conformance-fixture` run — the Atlas field-service demo with toolgate in
//! the call path ([`demo`]), an agent loop through a gateway with a model or
//! a scripted plan ([`agent`]), and the conformance suite's fixture server,
//! test equipment rather than product ([`fixture`]). It may use
//! toolgate-gateway, toolgate-ledger, toolgate-core and toolgate-atlas;
//! only the `toolgate` binary uses it.

pub mod agent;
pub mod demo;
pub mod fixture;
