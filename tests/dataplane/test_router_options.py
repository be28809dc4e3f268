"""``python -m dataplane`` options in process: every source validated alike, errors naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.__main__ import config_from, main, parse_args
from servekit.options import SettingsError


def test_the_environment_and_the_config_file_fill_the_router_config(tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    config.write_text(
        "http-listen: 127.0.0.1:0\nhttp_key_from_user: yes\nhttp-model-pool: [llama=chat]\n"
        "sample-rate: 0.5\n"
    )
    env = {"CACHEROUTE_ROUTER_ID": "r-7", "CACHEROUTE_SAMPLE_RATE": "0.25"}
    got = config_from(parse_args(["--config", str(config), "--seed", "3"], env))
    assert (got.router_id, got.sample_rate, got.seed) == ("r-7", 0.25, 3)
    assert got.http is not None and got.http.key_from_user and got.http.seed == 3
    assert got.http.model_pools == {"llama": "chat"}
    assert config_from(parse_args([], {})).http is None


def test_bad_environment_and_file_values_name_their_source(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"CACHEROUTE_SAMPLE_RATE: must be in \[0, 1\]"):
        parse_args([], {"CACHEROUTE_SAMPLE_RATE": "2"})
    with pytest.raises(SettingsError, match="CACHEROUTE_POLICY: 'nope' is not one of"):
        parse_args([], {"CACHEROUTE_POLICY": "nope"})
    config = tmp_path / "router.yaml"
    config.write_text("max-message-bytes: 10\n")
    with pytest.raises(SettingsError, match=r"router\.yaml:max-message-bytes: must be >= 65536"):
        parse_args(["--config", str(config)], {})
    config.write_text("http-key-from-user: maybe\n")
    with pytest.raises(SettingsError, match=r"router\.yaml:http-key-from-user: expected a boolean"):
        parse_args(["--config", str(config)], {})


def test_main_exits_2_naming_a_bad_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CACHEROUTE_TABLE_INTERVAL", "0")
    with pytest.raises(SystemExit) as raised:
        main([])
    assert raised.value.code == 2
    assert "CACHEROUTE_TABLE_INTERVAL: must be a positive number" in capsys.readouterr().err


def test_passive_health_and_planning_options_reach_the_router_config(tmp_path: Path) -> None:
    auth = tmp_path / "auth.yaml"
    auth.write_text(f"- {{name: alice, role: read, sha256: {'a' * 64}}}\n")
    env = {"CACHEROUTE_OUTLIER_CONSECUTIVE_FAILURES": "7", "CACHEROUTE_PLANNING_RATE_LIMIT": "50"}
    argv = ["--outlier-base-ejection", "2", "--outlier-max-ejection", "8",
            "--outlier-max-ejected-share", "0.25", "--auth-file", str(auth)]  # fmt: skip
    got = config_from(parse_args(argv, env))
    assert (got.outliers.consecutive_failures, got.outliers.base_ejection_s) == (7, 2.0)
    assert (got.outliers.max_ejection_s, got.outliers.max_ejected_share) == (8.0, 0.25)
    assert got.planning_rate_limit == 50.0
    assert got.auth is not None and [c.name for c in got.auth.by_hash.values()] == ["alice"]
    default = config_from(parse_args([], {}))
    assert default.outliers.consecutive_failures == 5 and default.auth is None
    assert default.planning_rate_limit == 0.0
    assert not default.health_feedback_anonymous  # issue 32: loopback peers only by default
    opted = config_from(parse_args([], {"CACHEROUTE_HEALTH_FEEDBACK_ANONYMOUS": "true"}))
    assert opted.health_feedback_anonymous


def test_bad_passive_health_and_planning_options_name_the_option(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"--outlier-base-ejection .* must be <="):
        config_from(parse_args(["--outlier-base-ejection", "9", "--outlier-max-ejection", "3"]))
    with pytest.raises(SettingsError, match="CACHEROUTE_OUTLIER_MAX_EJECTED_SHARE"):
        parse_args([], {"CACHEROUTE_OUTLIER_MAX_EJECTED_SHARE": "1.5"})
    with pytest.raises(SettingsError, match="CACHEROUTE_PLANNING_RATE_LIMIT"):
        parse_args([], {"CACHEROUTE_PLANNING_RATE_LIMIT": "-1"})
    broken = tmp_path / "auth.yaml"
    broken.write_text("- {name: x, role: boss, sha256: nope}\n")
    with pytest.raises(SettingsError, match=r"--auth-file .*role must be read, write or agent"):
        config_from(parse_args(["--auth-file", str(broken)], {}))


def test_active_probe_options_reach_the_router_config() -> None:
    env = {"CACHEROUTE_ACTIVE_PROBE_FAILURES": "4"}
    argv = ["--active-probe-interval", "0.5", "--active-probe-after-stale", "7",
            "--active-probe-timeout", "0.3"]  # fmt: skip
    got = config_from(parse_args(argv, env)).probes
    assert (got.interval_s, got.after_stale_s, got.failures, got.timeout_s) == (0.5, 7.0, 4, 0.3)
    default = config_from(parse_args([], {})).probes
    assert (default.interval_s, default.after_stale_s, default.failures) == (2.0, 10.0, 3)
    assert not config_from(parse_args(["--active-probe-interval", "0"], {})).probes.enabled
    with pytest.raises(SettingsError, match="CACHEROUTE_ACTIVE_PROBE_FAILURES"):
        parse_args([], {"CACHEROUTE_ACTIVE_PROBE_FAILURES": "0"})
