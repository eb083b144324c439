use super::*;

#[test]
fn batch_proofs_equal_single_proofs() {
    for n in 1..40u64 {
        let leaves: Vec<Hash> = (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        let all = inclusion_proofs(&leaves, 0, n).unwrap();
        for i in 0..n {
            assert_eq!(all[i as usize], inclusion_proof(&leaves, i, n).unwrap(), "n={n} i={i}");
        }
        if n > 3 {
            assert_eq!(inclusion_proofs(&leaves, 2, 4).unwrap(), all[2..4].to_vec());
        }
    }
}
use proptest::prelude::*;
use proptest::sample::Index;

fn unhex(s: &str) -> Hash {
    let bytes: Vec<u8> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect();
    bytes.try_into().unwrap()
}

fn unhexes(hexes: &[&str]) -> Vec<Hash> {
    hexes.iter().map(|h| unhex(h)).collect()
}

/// Distinct leaves for the property tests.
fn leaves(n: u64) -> Vec<Hash> {
    (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
}

fn ceil_log2(n: u64) -> usize {
    (u64::BITS - (n - 1).leading_zeros()) as usize
}

/// The RFC 6962 §2.1 definitions transcribed literally (recursive, slow):
/// the reference the fast code is checked against.
mod spec {
    use super::super::*;

    fn k(n: usize) -> usize {
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }

    pub fn mth(d: &[Hash]) -> Hash {
        match d.len() {
            0 => Sha256::digest(b"").into(),
            1 => d[0],
            n => node_hash(&mth(&d[..k(n)]), &mth(&d[k(n)..])),
        }
    }

    pub fn path(m: usize, d: &[Hash]) -> Vec<Hash> {
        let n = d.len();
        if n == 1 {
            return vec![];
        }
        let k = k(n);
        let (mut p, sibling) = if m < k {
            (path(m, &d[..k]), mth(&d[k..]))
        } else {
            (path(m - k, &d[k..]), mth(&d[..k]))
        };
        p.push(sibling);
        p
    }

    pub fn subproof(m: usize, d: &[Hash], b: bool) -> Vec<Hash> {
        let n = d.len();
        if m == n {
            return if b { vec![] } else { vec![mth(d)] };
        }
        let k = k(n);
        let (mut p, sibling) = if m <= k {
            (subproof(m, &d[..k], b), mth(&d[k..]))
        } else {
            (subproof(m - k, &d[k..], false), mth(&d[..k]))
        };
        p.push(sibling);
        p
    }
}

/// The eight leaves of the Certificate Transparency reference tests
/// (certificate-transparency merkle_tree_test.cc, carried into trillian's
/// and transparency-dev/merkle's testonly/constants.go).
fn ct_leaves() -> Vec<Hash> {
    let data: [&[u8]; 8] = [
        b"",
        b"\x00",
        b"\x10",
        b"\x20\x21",
        b"\x30\x31",
        b"\x40\x41\x42\x43",
        b"\x50\x51\x52\x53\x54\x55\x56\x57",
        b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
    ];
    data.iter().map(|d| leaf_hash(d)).collect()
}

// Every expected value below is from those reference files, and was
// recomputed independently with Python's hashlib and a literal
// transcription of RFC 6962 §2.1 (MTH, PATH, SUBPROOF); both agree.

#[test]
fn leaf_and_node_hashes_are_prefixed_and_apart() {
    assert_eq!(
        leaf_hash(b""),
        unhex("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")
    );
    let (l, r) = (leaf_hash(b"l"), leaf_hash(b"r"));
    let direct: Hash =
        Sha256::new().chain_update([1u8]).chain_update(l).chain_update(r).finalize().into();
    assert_eq!(node_hash(&l, &r), direct);
    assert_ne!(node_hash(&l, &r), node_hash(&r, &l));
    // The bytes of an interior node, logged as a leaf, hash differently.
    assert_ne!(leaf_hash(&[l, r].concat()), node_hash(&l, &r));
}

#[test]
fn roots_match_the_reference_vectors() {
    let expected = unhexes(&[
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]);
    let leaves = ct_leaves();
    let mut frontier = Frontier::new();
    for (n, want) in expected.iter().enumerate() {
        assert_eq!(root(&leaves[..n]), *want, "root of {n} leaves");
        assert_eq!(frontier.root(), *want, "frontier root of {n} leaves");
        if let Some(leaf) = leaves.get(n) {
            frontier.push(*leaf);
        }
    }
}

#[test]
fn inclusion_proofs_match_the_reference_vectors() {
    let leaves = ct_leaves();
    let cases: [(u64, u64, &[&str]); 5] = [
        (0, 1, &[]),
        (
            0,
            8,
            &[
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            5,
            8,
            &[
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
        (2, 3, &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
        (
            1,
            5,
            &[
                "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
    ];
    for (index, size, want) in cases {
        let proof = inclusion_proof(&leaves, index, size).unwrap();
        assert_eq!(proof, unhexes(want), "PATH({index}, D[{size}])");
        let r = root(&leaves[..size as usize]);
        assert_eq!(verify_inclusion(&leaves[index as usize], index, size, &proof, &r), Ok(()));
    }
}

#[test]
fn consistency_proofs_match_the_reference_vectors() {
    let leaves = ct_leaves();
    let cases: [(u64, u64, &[&str]); 5] = [
        (1, 1, &[]),
        (
            1,
            8,
            &[
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            6,
            8,
            &[
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
        (
            2,
            5,
            &[
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
        (
            6,
            7,
            &[
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
    ];
    for (old, new, want) in cases {
        let proof = consistency_proof(&leaves, old, new).unwrap();
        assert_eq!(proof, unhexes(want), "PROOF({old}, D[{new}])");
        let (old_root, new_root) = (root(&leaves[..old as usize]), root(&leaves[..new as usize]));
        assert_eq!(verify_consistency(old, new, &old_root, &new_root, &proof), Ok(()));
    }
}

#[test]
fn every_proof_up_to_64_leaves_is_the_rfc_one_and_verifies() {
    let all = leaves(64);
    for n in 1..=64u64 {
        let tree = &all[..n as usize];
        let r = root(tree);
        assert_eq!(r, spec::mth(tree), "root of {n}");
        for i in 0..n {
            let proof = inclusion_proof(&all, i, n).unwrap();
            assert_eq!(proof, spec::path(i as usize, tree), "PATH({i}, D[{n}])");
            assert_eq!(
                verify_inclusion(&tree[i as usize], i, n, &proof, &r),
                Ok(()),
                "inclusion of {i} in {n}"
            );
        }
        for m in 0..=n {
            let proof = consistency_proof(&all, m, n).unwrap();
            let want = if m == 0 { vec![] } else { spec::subproof(m as usize, tree, true) };
            assert_eq!(proof, want, "PROOF({m}, D[{n}])");
            assert_eq!(
                verify_consistency(m, n, &root(&tree[..m as usize]), &r, &proof),
                Ok(()),
                "{m} -> {n}"
            );
        }
    }
}

#[test]
fn the_frontier_root_is_the_tree_root_for_every_size_up_to_300() {
    let all = leaves(300);
    let mut frontier = Frontier::new();
    for n in 0..=300u64 {
        let tree = &all[..n as usize];
        assert_eq!(frontier.size(), n);
        assert_eq!(
            frontier.subtrees.len() as u32,
            n.count_ones(),
            "one subtree per set bit of {n}"
        );
        assert_eq!(frontier.root(), root(tree), "frontier vs root() at {n}");
        assert_eq!(root(tree), spec::mth(tree), "root() vs the RFC's MTH at {n}");
        if let Some(leaf) = all.get(n as usize) {
            frontier.push(*leaf);
        }
    }
}

#[test]
fn a_pushed_subtree_is_its_leaves_pushed_one_by_one() {
    let all = leaves(300);
    // 4 leaves, then subtrees of 4, 8 and 256 leaves at sizes they divide: refused elsewhere.
    let mut frontier = Frontier::new();
    all[..4].iter().for_each(|leaf| frontier.push(*leaf));
    frontier.push_subtree(root(&all[4..8]), 2).unwrap();
    frontier.push_subtree(root(&all[8..16]), 3).unwrap();
    assert_eq!((frontier.size(), frontier.root()), (16, root(&all[..16])));
    assert!(frontier.push_subtree(root(&all[16..48]), 5).is_err(), "32 leaves cannot follow 16");
    assert_eq!(frontier.size(), 16, "a refused subtree changes nothing");
    let mut from_tiles = Frontier::new();
    from_tiles.push_subtree(root(&all[..256]), 8).unwrap();
    all[256..300].iter().for_each(|leaf| from_tiles.push(*leaf));
    assert_eq!(from_tiles.root(), root(&all));
    assert_eq!(from_tiles.subtrees.len() as u32, 300u64.count_ones());
}

#[test]
fn a_large_tree_is_built_without_recursion_and_agrees_with_its_frontier() {
    let n = (1 << 17) + 3;
    let all = leaves(n);
    let mut frontier = Frontier::new();
    all.iter().for_each(|leaf| frontier.push(*leaf));
    assert_eq!(frontier.root(), root(&all));
    assert_eq!(frontier.subtrees.len(), 3);
    let proof = inclusion_proof(&all, n - 1, n).unwrap();
    assert_eq!(verify_inclusion(&all[(n - 1) as usize], n - 1, n, &proof, &root(&all)), Ok(()));
}

/// The proof fixes the path's shape, and a shape fits many sizes: leaf 0's
/// proof in a tree of 5 also walks a tree of 6, 7 or 8 to the same root.
/// So a verifier must take the size from the signed tree head that
/// signed the root, never from whoever hands over the proof.
#[test]
fn an_inclusion_proof_does_not_bind_the_tree_size() {
    let all = leaves(8);
    let proof = inclusion_proof(&all, 0, 5).unwrap();
    let r5 = root(&all[..5]);
    for size in 5..=8 {
        assert_eq!(verify_inclusion(&all[0], 0, size, &proof, &r5), Ok(()), "size {size}");
    }
    assert_eq!(
        verify_inclusion(&all[0], 0, 4, &proof, &r5),
        Err(MerkleError::WrongProofLength { expected: 2, got: 3 })
    );
    assert_eq!(
        verify_inclusion(&all[0], 0, 6, &proof, &root(&all[..6])),
        Err(MerkleError::RootMismatch)
    );
}

fn e<T: std::fmt::Debug>(result: Result<T, MerkleError>) -> MerkleError {
    result.unwrap_err()
}

#[test]
fn errors_say_what_failed() {
    let all = leaves(8);
    let r = root(&all);
    assert_eq!(e(inclusion_proof(&all, 8, 8)), MerkleError::IndexOutOfRange { index: 8, size: 8 });
    assert_eq!(e(inclusion_proof(&all, 0, 0)), MerkleError::IndexOutOfRange { index: 0, size: 0 });
    assert_eq!(
        e(inclusion_proof(&all, 0, 9)),
        MerkleError::SizeOutOfRange { size: 9, available: 8 }
    );
    assert_eq!(
        e(inclusion_proof(&all, 0, u64::MAX)),
        MerkleError::SizeOutOfRange { size: u64::MAX, available: 8 }
    );
    assert_eq!(
        e(consistency_proof(&all, 3, 9)),
        MerkleError::SizeOutOfRange { size: 9, available: 8 }
    );
    assert_eq!(e(consistency_proof(&all, 5, 4)), MerkleError::OldLargerThanNew { old: 5, new: 4 });
    assert_eq!(
        e(verify_inclusion(&all[0], 8, 8, &[], &r)),
        MerkleError::IndexOutOfRange { index: 8, size: 8 }
    );
    assert_eq!(
        e(verify_inclusion(&all[0], 0, 8, &[], &r)),
        MerkleError::WrongProofLength { expected: 3, got: 0 }
    );
    assert_eq!(
        e(verify_consistency(5, 4, &r, &r, &[])),
        MerkleError::OldLargerThanNew { old: 5, new: 4 }
    );
    assert_eq!(
        e(verify_consistency(3, 8, &r, &r, &[])),
        MerkleError::WrongProofLength { expected: 4, got: 0 }
    );

    let messages = [
        (
            MerkleError::IndexOutOfRange { index: 8, size: 8 },
            "leaf index 8 is outside a tree of 8 leaves",
        ),
        (
            MerkleError::SizeOutOfRange { size: 9, available: 8 },
            "a tree of 9 leaves was asked for; only 8 leaves are at hand",
        ),
        (
            MerkleError::OldLargerThanNew { old: 5, new: 4 },
            "the old tree size 5 is larger than the new tree size 4",
        ),
        (
            MerkleError::WrongProofLength { expected: 3, got: 0 },
            "the proof has 0 hashes; a proof for these sizes has exactly 3",
        ),
        (MerkleError::RootMismatch, "the proof leads to another root"),
        (MerkleError::OldRootMismatch, "the proof leads to another old root"),
        (
            MerkleError::SameSizeDifferentRoots { size: 4 },
            "the two roots given for tree size 4 differ",
        ),
    ];
    for (error, message) in messages {
        assert_eq!(error.to_string(), message);
    }
}

#[test]
fn trivial_consistency_takes_an_empty_proof() {
    let all = leaves(8);
    let (r4, r8, empty) = (root(&all[..4]), root(&all), root(&[]));
    assert_eq!(verify_consistency(0, 0, &empty, &empty, &[]), Ok(()));
    assert_eq!(verify_consistency(0, 8, &empty, &r8, &[]), Ok(()));
    assert_eq!(verify_consistency(8, 8, &r8, &r8, &[]), Ok(()));
    // Held roots are still checked where there is nothing to prove.
    assert_eq!(verify_consistency(0, 8, &r4, &r8, &[]), Err(MerkleError::OldRootMismatch));
    assert_eq!(
        verify_consistency(8, 8, &r4, &r8, &[]),
        Err(MerkleError::SameSizeDifferentRoots { size: 8 })
    );
    assert_eq!(
        verify_consistency(8, 8, &r8, &r8, &[r8]),
        Err(MerkleError::WrongProofLength { expected: 0, got: 1 })
    );
    assert_eq!(
        verify_consistency(0, 8, &empty, &r8, &[r8]),
        Err(MerkleError::WrongProofLength { expected: 0, got: 1 })
    );
    // A perfect old tree's root is the seed the path starts from, so the
    // proof omits it and the old root rebuilds to itself: a wrong one
    // shows as the new root not being reached.
    let proof = consistency_proof(&all, 4, 8).unwrap();
    assert_eq!(proof.len(), 1);
    assert_eq!(verify_consistency(4, 8, &r4, &r8, &proof), Ok(()));
    assert_eq!(verify_consistency(4, 8, &r8, &r8, &proof), Err(MerkleError::RootMismatch));
    assert_eq!(verify_consistency(4, 8, &r4, &r4, &proof), Err(MerkleError::RootMismatch));
    // Otherwise the proof carries the old tree's rightmost subtree root.
    let proof = consistency_proof(&all, 3, 8).unwrap();
    assert_eq!(verify_consistency(3, 8, &root(&all[..3]), &r8, &proof), Ok(()));
    assert_eq!(verify_consistency(3, 8, &r4, &r8, &proof), Err(MerkleError::OldRootMismatch));
}

fn flip(proof: &[Hash], at: Index, byte: usize, bit: u8) -> Vec<Hash> {
    let mut flipped = proof.to_vec();
    flipped[at.index(proof.len())][byte] ^= 1 << bit;
    flipped
}

proptest! {
    /// A proof shows one leaf at one index under one root, nothing else.
    #[test]
    fn an_inclusion_proof_verifies_and_nothing_else_does(
        n in 1u64..=200, at in any::<Index>(), other in any::<Index>(),
        other_size in 1u64..=256, element in any::<Index>(), byte in 0usize..32, bit in 0u8..8,
    ) {
        let all = leaves(256);
        let tree = &all[..n as usize];
        let (i, r) = (at.index(n as usize) as u64, root(tree));
        let leaf = tree[i as usize];
        let proof = inclusion_proof(&all, i, n).unwrap();
        prop_assert!(proof.len() <= ceil_log2(n), "{} hashes for {} leaves", proof.len(), n);
        prop_assert_eq!(verify_inclusion(&leaf, i, n, &proof, &r), Ok(()));

        prop_assert_eq!(verify_inclusion(&leaf_hash(b"another"), i, n, &proof, &r), Err(MerkleError::RootMismatch));
        prop_assert_eq!(verify_inclusion(&tree[0], i, n, &proof, &root(&[])), Err(MerkleError::RootMismatch));
        if !proof.is_empty() {
            prop_assert_eq!(verify_inclusion(&leaf, i, n, &flip(&proof, element, byte, bit), &r), Err(MerkleError::RootMismatch));
            let shorter = &proof[..proof.len() - 1];
            prop_assert_eq!(verify_inclusion(&leaf, i, n, shorter, &r), Err(MerkleError::WrongProofLength { expected: proof.len(), got: proof.len() - 1 }));
        }
        let longer = [proof.clone(), vec![r]].concat();
        prop_assert_eq!(verify_inclusion(&leaf, i, n, &longer, &r), Err(MerkleError::WrongProofLength { expected: proof.len(), got: proof.len() + 1 }));

        let j = other.index(n as usize) as u64;
        if j != i {
            prop_assert!(verify_inclusion(&leaf, j, n, &proof, &r).is_err(), "leaf {} proved at {}", i, j);
            prop_assert!(verify_inclusion(&tree[j as usize], j, n, &proof, &r).is_err(), "leaf {}'s proof used for {}", i, j);
        }

        // Another size never leads to its own root; it leads to this root
        // exactly when the path has the same shape (see
        // an_inclusion_proof_does_not_bind_the_tree_size).
        if other_size != n && i < other_size {
            prop_assert!(verify_inclusion(&leaf, i, other_size, &proof, &root(&all[..other_size as usize])).is_err());
            let same_shape = decompose(i, n).0 == decompose(i, other_size).0;
            prop_assert_eq!(verify_inclusion(&leaf, i, other_size, &proof, &r).is_ok(), same_shape, "{} in {} vs {}", i, n, other_size);
        }
    }

    /// A consistency proof links exactly these two trees.
    #[test]
    fn a_consistency_proof_verifies_and_nothing_else_does(
        new in 0u64..=200, at in any::<Index>(), element in any::<Index>(), byte in 0usize..32, bit in 0u8..8,
    ) {
        let all = leaves(new);
        let old = at.index(new as usize + 1) as u64;
        let (old_root, new_root) = (root(&all[..old as usize]), root(&all));
        let proof = consistency_proof(&all, old, new).unwrap();
        if new > 0 {
            prop_assert!(proof.len() <= ceil_log2(new) + 1, "{} hashes for {} -> {}", proof.len(), old, new);
        }
        prop_assert_eq!(verify_consistency(old, new, &old_root, &new_root, &proof), Ok(()));

        if old == new || old == 0 {
            prop_assert!(proof.is_empty());
            return Ok(());
        }
        let flipped = flip(&proof, element, byte, bit);
        let flipped = verify_consistency(old, new, &old_root, &new_root, &flipped);
        prop_assert!(flipped == Err(MerkleError::RootMismatch) || flipped == Err(MerkleError::OldRootMismatch), "{:?}", flipped);
        prop_assert_eq!(verify_consistency(new, old, &new_root, &old_root, &proof), Err(MerkleError::OldLargerThanNew { old: new, new: old }));
        prop_assert!(verify_consistency(old, new, &new_root, &old_root, &proof).is_err());
        prop_assert!(verify_consistency(old, new, &old_root, &root(&all[..new as usize - 1]), &proof).is_err());
        prop_assert!(verify_consistency(old, new, &root(&all[..old as usize - 1]), &new_root, &proof).is_err());
        let longer = [proof.clone(), vec![new_root]].concat();
        prop_assert_eq!(verify_consistency(old, new, &old_root, &new_root, &longer), Err(MerkleError::WrongProofLength { expected: proof.len(), got: proof.len() + 1 }));
        let shorter = &proof[..proof.len() - 1];
        prop_assert_eq!(verify_consistency(old, new, &old_root, &new_root, shorter), Err(MerkleError::WrongProofLength { expected: proof.len(), got: proof.len() - 1 }));
    }
}
