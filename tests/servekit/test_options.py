"""Options declared once: flag, environment variable, YAML key, default in --help, validation."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from servekit.flags import fraction, optional_path, positive_float, positive_int
from servekit.options import Option, OptionSet, SettingsError, list_option, switch

RATE = Option("rate", 1.5, positive_float, "requests per second")
KV_BLOCKS: Option[int | None] = Option("kv_blocks", None, positive_int, "cache blocks")
MODE = Option("mode", "fast", str, "how", choices=("fast", "slow"))
PORTS = list_option("ports", "ports to use", positive_int, metavar="PORT")
OPTIONS = OptionSet(RATE, KV_BLOCKS, MODE, PORTS)


def parse(argv: list[str], env: dict[str, str] | None = None) -> argparse.Namespace:
    return OPTIONS.parse(OPTIONS.parser(prog="t"), argv, env or {})


def test_one_declaration_yields_flag_env_name_and_help_with_default() -> None:
    text = OPTIONS.parser(prog="t").format_help()
    assert "--kv-blocks" in text and "CACHEROUTE_KV_BLOCKS" in text
    assert "(default: 1.5) (env: CACHEROUTE_RATE)" in " ".join(text.split())
    assert (RATE.flag, RATE.env) == ("--rate", "CACHEROUTE_RATE")


def test_flags_beat_the_environment_which_beats_the_file_which_beats_the_default(
    tmp_path: Path,
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("rate: 3\nkv-blocks: 7\nmode: slow\nports: [1, 2]\n")
    args = parse(["--config", str(config)])
    assert (RATE.value(args), KV_BLOCKS.value(args), MODE.value(args)) == (3.0, 7, "slow")
    assert PORTS.value(args) == ["1", "2"]
    args = parse(["--config", str(config)], {"CACHEROUTE_RATE": "4", "CACHEROUTE_PORTS": "5;6 7"})
    assert RATE.value(args) == 4.0
    assert PORTS.value(args) == ["5", "6", "7"]
    args = parse(["--rate", "5", "--ports", "9"], {"CACHEROUTE_RATE": "4", "CACHEROUTE_PORTS": "8"})
    assert (RATE.value(args), PORTS.value(args)) == (5.0, ["9"])
    assert (KV_BLOCKS.value(parse([])), MODE.value(parse([]))) == (None, "fast")


def test_every_source_is_validated_alike_and_errors_name_the_source(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="CACHEROUTE_RATE: must be a positive number"):
        parse([], {"CACHEROUTE_RATE": "0"})
    with pytest.raises(SettingsError, match="CACHEROUTE_MODE: 'medium' is not one of fast, slow"):
        parse([], {"CACHEROUTE_MODE": "medium"})
    with pytest.raises(SettingsError, match="CACHEROUTE_PORTS: must be a positive integer"):
        parse([], {"CACHEROUTE_PORTS": "1 -2"})
    config = tmp_path / "c.yaml"
    config.write_text("kv_blocks: -1\n")
    with pytest.raises(SettingsError, match=r"c\.yaml:kv_blocks: must be a positive integer"):
        parse(["--config", str(config)])
    config.write_text("colour: red\n")
    with pytest.raises(SettingsError, match="unknown option 'colour'"):
        parse(["--config", str(config)])


def test_a_bad_flag_exits_with_status_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--rate", "0"], ["--ports", "0"], ["--mode", "medium"]):
        with pytest.raises(SystemExit) as raised:
            parse(argv)
        assert raised.value.code == 2
        assert argv[0] in capsys.readouterr().err


QUIET = switch("quiet", "say less")
CERT: Option[Path | None] = Option("cert", None, optional_path, "certificate")
HOST: Option[str | None] = Option("host", None, str, "who", shown_default="hostname-pid")
SWITCHES = OptionSet(QUIET, (CERT, HOST))


def test_a_switch_is_a_bare_flag_or_a_boolean_in_the_environment_or_the_file(
    tmp_path: Path,
) -> None:
    parser = SWITCHES.parser(prog="t")
    assert QUIET.value(SWITCHES.parse(parser, [], {})) is False
    assert QUIET.value(SWITCHES.parse(SWITCHES.parser(prog="t"), ["--quiet"], {})) is True
    for text, expected in (("yes", True), ("ON", True), ("0", False), ("", False)):
        args = SWITCHES.parse(SWITCHES.parser(prog="t"), [], {"CACHEROUTE_QUIET": text})
        assert QUIET.value(args) is expected
    config = tmp_path / "c.yaml"
    config.write_text("quiet: true\n")
    assert QUIET.value(SWITCHES.parse(SWITCHES.parser(prog="t"), ["--config", str(config)], {}))
    with pytest.raises(SettingsError, match="CACHEROUTE_QUIET: expected a boolean"):
        SWITCHES.parse(SWITCHES.parser(prog="t"), [], {"CACHEROUTE_QUIET": "maybe"})
    config.write_text("quiet: 2\n")
    with pytest.raises(SettingsError, match=r"c\.yaml:quiet: expected a boolean"):
        SWITCHES.parse(SWITCHES.parser(prog="t"), ["--config", str(config)], {})


def test_an_optional_path_is_none_unless_given_and_empty_text_means_none() -> None:
    assert CERT.value(SWITCHES.parse(SWITCHES.parser(prog="t"), [], {})) is None
    args = SWITCHES.parse(SWITCHES.parser(prog="t"), ["--cert", "c.pem"], {})
    assert CERT.value(args) == Path("c.pem")
    args = SWITCHES.parse(SWITCHES.parser(prog="t"), [], {"CACHEROUTE_CERT": ""})
    assert CERT.value(args) is None


def test_help_shows_a_computed_default_by_its_description() -> None:
    text = " ".join(SWITCHES.parser(prog="t").format_help().split())
    assert "who (default: hostname-pid) (env: CACHEROUTE_HOST)" in text
    assert "certificate (default: none) (env: CACHEROUTE_CERT)" in text


def test_an_option_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        OptionSet(RATE, MODE, RATE)


def test_a_fraction_is_a_number_in_the_unit_interval() -> None:
    assert (fraction("0"), fraction("0.5"), fraction("1")) == (0.0, 0.5, 1.0)
    for text in ("-0.1", "1.5", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"must be in \[0, 1\]"):
            fraction(text)


def test_a_platform_variable_is_a_fallback_below_every_source_of_ours(tmp_path: Path) -> None:
    host = Option("pod_ip", "none", str, "this pod's IP", fallback_env="POD_IP")
    options = OptionSet(host)
    assert "(env: CACHEROUTE_POD_IP, else POD_IP)" in host.help_text()

    def parsed(argv: list[str], env: dict[str, str]) -> object:
        return host.value(options.parse(options.parser(), argv, env))

    assert parsed([], {}) == "none"
    assert parsed([], {"POD_IP": "10.0.0.1", "CACHEROUTE_OTHER": "x"}) == "10.0.0.1"
    assert parsed([], {"POD_IP": ""}) == "none"  # set but empty: as if unset
    path = tmp_path / "agent.yaml"
    path.write_text("pod_ip: 10.0.0.2\n")
    assert parsed(["--config", str(path)], {"POD_IP": "10.0.0.1"}) == "10.0.0.2"
    env = {"POD_IP": "10.0.0.1", "CACHEROUTE_POD_IP": "10.0.0.3"}
    assert parsed([], env) == "10.0.0.3"
    assert parsed(["--pod-ip", "10.0.0.4"], env) == "10.0.0.4"
    counted = OptionSet(Option("n", 1, positive_int, "n", fallback_env="POD_IP"))
    with pytest.raises(SettingsError, match=r"^POD_IP: "):
        counted.parse(counted.parser(), [], {"POD_IP": "ten"})
