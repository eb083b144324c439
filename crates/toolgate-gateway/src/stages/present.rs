//! present: the credential the call carries for its person, as its
//! server's `[servers.NAME.identity]` says (`identity/`). A credential that
//! cannot be made stops the call before anything is sent.

use toolgate_core::{Action, Caller, Entropy, Proposal, Reason, Refusal, Verdict};

use crate::call::Stop;
use crate::config::Config;
use crate::identity::{Identities, Presented};

pub(crate) async fn present(identities: &Identities, config: &Config, server: &str, caller: &Caller, proposal: &Proposal, now_ms: impl Fn() -> i64, entropy: &dyn Entropy) -> Result<Presented, Stop> {
    identities.present(config, server, caller, now_ms, entropy).await.map_err(|why| {
        tracing::warn!(server, %why, "no credential for the person");
        Stop::Refused(
            Refusal::new(
                Verdict::Allow,
                Reason::IdentityUnavailable,
                Action::Retry,
                format!("the server `{server}` could not be given a credential for you ({why}); nothing was run: retry later, or ask the operator to check [servers.{server}.identity]"),
            )
            .with_proposal(&proposal.sha256),
        )
    })
}
