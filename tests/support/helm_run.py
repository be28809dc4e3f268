"""Run what the chart renders, as the kubelet would, on this machine (tests/system/test_helm_*).

A container's command, args and environment are taken from the rendered objects: Secret keys
(``secretKeyRef``) come from the rendered Secrets, the downward API (``fieldRef``) from a made-up
Pod, ``$(VAR)`` references are expanded as the kubelet does, and files the chart mounts from a
Secret are written under a directory (mode 0600). What cannot be the same on one machine is
rewritten, and only that: ``0.0.0.0:PORT`` listen addresses become ``127.0.0.1:0`` (loopback,
any port) and a Service name in the store URL becomes the local Redis's address.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.support.faults import Proc
from tests.support.helm import containers, of_kind

POD = {"metadata.name": "cr-pod-0", "status.podIP": "127.0.0.1"}
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def secret_data(recipe: str, suffix: str) -> dict[str, str]:
    """The ``stringData`` of the rendered Secret whose name ends with ``-suffix``."""
    (secret,) = [s for s in of_kind(recipe, "Secret") if s["metadata"]["name"].endswith(suffix)]
    data: dict[str, str] = secret["stringData"]
    return data


def container(recipe: str, suffix: str) -> dict[str, Any]:
    """The rendered container whose "workload/container" name ends with ``suffix``."""
    (found,) = [c for name, c in containers(recipe) if name.endswith(suffix)]
    return found


def environment(recipe: str, spec: dict[str, Any]) -> dict[str, str]:
    """A container's environment as the kubelet builds it (module docstring)."""
    secrets = {s["metadata"]["name"]: s.get("stringData", {}) for s in of_kind(recipe, "Secret")}
    env: dict[str, str] = {}
    for item in spec.get("env", []):
        source = item.get("valueFrom")
        if source is None:
            value = _REFERENCE.sub(lambda m: env.get(m.group(1), m.group(0)), item["value"])
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            value = secrets[ref["name"]][ref["key"]]
        else:
            value = POD[source["fieldRef"]["fieldPath"]]
        env[item["name"]] = value
    return env


def loopback_args(args: list[str], files: dict[str, Path]) -> list[str]:
    """``args`` with listen addresses on loopback (any port) and mounted files at ``files``."""
    result = []
    for given in args:
        arg = "127.0.0.1:0" if re.fullmatch(r"0\.0\.0\.0:\d+", str(given)) else str(given)
        result.append(str(files.get(arg, arg)))
    return result


def write_secret_file(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    path.chmod(0o600)
    return path


class ChartProc(Proc):
    """A :class:`Proc` started with exactly the environment it is given (plus PATH and the
    interpreter's own variables), none of this machine's ``CACHEROUTE_*``."""

    def __init__(self, name: str, args: list[str], log_dir: Path, env: dict[str, str]) -> None:
        super().__init__(name, args, log_dir)
        self.env = env

    def start(self) -> ChartProc:
        base = {k: v for k, v in os.environ.items() if not k.startswith("CACHEROUTE_")}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**base, "PYTHONUNBUFFERED": "1", **self.env},
            )
        return self
