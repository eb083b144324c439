//! Merkle-tree maths for the receipt log. A signed receipt is only worth
//! something if its holder can check, without trusting the gateway, that it
//! is in the log (an inclusion proof) and that the log they saw yesterday is
//! a prefix of the one they see today (a consistency proof): a log that can
//! drop or rewrite entries unnoticed proves nothing. This is the tree of
//! RFC 6962 §2.1 with the verification algorithms of RFC 9162 §2.1.3.2 and
//! §2.1.4.2, so any Certificate Transparency / transparency-dev verifier can
//! check our proofs. Hashes, proofs and checks only; signing the root and
//! storing the leaves live elsewhere.
//!
//! A proof never binds the tree size on its own (see
//! `an_inclusion_proof_does_not_bind_the_tree_size`): whoever publishes a
//! root must sign it together with its size.

use sha2::{Digest, Sha256};

/// A SHA-256 digest: a leaf hash, an interior node or a root.
pub type Hash = [u8; 32];

/// Why a proof cannot be made, or does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MerkleError {
    /// A leaf index (or the end of a range) is not in the tree.
    #[error("leaf index {index} is outside a tree of {size} leaves")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The tree size, in leaves.
        size: u64,
    },
    /// A tree larger than the leaves at hand was asked for.
    #[error("a tree of {size} leaves was asked for; only {available} leaves are at hand")]
    SizeOutOfRange {
        /// The tree size asked for.
        size: u64,
        /// How many leaf hashes were given.
        available: u64,
    },
    /// The old tree of a consistency proof is larger than the new one.
    #[error("the old tree size {old} is larger than the new tree size {new}")]
    OldLargerThanNew {
        /// The old tree size.
        old: u64,
        /// The new tree size.
        new: u64,
    },
    /// The proof has another number of hashes than a proof for these sizes.
    #[error("the proof has {got} hashes; a proof for these sizes has exactly {expected}")]
    WrongProofLength {
        /// How many hashes a proof for these sizes has.
        expected: usize,
        /// How many the proof has.
        got: usize,
    },
    /// The proof leads to another root than the one given.
    #[error("the proof leads to another root")]
    RootMismatch,
    /// A consistency proof leads to another old root than the one given.
    #[error("the proof leads to another old root")]
    OldRootMismatch,
    /// A frontier's parts that do not fit its size.
    #[error("{0}")]
    Malformed(String),
    /// Two roots given for one tree size differ: the log forked.
    #[error("the two roots given for tree size {size} differ")]
    SameSizeDifferentRoots {
        /// The tree size.
        size: u64,
    },
}

/// The hash of one log entry. The 0x00 prefix (0x01 for interior nodes) keeps
/// a leaf from ever being passed off as a node: without it an interior node's
/// 64 input bytes would be a valid leaf, a second preimage for a shorter tree.
pub fn leaf_hash(data: &[u8]) -> Hash {
    Sha256::new().chain_update([0x00]).chain_update(data).finalize().into()
}

/// The hash of an interior node from its two children.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    Sha256::new().chain_update([0x01]).chain_update(left).chain_update(right).finalize().into()
}

/// The root of the empty tree: SHA-256 of the empty string (RFC 6962 §2.1).
fn empty_root() -> Hash {
    Sha256::digest(b"").into()
}

/// The Merkle Tree Hash (MTH, RFC 6962 §2.1) of these leaf hashes.
///
/// The RFC defines it top-down, splitting at the largest power of two below
/// n; that makes every left subtree perfect, so the same tree is built
/// bottom-up by hashing neighbours pairwise, level by level, and carrying a
/// level's odd last node up unchanged (it is the root of a smaller right
/// subtree, paired higher up). O(n) hashes, no recursion.
pub fn root(leaf_hashes: &[Hash]) -> Hash {
    if leaf_hashes.is_empty() {
        return empty_root();
    }
    let mut level = fold_level(leaf_hashes);
    while level.len() > 1 {
        level = fold_level(&level);
    }
    level[0]
}

/// One level up: neighbours hashed pairwise, an odd last node carried.
fn fold_level(hashes: &[Hash]) -> Vec<Hash> {
    hashes
        .chunks(2)
        .map(|pair| match pair {
            [left, right] => node_hash(left, right),
            [alone] => *alone,
            _ => unreachable!("chunks(2) yields one or two hashes"),
        })
        .collect()
}

/// The audit paths of leaves `from..to` in the tree of all `leaf_hashes`,
/// in O(n log n) hashes in all (one `inclusion_proof` each would be O(n)
/// per leaf): each subtree's root is computed once and appended to the
/// paths of the wanted leaves on its sibling's side.
pub fn inclusion_proofs(
    leaf_hashes: &[Hash],
    from: u64,
    to: u64,
) -> Result<Vec<Vec<Hash>>, MerkleError> {
    let size = leaf_hashes.len() as u64;
    if from > to || to > size {
        return Err(MerkleError::IndexOutOfRange { index: to.max(from), size });
    }
    let mut out = vec![Vec::new(); (to - from) as usize];
    fn walk(d: &[Hash], offset: u64, want: (u64, u64), out: &mut [Vec<Hash>]) -> Hash {
        if d.len() == 1 {
            return d[0];
        }
        let k = split(d.len());
        let (left, right) =
            (walk(&d[..k], offset, want, out), walk(&d[k..], offset + k as u64, want, out));
        // Only the wanted leaves under this node: no scan of all of `out`.
        let slot = |index: u64| (index.clamp(want.0, want.1) - want.0) as usize;
        let (lo, mid, hi) = (slot(offset), slot(offset + k as u64), slot(offset + d.len() as u64));
        out[lo..mid].iter_mut().for_each(|path| path.push(right));
        out[mid..hi].iter_mut().for_each(|path| path.push(left));
        node_hash(&left, &right)
    }
    if to > from {
        walk(leaf_hashes, 0, (from, to), &mut out);
    }
    Ok(out)
}

/// The largest power of two strictly below `n` (n ≥ 2): RFC 6962's `k`, the
/// size of the left subtree.
fn split(n: usize) -> usize {
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// The first `size` leaf hashes, or why there are not that many.
fn prefix(leaf_hashes: &[Hash], size: u64) -> Result<&[Hash], MerkleError> {
    usize::try_from(size)
        .ok()
        .and_then(|n| leaf_hashes.get(..n))
        .ok_or(MerkleError::SizeOutOfRange { size, available: leaf_hashes.len() as u64 })
}

/// The audit path of leaf `index` in the tree of the first `tree_size`
/// leaves (PATH(m, D[n]) of RFC 6962 §2.1.1), siblings from the leaf up.
pub fn inclusion_proof(
    leaf_hashes: &[Hash],
    index: u64,
    tree_size: u64,
) -> Result<Vec<Hash>, MerkleError> {
    let mut tree = prefix(leaf_hashes, tree_size)?;
    if index >= tree_size {
        return Err(MerkleError::IndexOutOfRange { index, size: tree_size });
    }
    // Lossless: index < tree_size, which fits a usize (prefix found it).
    let mut m = index as usize;
    // PATH recurses into the half holding leaf m and then appends the other
    // half's root, so walking down from the top collects the path in reverse.
    let mut path = Vec::new();
    while tree.len() > 1 {
        let k = split(tree.len());
        if m < k {
            path.push(root(&tree[k..]));
            tree = &tree[..k];
        } else {
            path.push(root(&tree[..k]));
            m -= k;
            tree = &tree[k..];
        }
    }
    path.reverse();
    Ok(path)
}

/// The consistency proof between the trees of the first `old_size` and the
/// first `new_size` leaves (PROOF(m, D[n]) = SUBPROOF(m, D[n], true) of
/// RFC 6962 §2.1.2). Empty when the sizes are equal or the old tree is empty:
/// there is nothing to prove.
pub fn consistency_proof(
    leaf_hashes: &[Hash],
    old_size: u64,
    new_size: u64,
) -> Result<Vec<Hash>, MerkleError> {
    let mut tree = prefix(leaf_hashes, new_size)?;
    if old_size > new_size {
        return Err(MerkleError::OldLargerThanNew { old: old_size, new: new_size });
    }
    if old_size == 0 {
        return Ok(Vec::new());
    }
    // Lossless: old_size ≤ new_size, which fits a usize.
    let mut m = old_size as usize;
    // `whole` is SUBPROOF's b: the old tree is still a whole subtree of the
    // new one, so its root is one the verifier already holds, not a proof node.
    let mut whole = true;
    let mut proof = Vec::new();
    // As in `inclusion_proof`: SUBPROOF appends after recursing, so walk down
    // and reverse.
    while m != tree.len() {
        let k = split(tree.len());
        if m <= k {
            proof.push(root(&tree[k..]));
            tree = &tree[..k];
        } else {
            proof.push(root(&tree[..k]));
            m -= k;
            tree = &tree[k..];
            whole = false;
        }
    }
    if !whole {
        proof.push(root(tree));
    }
    proof.reverse();
    Ok(proof)
}

/// The shape of the path from leaf `index` to the root of a tree of `size`
/// leaves: `inner` levels below the point where the paths to `index` and to
/// the last leaf meet, then `border` left siblings along the right edge (one
/// per set bit of `index` above that point).
fn decompose(index: u64, size: u64) -> (u32, u32) {
    let inner = u64::BITS - (index ^ (size - 1)).leading_zeros();
    let border = index.checked_shr(inner).unwrap_or(0).count_ones();
    (inner, border)
}

/// How many hashes the inclusion proof of `index` (< `size`) has.
fn inclusion_proof_len(index: u64, size: u64) -> usize {
    let (inner, border) = decompose(index, size);
    (inner + border) as usize
}

/// How many hashes the consistency proof from `old` to `new` (old ≤ new) has.
fn consistency_proof_len(old: u64, new: u64) -> usize {
    if old == 0 || old == new {
        return 0;
    }
    // The proof is the inclusion path of the old tree's last leaf, less the
    // levels inside the old tree's rightmost perfect subtree (whose root is a
    // single node), plus that node itself unless it is the whole old tree.
    let (inner, border) = decompose(old - 1, new);
    let shift = old.trailing_zeros();
    let seed = u32::from(!old.is_power_of_two());
    (seed + inner - shift + border) as usize
}

fn check_len(proof: &[Hash], expected: usize) -> Result<(), MerkleError> {
    match proof.len() {
        got if got == expected => Ok(()),
        got => Err(MerkleError::WrongProofLength { expected, got }),
    }
}

/// Whether `proof` shows `leaf_hash` at `index` in the tree of `tree_size`
/// leaves whose root is `root`: RFC 9162 §2.1.3.2, walking the bits of the
/// index and the last index up the tree (never rebuilding it).
pub fn verify_inclusion(
    leaf_hash: &Hash,
    index: u64,
    tree_size: u64,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), MerkleError> {
    if index >= tree_size {
        return Err(MerkleError::IndexOutOfRange { index, size: tree_size });
    }
    // The walk below rejects a proof of the wrong length too; checking first
    // says so plainly instead of as a root mismatch.
    let expected = inclusion_proof_len(index, tree_size);
    check_len(proof, expected)?;
    let wrong_len = MerkleError::WrongProofLength { expected, got: proof.len() };
    // The RFC's fn (this node's position in its level) and sn (the last node's).
    let (mut f, mut s) = (index, tree_size - 1);
    let mut r = *leaf_hash;
    for p in proof {
        if s == 0 {
            return Err(wrong_len);
        }
        if f & 1 == 1 || f == s {
            // p is a left sibling; on the right edge, skip the levels where
            // this node has no sibling and is carried up as it is.
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(wrong_len);
    }
    if r != *root {
        return Err(MerkleError::RootMismatch);
    }
    Ok(())
}

/// Whether `proof` shows that the tree of `old_size` leaves with `old_root`
/// is a prefix of the tree of `new_size` leaves with `new_root`: RFC 9162
/// §2.1.4.2, rebuilding both roots from the one path.
///
/// The RFC covers 0 < old < new. Equal sizes take an empty proof and equal
/// roots (different ones are a forked log). Every tree extends the empty one,
/// so old size 0 takes an empty proof and the empty tree's root.
pub fn verify_consistency(
    old_size: u64,
    new_size: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), MerkleError> {
    if old_size > new_size {
        return Err(MerkleError::OldLargerThanNew { old: old_size, new: new_size });
    }
    let expected = consistency_proof_len(old_size, new_size);
    check_len(proof, expected)?;
    if old_size == new_size {
        return if old_root == new_root {
            Ok(())
        } else {
            Err(MerkleError::SameSizeDifferentRoots { size: old_size })
        };
    }
    if old_size == 0 {
        return if *old_root == empty_root() { Ok(()) } else { Err(MerkleError::OldRootMismatch) };
    }
    let wrong_len = MerkleError::WrongProofLength { expected, got: proof.len() };
    // A whole perfect old tree is a node of the new one: the path starts at
    // its root, which the verifier holds and the proof therefore omits.
    let (seed, path) = if old_size.is_power_of_two() {
        (old_root, proof)
    } else {
        match proof.split_first() {
            Some(split) => split,
            None => return Err(wrong_len),
        }
    };
    let (mut f, mut s) = (old_size - 1, new_size - 1);
    // Start from the old tree's rightmost perfect subtree, the seed's node.
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*seed, *seed);
    for c in path {
        if s == 0 {
            return Err(wrong_len);
        }
        if f & 1 == 1 || f == s {
            // A left sibling: inside both trees.
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            // A right sibling: only in the new tree.
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(wrong_len);
    }
    if fr != *old_root {
        return Err(MerkleError::OldRootMismatch);
    }
    if sr != *new_root {
        return Err(MerkleError::RootMismatch);
    }
    Ok(())
}

/// The right edge of an append-only tree: the roots of its perfect subtrees,
/// largest (leftmost) first, one per set bit of the size, so at most
/// log2(n)+1 of them. Enough to append and to compute the root, so the
/// gateway keeps the current root in O(log n) memory without the leaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    subtrees: Vec<Hash>,
}

impl Frontier {
    /// The frontier of the empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one leaf. Like incrementing a binary counter: each trailing
    /// one bit of the old size is a perfect subtree of the new leaf's size,
    /// merged into it. O(1) hashes amortized.
    pub fn push(&mut self, leaf_hash: Hash) {
        let mut node = leaf_hash;
        let mut carry = self.size;
        while carry & 1 == 1 {
            let left = self.subtrees.pop().expect("one subtree per set bit of the size");
            node = node_hash(&left, &node);
            carry >>= 1;
        }
        self.subtrees.push(node);
        self.size += 1;
    }

    /// Appends the root of a perfect subtree of `2^height` leaves, as if
    /// its leaves were pushed one by one: how a tree is rebuilt from the
    /// hash tiles at its right edge. The size must be a multiple of
    /// `2^height` (else the subtree is not one of the tree's).
    pub fn push_subtree(&mut self, root: Hash, height: u32) -> Result<(), MerkleError> {
        let leaves = 1u64.checked_shl(height).filter(|n| self.size % n == 0);
        let Some(leaves) = leaves else {
            return Err(MerkleError::Malformed(format!(
                "a subtree of height {height} cannot follow {} leaves",
                self.size
            )));
        };
        let mut node = root;
        let mut carry = self.size >> height;
        while carry & 1 == 1 {
            let left = self.subtrees.pop().expect("one subtree per set bit of the size");
            node = node_hash(&left, &node);
            carry >>= 1;
        }
        self.subtrees.push(node);
        self.size += leaves;
        Ok(())
    }

    /// How many leaves the tree has.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its perfect subtrees' roots, largest first: what [`Frontier::from_parts`] takes back.
    pub fn subtrees(&self) -> &[Hash] {
        &self.subtrees
    }

    /// The frontier of a tree of `size` leaves from its subtrees' roots
    /// (largest first, one per set bit of `size`), as kept beside an archive.
    pub fn from_parts(size: u64, subtrees: Vec<Hash>) -> Result<Self, MerkleError> {
        if subtrees.len() != size.count_ones() as usize {
            return Err(MerkleError::Malformed(format!(
                "a tree of {size} leaves has {} perfect subtrees, not {}",
                size.count_ones(),
                subtrees.len()
            )));
        }
        Ok(Self { size, subtrees })
    }

    /// The tree's root: the subtrees joined from the right, smallest first,
    /// as MTH joins a perfect left subtree with the rest.
    pub fn root(&self) -> Hash {
        self.subtrees
            .iter()
            .rev()
            .copied()
            .reduce(|right, left| node_hash(&left, &right))
            .unwrap_or_else(empty_root)
    }
}

#[cfg(test)]
mod tests;
