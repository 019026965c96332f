"""How anyone checks a toolgate receipt with Python's hashlib and PyJWT: the verifier of
docs/audit.md, and the tests' (tests/audit.rs).

Usage:
  verify_receipt.py RECEIPT_FILE JWKS_FILE

Prints `ok <call_id> <entries>` and exits 0; or prints `refused: <why>` and exits 1.
"""

from __future__ import annotations

import hashlib
import json
import sys

import jwt  # PyJWT, with `cryptography` for EdDSA and ES256


def canonical(entry: dict) -> bytes:
    # RFC 8785 for the chain's entries, which hold strings, integers and booleans only.
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def verify(receipt: dict, jwks: dict) -> int:
    prev, hashes = receipt["prev"], {}
    for entry in receipt["entries"]:
        entry = dict(entry)
        claimed = entry.pop("hash")
        if hashlib.sha256(bytes.fromhex(prev) + canonical(entry)).hexdigest() != claimed:
            raise ValueError(f"entry {entry['seq']}: its hash does not match")
        prev = hashes[entry["seq"]] = claimed
    checkpoint = receipt["entries"][-1]["event"]
    token = checkpoint["jws"]
    kid = jwt.get_unverified_header(token)["kid"]
    key = next(k for k in jwt.PyJWKSet.from_dict(jwks).keys if k.key_id == kid)
    claims = jwt.decode(token, key.key, algorithms=["EdDSA", "ES256"])
    if hashes.get(claims["audit_seq"]) != claims["audit_hash"]:
        raise ValueError("the checkpoint does not sign this chain")
    if max(receipt["call_entries"]) > claims["audit_seq"]:
        raise ValueError("the checkpoint does not cover the call")
    return len(receipt["entries"])


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as r, open(argv[2]) as k:
        receipt, jwks = json.load(r), json.load(k)
    try:
        count = verify(receipt, jwks)
    except (ValueError, KeyError, StopIteration, jwt.PyJWTError) as error:
        print(f"refused: {error!r}")
        return 1
    print(f"ok {receipt['call_id']} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
