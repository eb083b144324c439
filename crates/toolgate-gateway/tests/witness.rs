//! Witnesses (c2sp.org/tlog-witness, tlog-cosignature): a witness cosigns
//! only a checkpoint consistent with what it cosigned before, and refuses
//! the rest with the spec's status codes; a gateway submits its checkpoints
//! to two witnesses and serves their cosignatures; `verify --answer`
//! requires a quorum of them.

mod common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use toolgate_core::merkle::{self, Hash};
use toolgate_core::note::{self, Checkpoint, Cosigner, Signer, Verifier};
use toolgate_core::{FixedClock, SystemClock};
use toolgate_gateway::log::readers::source::Source;
use toolgate_gateway::log::readers::verify_answer::{Options, verify_answer};
use toolgate_gateway::log::witness_server::{self, Witness};

const ORIGIN: &str = "log.test/one";

fn leaves(n: u64, forked_at: Option<u64>) -> Vec<Hash> {
    (0..n)
        .map(|i| {
            merkle::leaf_hash(
                format!("{}{i}", if Some(i) == forked_at { "x" } else { "e" }).as_bytes(),
            )
        })
        .collect()
}

fn signed(leaves: &[Hash], by: &Signer) -> String {
    Checkpoint::new(ORIGIN, leaves.len() as u64, merkle::root(leaves)).unwrap().sign(&[by]).unwrap()
}

fn request(old: u64, proof: &[Hash], checkpoint: &str) -> String {
    let lines: String = proof.iter().map(|h| format!("{}\n", STANDARD.encode(h))).collect();
    format!("old {old}\n{lines}\n{checkpoint}")
}

async fn serve(witness: Witness) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        async move { axum::serve(listener, witness_server::router(Arc::new(witness))).await },
    );
    url
}

async fn post(url: &str, body: String) -> (u16, String, String) {
    let r = reqwest::Client::new()
        .post(format!("{url}/add-checkpoint"))
        .body(body)
        .send()
        .await
        .unwrap();
    let kind = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (r.status().as_u16(), kind, r.text().await.unwrap())
}

#[tokio::test]
async fn a_witness_cosigns_growth_only_and_answers_the_spec_s_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log = Signer::ed25519(ORIGIN, ed25519_dalek::SigningKey::from_bytes(&[1; 32])).unwrap();
    let open = || {
        Witness::open(
            dir.path(),
            "witness.test/w1",
            vec![log.verifier()],
            Arc::new(FixedClock::new(1_700_000_000_123)),
        )
        .unwrap()
    };
    let witness = open();
    let vkeys = witness.vkeys();
    assert_eq!(vkeys.len(), 2, "Ed25519 and ML-DSA-44");
    let me: Vec<Verifier> = vkeys.iter().map(|k| Verifier::from_vkey(k).unwrap()).collect();
    let url = serve(witness).await;

    // First sight: old 0, no proof.
    let ten = leaves(10, None);
    let (status, _, lines) = post(&url, request(0, &[], &signed(&ten, &log))).await;
    assert_eq!(status, 200, "{lines}");
    let cosigned = format!("{}{lines}", signed(&ten, &log));
    assert_eq!(lines.lines().count(), 2, "{lines}");
    // Each of its keys alone verifies its line; both count as one witness.
    for key in &me {
        let by = note::cosigned_by(&cosigned, std::slice::from_ref(key)).unwrap();
        assert_eq!(by.iter().map(|s| s.algorithm).collect::<Vec<_>>(), [key.algorithm()]);
    }
    assert_eq!(note::cosigned_by(&cosigned, &me).unwrap().len(), 1);
    for line in lines.lines() {
        assert!(
            STANDARD.decode(line.rsplit(' ').next().unwrap()).unwrap()[4..12]
                == 1_700_000_000u64.to_be_bytes(),
            "timestamped in seconds"
        );
    }
    // A changed root is refused by the ML-DSA-44 line too (it signs the root, not the text).
    let other_root =
        cosigned.replacen(&STANDARD.encode(merkle::root(&ten)), &STANDARD.encode([0u8; 32]), 1);
    assert!(note::cosigned_by(&other_root, &me[1..]).is_err());

    // Growth with its consistency proof.
    let hundred = leaves(100, None);
    let proof = merkle::consistency_proof(&hundred, 10, 100).unwrap();
    assert_eq!(post(&url, request(10, &proof, &signed(&hundred, &log))).await.0, 200);

    // The old size is not the last cosigned: 409 naming it.
    let more = leaves(120, None);
    let (status, kind, body) = post(
        &url,
        request(10, &merkle::consistency_proof(&more, 10, 120).unwrap(), &signed(&more, &log)),
    )
    .await;
    assert_eq!((status, kind.as_str(), body.as_str()), (409, "text/x.tlog.size", "100\n"));

    // The same size with another root (a split view): 409, and nothing recorded.
    let forked = leaves(100, Some(3));
    assert_eq!(post(&url, request(100, &[], &signed(&forked, &log))).await.0, 409);
    // A larger tree that rewrote an entry: the proof does not verify, 422.
    let rewritten = leaves(130, Some(3));
    assert_eq!(
        post(
            &url,
            request(
                100,
                &merkle::consistency_proof(&rewritten, 100, 130).unwrap(),
                &signed(&rewritten, &log)
            )
        )
        .await
        .0,
        422
    );
    // An old size above the checkpoint's; a malformed request: 400.
    assert_eq!(post(&url, request(200, &[], &signed(&more, &log))).await.0, 400);
    assert_eq!(post(&url, "old 010\n\nx".into()).await.0, 400);
    assert_eq!(
        post(&url, request(0, &[[0; 32]], &signed(&ten, &log))).await.0,
        409,
        "old 0 is not the last size"
    );
    // Another log's origin: 404; the right origin under another key: 403.
    let stranger =
        Signer::ed25519("log.test/other", ed25519_dalek::SigningKey::from_bytes(&[2; 32])).unwrap();
    assert_eq!(
        post(
            &url,
            request(
                0,
                &[],
                &Checkpoint::new("log.test/other", 1, [0; 32]).unwrap().sign(&[&stranger]).unwrap()
            )
        )
        .await
        .0,
        404
    );
    let impostor =
        Signer::ed25519(ORIGIN, ed25519_dalek::SigningKey::from_bytes(&[3; 32])).unwrap();
    assert_eq!(post(&url, request(100, &[], &signed(&forked, &impostor))).await.0, 403);

    // The state survives a restart: the fork is still refused, growth still cosigned.
    let again = serve(open()).await;
    assert_eq!(post(&again, request(100, &[], &signed(&forked, &log))).await.0, 409);
    assert_eq!(
        post(
            &again,
            request(
                100,
                &merkle::consistency_proof(&more, 100, 120).unwrap(),
                &signed(&more, &log)
            )
        )
        .await
        .0,
        200
    );
}

/// Two witnesses for a gateway's log: each checkpoint goes to both, the
/// served checkpoint carries both cosignatures, and an answer's receipt
/// verifies under a quorum of them (and not under a witness that never saw it).
#[tokio::test]
async fn a_gateway_s_checkpoints_are_cosigned_by_two_witnesses_and_verified_under_a_quorum() {
    let witness_dir = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    let mut more = String::from("[receipts]\ncheckpoint_ms = 100\nlog_access = \"public\"\n");
    let mut keys = Vec::new();
    for i in 1..=2u8 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dir = witness_dir.path().join(format!("w{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("witness.key"), [40 + i; 32]).unwrap();
        let vkey = Cosigner::new(
            &format!("witness.test/w{i}"),
            ed25519_dalek::SigningKey::from_bytes(&[40 + i; 32]),
        )
        .unwrap()
        .verifier()
        .vkey();
        more.push_str(&format!(
            "[[receipts.witnesses]]\nurl = \"http://{}/\"\nvkey = \"{vkey}\"\n",
            listener.local_addr().unwrap()
        ));
        keys.push(Verifier::from_vkey(&vkey).unwrap());
        listeners.push((listener, dir));
    }
    let h = common::start_with("", &more, &[]).await;
    let log_keys: Vec<Verifier> = h
        .gateway
        .ledger
        .log_keys()
        .await
        .unwrap()
        .iter()
        .map(|k| Verifier::from_vkey(&k.ed25519).unwrap())
        .collect();
    for (i, (listener, dir)) in listeners.into_iter().enumerate() {
        let witness = Witness::open(
            &dir,
            &format!("witness.test/w{}", i + 1),
            log_keys.clone(),
            Arc::new(SystemClock),
        )
        .unwrap();
        tokio::spawn(async move {
            axum::serve(listener, witness_server::router(Arc::new(witness))).await
        });
    }

    let base = format!("{}/log/", h.url.trim_end_matches("/mcp"));
    let source = Source::parse(&base, None).unwrap();
    let prove = |answer: serde_json::Value, witnesses: Vec<Verifier>, min: usize| {
        let (source, log_keys) = (&source, log_keys.clone());
        async move {
            verify_answer(
                &answer,
                source,
                &Options {
                    verifiers: log_keys,
                    wait: Duration::from_secs(5),
                    witnesses,
                    min_witnesses: min,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
        }
    };
    // Two rounds: the second submits with a consistency proof from the first.
    for round in 0..2 {
        let answer = common::call(
            &h.url,
            "support__search_customers",
            json!({"query": format!("harbor {round}")}),
        )
        .await;
        let report = prove(answer.clone(), keys.clone(), 2).await;
        assert!(report.ok(), "round {round}: {report:#?}");
        let w = report.checks.iter().find(|c| c.name == "witnesses").unwrap();
        assert!(
            w.detail.contains("witness.test/w1") && w.detail.contains("witness.test/w2"),
            "{}",
            w.detail
        );
        if round == 1 {
            // A witness that never saw this log cannot make up the quorum.
            let absent =
                Cosigner::new("witness.test/w3", ed25519_dalek::SigningKey::from_bytes(&[9; 32]))
                    .unwrap()
                    .verifier();
            let report = prove(answer, vec![keys[0].clone(), absent], 2).await;
            assert_eq!(
                report.checks.iter().filter(|c| !c.ok).map(|c| c.name).collect::<Vec<_>>(),
                ["witnesses"],
                "{report:#?}"
            );
        }
    }
    let served = reqwest::get(format!("{base}checkpoint")).await.unwrap().text().await.unwrap();
    assert_eq!(note::cosigned_by(&served, &keys).unwrap().len(), 2, "{served}");
    // Kept for a restart and for bundles: an export's checkpoint carries them.
    let kept = std::fs::read_to_string(h.gateway.config().state_dir().join("checkpoint.cosigned"))
        .unwrap();
    assert_eq!(note::cosigned_by(&kept, &keys).unwrap().len(), 2);
    let covering =
        toolgate_gateway::log::evidence::covering(&h.gateway.log, h.gateway.ledger.as_ref(), 1)
            .await
            .unwrap();
    let bundle = toolgate_gateway::log::evidence::bundle(
        &h.gateway.log.archive,
        h.gateway.ledger.as_ref(),
        &covering,
        0,
        1,
    )
    .await
    .unwrap();
    assert_eq!(
        note::cosigned_by(&bundle.checkpoint, &keys).unwrap().len(),
        2,
        "{}",
        bundle.checkpoint
    );
    let report = toolgate_core::bundle::verify(&bundle, &Default::default());
    assert!(report.ok(), "a bundle with cosignatures still verifies: {:?}", report.failures);
    // A bundle verified under a quorum of witnesses: both, and not a stranger.
    let quorum = |witnesses: Vec<Verifier>| toolgate_core::bundle::Options {
        witnesses,
        min_witnesses: 2,
        ..Default::default()
    };
    assert!(toolgate_core::bundle::verify(&bundle, &quorum(keys.clone())).ok());
    let absent = Cosigner::new("witness.test/w3", ed25519_dalek::SigningKey::from_bytes(&[9; 32]))
        .unwrap()
        .verifier();
    let short = toolgate_core::bundle::verify(&bundle, &quorum(vec![keys[0].clone(), absent]));
    assert_eq!(short.failures.iter().map(|f| f.name()).collect::<Vec<_>>(), ["witnesses"]);
}
