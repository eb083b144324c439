"""An independent verifier of a toolgate bundle, written from the specs, not
from toolgate's code: it checks the checkpoint's Ed25519 signed-note
signature (c2sp.org/signed-note, c2sp.org/tlog-checkpoint), each receipt's
Ed25519 signature over its JCS bytes (RFC 8785) when it carries one (format 1
always does; format 2 only with `receipts.sign_each`, the checkpoint vouching
for it otherwise), and each receipt's RFC 6962 inclusion proof (verification
algorithm of RFC 9162 §2.1.3.2) — with the `cryptography` package and the
standard library only. docs/RECEIPTS.md specifies the bytes.

Usage: python verify_bundle.py BUNDLE.json
Prints one line per check; exits 1 on the first failure.

JCS here is json.dumps with sorted keys and no whitespace: exact for what
receipts hold (strings, integers, lists, objects, ASCII keys); receipts
that captured floating-point values would need a full RFC 8785 encoder.
"""

import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def fail(why):
    print(f"FAIL {why}")
    sys.exit(1)


def jcs(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def commitment_entry(logged, key_hex):
    """Format 3: the log holds {"commitment": SHA-256(domain, key, JCS(logged)), "v": 3}."""
    digest = hashlib.sha256(b"toolgate/receipt-commitment/v1\x00" + bytes.fromhex(key_hex) + jcs(logged)).hexdigest()
    return jcs({"commitment": digest, "v": 3})


def entry_bytes(logged, key_hex, index):
    """What the log holds for a logged receipt: itself (formats 1 and 2), or its commitment (3)."""
    if logged["receipt"]["v"] < 3:
        return jcs(logged)
    if not key_hex:
        fail(f"receipt {index}: format 3 without the key that opens its commitment")
    return commitment_entry(logged, key_hex)


def parse_vkey(vkey):
    """<name>+<hex key id>+<base64(type || key)>; returns (name, key id, raw Ed25519 key)."""
    name, key_id, material = vkey.split("+", 2)
    raw = base64.b64decode(material)
    if raw[0] != 0x01 or len(raw) != 33:
        fail(f"{vkey[:40]}… is not an Ed25519 verifier key")
    expected = hashlib.sha256(name.encode() + b"\n" + raw[:1] + raw[1:]).digest()[:4]
    if expected.hex() != key_id:
        fail(f"key id {key_id} is not the key's ({expected.hex()})")
    return name, bytes.fromhex(key_id), raw[1:]


def open_checkpoint(note, name, key_id, public_key):
    """Verifies the note's line from (name, key id); returns (origin, size, root)."""
    body, _, signatures = note.rpartition("\n\n")
    body += "\n"
    for line in signatures.splitlines():
        if not line.startswith("\u2014 "):
            fail("a signature line does not start with an em dash")
        signer, encoded = line[2:].split(" ", 1)
        blob = base64.b64decode(encoded)
        if signer == name and blob[:4] == key_id:
            try:
                Ed25519PublicKey.from_public_bytes(public_key).verify(blob[4:], body.encode())
            except InvalidSignature:
                fail("the checkpoint's Ed25519 signature does not verify")
            origin, size, root = body.splitlines()[:3]
            return origin, int(size), base64.b64decode(root)
    fail("no signature line from the bundle's Ed25519 key")


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(leaf, index, size, proof, root):
    """RFC 9162 §2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node(p, r)
            if not fn & 1:
                while True:
                    fn >>= 1
                    sn >>= 1
                    if fn & 1 or fn == 0:
                        break
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def main(path):
    with open(path, encoding="utf-8") as f:
        bundle = json.load(f)
    keys = {k["kid"]: parse_vkey(k["ed25519"]) for k in bundle["keys"]}
    for kid, (_, _, pk) in keys.items():
        if hashlib.sha256(pk).hexdigest()[:32] != kid:
            fail(f"kid {kid} is not its key's")
    print(f"ok   kids               {len(keys)} key(s), each kid the first 32 hex digits of sha256(key)")
    verified = None
    for name, key_id, pk in keys.values():
        if any(line[2:].startswith(name + " ") and base64.b64decode(line[2:].split(" ", 1)[1])[:4] == key_id for line in bundle["checkpoint"].split("\n\n")[-1].splitlines()):
            verified = open_checkpoint(bundle["checkpoint"], name, key_id, pk)
            break
    if verified is None:
        fail("the checkpoint is signed by no key of the bundle")
    origin, size, root = verified
    print(f"ok   checkpoint         {origin}: Ed25519 signature verified, tree size {size}")
    signed_each = 0
    for entry in bundle["receipts"]:
        logged = entry["receipt"]
        receipt = logged["receipt"]
        index = receipt["log_index"]
        if set(logged) - {"receipt", "sig"} or receipt.get("v") not in (1, 2, 3):
            fail(f"receipt {index}: not a logged receipt of format 1, 2 or 3")
        _, _, pk = keys.get(receipt["kid"]) or fail(f"receipt {index}: unknown kid")
        if "sig" in logged:
            try:
                Ed25519PublicKey.from_public_bytes(pk).verify(base64.b64decode(logged["sig"]), jcs(receipt))
            except InvalidSignature:
                fail(f"receipt {index}: the signature does not verify")
            signed_each += 1
        elif receipt["v"] == 1:
            fail(f"receipt {index}: format 1 without its signature")
        leaf = hashlib.sha256(b"\x00" + entry_bytes(logged, entry.get("opening"), index)).digest()
        proof = [bytes.fromhex(h) for h in entry["inclusion"]]
        if not verify_inclusion(leaf, index, size, proof, root):
            fail(f"receipt {index}: the inclusion proof does not lead to the checkpoint's root")
    n = len(bundle["receipts"])
    print(f"ok   receipts           {n} inclusion proof(s) verified; {signed_each} receipt signature(s), {n - signed_each} vouched for by the checkpoint")


if __name__ == "__main__":
    main(sys.argv[1])
