"""Service options from flags, environment variables or a YAML config file.

Precedence: command line > environment (``CACHEROUTE_<DEST>``, e.g. ``CACHEROUTE_REDIS_URL``) >
``--config FILE`` (keys are option names, ``redis-url`` or ``redis_url``) > built-in defaults.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ENV_PREFIX = "CACHEROUTE_"


class SettingsError(ValueError):
    """A config file or environment value that cannot be used; names the source and key."""


def env_name(dest: str) -> str:
    return ENV_PREFIX + dest.upper()


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"YAML file of option values (env: {env_name('config')})",
    )


def document_env(parser: argparse.ArgumentParser) -> None:
    """Append each option's environment variable to its help text."""
    for action in parser._actions:
        if action.dest in ("help", "config", argparse.SUPPRESS) or not action.option_strings:
            continue
        suffix = f"(env: {env_name(action.dest)})"
        action.help = f"{action.help} {suffix}" if action.help else suffix


def parse_settings(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> argparse.Namespace:
    """Parse ``argv`` with defaults layered from ``--config`` and the environment."""
    env = os.environ if environ is None else environ
    known = {
        a.dest: a
        for a in parser._actions
        if a.option_strings and a.dest not in ("help", argparse.SUPPRESS)
    }
    pre, _ = parser.parse_known_args(argv)
    config_path = getattr(pre, "config", None) or (
        Path(env[env_name("config")]) if env_name("config") in env else None
    )
    defaults: dict[str, Any] = {}
    if config_path is not None:
        defaults.update(_load_config(config_path, known))
    for dest, action in known.items():
        raw = env.get(env_name(dest))
        if raw is not None and dest != "config":
            defaults[dest] = _convert(action, raw, env_name(dest))
    parser.set_defaults(**defaults)
    return parser.parse_args(argv)


def _load_config(path: Path, known: Mapping[str, argparse.Action]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: expected a mapping of option: value")
    values: dict[str, Any] = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        if dest not in known:
            raise SettingsError(f"config file {path}: unknown option {key!r}")
        values[dest] = _convert(known[dest], value, f"{path}:{key}")
    return values


def _convert(action: argparse.Action, value: Any, source: str) -> Any:
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise SettingsError(f"{source}: expected a boolean, got {value!r}")
    convert: Callable[[Any], Any] | None = action.type  # type: ignore[assignment]
    converted = value
    if convert is not None and isinstance(value, str | int | float):
        try:
            converted = convert(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise SettingsError(f"{source}: {exc}") from exc
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise SettingsError(f"{source}: {value!r} is not one of {choices}")
    return converted
