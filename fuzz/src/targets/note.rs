//! C2SP signed notes and checkpoints (`toolgate_core::note`): a note opens
//! only if it is the body we signed (whatever else is in its signature
//! block), and a checkpoint body parses only in its one canonical form.

use std::sync::OnceLock;

use aws_lc_rs::signature::{ML_DSA_65_SIGNING, PqdsaKeyPair};
use ed25519_dalek::SigningKey;
use toolgate_core::merkle;
use toolgate_core::note::{self, Checkpoint, Signer, Verifier};

pub(crate) const ORIGIN: &str = "fuzz.toolgate.example/log";

pub(crate) struct Keys {
    pub(crate) ed25519: Signer,
    pub(crate) ml_dsa_65: Signer,
}

/// The log's two keys, fixed so the seeds are stable.
pub(crate) fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| Keys {
        ed25519: Signer::ed25519(ORIGIN, SigningKey::from_bytes(&[0x11; 32]))
            .expect("a valid name"),
        ml_dsa_65: Signer::ml_dsa_65(
            ORIGIN,
            PqdsaKeyPair::from_seed(&ML_DSA_65_SIGNING, &[0x22; 32]).expect("a 32-byte seed"),
        )
        .expect("a valid name"),
    })
}

struct Fixture {
    verifiers: Vec<Verifier>,
    /// The bodies of the notes we signed.
    signed: Vec<String>,
    notes: Vec<String>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let k = keys();
        let checkpoint = Checkpoint::new(ORIGIN, 3, merkle::root(&[[1; 32], [2; 32], [3; 32]]))
            .expect("a valid checkpoint");
        let notes = vec![
            checkpoint.sign(&[&k.ed25519, &k.ml_dsa_65]).expect("signs"),
            checkpoint.sign(&[&k.ed25519]).expect("signs"),
        ];
        Fixture {
            verifiers: vec![k.ed25519.verifier(), k.ml_dsa_65.verifier()],
            signed: vec![checkpoint.body()],
            notes,
        }
    })
}

pub(crate) fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let f = fixture();
    if let Ok(opened) = note::open_note(text, &f.verifiers) {
        assert!(f.signed.contains(&opened.body), "a note we never signed verified");
        assert!(!opened.verified.is_empty());
    }
    if let Ok((checkpoint, _)) = note::open_checkpoint(text, &f.verifiers) {
        assert!(f.signed.contains(&checkpoint.body()), "a checkpoint we never signed verified");
    }
    // The body alone: a parsed checkpoint writes back byte for byte.
    if let Ok(checkpoint) = Checkpoint::parse(text) {
        assert_eq!(checkpoint.body(), text, "a checkpoint body that is not canonical parsed");
    }
    // A verifier key text reads back as itself.
    if let Ok(v) = Verifier::from_vkey(text) {
        assert_eq!(v.vkey(), text, "a verifier key text that is not canonical parsed");
    }
}

pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let f = fixture();
    let mut out: Vec<Vec<u8>> = f.notes.iter().map(|n| n.clone().into_bytes()).collect();
    out.push(f.signed[0].clone().into_bytes());
    out.extend(f.verifiers.iter().map(|v| v.vkey().into_bytes()));
    out
}
