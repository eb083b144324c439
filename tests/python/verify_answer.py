"""An independent verifier of an answer's receipt (`_meta["io.toolgate/receipt"]`)
against a log published as C2SP tlog-tiles, written from the specs, not from
toolgate's code: the checkpoint's Ed25519 signed-note signature, an RFC 6962
inclusion proof built from the hash tiles (c2sp.org/tlog-tiles), and the entry
bundle's entry hashing to the leaf the answer names (from format 3, a
commitment the answer's `opening` must open) — with the `cryptography`
package and the standard library only.

Usage: python verify_answer.py RECEIPT.json LOG_URL VKEY
Prints one line per check; exits 1 on the first failure.
"""

import base64
import hashlib
import json
import sys
import time
import urllib.request

from verify_bundle import commitment_entry, fail, node, open_checkpoint, parse_vkey, verify_inclusion

WIDTH = 256


def fetch(base, path):
    with urllib.request.urlopen(base.rstrip("/") + "/" + path, timeout=10) as r:
        return r.read()


def index_path(n):
    """N in groups of three digits, all but the last prefixed with x."""
    groups = []
    while True:
        groups.append(f"{n % 1000:03d}")
        n //= 1000
        if n == 0:
            break
    groups.reverse()
    return "/".join([f"x{g}" for g in groups[:-1]] + [groups[-1]])


def width_at(size, level, index):
    nodes = size >> (8 * level)
    return max(0, min(WIDTH, nodes - index * WIDTH))


def suffix(width):
    return "" if width == WIDTH else f".p/{width}"


class Tiles:
    def __init__(self, base, size):
        self.base, self.size, self.cache = base, size, {}

    def hashes(self, level, index):
        key = (level, index)
        if key not in self.cache:
            width = width_at(self.size, level, index)
            data = fetch(self.base, f"tile/{level}/{index_path(index)}{suffix(width)}")
            if len(data) != 32 * width:
                fail(f"tile {level}/{index} is {len(data)} bytes, not {32 * width}")
            self.cache[key] = [data[i:i + 32] for i in range(0, len(data), 32)]
        return self.cache[key]

    def perfect(self, height, start):
        """The root of the perfect subtree of 2**height leaves from `start`."""
        level, rest = divmod(height, 8)
        at = start >> (8 * level)
        hashes = self.hashes(level, at // WIDTH)[at % WIDTH:at % WIDTH + (1 << rest)]
        while len(hashes) > 1:
            hashes = [node(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
        return hashes[0]

    def mth(self, lo, hi):
        """MTH(D[lo:hi]) of RFC 6962 §2.1."""
        n = hi - lo
        if n & (n - 1) == 0 and lo % n == 0:
            return self.perfect(n.bit_length() - 1, lo)
        k = 1 << ((n - 1).bit_length() - 1)
        return node(self.mth(lo, lo + k), self.mth(lo + k, hi))

    def path(self, m, lo, hi):
        """PATH(m, D[lo:hi]) of RFC 6962 §2.1.1, from the leaf up."""
        if hi - lo <= 1:
            return []
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        if m < lo + k:
            return self.path(m, lo, lo + k) + [self.mth(lo + k, hi)]
        return self.path(m, lo + k, hi) + [self.mth(lo, lo + k)]


def main(receipt_path, base, vkey):
    with open(receipt_path, encoding="utf-8") as f:
        receipt = json.load(f)
    index, leaf = receipt["index"], bytes.fromhex(receipt["leaf_hash"])
    name, key_id, public_key = parse_vkey(vkey)
    for _ in range(25):
        origin, size, root = open_checkpoint(fetch(base, "checkpoint").decode(), name, key_id, public_key)
        if size > index:
            break
        time.sleep(0.2)
    else:
        fail(f"no checkpoint covers receipt {index}")
    if origin != receipt["origin"]:
        fail(f"the log is {origin!r}, the receipt names {receipt['origin']!r}")
    print(f"ok   checkpoint {origin} size {size}")
    tiles = Tiles(base, size)
    if not verify_inclusion(leaf, index, size, tiles.path(index, 0, size), root):
        fail(f"leaf {index} is not in the signed tree")
    print(f"ok   inclusion of leaf {index}")
    bundle = fetch(base, f"tile/entries/{index_path(index // WIDTH)}{suffix(width_at(size, 0, index // WIDTH))}")
    entries, at = [], 0
    while at < len(bundle):
        length = int.from_bytes(bundle[at:at + 2], "big")
        entries.append(bundle[at + 2:at + 2 + length])
        at += 2 + length
    entry = entries[index % WIDTH]
    if hashlib.sha256(b"\x00" + entry).digest() != leaf:
        fail("the log's entry does not hash to the leaf the answer names")
    published = json.loads(entry)
    if "commitment" in published:
        # Format 3: the log holds a commitment; the answer carries what opens it.
        opening = receipt.get("opening") or fail("the log holds a commitment and the answer carries no opening")
        if commitment_entry(opening["logged"], opening["key"]) != entry:
            fail("the answer's receipt does not open the log's commitment")
        published = opening["logged"]
    logged = published["receipt"]
    if logged["log_index"] != index:
        fail(f"entry {index} is receipt {logged['log_index']}")
    print(f"ok   receipt {logged['server']} {logged['tool']} {logged['decision']} {logged['result_status']}")
    print("verified")


if __name__ == "__main__":
    main(*sys.argv[1:4])
