"""Key hashing, key derivation and prompt blocks: pinned vectors plus an independent re-derivation.

The vectors are the cross-language contract (docs/ARCHITECTURE.md): a client in another language
must reproduce them, so they are pinned as literals here and also re-derived below straight from
``hashlib`` with the documented parameters, independent of :mod:`dataplane.core.keys`.
"""

from __future__ import annotations

import hashlib
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.keys import (
    DERIVE_PROMPT_BYTES,
    DERIVED_KEY_PREFIX,
    MAX_KEY_BYTES,
    MAX_PROMPT_BYTES,
    PROMPT_BLOCK_BYTES,
    InvalidKeyError,
    derive_key,
    hash_key,
    key_head,
    prompt_blocks,
    validate_key,
)

# (key, uint64 hash): the documented test vectors.
HASH_VECTORS = [
    ("", 10723189044890831333),
    ("tenant-42", 6072636877212120176),
    ("acme/support-bot", 8597561603578440949),
    ("café-Zürich/日本語", 12219815183572137283),
    ("x" * 512, 17912811886817355833),
    ("é" * 256, 6744470282858916281),  # 256 characters, 512 UTF-8 bytes
]


def reference_hash(data: bytes) -> int:
    """The documented scheme, written from the spec: BLAKE2b-64, person, little-endian."""
    digest = hashlib.blake2b(data, digest_size=8, person=b"cacheroute.k1").digest()
    (value,) = struct.unpack("<Q", digest)
    return int(value)


# The documented head rule, written from docs/ARCHITECTURE.md with a regular expression.
_TURN = re.compile(
    r"<\|im_start\|>user|<\|start_header_id\|>user<\|end_header_id\|>|<start_of_turn>user"
    r"|<\|user\|>|(?:^|(?<=\n))user: |(?<=<</SYS>>)",
    re.DOTALL,
)
_OPENING = re.compile(r"^\s*(?:(?:<s>|<\|begin_of_text\|>|<bos>|\[INST\])\s*)*$")


def reference_head(prompt: str) -> bytes:
    found = _TURN.search(prompt)
    if found and found.start() > 0 and not _OPENING.match(prompt[: found.start()]):
        return prompt[: found.start()].encode()
    return prompt.encode()[:1024]


def reference_derive(model: str, salt: str, prompt: str) -> str:
    body = b""
    for part in (model.encode(), salt.encode(), reference_head(prompt)):
        body += struct.pack("<I", len(part)) + part
    return "~d2." + hashlib.blake2b(body, digest_size=16, person=b"cacheroute.d2").hexdigest()


def reference_blocks(data: bytes) -> list[int]:
    blocks, parent = [], 0
    for start in range(0, len(data), 64):
        payload = struct.pack("<Q", parent) + data[start : start + 64]
        digest = hashlib.blake2b(payload, digest_size=8, person=b"cacheroute.b1").digest()
        parent = struct.unpack("<Q", digest)[0]
        blocks.append(parent)
    return blocks


@pytest.mark.parametrize(("key", "expected"), HASH_VECTORS, ids=lambda v: repr(v)[:24])
def test_hash_key_matches_pinned_vector(key: str, expected: int) -> None:
    assert hash_key(key) == expected


@pytest.mark.parametrize(("key", "expected"), HASH_VECTORS, ids=lambda v: repr(v)[:24])
def test_pinned_vectors_follow_the_documented_scheme(key: str, expected: int) -> None:
    assert reference_hash(key.encode("utf-8")) == expected


def test_hash_key_of_bytes_equals_hash_of_their_text() -> None:
    assert hash_key(b"acme/support-bot") == hash_key("acme/support-bot")


@given(st.text(max_size=200))
@settings(max_examples=200)
def test_hash_key_is_a_uint64_equal_to_the_reference(key: str) -> None:
    value = hash_key(key)
    assert 0 <= value < 2**64
    assert value == reference_hash(key.encode("utf-8"))


def test_validate_key_returns_the_utf8_bytes() -> None:
    assert validate_key("café") == "café".encode()


def test_validate_key_accepts_exactly_512_bytes_of_multibyte_text() -> None:
    assert len(validate_key("é" * 256)) == MAX_KEY_BYTES


def test_validate_key_rejects_an_empty_key() -> None:
    with pytest.raises(InvalidKeyError, match=r"^key is empty$"):
        validate_key("")


@pytest.mark.parametrize("key", ["x" * 513, "é" * 256 + "x"], ids=["ascii", "multibyte"])
def test_validate_key_rejects_513_bytes_counting_bytes_not_characters(key: str) -> None:
    with pytest.raises(InvalidKeyError, match="513 bytes; the limit is 512"):
        validate_key(key)


def test_derive_key_matches_pinned_vectors() -> None:
    prompt = "You are a helpful assistant."
    assert derive_key("llama-3.3-70b", "", prompt) == "~d2.7efb85abc264a22f2f6a6ace69ae6406"
    assert derive_key("llama-3.3-70b", "lora-a", prompt) == "~d2.11933d2fcc78d6f69f6e110cab66d164"
    assert derive_key("m", "", "") == "~d2.27484e53b0de137cd2ec20db2acaba2c"


_PIECES = st.sampled_from(
    ["system: ", "user: ", "\n", "<|im_start|>", "user", "<|im_end|>", "<s>", "[INST]",
     "<</SYS>>", "<|user|>", "<start_of_turn>", "<|start_header_id|>", "<|end_header_id|>",
     "<|begin_of_text|>", " ", "be brief", "é"]
)  # fmt: skip
_PROMPTS = st.one_of(st.text(max_size=1500), st.lists(_PIECES, max_size=40).map("".join))


@given(st.text(max_size=30), st.text(max_size=30), _PROMPTS)
@settings(max_examples=200)
def test_derive_key_equals_the_reference_and_is_a_valid_key(
    model: str, salt: str, prompt: str
) -> None:
    key = derive_key(model, salt, prompt)
    assert key == reference_derive(model, salt, prompt)
    assert key.startswith(DERIVED_KEY_PREFIX)
    assert len(key) == len(DERIVED_KEY_PREFIX) + 32
    validate_key(key)


def test_derive_key_is_scoped_by_model_and_salt() -> None:
    prompt = "system: you answer billing questions"
    keys = {
        derive_key("llama-3.3-70b", "", prompt),
        derive_key("qwen3-32b", "", prompt),
        derive_key("llama-3.3-70b", "tenant-a-lora", prompt),
        derive_key("llama-3.3-70b", "tenant-b-lora", prompt),
    }
    assert len(keys) == 4


def test_derive_key_length_prefixes_keep_model_and_salt_apart() -> None:
    assert derive_key("ab", "c", "p") != derive_key("a", "bc", "p")
    assert derive_key("m", "", "sp") != derive_key("m", "s", "p")


def test_without_structure_the_key_reads_only_the_first_1024_prompt_bytes() -> None:
    head = "h" * DERIVE_PROMPT_BYTES
    assert derive_key("m", "", head + "turn one") == derive_key("m", "", head + "turn two")
    assert derive_key("m", "", head[:-1] + "X") != derive_key("m", "", head)


SYSTEM = "You answer billing questions for ACME. Be brief."  # shorter than 1,024 bytes


@pytest.mark.parametrize(
    ("template", "expected_head"),
    [
        ("system: {s}\nuser: {q}\n", "system: {s}\n"),  # the doors' rendering of chat
        ("<|im_start|>system\n{s}<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n",
         "<|im_start|>system\n{s}<|im_end|>\n"),  # ChatML
        ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{s}<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\n{q}<|eot_id|>",
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{s}<|eot_id|>"),
        ("<bos><start_of_turn>system\n{s}<end_of_turn>\n<start_of_turn>user\n{q}",
         "<bos><start_of_turn>system\n{s}<end_of_turn>\n"),  # Gemma-style
        ("<|system|>\n{s}<|end|>\n<|user|>\n{q}<|end|>", "<|system|>\n{s}<|end|>\n"),
        ("<s>[INST] <<SYS>>\n{s}\n<</SYS>>\n\n{q} [/INST]", "<s>[INST] <<SYS>>\n{s}\n<</SYS>>"),
    ],
    ids=["rendered-chat", "chatml", "llama3", "gemma", "phi3", "llama2"],
)  # fmt: skip
def test_a_short_shared_system_prompt_is_the_key_not_the_question(
    template: str, expected_head: str
) -> None:
    one = template.format(s=SYSTEM, q="How do I pay an invoice?")
    two = template.format(s=SYSTEM, q="Why was I charged twice this month?")
    assert key_head(one) == expected_head.format(s=SYSTEM).encode()
    assert derive_key("m", "", one) == derive_key("m", "", two)
    other = template.format(s="You answer shipping questions.", q="How do I pay an invoice?")
    assert derive_key("m", "", other) != derive_key("m", "", one)


@pytest.mark.parametrize(
    "prompt",
    ["user: hello there\n", "<|im_start|>user\nhello<|im_end|>\n", "<s>[INST] hello [/INST]",
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello"],
)  # fmt: skip
def test_a_prompt_that_opens_with_the_user_turn_keeps_the_first_1024_bytes(prompt: str) -> None:
    assert key_head(prompt) == prompt.encode()
    assert key_head(prompt + "x" * 2000) == (prompt + "x" * 2000).encode()[:DERIVE_PROMPT_BYTES]


def test_prompt_blocks_matches_pinned_vector() -> None:
    assert prompt_blocks("a" * 130) == (
        11968131931205555068,
        14893267314868745614,
        2554882733512941813,
    )
    assert prompt_blocks("") == ()


@given(st.binary(max_size=700))
@settings(max_examples=100)
def test_prompt_blocks_equal_the_reference_chain(data: bytes) -> None:
    assert list(prompt_blocks(data)) == reference_blocks(data)


def test_prompt_blocks_counts_a_trailing_partial_chunk() -> None:
    assert len(prompt_blocks("a" * 64)) == 1
    assert len(prompt_blocks("a" * 65)) == 2


def test_prompt_blocks_stop_at_max_bytes() -> None:
    assert len(prompt_blocks("a" * 10_000)) == MAX_PROMPT_BYTES // PROMPT_BLOCK_BYTES
    assert len(prompt_blocks("a" * 1000, max_bytes=128)) == 2


def test_prompt_blocks_of_text_equal_blocks_of_its_utf8_bytes() -> None:
    text = "Grüße, 世界! " * 20
    assert prompt_blocks(text) == prompt_blocks(text.encode("utf-8"))


@given(st.binary(min_size=0, max_size=400), st.binary(max_size=200), st.binary(max_size=200))
@settings(max_examples=100)
def test_same_prefix_gives_the_same_leading_blocks(
    prefix: bytes, tail_a: bytes, tail_b: bytes
) -> None:
    full = len(prefix) // PROMPT_BLOCK_BYTES
    a, b = prompt_blocks(prefix + tail_a), prompt_blocks(prefix + tail_b)
    assert a[:full] == b[:full]


def test_a_change_in_one_block_changes_it_and_every_later_block() -> None:
    base = bytes(range(256))
    changed = base[:100] + b"!" + base[101:]
    a, b = prompt_blocks(base), prompt_blocks(changed)
    assert a[0] == b[0]
    assert all(x != y for x, y in zip(a[1:], b[1:], strict=True))
