"""An independent verifier of an answer's receipt (`_meta["io.toolgate/receipt"]`)
against a log published as C2SP tlog-tiles, written from the specs, not from
toolgate's code: the checkpoint's Ed25519 signed-note signature, an RFC 6962
inclusion proof built from the hash tiles (c2sp.org/tlog-tiles), and the entry
bundle's entry hashing to the leaf the answer names (from format 3, a
commitment the answer's `opening` must open) — with the `cryptography`
package and the standard library only.

Given a whole answer (a result holding the receipt in `_meta`, or in `meta`
as the Python SDK's `model_dump_json()` writes it, or a JSON-RPC response),
and a receipt that records a result (`ok`, `tool_error`), it also proves the
result against `result_sha256`, read as a stock MCP SDK hands it back: the
readings of docs/RECEIPTS.md ("An answer as an SDK hands it back"), with an
RFC 8785 encoder of its own.

Usage: python verify_answer.py ANSWER.json LOG_URL VKEY
TOOLGATE_LOG_TOKEN, when set, is sent as `Authorization: Bearer`.
Prints one line per check; exits 1 on the first failure.
"""

import hashlib
import itertools
import json
import os
import sys
import time
import urllib.request

from verify_bundle import commitment_entry, fail, node, open_checkpoint, parse_vkey, verify_inclusion

WIDTH = 256


def fetch(base, path):
    request = urllib.request.Request(base.rstrip("/") + "/" + path)
    if os.environ.get("TOOLGATE_LOG_TOKEN"):
        request.add_header("Authorization", "Bearer " + os.environ["TOOLGATE_LOG_TOKEN"])
    with urllib.request.urlopen(request, timeout=10) as r:
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


# --- RFC 8785 (JCS), for results: numbers as ECMAScript prints the double ---

def es_number(x):
    """ECMAScript Number::toString of the double x (RFC 8785 §3.2.2.3)."""
    if x != x or x in (float("inf"), float("-inf")):
        fail("a number JSON cannot hold")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    mantissa, _, exponent = repr(abs(x)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    figures = whole + fraction
    point = len(whole) + int(exponent or 0)
    lead = len(figures) - len(figures.lstrip("0"))
    digits, n = figures[lead:].rstrip("0"), point - lead
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    return sign + digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e > 0 else "-") + str(abs(e))


def canonical(v):
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, int):
        return str(v) if abs(v) <= 2**53 else es_number(float(v))
    if isinstance(v, float):
        return es_number(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(canonical(x) for x in v) + "]"
    keys = sorted(v, key=lambda k: k.encode("utf-16-be"))
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(v[k]) for k in keys) + "}"


# --- The readings of a saved result (docs/RECEIPTS.md) ---

RECEIPT = "io.toolgate/receipt"
SNAKE = {"meta": "_meta", "structured_content": "structuredContent", "is_error": "isError", "result_type": "resultType",
         "ttl_ms": "ttlMs", "cache_scope": "cacheScope", "mime_type": "mimeType", "last_modified": "lastModified"}
# Each schema object's optional fields that a null may stand at, and which of
# its members hold schema objects (a list of them: True).
RESULTS = {"call": ({"structuredContent", "isError", "_meta"}, {"content": ("block", True)}),
           "prompt": ({"description", "_meta"}, {"messages": ("message", True)}),
           "read": ({"_meta"}, {"contents": ("contents", True)})}
DEFAULTS = {"call": [("isError", False), ("content", [])], "prompt": [], "read": [("ttlMs", 0), ("cacheScope", "private")]}


def schema(obj, model):
    """(optional fields, children) of a schema object."""
    if model in RESULTS:
        return RESULTS[model]
    if model == "message":
        return set(), {"content": ("block", False)}
    if model == "block":
        kind = obj.get("type")
        children = {"annotations": ("annotations", False)} if isinstance(kind, str) else {}
        if kind == "resource_link":
            children["icons"] = ("icon", True)
            return {"title", "description", "mimeType", "size", "icons", "annotations", "_meta"}, children
        if kind == "resource":
            children["resource"] = ("contents", False)
        return ({"annotations", "_meta"} if kind in ("text", "image", "audio", "resource") else set()), children
    return {"annotations": {"audience", "priority", "lastModified"}, "icon": {"mimeType", "sizes", "theme"},
            "contents": {"mimeType", "_meta"}}[model], {}


def each_object(value, model, change, many=False):
    """Calls change(obj, model) on every schema object, outermost first."""
    if many:
        for item in value if isinstance(value, list) else []:
            each_object(item, model, change)
        return
    if not isinstance(value, dict):
        return
    change(value, model)
    for key, (child, many_) in schema(value, model)[1].items():
        if key in value:
            each_object(value[key], child, change, many_)


def with_wire_names(result, shape):
    out = json.loads(json.dumps(result))
    def rename(obj, _):
        for snake, wire in SNAKE.items():
            if snake in obj:
                if wire in obj:
                    raise ValueError(wire)
                obj[wire] = obj.pop(snake)
    try:
        each_object(out, shape, rename)
    except ValueError:
        return None
    return out


def without_nulls(result, shape):
    out, found = json.loads(json.dumps(result)), []
    def strip(obj, model):
        for key in schema(obj, model)[0]:
            if key in obj and obj[key] is None:
                del obj[key]
                found.append(key)
    each_object(out, shape, strip)
    return out, found


def is_default(v, d):
    """v is the default d as JCS writes them (0 and 0.0 alike; false is no number)."""
    if isinstance(v, bool) or isinstance(d, bool):
        return v is d
    if isinstance(d, (int, float)):
        return isinstance(v, (int, float)) and v == d
    return v == d


def readings(result, shape, server):
    out = [result]
    if any(k in SNAKE and k != "meta" for k in result) or ("meta" in result and "_meta" not in result):
        renamed = with_wire_names(result, shape)
        if renamed is not None:
            out.append(renamed)
    for r in list(out):
        stripped, found = without_nulls(r, shape)
        if found:
            out.append(stripped)
    if shape == "read":
        prefix = f"toolgate://{server}/"
        for r in list(out):
            renamed, changed = json.loads(json.dumps(r)), False
            for item in renamed.get("contents", []) if isinstance(renamed.get("contents"), list) else []:
                if isinstance(item, dict) and isinstance(item.get("uri"), str) and item["uri"].startswith(prefix):
                    item["uri"], changed = item["uri"][len(prefix):], True
            if changed:
                out.append(renamed)
    for r in out:
        metas = [r.get("_meta", ...)]
        if isinstance(r.get("_meta"), dict):
            metas = []
            for keep in (lambda k: not k.startswith("io.toolgate/"), lambda k: k != RECEIPT):
                kept = {k: v for k, v in r["_meta"].items() if keep(k)}
                metas += ([...] if not kept else []) + [kept]
        toggles = [(k, d) for k, d in [("resultType", "complete")] + DEFAULTS[shape] if k in r and is_default(r[k], d)]
        if "resultType" not in r:
            toggles.append(("resultType", "complete"))
        for meta in metas:
            for flips in itertools.product((False, True), repeat=len(toggles)):
                candidate = {k: v for k, v in r.items() if k != "_meta"}
                if meta is not ...:
                    candidate["_meta"] = meta
                for (k, d), flip in zip(toggles, flips):
                    if flip and k in candidate:
                        del candidate[k]
                    elif flip:
                        candidate[k] = d
                yield candidate


def saved_answer(doc):
    """(the receipt, the result or None) of what was saved."""
    if "origin" in doc and "index" in doc:
        return doc, None
    if isinstance(doc.get("result"), dict):
        doc = doc["result"]
    for meta in ("_meta", "meta"):
        if isinstance(doc.get(meta), dict) and RECEIPT in doc[meta]:
            return doc[meta][RECEIPT], doc
    fail("no receipt in the saved answer")


def main(answer_path, base, vkey):
    with open(answer_path, encoding="utf-8") as f:
        receipt, result = saved_answer(json.load(f))
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
    if result is not None and logged["result_status"] in ("ok", "tool_error") and logged.get("result_sha256"):
        tool = logged["tool"]
        shape = "prompt" if tool.startswith("prompt:") else "read" if tool.startswith("resource:") else "call"
        want = logged["result_sha256"]
        if not any(hashlib.sha256(canonical(c).encode("utf-8")).hexdigest() == want for c in readings(result, shape, logged["server"])):
            fail(f"answer: no reading of the saved result hashes to result_sha256 {want}")
        print(f"ok   answer hashes to result_sha256 {want}")
    elif result is not None:
        print(f"--   answer not judged here: its receipt records {logged['result_status']}, not a result")
    print("verified")


if __name__ == "__main__":
    main(*sys.argv[1:4])
