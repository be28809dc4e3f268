"""cacheroute_state.embedded: an embedded Redis bound beyond loopback requires a password.

Issue 23, failure 2: ``--embedded-redis-bind 0.0.0.0`` started a Redis with no password and
protected mode off; from the machine's address every key, the active plan included, could be
read and written. Now the password is generated once, kept with the data (0600), handed to
redis-server in a 0600 config file (not on its command line), and printed only by
``python -m controlplane redis-url``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from cacheroute_state.embedded import PASSWORD_FILE, EmbeddedRedis
from cacheroute_state.urls import redacted

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


def test_a_redis_bound_beyond_loopback_refuses_clients_without_its_stored_password(
    tmp_path: Path,
) -> None:
    server = EmbeddedRedis(data_dir=tmp_path, bind="0.0.0.0").start()
    try:
        password = (tmp_path / PASSWORD_FILE).read_text().strip()
        assert len(password) >= 32
        assert stat.S_IMODE((tmp_path / PASSWORD_FILE).stat().st_mode) == 0o600
        anonymous = redis.Redis(host="127.0.0.1", port=server.port)
        with pytest.raises(redis.AuthenticationError):
            anonymous.get("cr:{default}:active")
        anonymous.close()
        assert password in server.url and password not in redacted(server.url)
        owner = redis.Redis.from_url(server.url)
        assert owner.ping()
        owner.close()
        assert server.pid is not None
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode(errors="replace")
        assert password not in cmdline  # not visible in ps
        server.stop()
        again = EmbeddedRedis(data_dir=tmp_path, bind="0.0.0.0", port=server.port).start()
        try:
            assert again.password == password  # kept with the data: routers keep their URL
        finally:
            again.stop()
    finally:
        server.stop()


def test_a_loopback_redis_needs_no_password(tmp_path: Path) -> None:
    with EmbeddedRedis(data_dir=tmp_path) as server:
        assert server.password is None and not (tmp_path / PASSWORD_FILE).exists()
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        client.close()


def test_the_operator_command_prints_the_url_with_the_password(tmp_path: Path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path, bind="0.0.0.0").start()
    server.stop()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEROUTE_")}
    args = ["redis-url", "--embedded-redis-bind", "0.0.0.0", "--redis-data-dir", str(tmp_path),
            "--embedded-redis-port", str(server.port)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "controlplane", *args],
        capture_output=True, text=True, timeout=60, check=True, env=env,
    )  # fmt: skip
    assert done.stdout.strip() == f"redis://:{server.password}@HOST:{server.port}/0"


def test_an_exposed_redis_without_a_data_directory_is_refused() -> None:
    from controlplane.config import parse_config  # noqa: PLC0415
    from servekit.options import SettingsError  # noqa: PLC0415

    bind = ["--embedded-redis-bind", "0.0.0.0"]
    with pytest.raises(SettingsError, match="needs a data directory") as off:
        parse_config([*bind, "--redis-data-dir", "off"], environ={})
    # Issue 34: the port is fixed (6379) here, so the advice names the flag that matters.
    assert "--redis-data-dir off leaves none" in str(off.value)
    assert "--embedded-redis-port" not in str(off.value)
    with pytest.raises(SettingsError, match="needs a data directory") as free:
        parse_config([*bind, "--embedded-redis-port", "0"], environ={})
    assert "--embedded-redis-port 0 (a free port) has no default one" in str(free.value)
