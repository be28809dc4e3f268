"""Control-plane options from flags, environment and config file, and the /metrics endpoint."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from controlplane.__main__ import main
from controlplane.config import ControlPlaneConfig, build_parser, parse_config
from controlplane.server import ControlPlane
from servekit.options import SettingsError
from tests.support.controlplane import clients, fast_config, running
from tests.support.polling import eventually


def test_defaults_match_the_documented_ones() -> None:
    config = parse_config([], environ={})
    assert config == ControlPlaneConfig()
    assert config.load_publish_interval_s == 0.25 and config.report_interval_ms == 250
    assert config.node_timeout_intervals == 3 and config.plan_interval_s == 0
    assert config.slots_per_node == 8 and config.redis_url == ""
    assert config.report_retention_s == 600


def test_flags_beat_environment_beat_config_file(tmp_path: Path) -> None:
    config_file = tmp_path / "cp.yaml"
    config_file.write_text("redis-url: redis://file:1/0\nslots_per_node: 3\nplan-interval: 30\n")
    env = {"CACHEROUTE_SLOTS_PER_NODE": "5", "CACHEROUTE_RATE_HALF_LIFE": "120"}
    config = parse_config(["--config", str(config_file), "--plan-interval", "10"], environ=env)
    assert config.redis_url == "redis://file:1/0"
    assert config.slots_per_node == 5
    assert config.rate_half_life_s == 120
    assert config.plan_interval_s == 10


@pytest.mark.parametrize(
    "argv",
    [
        ["--load-publish-interval", "0"],
        ["--rate-half-life", "-1"],
        ["--report-retention", "-1"],
        ["--plan-interval", "nan"],
        ["--tls-cert", "c.pem"],
        ["--metrics-listen", "nonsense"],
        ["--log-level", "loud"],
    ],
)
def test_bad_options_exit_with_usage(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        parse_config(argv, environ={})
    assert raised.value.code == 2


def test_help_documents_every_option_with_its_environment_variable() -> None:
    text = build_parser().format_help()
    for flag in ("--listen", "--redis-url", "--redis-data-dir", "--instance-id",
                 "--metrics-listen", "--load-publish-interval", "--node-timeout-intervals",
                 "--report-retention", "--plan-interval", "--q-cap", "--slots-per-node",
                 "--rate-half-life",
                 "--tls-cert", "--log-format", "--log-level", "--config"):  # fmt: skip
        assert flag in text
    assert "CACHEROUTE_REDIS_URL" in " ".join(text.split())


@pytest.mark.redis
@pytest.mark.grpc
async def test_metrics_endpoint_exposes_the_control_plane_metrics(
    redis_url: str, stores: Stores
) -> None:
    async with running(fast_config(redis_url)) as plane, clients(plane.address) as c:
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="n1", address="h:1"))
        await c.plans.ListPlans(admin_pb2.ListPlansRequest())

        async def published() -> bool:
            return await stores.cluster.get_load("default") is not None

        await eventually(published)
        assert plane.metrics_endpoint is not None
        url = plane.metrics_endpoint.url
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
    text = body.decode()
    for line in (
        'cacheroute_controlplane_nodes{pool="default",state="healthy"} 1.0',
        'cacheroute_controlplane_node_load{node="n1",pool="default"} 0.0',
        'cacheroute_controlplane_rpcs_total{code="OK",method="AddNode"} 1.0',
        "cacheroute_controlplane_leader 1.0",
        "cacheroute_controlplane_agent_streams 0.0",
    ):
        assert line in text
    assert 'cacheroute_controlplane_load_snapshots_published_total{pool="default"}' in text


def test_bad_environment_and_file_values_name_their_source(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="CACHEROUTE_SLOTS_PER_NODE: must be an integer >= 0"):
        parse_config([], environ={"CACHEROUTE_SLOTS_PER_NODE": "-1"})
    config_file = tmp_path / "cp.yaml"
    config_file.write_text("agent-networks: 10.0.0.0/33\n")
    with pytest.raises(SettingsError, match=r"cp\.yaml:agent-networks: agent network"):
        parse_config(["--config", str(config_file)], environ={})
    clients = tmp_path / "clients.yaml"
    clients.write_text("- {name: ops, role: write, sha256: " + "a" * 64 + "}\n")
    clients.chmod(0o600)
    config_file.write_text(f"agent-networks: 10.0.0.0/8, fd00::/8\nauth-file: {clients}\n")
    config = parse_config(["--config", str(config_file)], environ={})
    assert config.agent_networks == ("10.0.0.0/8", "fd00::/8")
    assert config.auth_file == clients
    clients.unlink()  # the auth file is read when the options are: a missing one is one line
    with pytest.raises(SettingsError, match=r"--auth-file .*clients\.yaml: No such file"):
        parse_config(["--config", str(config_file)], environ={})


def test_main_exits_2_naming_a_bad_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CACHEROUTE_LOAD_PUBLISH_INTERVAL", "0")
    assert main([]) == 2
    assert "CACHEROUTE_LOAD_PUBLISH_INTERVAL: must be a positive number" in capsys.readouterr().err


def test_lifecycle_options_come_from_flags_and_environment() -> None:
    config = parse_config(
        ["--auto-interval", "2", "--guard-action", "rollback", "--guard-all-rollouts",
         "--shadow-seeds", "2", "--shadow-profile", "llama-3.1-8b-bf16-h100",
         "--shadow-policy", "cacheroute_online"],
        {"CACHEROUTE_MAX_CHURN": "0.2", "CACHEROUTE_GUARD_WINDOW": "30"},
    )  # fmt: skip
    assert (config.auto_interval_s, config.guard_action, config.guard_all_rollouts) == (
        2.0, "rollback", True,
    )  # fmt: skip
    assert (config.max_churn, config.guard_window_s, config.shadow_seeds) == (0.2, 30.0, 2)
    assert config.shadow_policy == "cacheroute_online"
    assert ControlPlane(config).budget.policy == "cacheroute_online"  # what the replays follow
    assert parse_config([], {}) == ControlPlaneConfig()  # the defaults are the dataclass's


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-churn", "1.5"],
        ["--max-churn", "0"],
        ["--shadow-seeds", "1"],
        ["--guard-action", "panic"],
        ["--shadow-profile", "no-such-engine"],
        ["--shadow-policy", "sglang"],  # not a policy that follows a plan
    ],
)
def test_bad_lifecycle_options_exit_with_usage(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_config(argv, {})
    assert caught.value.code == 2
