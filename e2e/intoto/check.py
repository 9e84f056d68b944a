"""Checks an ari attestation with verifiers no one in ari wrote.

securesystemslib's DSSE `Envelope.verify` checks the signature with the Agent's published
Ed25519 key, and in-toto-attestation's `Statement.validate` checks the payload is an in-toto
Statement v1. Prints one JSON line: whether it verified, the predicate type, the subjects and the
envelope's digest (SHA-256 of its canonical JSON: keys sorted, no whitespace).

Usage: python check.py ENVELOPE.json PUBLIC_KEY_HEX
Exit: 0 verified, 3 not verified, anything else an error.
"""

import hashlib
import json
import sys

from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey


def main(path, public_hex):
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    # Before from_dict, which rewrites the signatures it is given in place.
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    # ari's keyid is the SHA-256 of the raw 32-byte public key (docs/runtime.md).
    keyid = hashlib.sha256(bytes.fromhex(public_hex)).hexdigest()
    key = SSlibKey(keyid, "ed25519", "ed25519", {"public": public_hex})
    envelope = Envelope.from_dict(document)
    try:
        envelope.verify([key], 1)
    except VerificationError as e:
        print(json.dumps({"verified": False, "error": str(e)}))
        return 3
    if envelope.payload_type != "application/vnd.in-toto+json":
        print(json.dumps({"verified": False, "error": envelope.payload_type}))
        return 3
    proto = json_format.Parse(envelope.payload, statement_pb2.Statement())
    Statement.copy_from_pb(proto).validate()
    print(
        json.dumps(
            {
                "verified": True,
                "predicateType": proto.predicate_type,
                "subjects": {s.name: s.digest["sha256"] for s in proto.subject},
                "digest": hashlib.sha256(canonical).hexdigest(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
