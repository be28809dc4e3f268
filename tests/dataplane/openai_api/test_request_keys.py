"""Key and pool of an HTTP request, in the documented order; node address → base URL."""

from __future__ import annotations

from typing import Any

import pytest

from dataplane.core.keys import derive_key, hash_key
from dataplane.http_front.proxy import base_url
from dataplane.openai_api.errors import FrontError
from dataplane.openai_api.prompts import endpoint_of
from dataplane.openai_api.request_keys import (
    DEFAULT_KEY_HEADERS,
    KeyRules,
    front_request,
    header_request,
    parse_body,
)

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _parse(
    body: dict[str, Any], headers: dict[str, str] | None = None, rules: KeyRules | None = None
) -> tuple[str, str]:
    endpoint = "chat" if "messages" in body else "completions"
    parsed = front_request(
        body, headers or {}, endpoint=endpoint, rules=rules or KeyRules(), request_id="r"
    )
    assert parsed.route.key_hash == hash_key(parsed.route.key)
    return parsed.route.key, parsed.route.pool


def test_the_key_header_wins_then_prompt_cache_key_then_user_when_configured() -> None:
    body = {**CHAT, "prompt_cache_key": "pck", "user": "alice"}
    users = KeyRules(key_from_user=True)
    assert _parse(body, {"x-cacheroute-key": "hdr"})[0] == "hdr"
    assert _parse(body)[0] == "pck"
    assert _parse({**CHAT, "user": "alice"}, rules=users)[0] == "alice"
    assert _parse({**CHAT, "user": "alice"})[0] == derive_key("m", "", "user: hi\n")


def test_without_a_key_it_is_derived_from_model_salt_and_prompt() -> None:
    key, _ = _parse({"model": "m", "prompt": "p" * 5000, "cache_salt": "s"})
    assert key == derive_key("m", "s", "p" * 5000)
    assert _parse({"model": "m", "prompt": [1, 2, 3]})[0] == derive_key("m", "", "1 2 3")
    parts = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
    }
    assert _parse(parts)[0] == derive_key("m", "", "user: x\n")


def test_the_pool_comes_from_the_header_then_the_model_map_then_default() -> None:
    rules = KeyRules(model_pools={"m": "llama"})
    assert _parse(CHAT, {"x-cacheroute-pool": "other"}, rules)[1] == "other"
    assert _parse(CHAT, rules=rules)[1] == "llama"
    assert _parse(CHAT)[1] == "default"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": 3, "prompt": "x"}, "model"),
        ({"prompt": "x", "stream": 1}, "stream"),
        ({"prompt": "x", "prompt_cache_key": 5}, "prompt_cache_key"),
        ({"prompt": {"a": 1}}, "prompt"),
        ({"messages": []}, "messages"),
        ({"prompt": "x", "cache_salt": []}, "cache_salt"),
    ],
)
def test_malformed_fields_are_400s_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(FrontError) as caught:
        _parse(body)
    assert caught.value.status == 400 and caught.value.param == param


def test_bodies_that_are_not_json_objects_are_refused() -> None:
    for raw in (b"{", b"[]", b"\xff"):
        with pytest.raises(FrontError) as caught:
            parse_body(raw)
        assert caught.value.code == "invalid_json"


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("engine-3.svc:8000", "http://engine-3.svc:8000"),
        ("127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("https://gpu7.example/serve/", "https://gpu7.example/serve"),
        ("http://h:1", "http://h:1"),
    ],
)
def test_a_node_address_maps_to_a_base_url(address: str, url: str) -> None:
    assert base_url(address) == url


def test_key_headers_are_honoured_in_order_before_prompt_cache_key_and_name_their_source() -> None:
    body = {**CHAT, "prompt_cache_key": "pck"}
    names = list(DEFAULT_KEY_HEADERS)
    assert names == [
        "x-cacheroute-key",
        "x-session-id",
        "x-smg-routing-key",
        "x-dynamo-session-id",
        "x-llm-d-inference-fairness-id",
    ]
    for first in range(len(names)):
        headers = {name: f"key-{i}" for i, name in enumerate(names) if i >= first}
        parsed = front_request(body, headers, endpoint="chat", rules=KeyRules(), request_id="r")
        assert (parsed.route.key, parsed.key_source) == (f"key-{first}", names[first])
        alone = header_request(headers, KeyRules(), "r")
        assert alone is not None and alone.route.key == f"key-{first}"
    parsed = front_request(body, {}, endpoint="chat", rules=KeyRules(), request_id="r")
    assert parsed.key_source == "prompt_cache_key"
    parsed = front_request(CHAT, {}, endpoint="chat", rules=KeyRules(), request_id="r")
    assert parsed.key_source == "derived"
    assert header_request({}, KeyRules(), "r") is None
    custom = KeyRules(key_headers=("x-tenant",))
    assert _parse(body, {"x-tenant": "t", "x-cacheroute-key": "k"}, custom)[0] == "t"


@pytest.mark.parametrize(
    ("path", "body", "prompt"),
    [
        ("/v1/embeddings", {"model": "m", "input": "embed me"}, "embed me"),
        ("/v1/embeddings", {"model": "m", "input": ["a", "b"]}, "a"),
        ("/v1/responses", {"model": "m", "input": "hi"}, "hi"),
        (
            "/v1/responses",
            {"model": "m", "instructions": "be brief", "input": [{"role": "user", "content": "q"}]},
            "system: be brief\nuser: q\n",
        ),
        ("/v1/completions?x=1", {"model": "m", "prompt": "p"}, "p"),
    ],
)
def test_embeddings_and_responses_derive_their_key_from_their_own_input(
    path: str, body: dict[str, Any], prompt: str
) -> None:
    endpoint = endpoint_of(path)
    assert endpoint is not None
    parsed = front_request(body, {}, endpoint=endpoint, rules=KeyRules(), request_id="r")
    assert parsed.route.key == derive_key("m", "", prompt)


def test_an_embeddings_or_responses_body_without_input_names_the_field() -> None:
    for endpoint in ("embeddings", "responses"):
        with pytest.raises(FrontError) as caught:
            front_request({"model": "m"}, {}, endpoint=endpoint, rules=KeyRules(), request_id="r")
        assert caught.value.param == "input"
