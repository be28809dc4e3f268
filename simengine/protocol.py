"""OpenAI request bodies → :class:`~simengine.realtime_engine.EngineRequest` or an ``ApiError``.

Token accounting of a text prompt: the engine has no tokenizer, so a prompt's blocks are
``dataplane.core.keys.prompt_blocks`` over the *whole* UTF-8 prompt (64-byte chained blocks ≈ 16
tokens, the routers' own prefix blocks) and its token count is ``ceil(bytes / 4)`` (≈ 4 bytes per
token for English text), which keeps ``blocks == ceil(tokens / 16)``. A prompt of token ids
(``[1, 2, 3]``) counts exactly: one block per 16 ids, chained the same way. A chat request's
prompt is its messages rendered as ``"<role>: <content>\\n"`` each.

The documented extension lets a load generator send a workload request's exact blocks and
token counts (``sim.types.SimRequest``)::

    "cacheroute": {"blocks": [int, ...], "prompt_tokens": N, "output_tokens": M}

``blocks`` are chained prefix-block ids (unsigned 64-bit, oldest first, one per 16 prompt tokens:
``len(blocks) == ceil(prompt_tokens / 16)``); ``prompt_tokens`` defaults to ``16 × len(blocks)``;
``output_tokens`` overrides ``max_tokens``. The prompt text is then ignored for accounting.

Output tokens = ``max_tokens`` (default 16, OpenAI's completions default; also for chat) or the
extension's ``output_tokens``: the simulated answer always runs to its length
(``finish_reason = "length"``). Unsupported options (``n`` > 1, ``best_of`` > 1) and malformed
fields are refused with HTTP 400 and an OpenAI-style error object naming the field. The response
bodies are :mod:`simengine.responses`.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

from dataplane.core.keys import chain_block, prompt_blocks
from sim.types import BLOCK_TOKENS
from simengine.tickets import EngineRequest

BYTES_PER_TOKEN = 4
DEFAULT_MAX_TOKENS = 16
MAX_BLOCKS = 1 << 16  # 1M tokens: far above any profile's cache
MAX_OUTPUT_TOKENS = 1 << 20
EXTENSION = "cacheroute"
_U64_MAX = (1 << 64) - 1


class ApiError(Exception):
    """An HTTP error with an OpenAI-style body: ``{"error": {message, type, param, code}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        }


def bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


@dataclass(frozen=True)
class ParsedRequest:
    """A validated completion or chat request."""

    chat: bool
    model: str
    stream: bool
    include_usage: bool
    engine: EngineRequest


def parse_request(body: object, *, chat: bool, served_model: str) -> ParsedRequest:
    """Validate a JSON body (module docstring); raises :class:`ApiError`."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    model = body.get("model", served_model)
    if not isinstance(model, str):
        raise bad("'model' must be a string", "model")
    if model != served_model:
        raise ApiError(
            404, f"The model `{model}` does not exist.", param="model", kind="NotFoundError"
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("'stream' must be a boolean", "stream")
    include_usage = _include_usage(body.get("stream_options"))
    for field in ("n", "best_of"):
        value = body.get(field, 1)
        if value is not None and value != 1:
            raise bad(f"'{field}' must be 1: the simulated engine returns one choice", field)
    max_tokens = _max_tokens(body, chat)
    extension = body.get(EXTENSION)
    if extension is not None:
        _prompt_text_or_tokens(body, chat)  # still validate the standard fields
        engine = _from_extension(extension, max_tokens)
    else:
        engine = _from_prompt(_prompt_text_or_tokens(body, chat), max_tokens)
    return ParsedRequest(chat, model, stream, include_usage, engine)


def _include_usage(options: object) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    value = options.get("include_usage", False)
    if not isinstance(value, bool):
        raise bad("'stream_options.include_usage' must be a boolean", "stream_options")
    return value


def _positive_int(value: object, name: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise bad(f"'{name}' must be an integer in [1, {limit}], got {value!r}", name)
    return value


def _max_tokens(body: dict[str, Any], chat: bool) -> int:
    names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
    for name in names:
        value = body.get(name)
        if value is not None:
            return _positive_int(value, name, MAX_OUTPUT_TOKENS)
    return DEFAULT_MAX_TOKENS


def _prompt_text_or_tokens(body: dict[str, Any], chat: bool) -> str | list[int]:
    if chat:
        return render_messages(body.get("messages"))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        if not prompt:
            raise bad("'prompt' must not be empty", "prompt")
        return prompt
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
    ):
        return list(prompt)
    raise bad(
        "'prompt' must be a non-empty string or list of token ids (one prompt per request)",
        "prompt",
    )


def render_messages(messages: object) -> str:
    """A chat request's prompt text: ``"<role>: <content>\\n"`` per message."""
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list", "messages")
    parts: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad(f"messages[{i}] must be an object with a string 'role'", "messages")
        parts.append(f"{message['role']}: {_content_text(message.get('content'), i)}\n")
    return "".join(parts)


def _content_text(content: object, i: int) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise bad(f"messages[{i}].content: only text parts are supported", "messages")
            text = part.get("text")
            if not isinstance(text, str):
                raise bad(f"messages[{i}].content: a text part needs a string 'text'", "messages")
            texts.append(text)
        return "".join(texts)
    raise bad(f"messages[{i}].content must be a string or a list of text parts", "messages")


def _from_prompt(prompt: str | list[int], max_tokens: int) -> EngineRequest:
    if isinstance(prompt, str):
        data = prompt.encode("utf-8")
        blocks = prompt_blocks(data, max_bytes=len(data))
        tokens = math.ceil(len(data) / BYTES_PER_TOKEN)
    else:
        blocks = token_blocks(prompt)
        tokens = len(prompt)
    if len(blocks) > MAX_BLOCKS:
        raise bad(f"the prompt is longer than {MAX_BLOCKS * BLOCK_TOKENS} tokens", "prompt")
    return EngineRequest(blocks, tokens, max_tokens)


def token_blocks(tokens: list[int]) -> tuple[int, ...]:
    """Chained block ids of a token-id prompt, 16 ids per block (ids packed as uint32 LE)."""
    blocks: list[int] = []
    parent = 0
    for start in range(0, len(tokens), BLOCK_TOKENS):
        chunk = tokens[start : start + BLOCK_TOKENS]
        payload = struct.pack(f"<{len(chunk)}I", *(t & 0xFFFFFFFF for t in chunk))
        parent = chain_block(parent, payload)
        blocks.append(parent)
    return tuple(blocks)


def _from_extension(extension: object, max_tokens: int) -> EngineRequest:
    name = EXTENSION
    if not isinstance(extension, dict):
        raise bad(f"'{name}' must be an object", name)
    unknown = sorted(set(extension) - {"blocks", "prompt_tokens", "output_tokens", "key"})
    if unknown:
        raise bad(f"'{name}' does not take {', '.join(unknown)}", name)
    blocks = extension.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= MAX_BLOCKS:
        raise bad(f"'{name}.blocks' must be a list of 1 to {MAX_BLOCKS} block ids", name)
    for block in blocks:
        if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block <= _U64_MAX:
            raise bad(f"'{name}.blocks' holds {block!r}: block ids are unsigned 64-bit", name)
    prompt = extension.get("prompt_tokens", BLOCK_TOKENS * len(blocks))
    prompt = _positive_int(prompt, f"{name}.prompt_tokens", MAX_BLOCKS * BLOCK_TOKENS)
    if len(blocks) != -(-prompt // BLOCK_TOKENS):
        raise bad(
            f"'{name}.blocks' has {len(blocks)} ids but {prompt} prompt tokens need "
            f"ceil({prompt} / {BLOCK_TOKENS}) = {-(-prompt // BLOCK_TOKENS)}",
            name,
        )
    output = extension.get("output_tokens")
    if output is not None:
        max_tokens = _positive_int(output, f"{name}.output_tokens", MAX_OUTPUT_TOKENS)
    key = extension.get("key", "")
    if not isinstance(key, str):
        raise bad(f"'{name}.key' must be a string", name)
    return EngineRequest(tuple(blocks), prompt, max_tokens, key)
