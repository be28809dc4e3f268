"""Key and pool of an HTTP request, in the documented order; node address → base URL."""

from __future__ import annotations

from typing import Any

import pytest

from dataplane.core.keys import derive_key, hash_key
from dataplane.http_front.errors import FrontError
from dataplane.http_front.proxy import base_url
from dataplane.http_front.request_keys import KeyRules, front_request, parse_body

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _parse(
    body: dict[str, Any], headers: dict[str, str] | None = None, rules: KeyRules | None = None
) -> tuple[str, str]:
    parsed = front_request(
        body, headers or {}, chat="messages" in body, rules=rules or KeyRules(), request_id="r"
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
