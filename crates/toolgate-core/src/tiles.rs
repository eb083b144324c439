//! The log as static files, per C2SP tlog-tiles (c2sp.org/tlog-tiles): hash
//! tiles and entry bundles, by the spec's paths, so any tlog-tiles client can
//! read an archive of the log. Pure: bytes and paths in, bytes and paths out;
//! the caller writes and reads the files.
//!
//! - A **hash tile** at level L holds up to 256 consecutive hashes of the
//!   tree's nodes at height 8·L (level 0: the leaf hashes; level 1: the roots
//!   of each 256 leaves; …), each 32 bytes, concatenated. A full tile has
//!   256; the tree's right edge may end in a partial one, `.p/W` for width W.
//! - An **entry bundle** holds the entries (the leaves' data) of one level-0
//!   tile, each as its length (big-endian u16) and its bytes.
//! - A tile index N is written in groups of three digits, all but the last
//!   prefixed with `x`: 1234067 is `x001/x234/067`.

use crate::merkle::{self, Hash};

/// Hashes per full tile, and entries per full bundle.
pub const WIDTH: u64 = 256;

/// The largest entry a bundle can hold (its length is a u16).
pub const MAX_ENTRY: usize = u16::MAX as usize;

/// Why tiles cannot be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TileError {
    /// An entry longer than a bundle can hold.
    #[error("entry {index} is {len} bytes; a tlog-tiles entry bundle holds at most {MAX_ENTRY}")]
    EntryTooLarge {
        /// The entry's index in the log.
        index: u64,
        /// Its length.
        len: usize,
    },
    /// A file that is not what its path says.
    #[error("{0}")]
    Malformed(String),
}

/// `N` as a tile path: groups of three digits, all but the last `x`-prefixed.
pub fn index_path(n: u64) -> String {
    let digits = format!("{n:03}");
    let pad = (3 - digits.len() % 3) % 3;
    let padded = format!("{}{digits}", "0".repeat(pad));
    let groups: Vec<&str> = padded
        .as_bytes()
        .chunks(3)
        .map(|g| std::str::from_utf8(g).expect("ASCII digits"))
        .collect();
    let last = groups.len() - 1;
    groups
        .iter()
        .enumerate()
        .map(|(i, g)| if i < last { format!("x{g}") } else { (*g).to_string() })
        .collect::<Vec<_>>()
        .join("/")
}

fn suffix(width: u64) -> String {
    if width < WIDTH { format!(".p/{width}") } else { String::new() }
}

/// The path of hash tile `index` at `level`, `width` hashes wide.
pub fn tile_path(level: u8, index: u64, width: u64) -> String {
    format!("tile/{level}/{}{}", index_path(index), suffix(width))
}

/// The path of entry bundle `index`, `width` entries wide.
pub fn entries_path(index: u64, width: u64) -> String {
    format!("tile/entries/{}{}", index_path(index), suffix(width))
}

/// One hash tile of a tree: its level, index and hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tile {
    /// Its level: its hashes are of nodes at height 8·level.
    pub level: u8,
    /// Its index among the level's tiles.
    pub index: u64,
    /// Its hashes, 1 to [`WIDTH`].
    pub hashes: Vec<Hash>,
}

impl Tile {
    /// Its path.
    pub fn path(&self) -> String {
        tile_path(self.level, self.index, self.hashes.len() as u64)
    }

    /// Its file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.hashes.concat()
    }
}

/// Every hash tile of the tree whose leaf hashes these are (at its size):
/// full tiles, and the partial ones at its right edge. A level's hashes are
/// the roots of the previous level's full tiles.
pub fn tiles(leaf_hashes: &[Hash]) -> Vec<Tile> {
    let mut out = Vec::new();
    let mut level_hashes = leaf_hashes.to_vec();
    let mut level = 0u8;
    while !level_hashes.is_empty() {
        let mut up = Vec::new();
        for (index, chunk) in level_hashes.chunks(WIDTH as usize).enumerate() {
            if chunk.len() as u64 == WIDTH {
                up.push(merkle::root(chunk));
            }
            out.push(Tile { level, index: index as u64, hashes: chunk.to_vec() });
        }
        level_hashes = up;
        level += 1;
    }
    out
}

/// The right edge of an archived tree: per level (1 up, ascending), the
/// hashes of its partial tile, as [`edge_widths`] names them.
pub type Edge = [(u8, Vec<Hash>)];

/// The tiles an archive of `size` leaves gains when `fresh` leaf hashes
/// are appended: the new full tiles, and the new partial one of each level.
/// `edge` is the old tree's right edge (level 0 has none: `size` is a
/// multiple of [`WIDTH`]). Only what changes is computed, so archiving the
/// next minute costs that minute's leaves, not the whole log's.
pub fn grown(size: u64, edge: &Edge, fresh: &[Hash]) -> Result<Vec<Tile>, TileError> {
    let shape: Vec<(u8, u64)> =
        edge.iter().map(|(level, hashes)| (*level, hashes.len() as u64)).collect();
    let expected: Vec<(u8, u64)> =
        edge_widths(size).into_iter().map(|(level, _, width)| (level, width)).collect();
    if size % WIDTH != 0 || shape != expected {
        return Err(TileError::Malformed(format!(
            "the edge of a tree of {size} leaves is (level, hashes) {expected:?}, not {shape:?}"
        )));
    }
    let mut out = Vec::new();
    let mut fresh = fresh.to_vec();
    let mut level = 0u8;
    while !fresh.is_empty() {
        let first = edge_of(size, level).0;
        let mut hashes =
            edge.iter().find(|(l, _)| *l == level).map(|(_, h)| h.clone()).unwrap_or_default();
        hashes.append(&mut fresh);
        for (i, chunk) in hashes.chunks(WIDTH as usize).enumerate() {
            if chunk.len() as u64 == WIDTH {
                fresh.push(merkle::root(chunk));
            }
            out.push(Tile { level, index: first + i as u64, hashes: chunk.to_vec() });
        }
        level += 1;
    }
    Ok(out)
}

/// The partial tiles at the right edge of a tree of `size` leaves, level 1
/// up: (level, tile index, width). Level 0 has none when `size` is a
/// multiple of [`WIDTH`], as an archive's is.
pub fn edge_widths(size: u64) -> Vec<(u8, u64, u64)> {
    let mut out = Vec::new();
    let mut level = 1u8;
    while size.checked_shr(8 * u32::from(level)).unwrap_or(0) > 0 {
        let (index, width) = edge_of(size, level);
        if width > 0 {
            out.push((level, index, width));
        }
        level += 1;
    }
    out
}

/// At `level` of a tree of `size` leaves: the index of the tile that grows
/// next, and how many hashes it holds.
fn edge_of(size: u64, level: u8) -> (u64, u64) {
    let n = size.checked_shr(8 * u32::from(level)).unwrap_or(0);
    (n / WIDTH, n % WIDTH)
}

/// The tree of `size` leaves as its right edge rebuilds it (the hashes of
/// each partial tile, by level, as [`edge_widths`] lists them): its root
/// checks an archive's edge against the root the ledger recorded.
pub fn edge_frontier(size: u64, edge: &Edge) -> Result<merkle::Frontier, TileError> {
    if size % WIDTH != 0 {
        return Err(TileError::Malformed(format!(
            "an archive holds whole tiles of {WIDTH}, not {size} leaves"
        )));
    }
    let mut frontier = merkle::Frontier::new();
    for (level, hashes) in edge.iter().rev() {
        for hash in hashes {
            frontier
                .push_subtree(*hash, 8 * u32::from(*level))
                .map_err(|e| TileError::Malformed(e.to_string()))?;
        }
    }
    if frontier.size() != size {
        return Err(TileError::Malformed(format!(
            "the edge tiles hold {} leaves, not {size}",
            frontier.size()
        )));
    }
    Ok(frontier)
}

/// Reads a hash tile's file: `width` hashes.
pub fn read_tile(bytes: &[u8], width: u64) -> Result<Vec<Hash>, TileError> {
    if bytes.len() as u64 != width * 32 {
        return Err(TileError::Malformed(format!(
            "a hash tile of width {width} is {} bytes, not {}",
            bytes.len(),
            width * 32
        )));
    }
    Ok(bytes.chunks(32).map(|h| h.try_into().expect("32 bytes")).collect())
}

/// An entry bundle's bytes; `first` is the first entry's log index (for the error).
pub fn entry_bundle<'a>(
    first: u64,
    entries: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, TileError> {
    let mut out = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let len = u16::try_from(entry.len())
            .map_err(|_| TileError::EntryTooLarge { index: first + i as u64, len: entry.len() })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(entry);
    }
    Ok(out)
}

/// Reads an entry bundle: exactly `width` entries.
pub fn read_entry_bundle(bytes: &[u8], width: u64) -> Result<Vec<&[u8]>, TileError> {
    let mut out = Vec::with_capacity(width as usize);
    let mut rest = bytes;
    while !rest.is_empty() {
        let [a, b, tail @ ..] = rest else {
            return Err(TileError::Malformed("an entry bundle ends inside a length".into()));
        };
        let len = usize::from(u16::from_be_bytes([*a, *b]));
        if tail.len() < len {
            return Err(TileError::Malformed("an entry bundle ends inside an entry".into()));
        }
        out.push(&tail[..len]);
        rest = &tail[len..];
    }
    if out.len() as u64 != width {
        return Err(TileError::Malformed(format!(
            "an entry bundle of width {width} holds {} entries",
            out.len()
        )));
    }
    Ok(out)
}

/// The width of hash tile `index` at `level` in a tree of `size` leaves:
/// how many of its hashes the tree has (0: none yet).
pub fn width_at(size: u64, level: u8, index: u64) -> u64 {
    let nodes = size.checked_shr(8 * u32::from(level)).unwrap_or(0);
    nodes.saturating_sub(index.saturating_mul(WIDTH)).min(WIDTH)
}

/// Reads `path` (after `tile/`) as a hash tile's: level, index and width.
/// `None` for anything the spec's paths are not (so a server answers 404).
pub fn parse_tile_path(path: &str) -> Option<(u8, u64, u64)> {
    let (level, rest) = path.split_once('/')?;
    let level: u8 = level.parse().ok().filter(|l: &u8| *l <= 63 && level == l.to_string())?;
    let (index, width) = parse_index(rest)?;
    Some((level, index, width))
}

/// Reads `N[.p/W]` in the spec's three-digit groups: the index and width.
pub fn parse_index(path: &str) -> Option<(u64, u64)> {
    let (digits, width) = match path.split_once(".p/") {
        Some((digits, text)) => {
            let w: u64 = text
                .parse()
                .ok()
                .filter(|w: &u64| (1..WIDTH).contains(w) && w.to_string() == text)?;
            (digits, w)
        }
        None => (path, WIDTH),
    };
    let groups: Vec<&str> = digits.split('/').collect();
    let mut n: u64 = 0;
    for (i, g) in groups.iter().enumerate() {
        let g = if i + 1 < groups.len() { g.strip_prefix('x')? } else { g };
        if g.len() != 3 || !g.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n = n.checked_mul(1000)?.checked_add(g.parse().ok()?)?;
    }
    // One way to write each index: no leading all-zero groups.
    (index_path(n) == digits).then_some((n, width))
}

/// Where a tree's hashes come from, a tile at a time: `(level, index,
/// width)` gives that tile's hashes.
pub type TileReader<'a, E> = dyn FnMut(u8, u64, u64) -> Result<Vec<Hash>, E> + 'a;

/// The RFC 6962 inclusion proof of leaf `index` in the tree of `size`
/// leaves, from its hash tiles alone (as a tlog-tiles client proves it):
/// each sibling is the hash of a range of leaves, made of the perfect
/// subtrees the tiles hold. Which tiles it reads depends only on `index`
/// and `size` ([`tiles_read`]).
pub fn inclusion_proof<E: From<TileError>>(
    index: u64,
    size: u64,
    read: &mut TileReader<'_, E>,
) -> Result<Vec<Hash>, E> {
    if index >= size {
        return Err(TileError::Malformed(format!(
            "leaf {index} is not in a tree of {size} leaves"
        ))
        .into());
    }
    let mut proof = Vec::new();
    path(index, 0, size, size, read, &mut proof)?;
    Ok(proof)
}

/// The RFC 6962 consistency proof from the tree of `old` leaves to the tree
/// of `new`, from the newer tree's hash tiles alone (a monitor's or a
/// witness's check that a log only grew). Empty when `old` is 0 or equals
/// `new`.
pub fn consistency_proof<E: From<TileError>>(
    old: u64,
    new: u64,
    read: &mut TileReader<'_, E>,
) -> Result<Vec<Hash>, E> {
    if old > new {
        return Err(TileError::Malformed(format!(
            "a tree of {new} leaves cannot extend one of {old}"
        ))
        .into());
    }
    let mut proof = Vec::new();
    if old > 0 && old < new {
        subproof(old, 0, new, true, new, read, &mut proof)?;
    }
    Ok(proof)
}

/// SUBPROOF(m, D[a:b], whole) of RFC 6962 §2.1.2.
fn subproof<E: From<TileError>>(
    m: u64,
    a: u64,
    b: u64,
    whole: bool,
    size: u64,
    read: &mut TileReader<'_, E>,
    out: &mut Vec<Hash>,
) -> Result<(), E> {
    if m == b - a {
        if !whole {
            out.push(range_hash(a, b, size, read)?);
        }
        return Ok(());
    }
    let k = split(b - a);
    if m <= k {
        subproof(m, a, a + k, whole, size, read, out)?;
        out.push(range_hash(a + k, b, size, read)?);
    } else {
        subproof(m - k, a + k, b, false, size, read, out)?;
        out.push(range_hash(a, a + k, size, read)?);
    }
    Ok(())
}

/// The tiles a proof over a tree of `size` leaves reads, each once, as
/// (level, index, width): run `proof` once over placeholder tiles.
pub fn tiles_read(
    proof: impl FnOnce(&mut TileReader<'_, TileError>) -> Result<Vec<Hash>, TileError>,
) -> Result<Vec<(u8, u64, u64)>, TileError> {
    let mut wanted = Vec::new();
    proof(&mut |level, tile, width| {
        if !wanted.contains(&(level, tile, width)) {
            wanted.push((level, tile, width));
        }
        Ok(vec![[0; 32]; width as usize])
    })?;
    Ok(wanted)
}

/// PATH(m, D[a:b]) of RFC 6962 §2.1.1, siblings from the leaf up.
fn path<E: From<TileError>>(
    m: u64,
    a: u64,
    b: u64,
    size: u64,
    read: &mut TileReader<'_, E>,
    out: &mut Vec<Hash>,
) -> Result<(), E> {
    if b - a <= 1 {
        return Ok(());
    }
    let k = split(b - a);
    if m < a + k {
        path(m, a, a + k, size, read, out)?;
        out.push(range_hash(a + k, b, size, read)?);
    } else {
        path(m, a + k, b, size, read, out)?;
        out.push(range_hash(a, a + k, size, read)?);
    }
    Ok(())
}

/// The largest power of two below `n` (n ≥ 2).
fn split(n: u64) -> u64 {
    1 << (63 - (n - 1).leading_zeros())
}

/// MTH(D[a:b]): a perfect, aligned subtree from its tile, else split as RFC 6962 splits.
fn range_hash<E: From<TileError>>(
    a: u64,
    b: u64,
    size: u64,
    read: &mut TileReader<'_, E>,
) -> Result<Hash, E> {
    let n = b - a;
    if n.is_power_of_two() && a % n == 0 {
        return subtree(n.trailing_zeros(), a, size, read);
    }
    let k = split(n);
    Ok(merkle::node_hash(&range_hash(a, a + k, size, read)?, &range_hash(a + k, b, size, read)?))
}

/// The root of the perfect subtree of height `h` starting at leaf `start`:
/// a hash of the tile at level h/8, or the root of 2^(h%8) of them.
fn subtree<E: From<TileError>>(
    h: u32,
    start: u64,
    size: u64,
    read: &mut TileReader<'_, E>,
) -> Result<Hash, E> {
    let level = (h / 8) as u8;
    let node = start >> (8 * u32::from(level));
    let (tile, offset, count) = (node / WIDTH, (node % WIDTH) as usize, 1usize << (h % 8));
    let width = width_at(size, level, tile);
    let hashes = read(level, tile, width)?;
    let Some(part) = hashes.get(offset..offset + count).filter(|_| hashes.len() as u64 == width)
    else {
        return Err(TileError::Malformed(format!(
            "tile {level}/{tile} holds {} hashes, not the {width} a tree of {size} has",
            hashes.len()
        ))
        .into());
    };
    Ok(merkle::root(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_the_spec_s() {
        assert_eq!(index_path(0), "000");
        assert_eq!(index_path(5), "005");
        assert_eq!(index_path(1234), "x001/234");
        assert_eq!(index_path(1_234_067), "x001/x234/067");
        assert_eq!(tile_path(0, 1_234_067, 256), "tile/0/x001/x234/067");
        assert_eq!(tile_path(1, 3, 17), "tile/1/003.p/17");
        assert_eq!(entries_path(2, 256), "tile/entries/002");
        assert_eq!(entries_path(0, 9), "tile/entries/000.p/9");
    }

    #[test]
    fn each_level_holds_the_roots_of_the_full_tiles_below() {
        let leaves: Vec<Hash> =
            (0..256 * 257 + 3u64).map(|i| merkle::leaf_hash(&i.to_be_bytes())).collect();
        let t = tiles(&leaves);
        let level = |l: u8| t.iter().filter(move |x| x.level == l);
        assert_eq!(level(0).count(), 258);
        assert_eq!(level(0).last().unwrap().hashes.len(), 3);
        assert_eq!(level(1).map(|x| x.hashes.len()).collect::<Vec<_>>(), [256, 1]);
        assert_eq!(level(2).map(|x| x.hashes.len()).collect::<Vec<_>>(), [1]);
        assert_eq!(level(3).count(), 0);
        // Level 2's one hash is the root of the first 65,536 leaves.
        assert_eq!(level(2).next().unwrap().hashes[0], merkle::root(&leaves[..65_536]));
        assert_eq!(level(1).nth(1).unwrap().hashes[0], merkle::root(&leaves[65_536..65_792]));
        let tile = level(1).next().unwrap();
        assert_eq!(read_tile(&tile.bytes(), 256).unwrap(), tile.hashes);
        assert!(read_tile(&tile.bytes(), 255).is_err());
    }

    /// The right edge of the tiles of `size` leaves, as an archive reads it.
    fn edge(all: &[Tile], size: u64) -> Vec<(u8, Vec<Hash>)> {
        edge_widths(size)
            .into_iter()
            .map(|(level, index, width)| {
                (
                    level,
                    all.iter()
                        .find(|t| {
                            (t.level, t.index, t.hashes.len() as u64) == (level, index, width)
                        })
                        .expect("the edge tile")
                        .hashes
                        .clone(),
                )
            })
            .collect()
    }

    #[test]
    fn grown_tiles_are_the_tiles_that_change_and_the_edge_gives_the_root() {
        let leaves: Vec<Hash> =
            (0..256 * 258 + 256u64).map(|i| merkle::leaf_hash(&i.to_be_bytes())).collect();
        for (size, to) in [
            (0, 256),
            (256, 512),
            (256, 256 * 256),
            (256 * 255, 256 * 257),
            (256 * 256, 256 * 258),
            (256 * 3, 256 * 259),
        ] {
            let before = tiles(&leaves[..size as usize]);
            let after = tiles(&leaves[..to as usize]);
            let edge = edge(&before, size);
            let frontier = edge_frontier(size, &edge).unwrap();
            assert_eq!(
                frontier.root(),
                merkle::root(&leaves[..size as usize]),
                "the edge of {size} gives its root"
            );
            let grown = grown(size, &edge, &leaves[size as usize..to as usize]).unwrap();
            let changed: Vec<&Tile> = after.iter().filter(|t| !before.contains(t)).collect();
            assert_eq!(
                grown.iter().collect::<Vec<_>>(),
                changed,
                "{size}..{to}: exactly the new and grown tiles"
            );
        }
        assert!(edge_frontier(300, &[]).is_err(), "not whole tiles");
        assert!(edge_frontier(512, &[]).is_err(), "an edge missing its tiles");
        assert!(grown(512, &[], &leaves[..1]).is_err(), "the edge of 512 has 2 hashes at level 1");
    }

    #[test]
    fn tile_paths_parse_back_and_refuse_other_spellings() {
        for (level, index, width) in [
            (0u8, 0u64, 256u64),
            (0, 5, 17),
            (1, 1234, 256),
            (2, 1_234_067, 1),
            (63, u64::MAX / 1000, 255),
        ] {
            let path = tile_path(level, index, width);
            assert_eq!(
                parse_tile_path(path.strip_prefix("tile/").unwrap()),
                Some((level, index, width)),
                "{path}"
            );
        }
        assert_eq!(
            parse_index(entries_path(7, 9).strip_prefix("tile/entries/").unwrap()),
            Some((7, 9))
        );
        for bad in [
            "0/5",
            "0/0005",
            "0/x000/005",
            "0/005.p/256",
            "0/005.p/0",
            "0/005.p/017",
            "00/005",
            "64/000",
            "0/x1/005",
            "0/005/",
            "a/005",
            "0/005.p/",
        ] {
            assert_eq!(parse_tile_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn inclusion_proofs_from_tiles_are_rfc_6962_s() {
        let leaves: Vec<Hash> =
            (0..256 * 256 + 700u64).map(|i| merkle::leaf_hash(&i.to_be_bytes())).collect();
        for size in [1u64, 2, 3, 255, 256, 257, 511, 700, 65_536, 65_537, 65_536 + 700] {
            let t = tiles(&leaves[..size as usize]);
            for index in [0, 1, size / 2, size.saturating_sub(257), size - 1]
                .into_iter()
                .filter(|i| *i < size)
            {
                let mut read = |level: u8, tile: u64, width: u64| -> Result<Vec<Hash>, TileError> {
                    t.iter()
                        .find(|x| (x.level, x.index, x.hashes.len() as u64) == (level, tile, width))
                        .map(|x| x.hashes.clone())
                        .ok_or_else(|| {
                            TileError::Malformed(format!("no tile {level}/{tile}.p/{width}"))
                        })
                };
                let proof = inclusion_proof(index, size, &mut read).unwrap();
                assert_eq!(
                    proof,
                    merkle::inclusion_proof(&leaves[..size as usize], index, size).unwrap(),
                    "{index} in {size}"
                );
                merkle::verify_inclusion(
                    &leaves[index as usize],
                    index,
                    size,
                    &proof,
                    &merkle::root(&leaves[..size as usize]),
                )
                .unwrap();
                let wanted = tiles_read(|r| inclusion_proof(index, size, r)).unwrap();
                assert!(wanted.len() <= 2 * 3 + 2, "{index} in {size}: {wanted:?}");
            }
        }
        assert!(inclusion_proof::<TileError>(3, 3, &mut |_, _, _| Ok(vec![])).is_err());
        // Consistency, from the newer tree's tiles.
        for (old, new) in [
            (1u64, 2u64),
            (3, 7),
            (256, 257),
            (255, 700),
            (700, 65_536 + 700),
            (65_536, 65_537),
            (7, 7),
        ] {
            let t = tiles(&leaves[..new as usize]);
            let mut read = |level: u8, tile: u64, width: u64| -> Result<Vec<Hash>, TileError> {
                t.iter()
                    .find(|x| (x.level, x.index, x.hashes.len() as u64) == (level, tile, width))
                    .map(|x| x.hashes.clone())
                    .ok_or_else(|| {
                        TileError::Malformed(format!("no tile {level}/{tile}.p/{width}"))
                    })
            };
            let proof = consistency_proof(old, new, &mut read).unwrap();
            assert_eq!(
                proof,
                merkle::consistency_proof(&leaves[..new as usize], old, new).unwrap(),
                "{old} to {new}"
            );
            merkle::verify_consistency(
                old,
                new,
                &merkle::root(&leaves[..old as usize]),
                &merkle::root(&leaves[..new as usize]),
                &proof,
            )
            .unwrap();
            assert!(
                !tiles_read(|r| consistency_proof(old, new, r)).unwrap().is_empty() || old == new
            );
        }
        assert!(consistency_proof::<TileError>(8, 7, &mut |_, _, _| Ok(vec![])).is_err());
        // A tile narrower than the tree says is refused, not read past.
        assert!(inclusion_proof::<TileError>(0, 3, &mut |_, _, _| Ok(vec![[0; 32]])).is_err());
    }

    #[test]
    fn entry_bundles_round_trip_and_refuse_what_they_cannot_hold() {
        let entries: Vec<Vec<u8>> = vec![b"{}".to_vec(), vec![], vec![7; 300]];
        let bytes = entry_bundle(10, entries.iter().map(Vec::as_slice)).unwrap();
        assert_eq!(&bytes[..4], &[0, 2, b'{', b'}']);
        assert_eq!(
            read_entry_bundle(&bytes, 3).unwrap(),
            entries.iter().map(Vec::as_slice).collect::<Vec<_>>()
        );
        assert!(read_entry_bundle(&bytes, 4).is_err());
        assert!(read_entry_bundle(&bytes[..bytes.len() - 1], 3).is_err());
        let big = vec![0u8; MAX_ENTRY + 1];
        assert_eq!(
            entry_bundle(10, [&b"a"[..], &big]).unwrap_err(),
            TileError::EntryTooLarge { index: 11, len: MAX_ENTRY + 1 }
        );
    }
}
