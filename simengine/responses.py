"""The simulated engine's OpenAI response bodies: completions, stream chunks, usage, the text.

Apart from the request parsing (:mod:`simengine.protocol`): the answers are built from what the
engine did, and their text is made up (one word per output token) since nothing is generated.
"""

from __future__ import annotations

from typing import Any

from simengine.protocol import ParsedRequest

_WORDS = (
    " the", " cache", " route", " warm", " prefix", " plan", " token", " node", " key", " load",
    " hit", " set", " table", " batch", " step", " block",
)  # fmt: skip


def token_text(start: int, stop: int) -> str:
    """The simulated text of output tokens ``[start, stop)``: one word per token."""
    return "".join(_WORDS[i % len(_WORDS)] for i in range(start, stop))


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """The usage object, with vLLM's ``prompt_tokens_details.cached_tokens``."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def completion_body(
    request: ParsedRequest, rid: str, created: int, text: str, usage_obj: dict[str, Any]
) -> dict[str, Any]:
    if request.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": "length",
        }
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        kind = "text_completion"
    return {
        "id": rid,
        "object": kind,
        "created": created,
        "model": request.model,
        "choices": [choice],
        "usage": usage_obj,
    }


def chunk_body(
    request: ParsedRequest,
    rid: str,
    created: int,
    text: str,
    *,
    first: bool,
    finished: bool,
) -> dict[str, Any]:
    """One streamed chunk carrying ``text`` (the first chat chunk also carries the role)."""
    reason = "length" if finished else None
    if request.chat:
        delta: dict[str, Any] = (
            {"role": "assistant", "content": text} if first else {"content": text}
        )
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": reason,
        }
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        kind = "text_completion"
    return {
        "id": rid,
        "object": kind,
        "created": created,
        "model": request.model,
        "choices": [choice],
    }


def usage_chunk(
    request: ParsedRequest, rid: str, created: int, usage_obj: dict[str, Any]
) -> dict[str, Any]:
    """The last chunk with ``stream_options.include_usage``: no choices, the usage."""
    kind = "chat.completion.chunk" if request.chat else "text_completion"
    return {
        "id": rid,
        "object": kind,
        "created": created,
        "model": request.model,
        "choices": [],
        "usage": usage_obj,
    }
