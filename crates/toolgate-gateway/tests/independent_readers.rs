//! The published log read by implementations toolgate did not write:
//! Cloudflare's `signed_note` opens the checkpoint under the log's Ed25519
//! vkey, and its `tlog_tiles` (a port of Go's sumdb/tlog) authenticates the
//! hash tiles against that checkpoint's root, proves an answer's receipt in
//! the tree, and proves the tree consistent with an earlier one. Entry
//! bundles are read by the spec's layout and hashed by `tlog_tiles`. The
//! Python verifier proves the same receipt from the same tiles.

mod common;

use std::time::Duration;

use serde_json::{Value, json};
use signed_note::{Note, StandardVerifier, VerifierList};
use tlog_tiles::{
    Checkpoint, Error, Hash, HashReader as _, Tile, TileHashReader, TileReader, check_record,
    check_tree, prove_record, prove_tree, record_hash, stored_hash_index, tree_hash,
};

/// Reads C2SP tiles over HTTP: `tile/<L>/<N>[.p/<W>]` (tlog_tiles names
/// them with the sumdb height too, `tile/8/…`, which C2SP leaves out).
struct Http {
    base: String,
    client: reqwest::blocking::Client,
}

impl Http {
    fn get(&self, path: &str) -> Vec<u8> {
        let r = self.client.get(format!("{}{path}", self.base)).send().unwrap();
        assert_eq!(r.status(), 200, "{path}");
        r.bytes().unwrap().to_vec()
    }
}

impl TileReader for Http {
    fn height(&self) -> u8 {
        8
    }

    fn read_tiles(&self, tiles: &[Tile]) -> Result<Vec<Vec<u8>>, Error> {
        Ok(tiles
            .iter()
            .map(|t| {
                self.get(&format!("tile/{}", t.path().strip_prefix("tile/8/").expect("height 8")))
            })
            .collect())
    }

    fn save_tiles(&self, _: &[Tile], _: &[Vec<u8>]) {}
}

/// The checkpoint, opened by `signed_note` under the log's Ed25519 vkey and
/// parsed by `tlog_tiles`.
fn checkpoint(http: &Http, vkey: &str) -> Checkpoint {
    let note = Note::from_bytes(&http.get("checkpoint")).unwrap();
    let known = VerifierList::new(vec![Box::new(StandardVerifier::new(vkey).unwrap())]);
    let (verified, unverified) = note.verify(&known).unwrap();
    assert_eq!(
        (verified.len(), unverified.len()),
        (1, 1),
        "the Ed25519 line verifies; the ML-DSA-65 line is a key it does not know"
    );
    Checkpoint::from_bytes(note.text()).unwrap()
}

fn hash(hex: &str) -> Hash {
    let bytes: Vec<u8> =
        (0..32).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    Hash(bytes.try_into().unwrap())
}

#[tokio::test]
async fn cloudflare_s_tlog_tiles_and_signed_note_prove_what_toolgate_publishes() {
    let h =
        common::start_with("", "[receipts]\ncheckpoint_ms = 100\nlog_access = \"public\"\n", &[])
            .await;
    let vkey = h.gateway.ledger.log_keys().await.unwrap()[0].ed25519.clone();
    // More than a tile's worth, so level 1 has a hash and level 0 a full tile.
    let mut answers = Vec::new();
    for i in 0..140 {
        answers.push(
            common::call(
                &h.url,
                "support__search_customers",
                json!({"query": format!("harbor {i}")}),
            )
            .await,
        );
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let base = format!("{}/log/", h.url.trim_end_matches("/mcp"));
    let url = h.url.clone();
    let (first, vkey_) = (answers.remove(0), vkey.clone());
    let early = tokio::task::spawn_blocking(move || {
        let http = Http { base, client: reqwest::blocking::Client::new() };
        let c = checkpoint(&http, &vkey_);
        (c.size(), *c.hash())
    })
    .await
    .unwrap();
    for i in 0..140 {
        common::call(&url, "support__search_customers", json!({"query": format!("pier {i}")}))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let base = format!("{}/log/", h.url.trim_end_matches("/mcp"));
    tokio::task::spawn_blocking(move || {
        let http = Http { base, client: reqwest::blocking::Client::new() };
        let c = checkpoint(&http, &vkey);
        let (size, root) = (c.size(), *c.hash());
        assert!(size > 256 && size > early.0, "{size}");
        let reader = TileHashReader::new(size, root, &http);
        // The tiles give the checkpoint's root.
        assert_eq!(tree_hash(size, &reader).unwrap(), root);

        // The first answer's receipt, by the leaf its `_meta` names.
        let named: &Value = &first["result"]["_meta"]["io.toolgate/receipt"];
        let (index, leaf) =
            (named["index"].as_u64().unwrap(), hash(named["leaf_hash"].as_str().unwrap()));
        let proof = prove_record(size, index, &reader).unwrap();
        check_record(&proof, size, root, index, leaf).unwrap();
        assert!(
            check_record(&proof, size, root, index, Hash([0; 32])).is_err(),
            "another leaf does not prove"
        );

        // Every entry of the first bundle hashes to its leaf in the tree.
        let bundle = http.get("tile/entries/000");
        let (mut rest, mut i) = (&bundle[..], 0u64);
        while !rest.is_empty() {
            let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
            let entry = &rest[2..2 + len];
            assert_eq!(
                record_hash(entry),
                reader.read_hashes(&[stored_hash_index(0, i)]).unwrap()[0],
                "entry {i}"
            );
            rest = &rest[2 + len..];
            i += 1;
        }
        assert_eq!(i, 256);

        // The later tree extends the earlier one.
        let consistency = prove_tree(size, early.0, &reader).unwrap();
        check_tree(&consistency, size, root, early.0, early.1).unwrap();
        // The Python verifier (tests/python/verify_answer.py), from the same tiles.
        let saved =
            std::env::temp_dir().join(format!("toolgate-receipt-{}.json", std::process::id()));
        std::fs::write(&saved, named.to_string()).unwrap();
        let script = common::workspace().join("tests/python/verify_answer.py");
        let out = std::process::Command::new(common::python())
            .arg(&script)
            .arg(&saved)
            .arg(&http.base)
            .arg(&vkey)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&saved);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    })
    .await
    .unwrap();
}
