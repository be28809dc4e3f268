"""An OpenAI request body and headers → the router's input: pool, routing key, prompt head.

Routing key, first that applies:

1. the ``x-cacheroute-key`` header;
2. the body's ``prompt_cache_key`` (OpenAI's name for a caller-chosen cache key);
3. the body's ``user``, when the front is configured to (``--http-key-from-user``);
4. otherwise the derived key of model + ``cache_salt`` (or the LoRA-style model name) + the
   prompt's first 1,024 bytes (:func:`dataplane.core.keys.derive_key`).

Pool: the ``x-cacheroute-pool`` header, else the configured model → pool map, else ``default``.

Session: the ``x-session-token`` header (llm-d's convention; the first 512 characters) becomes
``RouteRequest.session_token``; the response carries the decision's own token in the same header
(:mod:`dataplane.core.session_token`).

The prompt text is the completion's ``prompt`` or the chat messages rendered ``"<role>:
<content>\\n"`` each (the simulated engine's rendering, so its prefix blocks and the router's
agree). Only its first 4,096 UTF-8 bytes are kept: they derive the key and the chained
prompt-block hashes that prefix-history policies and the sampled trace read
(:meth:`~dataplane.core.route_input.RouteInput.blocks`, computed only when one of them asks).
Every check raises :class:`~dataplane.http_front.errors.FrontError` (400) naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cacheroute.v1 import routing_pb2
from dataplane.core.keys import MAX_PROMPT_BYTES
from dataplane.core.route_input import InvalidRequestError, RouteInput, parse_request
from dataplane.core.session_token import MAX_TOKEN
from dataplane.http_front.errors import bad_request

KEY_HEADER = "x-cacheroute-key"
POOL_HEADER = "x-cacheroute-pool"
# llm-d's session header: the response carries the decision's token, the next turn sends it back
SESSION_HEADER = "x-session-token"


@dataclass(frozen=True)
class KeyRules:
    """How the front picks a request's key and pool (module docstring)."""

    key_from_user: bool = False
    model_pools: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FrontRequest:
    """A checked request: the router's input, whether it streams, its model."""

    route: RouteInput
    stream: bool
    model: str


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body, or a 400 saying why not."""
    try:
        body = json.loads(raw.decode())  # str: skips json's encoding detection
    except (ValueError, UnicodeDecodeError) as exc:
        message = f"the request body is not valid JSON: {exc}"
        raise bad_request(message, code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", code="invalid_json")
    return body


def front_request(
    body: dict[str, Any],
    headers: Mapping[str, str],
    *,
    chat: bool,
    rules: KeyRules,
    request_id: str,
) -> FrontRequest:
    """Validate ``body`` and build the router's input (module docstring)."""
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad_request("'model' must be a string", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", param="stream")
    salt = body.get("cache_salt", "")
    if not isinstance(salt, str):
        raise bad_request("'cache_salt' must be a string", param="cache_salt")
    key, param = _key(body, headers, rules)
    pool = headers.get(POOL_HEADER) or rules.model_pools.get(model, "")
    message = routing_pb2.RouteRequest(
        pool=pool,
        key=key,
        prompt_prefix=_prompt_head(body, chat),
        model=model,
        cache_salt=salt,
        request_id=request_id,
        session_token=headers.get(SESSION_HEADER, "")[:MAX_TOKEN],
    )
    try:
        route = parse_request(message)
    except InvalidRequestError as exc:
        text = str(exc)
        if text.startswith("pool"):
            param = POOL_HEADER
        raise bad_request(text, param=param) from None
    return FrontRequest(route, stream, model)


def _key(body: dict[str, Any], headers: Mapping[str, str], rules: KeyRules) -> tuple[str, str]:
    header = headers.get(KEY_HEADER)
    if header:
        return header, KEY_HEADER
    for name in ("prompt_cache_key", "user") if rules.key_from_user else ("prompt_cache_key",):
        value = body.get(name)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise bad_request(f"'{name}' must be a string", param=name)
        return value, name
    return "", "prompt"


def _prompt_head(body: dict[str, Any], chat: bool) -> str:
    """The prompt's first MAX_PROMPT_BYTES bytes as text ("" when it has none)."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty list", param="messages")
        parts: list[str] = []
        size = 0
        for message in messages:
            if not isinstance(message, dict):
                raise bad_request("each message must be an object", param="messages")
            text = f"{message.get('role', '')}: {_content(message.get('content'))}\n"
            parts.append(text)
            size += len(text)
            if size >= MAX_PROMPT_BYTES:  # characters ≥ bytes / 4: enough, cut below
                break
        prompt = "".join(parts)
    else:
        prompt = _completion_prompt(body.get("prompt"))
    data = prompt.encode("utf-8")
    if len(data) <= MAX_PROMPT_BYTES:
        return prompt
    return data[:MAX_PROMPT_BYTES].decode("utf-8", errors="ignore")


def _content(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _completion_prompt(prompt: object) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, str):
            return first
        if isinstance(first, int):  # token ids
            return " ".join(str(t) for t in prompt[:MAX_PROMPT_BYTES])
        if isinstance(first, list):  # a batch of token-id prompts
            return " ".join(str(t) for t in first[:MAX_PROMPT_BYTES])
    if prompt is None:
        raise bad_request("'prompt' is required", param="prompt")
    raise bad_request("'prompt' must be a string or a list", param="prompt")
