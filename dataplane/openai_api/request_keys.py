"""An OpenAI request body and headers → the router's input: pool, routing key, prompt head.

Routing key, first that applies:

1. the first key header present, in the configured order (``--key-header``; default
   :data:`DEFAULT_KEY_HEADERS`: CacheRoute's own, then the session and routing keys that users of
   llm-d, the SGLang model gateway and Dynamo already send, then llm-d's fairness id);
2. the body's ``prompt_cache_key`` (OpenAI's name for a caller-chosen cache key);
3. the body's ``user``, when the front is configured to (``--http-key-from-user``);
4. otherwise the derived key of model + ``cache_salt`` (or the LoRA-style model name) + the
   prompt's shared head: what comes before its first user turn (a chat request's system and
   developer messages, a templated prompt's preamble), else its first 1,024 bytes
   (:func:`dataplane.core.keys.derive_key`, :func:`~dataplane.core.keys.key_head`).

Which of these gave the key is the request's ``key_source`` (the header's name in lower case,
``prompt_cache_key``, ``user`` or ``derived``), counted by
``cacheroute_router_key_source_total{source}``.

Pool: the ``x-cacheroute-pool`` header, else the configured model → pool map, else ``default``.

Session: the ``x-session-token`` header (llm-d's convention; the first 512 characters) becomes
``RouteRequest.session_token``; the response carries the decision's own token in the same header
(:mod:`dataplane.core.session_token`).

The prompt text is read per endpoint by :mod:`~dataplane.openai_api.prompts`; its first 4,096
UTF-8 bytes derive the key and the chained prompt-block hashes that prefix-history policies and
the sampled trace read (:meth:`~dataplane.core.route_input.RouteInput.blocks`, computed only when
one of them asks).
Every check raises :class:`~dataplane.openai_api.errors.FrontError` (400) naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cacheroute.v1 import routing_pb2
from dataplane.core.route_input import InvalidRequestError, RouteInput, parse_request
from dataplane.core.session_token import MAX_TOKEN
from dataplane.openai_api.conversation import conversation_id, opens_conversation
from dataplane.openai_api.errors import bad_request
from dataplane.openai_api.prompts import prompt_head

KEY_HEADER = "x-cacheroute-key"
POOL_HEADER = "x-cacheroute-pool"
DEFAULT_KEY_HEADERS = (
    KEY_HEADER,
    "x-session-id",  # llm-d session affinity
    "x-smg-routing-key",  # SGLang model gateway
    "x-dynamo-session-id",  # NVIDIA Dynamo
    "x-llm-d-inference-fairness-id",  # llm-d tenant (fairness) id
)
DERIVED = "derived"
# llm-d's session header: the response carries the decision's token, the next turn sends it back
SESSION_HEADER = "x-session-token"


@dataclass(frozen=True)
class KeyRules:
    """How the front picks a request's key and pool (module docstring)."""

    key_from_user: bool = False
    model_pools: Mapping[str, str] = field(default_factory=dict)
    key_headers: tuple[str, ...] = DEFAULT_KEY_HEADERS  # lower case, first present wins
    conversations: bool = True  # derive session_id (only session-aware policies read it)


@dataclass(frozen=True)
class FrontRequest:
    """A checked request: the router's input, whether it streams, its model, the key's source."""

    route: RouteInput
    stream: bool
    model: str
    key_source: str = DERIVED


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body, or a 400 saying why not."""
    try:
        body = json.loads(raw.decode())  # str: skips json's encoding detection
    except (ValueError, UnicodeDecodeError) as exc:
        message = f"the request body is not valid JSON: {exc}"
        raise bad_request(message, code="invalid_json") from None
    except RecursionError:  # 100,000 nested arrays: a 400, not a 500 with a traceback
        raise bad_request("the request body nests too deeply", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", code="invalid_json")
    return body


def front_request(
    body: dict[str, Any],
    headers: Mapping[str, str],
    *,
    endpoint: str,
    rules: KeyRules,
    request_id: str,
) -> FrontRequest:
    """Validate ``body`` of an ``endpoint`` (:data:`~dataplane.openai_api.prompts.ENDPOINTS`)
    and build the router's input (module docstring)."""
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
    pool = _header(headers, POOL_HEADER) or rules.model_pools.get(model, "")
    message = routing_pb2.RouteRequest(
        pool=pool,
        key=key,
        prompt_prefix=prompt_head(body, endpoint),
        model=model,
        cache_salt=salt,
        request_id=request_id,
        session_token=_session_token(headers),
        session_id=conversation_id(body, headers, endpoint) if rules.conversations else "",
        opening_turn=rules.conversations and opens_conversation(body, endpoint),
    )
    try:
        route = parse_request(message)
    except InvalidRequestError as exc:
        text = str(exc)
        if text.startswith("pool"):
            param = POOL_HEADER
        raise bad_request(text, param=param) from None
    return FrontRequest(route, stream, model, param if key else DERIVED)


def header_request(
    headers: Mapping[str, str], rules: KeyRules, request_id: str
) -> FrontRequest | None:
    """The router's input from the headers alone (a key header is present), else None.

    What the Endpoint Picker decides on before the body arrives; the pool is the pool header's
    (the model → pool map needs the body, so it does not apply here).
    """
    found = header_key(headers, rules)
    if found is None:
        return None
    key, source = found
    message = routing_pb2.RouteRequest(
        pool=headers.get(POOL_HEADER, ""),
        key=key,
        request_id=request_id,
        session_id=conversation_id({}, headers, "") if rules.conversations else "",
    )
    try:
        route = parse_request(message)
    except InvalidRequestError as exc:
        text = str(exc)
        raise bad_request(text, param=POOL_HEADER if text.startswith("pool") else source) from None
    return FrontRequest(route, False, "", source)


def header_key(headers: Mapping[str, str], rules: KeyRules) -> tuple[str, str] | None:
    """(key, header name) of the first configured key header present, or None."""
    for name in rules.key_headers:
        value = _header(headers, name)
        if value:
            return value, name
    return None


def _session_token(headers: Mapping[str, str]) -> str:
    """The session header, cut to its bound; one that is not UTF-8 is dropped, never an error (a
    bad token is ignored like a stale one: the request just routes without it)."""
    value = headers.get(SESSION_HEADER, "")[:MAX_TOKEN]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return ""
    return value


def _header(headers: Mapping[str, str], name: str) -> str:
    """A routing header's text; aiohttp keeps bytes that are not UTF-8 as surrogates, which no
    message can carry: a 400 naming the header."""
    value = headers.get(name) or ""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_request(f"header {name} is not valid UTF-8", param=name) from None
    return value


def _key(body: dict[str, Any], headers: Mapping[str, str], rules: KeyRules) -> tuple[str, str]:
    found = header_key(headers, rules)
    if found is not None:
        return found
    for name in ("prompt_cache_key", "user") if rules.key_from_user else ("prompt_cache_key",):
        value = body.get(name)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise bad_request(f"'{name}' must be a string", param=name)
        return value, name
    return "", "prompt"
