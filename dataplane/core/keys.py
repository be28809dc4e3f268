"""The one key-hash function, and how keys and prefix blocks are derived from a prompt.

Everyone (routers, planner, simulator, cachectl) hashes business keys here, so a key hashes the
same in the plan and at the router. The scheme is BLAKE2b, which every language has:

* ``hash_key(key)`` = BLAKE2b(key UTF-8, digest 8 bytes, person ``cacheroute.k1``) read as a
  little-endian uint64.
* ``derive_key(model, cache_salt, prompt)`` = ``"~d1."`` + hex BLAKE2b-128 (person
  ``cacheroute.d1``) of the length-prefixed model, salt and the first 1,024 prompt bytes. It scopes
  a request without a business key to its model/adapter/salt and opening text.
* ``prompt_blocks(prompt)`` chains 64-byte chunks (≈ 16 tokens) of the prompt:
  ``h_i = BLAKE2b(h_{i-1} as 8 LE bytes || chunk_i, digest 8, person cacheroute.b1)``, with
  ``h_{-1} = 0``. Equal leading blocks mean an equal prefix, like an engine's chained block hashes.
"""

from __future__ import annotations

import hashlib
import struct

MAX_KEY_BYTES = 512
DERIVED_KEY_PREFIX = "~d1."
DERIVE_PROMPT_BYTES = 1024
PROMPT_BLOCK_BYTES = 64
MAX_PROMPT_BYTES = 4096

_KEY_PERSON = b"cacheroute.k1"
_DERIVE_PERSON = b"cacheroute.d1"
_BLOCK_PERSON = b"cacheroute.b1"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class InvalidKeyError(ValueError):
    """A business key that cannot be routed (empty, too long, reserved prefix)."""


def hash_key(key: str | bytes) -> int:
    """Hash a business key to a uint64 (see the module docstring for the exact scheme)."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    digest = hashlib.blake2b(data, digest_size=8, person=_KEY_PERSON).digest()
    return int.from_bytes(digest, "little")


def validate_key(key: str) -> bytes:
    """Return the key's UTF-8 bytes, or raise :class:`InvalidKeyError` saying what is wrong."""
    data = key.encode("utf-8")
    if not data:
        raise InvalidKeyError("key is empty")
    if len(data) > MAX_KEY_BYTES:
        raise InvalidKeyError(f"key is {len(data)} bytes; the limit is {MAX_KEY_BYTES}")
    return data


def derive_key(model: str, cache_salt: str, prompt: str) -> str:
    """Derive a business key for a request that carries none (see the module docstring)."""
    digest = hashlib.blake2b(digest_size=16, person=_DERIVE_PERSON)
    for part in (model.encode("utf-8"), cache_salt.encode("utf-8")):
        digest.update(_U32.pack(len(part)))
        digest.update(part)
    head = prompt.encode("utf-8")[:DERIVE_PROMPT_BYTES]
    digest.update(_U32.pack(len(head)))
    digest.update(head)
    return DERIVED_KEY_PREFIX + digest.hexdigest()


def chain_block(parent: int, payload: bytes) -> int:
    """Hash of a block given its parent's hash: equal results mean an equal prefix."""
    digest = hashlib.blake2b(_U64.pack(parent), digest_size=8, person=_BLOCK_PERSON)
    digest.update(payload)
    return int.from_bytes(digest.digest(), "little")


def prompt_blocks(prompt: str | bytes, *, max_bytes: int = MAX_PROMPT_BYTES) -> tuple[int, ...]:
    """Chained hashes of the prompt's 64-byte chunks (a trailing partial chunk counts)."""
    data = (prompt.encode("utf-8") if isinstance(prompt, str) else prompt)[:max_bytes]
    blocks: list[int] = []
    parent = 0
    for start in range(0, len(data), PROMPT_BLOCK_BYTES):
        parent = chain_block(parent, data[start : start + PROMPT_BLOCK_BYTES])
        blocks.append(parent)
    return tuple(blocks)
