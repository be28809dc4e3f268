"""``python -m agents``: options, engine specs, and the real process (SIGTERM → leaving, exit 0)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents.__main__ import main, parse_args
from agents.agent import AgentConfig
from agents.engine_settings import ConfigError, agent_configs, client_tls, engine_endpoints
from cacheroute.v1 import agent_pb2
from servekit.options import SettingsError
from tests.support.agents import ControlPlaneStub, EngineStub, controlplane, wait_until

__all__ = ["controlplane"]

ROOT = Path(__file__).resolve().parents[2]


def configs(*argv: str, environ: dict[str, str] | None = None) -> list[AgentConfig]:
    return agent_configs(parse_args(list(argv), environ or {}))


def test_help_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in (
        "--engine-url", "--node-id", "--pool", "--address", "--controlplane", "--interval",
        "--dialect", "--weight", "--metrics-listen", "--tls-ca", "--tls-cert", "--tls-key",
        "--log-format", "--log-level", "--engine", "--scrape-timeout", "--config",
        "CACHEROUTE_ENGINE_URL", "--kv-events", "--kv-replay", "CACHEROUTE_KV_EVENTS",
    ):  # fmt: skip
        assert option in text


def test_engine_url_gives_metrics_url_and_address() -> None:
    assert engine_endpoints("http://10.0.0.5:8000") == (
        "http://10.0.0.5:8000/metrics",
        "10.0.0.5:8000",
    )
    assert engine_endpoints("https://gpu.example/") == (
        "https://gpu.example/metrics",
        "gpu.example:443",
    )
    assert engine_endpoints("http://[::1]:9000/metrics")[1] == "[::1]:9000"
    with pytest.raises(ConfigError, match="http://host:port"):
        engine_endpoints("10.0.0.5:8000")


def test_one_engine_defaults_node_id_to_its_address() -> None:
    (cfg,) = configs("--engine-url", "http://127.0.0.1:8000", "--interval", "0.5")
    assert (cfg.node_id, cfg.address, cfg.pool, cfg.interval_s) == (
        "127.0.0.1:8000", "127.0.0.1:8000", "default", 0.5,
    )  # fmt: skip
    (named,) = configs("--engine-url", "http://e:8000", "--node-id", "a", "--address", "pub:80")
    assert (named.node_id, named.address, named.metrics_url) == (
        "a",
        "pub:80",
        "http://e:8000/metrics",
    )


def test_repeated_engine_specs_make_several_agents() -> None:
    got = configs(
        "--pool", "chat", "--dialect", "sim",
        "--engine", "sim-0=http://127.0.0.1:9100",
        "--engine", "sim-1=http://127.0.0.1:9101,address=10.1.1.1:80,weight=2,dialect=vllm_v1",
    )  # fmt: skip
    assert [(c.node_id, c.address, c.weight, c.dialect, c.pool) for c in got] == [
        ("sim-0", "127.0.0.1:9100", 1.0, "sim", "chat"),
        ("sim-1", "10.1.1.1:80", 2.0, "vllm_v1", "chat"),
    ]


def test_kv_event_endpoints_come_with_the_engine_or_its_spec() -> None:
    (one,) = configs(
        "--engine-url",
        "http://h:8000",
        "--kv-events",
        "tcp://h:5557",
        "--kv-replay",
        "tcp://h:5558",
    )
    assert (one.kv_events, one.kv_replay) == ("tcp://h:5557", "tcp://h:5558")
    a, b = configs(
        "--engine", "a=http://h:1,kv_events=tcp://h:5557,kv_replay=tcp://h:5558",
        "--engine", "b=http://h:2",
    )  # fmt: skip
    assert (a.kv_events, a.kv_replay, b.kv_events) == ("tcp://h:5557", "tcp://h:5558", None)


def test_engine_specs_come_from_the_environment_unless_given_on_the_command_line() -> None:
    env = {"CACHEROUTE_ENGINE": "a=http://h:1 b=http://h:2;c=http://h:3"}
    assert [c.node_id for c in configs(environ=env)] == ["a", "b", "c"]
    got = configs("--engine", "z=http://h:9", environ=env)
    assert [c.node_id for c in got] == ["z"]


def test_engine_specs_come_from_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text("controlplane: cp:7000\nengine:\n  - a=http://h:1\n  - b=http://h:2\n")
    args = parse_args(["--config", str(path)], {})
    assert args.controlplane == "cp:7000"
    assert [c.node_id for c in agent_configs(args)] == ["a", "b"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no engine"),
        (["--node-id", "x"], "missing"),
        (["--engine", "nourl"], "NODE_ID=URL"),
        (["--engine", "a=http://h:1,colour=red"], "unknown option"),
        (["--engine", "a=http://h:1,weight=-1"], "finite number >= 0"),
        (["--engine-url", "http://h:1", "--weight", "inf"], "finite number >= 0"),
        (["--engine", "a=http://h:1,dialect=tgi"], "dialect must be one of"),
        (["--engine", "a=http://h:1", "--engine", "a=http://h:2"], "distinct"),
        (["--engine", "bad id=http://h:1"], "does not match"),
        (["--engine-url", "http://h:1", "--pool", "Bad Pool"], "--pool"),
        (["--engine-url", "http://h:1", "--interval", "0"], "--interval"),
        (["--engine-url", "http://h:1", "--kv-events", "h:5557"], "tcp://HOST:PORT"),
        (["--engine", "a=http://h:1,kv_events=udp://h:1"], "KV-event endpoint"),
        (["--kv-events", "tcp://h:5557"], "describe --engine-url"),
    ],
)
def test_bad_options_are_named(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        configs(*argv)


def test_tls_flags_must_come_together(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="need --tls-ca"):
        client_tls(parse_args(["--tls-cert", "c.pem"], {}))
    with pytest.raises(ConfigError, match="go together"):
        client_tls(parse_args(["--tls-ca", "ca.pem", "--tls-key", "k.pem"], {}))
    tls = client_tls(parse_args(["--tls-ca", "ca.pem"], {}))
    assert tls is not None and tls.ca_file == Path("ca.pem")


def test_main_exits_2_with_the_message_on_a_bad_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--engine", "nourl"])
    assert exit_info.value.code == 2
    assert "NODE_ID=URL" in capsys.readouterr().err


@pytest.mark.grpc
async def test_the_process_reports_two_engines_and_exits_0_on_sigterm_after_leaving(
    controlplane: ControlPlaneStub, tmp_path: Path
) -> None:
    engines = [await EngineStub().start(), await EngineStub().start()]
    engines[0].serve("vllm_v1_a")
    engines[1].serve("sglang_underscore_a")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "proto")])}
    log_path = tmp_path / "agents.log"
    service = controlplane.service
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "agents",
                "--controlplane", controlplane.target,
                "--interval", "0.05",
                "--engine-url", engines[0].url, "--node-id", "e0",
                "--engine", f"e1={engines[1].url}",
                "--metrics-listen", "127.0.0.1:0",
            ],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log_file,
        )  # fmt: skip
        try:
            await wait_until(lambda: len(service.of("e0")) >= 2 and len(service.of("e1")) >= 2, 30)
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stub in engines:
                await stub.close()
    logs = log_path.read_text()
    assert code == 0, logs
    assert service.of("e0")[-1].leaving and service.of("e1")[-1].leaving
    assert service.of("e0")[0].dialect == agent_pb2.METRIC_DIALECT_VLLM_V1
    assert service.of("e1")[0].dialect == agent_pb2.METRIC_DIALECT_SGLANG_UNDERSCORE
    assert "metrics_endpoint" in logs


def test_bad_environment_and_file_values_name_their_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SettingsError, match="CACHEROUTE_DIALECT: 'tgi' is not one of"):
        parse_args([], {"CACHEROUTE_DIALECT": "tgi"})
    path = tmp_path / "agents.yaml"
    path.write_text("interval: soon\n")
    with pytest.raises(SettingsError, match=r"agents\.yaml:interval: could not convert"):
        parse_args(["--config", str(path)], {})
    monkeypatch.setenv("CACHEROUTE_WEIGHT", "heavy")
    with pytest.raises(SystemExit) as exit_info:
        main(["--engine-url", "http://h:1"])
    assert exit_info.value.code == 2
    assert "CACHEROUTE_WEIGHT" in capsys.readouterr().err
