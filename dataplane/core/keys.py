"""The one key-hash function, and how keys and prefix blocks are derived from a prompt.

Everyone (routers, planner, simulator, cachectl) hashes business keys here, so a key hashes the
same in the plan and at the router. The scheme is BLAKE2b, which every language has:

* ``hash_key(key)`` = BLAKE2b(key UTF-8, digest 8 bytes, person ``cacheroute.k1``) read as a
  little-endian uint64.
* ``derive_key(model, cache_salt, prompt)`` = ``"~d2."`` + hex BLAKE2b-128 (person
  ``cacheroute.d2``) of the length-prefixed model, salt and the prompt's *shared head*
  (:func:`key_head`). It scopes a request without a business key to its model/adapter/salt and
  the part of its prompt that other requests share.
* ``key_head(prompt)``: everything before the first user turn, when something comes before it
  (a system or developer message, the chat template's preamble); else the first 1,024 bytes. A
  user turn starts at ``"user: "`` at the start of a line (the doors' rendering of chat messages,
  :mod:`dataplane.openai_api.prompts`) or at a chat template's user marker
  (:data:`USER_TURN_MARKERS`); a Llama-2 prompt's head ends with its ``<</SYS>>``. A fixed 1,024
  bytes put the question of a short-system-prompt request into its key, so every request became
  its own key and planned routing degenerated to the tail (issue 35).
* ``prompt_blocks(prompt)`` chains 64-byte chunks (≈ 16 tokens) of the prompt:
  ``h_i = BLAKE2b(h_{i-1} as 8 LE bytes || chunk_i, digest 8, person cacheroute.b1)``, with
  ``h_{-1} = 0``. Equal leading blocks mean an equal prefix, like an engine's chained block hashes.
"""

from __future__ import annotations

import hashlib
import struct

MAX_KEY_BYTES = 512
DERIVED_KEY_PREFIX = "~d2."
DERIVE_PROMPT_BYTES = 1024
# Where a chat template's first user turn begins (ChatML, Llama 3, Gemma, Phi-3/Zephyr).
USER_TURN_MARKERS = (
    "<|im_start|>user",
    "<|start_header_id|>user<|end_header_id|>",
    "<start_of_turn>user",
    "<|user|>",
)
RENDERED_USER_TURN = "user: "  # a chat message as the doors render it: "<role>: <content>\n"
LLAMA2_SYSTEM_END = "<</SYS>>"
# What may open a prompt without being shared structure (begin-of-sequence tokens).
_OPENERS = ("<s>", "<|begin_of_text|>", "<bos>", "[INST]")
PROMPT_BLOCK_BYTES = 64
MAX_PROMPT_BYTES = 4096

_KEY_PERSON = b"cacheroute.k1"
_DERIVE_PERSON = b"cacheroute.d2"
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


def _first_user_turn(prompt: str) -> int:
    """Where the first user turn starts (or the Llama-2 system block ends); -1: nowhere."""
    found = [prompt.find(marker) for marker in USER_TURN_MARKERS]
    if prompt.startswith(RENDERED_USER_TURN):
        found.append(0)
    line = prompt.find("\n" + RENDERED_USER_TURN)
    if line >= 0:
        found.append(line + 1)
    end_sys = prompt.find(LLAMA2_SYSTEM_END)
    if end_sys >= 0:
        found.append(end_sys + len(LLAMA2_SYSTEM_END))
    return min((i for i in found if i >= 0), default=-1)


def _only_openers(text: str) -> bool:
    """Whether ``text`` is nothing but begin-of-sequence tokens and whitespace."""
    rest = text.strip()
    while rest:
        opener = next((o for o in _OPENERS if rest.startswith(o)), None)
        if opener is None:
            return False
        rest = rest[len(opener) :].strip()
    return True


def key_head(prompt: str) -> bytes:
    """The part of a prompt a derived key reads (module docstring), as UTF-8 bytes."""
    turn = _first_user_turn(prompt)
    if turn > 0:
        head = prompt[:turn]
        if not _only_openers(head):
            return head.encode("utf-8")
    return prompt.encode("utf-8")[:DERIVE_PROMPT_BYTES]


def derive_key(model: str, cache_salt: str, prompt: str) -> str:
    """Derive a business key for a request that carries none (see the module docstring)."""
    digest = hashlib.blake2b(digest_size=16, person=_DERIVE_PERSON)
    for part in (model.encode("utf-8"), cache_salt.encode("utf-8")):
        digest.update(_U32.pack(len(part)))
        digest.update(part)
    head = key_head(prompt)
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
