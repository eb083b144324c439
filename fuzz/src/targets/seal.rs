//! Opening a `requestState` a client presents (`toolgate_gateway::seal`):
//! anything but a state this key sealed opens to nothing, and a state it
//! sealed opens to exactly its claim.

use std::sync::{Arc, OnceLock};

use toolgate_core::SeededEntropy;
use toolgate_core::approval::{Binding, Claim};
use toolgate_gateway::seal::Sealer;

const KEY: [u8; 32] = [0x5e; 32];

struct Fixture {
    sealer: Sealer,
    sealed: Vec<(String, Claim)>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let sealer = Sealer::new(&KEY, Arc::new(SeededEntropy::new([7; 32])));
        let sealed = claims().into_iter().map(|c| (sealer.seal(&c), c)).collect();
        Fixture { sealer, sealed }
    })
}

fn claims() -> Vec<Claim> {
    let binding = Binding {
        tenant: "atlas".into(),
        caller: "agent".into(),
        server: "parts".into(),
        tool: "raise_parts_order".into(),
        proposal_sha256: "ab".repeat(32),
        policy_version: "v1".into(),
    };
    vec![
        Claim { approval_id: "apr_1".into(), binding: binding.clone(), upstream_state: None },
        Claim {
            approval_id: "apr_2".into(),
            binding,
            upstream_state: Some("upstream-round-1".into()),
        },
    ]
}

pub(crate) fn run(data: &[u8]) {
    let Ok(state) = std::str::from_utf8(data) else { return };
    let f = fixture();
    let opened = f.sealer.open(state);
    match f.sealed.iter().find(|(s, _)| s == state) {
        Some((_, claim)) => {
            assert_eq!(opened.as_ref(), Some(claim), "our own state does not open to its claim")
        }
        None => assert!(opened.is_none(), "a state this key never sealed opened"),
    }
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> =
        fixture().sealed.iter().map(|(s, _)| s.clone().into_bytes()).collect();
    out.push(b"tg1.".to_vec());
    out.push(b"upstream-round-1".to_vec());
    out
}
