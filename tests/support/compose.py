"""docker-compose.yml as the tests read it: interpolated with its defaults, services, commands.

Shared by the tests of the compose file, its monitoring (Prometheus, Grafana) and its image
(Dockerfile), which all hold the files against one reading of them.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "cacheroute.json"
PROJECT_IMAGE = "cacheroute:local"
ENV_PREFIX = "CACHEROUTE_"

_VARIABLE = re.compile(r"\$(?:\$|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value: Any, path: str = "") -> Any:
    """Compose's ``${NAME:-default}`` interpolation with an empty environment (the defaults)."""
    if isinstance(value, dict):
        return {k: interpolate(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        body = match.group(1) if match.group(1) is not None else match.group(2)
        found = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:?-)(.*)", body, re.DOTALL)
        if found is None:
            raise AssertionError(
                f"{path}: ${{{body}}} needs a default (${{NAME:-value}}) so that "
                "`docker compose up` works without a .env file"
            )
        return found.group(3)

    return _VARIABLE.sub(substitute, value)


@cache
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict), "docker-compose.yml must be a mapping"
    return {k: interpolate(v, k) for k, v in data.items() if not str(k).startswith("x-")}


def services() -> dict[str, dict[str, Any]]:
    found = compose()["services"]
    assert isinstance(found, dict) and found, "docker-compose.yml has no services"
    return found


@cache
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def wheel_packages() -> list[str]:
    """Top-level import names the project's wheel (and so the image) contains."""
    packages = pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return [Path(p).name for p in packages]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(str(item).partition("=")[::2] for item in env)
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in env.items()}  # fmt: skip


def argv(name: str, service: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if value is None:
            continue
        assert isinstance(value, list), f"{name}.{key}: use the exec (list) form"
        parts.extend(str(v) for v in value)
    return parts


def is_project(service: dict[str, Any]) -> bool:
    return "build" in service


def project_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services().items() if is_project(s)}


def image_name(service: dict[str, Any]) -> str:
    return str(service.get("image", "")).rsplit(":", 1)[0]


def bind_mounts(name: str) -> dict[Path, str]:
    """Host path -> container path of a service's bind mounts (short syntax)."""
    volumes = services()[name].get("volumes", [])
    return {(ROOT / str(v).split(":")[0]).resolve(): str(v).split(":")[1] for v in volumes}
