"""Agents: several control-plane addresses (and names resolving to several), and the token."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.agent_metrics import AgentMetrics
from agents.engine_settings import ConfigError, controlplanes, read_token
from agents.reporter import Reporter
from cacheroute_state.urls import redacted as redact_url


def test_controlplane_takes_a_comma_separated_list() -> None:
    assert controlplanes("a:1, b:2,") == ["a:1", "b:2"]
    with pytest.raises(ConfigError, match="HOST:PORT"):
        controlplanes("a:1,nonsense")


def test_the_token_comes_from_the_file_else_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_text("  tok-1\n")
    assert read_token(path, {"CACHEROUTE_TOKEN": "env"}) == "tok-1"
    assert read_token(None, {"CACHEROUTE_TOKEN": " env "}) == "env"
    assert read_token(None, {}) is None
    path.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        read_token(path, {})


async def test_a_name_expands_to_each_address_and_reconnects_go_round_robin() -> None:
    metrics = AgentMetrics().for_node("n")
    reporter = Reporter(["localhost:7001", "127.0.0.2:7002"], metrics=metrics)
    candidates = await reporter._candidates()
    dialled = [address for address, _ in candidates]
    assert "127.0.0.1:7001" in dialled and dialled[-1] == "127.0.0.2:7002"
    assert all(host in ("localhost", "127.0.0.2") for _, host in candidates)
    seen = []
    for _ in range(len(candidates) + 1):
        channel = await reporter._open_channel()
        seen.append(reporter.target)
        await channel.close()
    assert seen[: len(candidates)] == dialled and seen[-1] == dialled[0]


def test_redis_urls_are_logged_without_their_password() -> None:
    assert redact_url("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("redis://user:pw@[::1]:1/2") == "redis://user:***@[::1]:1/2"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    sentinel = "redis+sentinel://:pw@a:1,b:2/svc/0?sentinel_password=sp"
    assert redact_url(sentinel) == "redis+sentinel://:***@a:1,b:2/svc/0?sentinel_password=***"
    assert redact_url("redis+cluster://u:pw@a:1,b:2") == "redis+cluster://u:***@a:1,b:2"
