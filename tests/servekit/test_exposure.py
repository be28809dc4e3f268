"""servekit.exposure and servekit.file_modes, through the real entry points (subprocesses).

Issue 23, failure 2: without ``--auth-file`` an anonymous client rolled out plans and drained
nodes of a control plane listening on 0.0.0.0, and nothing warned; a world-writable auth file
let any local user add a write-role hash; a bad auth file stopped the control plane with a
25-line traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.services.auth import token_hash
from servekit.exposure import is_loopback

pytestmark = pytest.mark.timeout(120)


def run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEROUTE_")}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip


def test_loopback_hosts_are_told_apart_from_wildcards_and_names() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.3.4.5", "localhost", "[::1]", "::1"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "", "10.0.0.1", "example.org", "[::]"]))


@pytest.mark.parametrize("module", ["controlplane", "dataplane"])
def test_a_non_loopback_listen_without_auth_refuses_to_start_with_the_fix_in_one_line(
    module: str,
) -> None:
    done = run(module, "--listen", "0.0.0.0:0")
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "refusing to serve" in last and "0.0.0.0:0" in last
    assert "--auth-file" in last and "--allow-unauthenticated" in last
    assert "Traceback" not in done.stderr


def test_the_opt_out_and_an_auth_file_both_satisfy_protected_mode(tmp_path: Path) -> None:
    from controlplane.config import parse_config  # noqa: PLC0415
    from dataplane.__main__ import config_from, parse_args  # noqa: PLC0415

    auth = tmp_path / "auth.yaml"
    auth.write_text(f"- {{name: ops, role: write, sha256: {token_hash('t')}}}\n")
    auth.chmod(0o644)  # readable by others is fine: it holds hashes only
    for extra in (["--allow-unauthenticated"], ["--auth-file", str(auth)]):
        assert parse_config(["--listen", "0.0.0.0:0", *extra], environ={}).listen == "0.0.0.0:0"
        assert config_from(parse_args(["--listen", "0.0.0.0:0", *extra], environ={}))
    assert parse_config(["--listen", "127.0.0.1:0"], environ={}).auth_file is None


def test_a_group_or_world_writable_auth_file_is_refused_in_one_line(tmp_path: Path) -> None:
    auth = tmp_path / "auth.yaml"
    auth.write_text(f"- {{name: ops, role: write, sha256: {token_hash('t')}}}\n")
    auth.chmod(0o666)
    for module in ("controlplane", "dataplane"):
        done = run(module, "--auth-file", str(auth))
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert "lets other users add clients" in last and "chmod go-w" in last


def test_a_bad_auth_file_stops_the_control_plane_with_one_clear_line(tmp_path: Path) -> None:
    auth = tmp_path / "auth.yaml"
    auth.write_text("- {name: ops, role: write, sha256: [unclosed\n")
    auth.chmod(0o600)
    done = run("controlplane", "--auth-file", str(auth))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not YAML at line" in lines[0], done.stderr


def test_a_token_file_open_to_others_is_read_with_a_warning(tmp_path: Path) -> None:
    from servekit.client_token import read_token  # noqa: PLC0415

    token = tmp_path / "token"
    token.write_text("tok\n")
    token.chmod(0o644)
    done = subprocess.run(
        [sys.executable, "-c", f"from servekit.client_token import read_token as r; "
                               f"print(r(__import__('pathlib').Path({str(token)!r})))"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "tok"
    assert "mode 0o644" in done.stderr and "chmod 600" in done.stderr
    token.chmod(0o600)
    assert read_token(token) == "tok"
