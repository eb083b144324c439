//! The log's archive (`toolgate log archive`): sealed ranges move out of the
//! ledger into C2SP tlog-tiles files; the log stays whole for every reader
//! (bundles prove archived receipts and new ones alike), the gateway carries
//! the tree on across a restart, and a damaged archive is refused.

mod common;

use common::{call, start_with};
use serde_json::json;
use toolgate_core::bundle::{self, Options};
use toolgate_core::merkle;
use toolgate_core::tiles;
use toolgate_gateway::log::archive;
use toolgate_gateway::log::evidence;

async fn calls(url: &str, n: usize) {
    for i in 0..n {
        let read = call(
            url,
            "support__get_ticket",
            json!({"client_reference": format!("ref-arch-{i:04}")}),
        )
        .await;
        assert!(read.get("result").is_some(), "{read}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archived_range_is_tiles_on_disk_and_the_log_stays_whole() {
    // No timed checkpoint: on a busy machine the 300 calls take more than
    // its second, and one would make the first archive below possible.
    let h = start_with("", "[receipts]\ncheckpoint_ms = 3600000\n", &[]).await;
    let (gw, ledger) = (&h.gateway, &*h.gateway.ledger);
    calls(&h.url, 300).await;
    let refused = gw.log.archive_before(256, 1).await.unwrap_err().to_string();
    assert!(refused.contains("up to the last checkpoint"), "{refused}");
    gw.log.checkpoint().await.unwrap();
    let size = ledger.log_size().await.unwrap();
    assert!(size >= 300, "{size}");
    let root_before = merkle::root(&ledger.leaf_hashes(0, size).await.unwrap());

    let done = gw.log.archive_before(300, 2).await.unwrap();
    assert_eq!(done, archive::Archived { before: 256, moved: 256, checkpoints_dropped: 0 });
    let old_checkpoint = ledger.checkpoint(None).await.unwrap().unwrap();
    let old_bundle =
        evidence::bundle(&gw.log.archive, ledger, &old_checkpoint, 10, 11).await.unwrap();
    let dir = gw.log.archive.dir();
    for file in ["checkpoint", "tile/0/000", "tile/1/000.p/1", "tile/entries/000", "private/000"] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    // The spec's bytes: a level-0 tile is the 256 leaf hashes; the entries hash to them.
    let tile = tiles::read_tile(&std::fs::read(dir.join("tile/0/000")).unwrap(), 256).unwrap();
    let bundle_bytes = std::fs::read(dir.join("tile/entries/000")).unwrap();
    let entries = tiles::read_entry_bundle(&bundle_bytes, 256).unwrap();
    assert!(entries.iter().zip(&tile).all(|(e, h)| merkle::leaf_hash(e) == *h));
    assert_eq!(std::fs::read(dir.join("tile/1/000.p/1")).unwrap(), merkle::root(&tile).to_vec());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(dir.join("private/000")).unwrap().permissions().mode() & 0o077,
        0,
        "salts and records stay the owner's"
    );
    assert!(
        std::fs::read_to_string(dir.join("checkpoint"))
            .unwrap()
            .starts_with("toolgate.local/log\n256\n")
    );

    // The ledger lost the rows, not the log.
    assert_eq!(ledger.log_size().await.unwrap(), size);
    assert_eq!(ledger.receipts(0, 1).await.unwrap()[0].log_index, 256);
    assert_eq!(
        merkle::root(&archive::leaf_hashes(&gw.log.archive, ledger, 0, size).await.unwrap()),
        root_before
    );
    // New calls, a new checkpoint from the carried-on tree, and one bundle
    // across the archive and the ledger that verifies.
    calls(&h.url, 20).await;
    let checkpoint = gw.log.checkpoint().await.unwrap().expect("the log grew");
    let to = checkpoint.size;
    let all = archive::leaf_hashes(&gw.log.archive, ledger, 0, to).await.unwrap();
    assert_eq!(
        checkpoint.root,
        merkle::root(&all),
        "the tree carried on from the archive's frontier"
    );
    let b = evidence::bundle(&gw.log.archive, ledger, &checkpoint, 250, to).await.unwrap();
    let report = bundle::verify(
        &b,
        &Options { expected_kids: vec![], require_pq: true, ..Default::default() },
    );
    assert!(report.ok(), "{:?}", report.failures);
    assert_eq!(b.receipts.len() as u64, to - 250);
    // A second run has nothing to move yet; a damaged tile at the edge the
    // next run grows from is refused before any row goes.
    assert!(gw.log.archive_before(300, 3).await.is_err());
    calls(&h.url, 256).await;
    gw.log.checkpoint().await.unwrap();
    let edge = std::fs::read(dir.join("tile/1/000.p/1")).unwrap();
    std::fs::write(dir.join("tile/1/000.p/1"), vec![0u8; 32]).unwrap();
    let refused = gw.log.archive_before(512, 4).await.unwrap_err().to_string();
    assert!(refused.contains("tiles at the edge") && refused.contains("restore"), "{refused}");
    assert_eq!(ledger.receipts(0, 1).await.unwrap()[0].log_index, 256, "nothing moved");
    std::fs::write(dir.join("tile/1/000.p/1"), edge).unwrap();
    let below: Vec<u64> =
        ledger.checkpoints().await.unwrap().iter().map(|c| c.size).filter(|s| *s < 512).collect();
    assert!(below.contains(&256) && below.contains(&old_checkpoint.size), "{below:?}");
    assert_eq!(
        gw.log.archive_before(512, 5).await.unwrap(),
        archive::Archived { before: 512, moved: 256, checkpoints_dropped: below.len() as u64 }
    );
    // The checkpoints it covers went; the archive's stays, and proves what
    // they did: a receipt of the first tile, by the new checkpoint, and the
    // bundle made earlier still verifies on its own.
    let kept: Vec<u64> = ledger.checkpoints().await.unwrap().iter().map(|c| c.size).collect();
    assert!(kept.first() == Some(&512) && kept.iter().all(|s| *s >= 512), "{kept:?}");
    let latest = ledger.checkpoint(None).await.unwrap().unwrap();
    for b in [old_bundle, evidence::bundle(&gw.log.archive, ledger, &latest, 10, 11).await.unwrap()]
    {
        let report = bundle::verify(
            &b,
            &Options { expected_kids: vec![], require_pq: true, ..Default::default() },
        );
        assert!(report.ok(), "{:?}", report.failures);
    }
    assert_eq!(
        std::fs::read(dir.join("tile/1/000.p/2")).unwrap(),
        [
            merkle::root(&tile),
            merkle::root(&archive::leaf_hashes(&gw.log.archive, ledger, 256, 512).await.unwrap())
        ]
        .concat()
    );
    // A run reads only the edge; the full check (`toolgate log verify`) reads
    // every tile against the entries, and finds a damaged one inside.
    let check = |archive: &archive::Archive, before: u64| {
        let leaves = archive.leaves(0, before).unwrap();
        let mut check = archive::TileCheck::new(archive, before);
        leaves.iter().try_for_each(|l| check.leaf(l.index, l.hash)).and_then(|()| check.finish())
    };
    check(&gw.log.archive, 512).unwrap();
    std::fs::write(dir.join("tile/0/000"), vec![0u8; 256 * 32]).unwrap();
    let found = check(&gw.log.archive, 512).unwrap_err().to_string();
    assert!(found.contains("tile/0/000 is not the hashes of its entries"), "{found}");
    std::fs::write(dir.join("tile/0/000"), tile.concat()).unwrap();
    std::fs::write(dir.join("tile/1/000.p/2"), vec![1u8; 64]).unwrap();
    let found = check(&gw.log.archive, 512).unwrap_err().to_string();
    assert!(found.contains("tile/1/000.p/2 is not the roots"), "{found}");
}
