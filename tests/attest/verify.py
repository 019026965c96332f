"""How an upstream verifies toolgate's attestation, with PyJWT: the verifier of
docs/attestations.md, and the tests' (tests/attestations.rs).

Usage:
  verify.py JWKS_URL AUDIENCE TOKEN [ARGUMENTS_JSON]

Prints the token's claims as one JSON line and exits 0; or prints `refused: <why>` and exits 1.
With ARGUMENTS_JSON, the token's `args_sha256` must be the hash of those arguments.
"""

from __future__ import annotations

import hashlib
import json
import sys

import jwt  # PyJWT, with `cryptography` for EdDSA and ES256

_keys: dict[str, jwt.PyJWKClient] = {}


def verify(token: str | None, jwks_url: str, audience: str, arguments: dict | None = None) -> dict:
    """The claims of `token`, toolgate's attestation for `audience`; raises on anything else."""
    if not token:
        raise PermissionError("the call carries no attestation")
    client = _keys.setdefault(jwks_url, jwt.PyJWKClient(jwks_url))
    # An unknown `kid` makes the client fetch the key set again (a key made since).
    key = client.get_signing_key_from_jwt(token)
    claims = jwt.decode(
        token,
        key.key,
        algorithms=["EdDSA", "ES256"],
        audience=audience,
        options={"require": ["exp", "iat", "aud", "jti", "call_id"]},
    )
    if arguments is not None:
        canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        if hashlib.sha256(canonical.encode()).hexdigest() != claims["args_sha256"]:
            raise PermissionError("the arguments are not those attested")
    return claims


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    arguments = json.loads(argv[4]) if len(argv) == 5 else None
    try:
        claims = verify(argv[3], argv[1], argv[2], arguments)
    except (jwt.PyJWTError, PermissionError) as error:
        print(f"refused: {error}")
        return 1
    print(json.dumps(claims, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
