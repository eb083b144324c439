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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::identity::assertion::AssertionKey;
    use toolgate_core::{Action, SeededEntropy};

    fn config(identity: &str) -> Config {
        let text = format!("[servers.desk]\nurl = \"http://127.0.0.1:9/mcp\"\n[servers.desk.identity]\n{identity}\n");
        Config::parse(&text, std::path::Path::new("/tmp/toolgate.toml")).unwrap()
    }

    fn caller() -> Caller {
        Caller { name: "agent".into(), subject: "tech-jane".into(), tenant: "atlas".into(), roles: vec![] }
    }

    async fn presented(identity: &str) -> Result<Presented, Stop> {
        let identities = Identities::new(Arc::new(AssertionKey::derive(&[3; 32])), &[], Vec::new()).unwrap();
        let proposal = Proposal::new("desk", "lookup", serde_json::json!({}));
        present(&identities, &config(identity), "desk", &caller(), &proposal, || 1_800_000_000_000, &SeededEntropy::new([4; 32])).await
    }

    #[tokio::test]
    async fn a_shared_server_gets_nothing_more_and_the_receipt_says_shared() {
        let p = presented("mode = \"shared\"").await.unwrap_or_else(|_| panic!("refused"));
        assert!(p.headers.is_empty() && p.meta.is_none());
        assert_eq!((p.identity.mode.as_str(), p.identity.subject.as_deref()), ("shared", None));
    }

    #[tokio::test]
    async fn an_assertion_goes_in_its_header_and_the_receipt_names_the_person_not_the_token() {
        let p = presented("mode = \"assertion\"\nheader = \"X-Who\"\naudience = \"desk\"").await.unwrap_or_else(|_| panic!("refused"));
        assert_eq!(p.headers.len(), 1);
        assert_eq!(p.headers[0].0, "X-Who");
        assert_eq!(p.headers[0].1.matches('.').count(), 2, "a compact JWS");
        let i = &p.identity;
        assert_eq!((i.mode.as_str(), i.subject.as_deref(), i.audience.as_deref()), ("assertion", Some("tech-jane"), Some("desk")));
        assert!(!serde_json::to_string(i).unwrap().contains(&p.headers[0].1));
    }

    #[tokio::test]
    async fn a_token_endpoint_out_of_reach_refuses_the_call_before_anything_is_sent() {
        let stop = presented("mode = \"exchange\"\ntoken_endpoint = \"http://127.0.0.1:9/token\"\nclient_id = \"gw\"").await.unwrap_err();
        let Stop::Refused(r) = stop else { panic!("not a refusal") };
        assert_eq!((r.reason, r.action), (Reason::IdentityUnavailable, Action::Retry));
        assert!(r.message.contains("nothing was run") && r.message.contains("[servers.desk.identity]") && r.message.contains("could not be reached"), "{}", r.message);
    }
}
