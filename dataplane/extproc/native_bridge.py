"""The Endpoint Picker behind the native ext_proc transport (``--extproc-native BINARY``).

Profiling put ~90% of the Python picker's CPU in grpc.aio carrying the ext_proc stream, ~5% in
the decision. So the router runs the native server (native/extproc/, built by
``scripts/build_extproc_native.py``) as a child process that listens on ``--extproc-listen`` and
carries the streams, while every message is decided here, on the router's event loop, by the
Python picker's own code (:mod:`dataplane.extproc.native_streams`). The two talk over a Unix
socket in a private temporary directory (:mod:`servekit.private_dirs`), in batches
(:mod:`dataplane.extproc.native_frames`).

The health server (``--extproc-health-listen``) stays in Python: SERVING once the router has
synced *and* the child is connected. A child that dies is logged, its streams end (their holds
are released), readiness goes NOT_SERVING and the child is started again on the same port after
a back-off (``cacheroute_router_extproc_native_restarts_total``); readiness comes back with its
connection. On stop the child gets SIGTERM and its grace period, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from pathlib import Path

import structlog
from grpc_health.v1 import health_pb2
from prometheus_client import Counter

from dataplane.extproc import native_frames as frames
from dataplane.extproc.context import ExtProcConfig, PickerContext
from dataplane.extproc.identity import PickerIdentity
from dataplane.extproc.native_streams import NativeStreams
from dataplane.extproc.service import EXT_PROC_SERVICE, LIVENESS, MESSAGE_SLACK_BYTES, READINESS
from servekit.auth_file import AuthTable
from servekit.grpc_server import GrpcServer
from servekit.private_dirs import private_dir

log = structlog.get_logger("dataplane.extproc")
START_TIMEOUT_S = 30.0  # the child's first connection (a cold, loaded machine)
RESTART_BACKOFF_S = (0.2, 1.0, 5.0)  # after the 1st, 2nd, later consecutive failures


class _Link(asyncio.Protocol):
    """One connection from the child: frames in, each read's answers out in one write."""

    def __init__(self, bridge: NativeExtProcServer) -> None:
        self._bridge = bridge
        self._reader = frames.FrameReader(bridge.max_frame)
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._bridge.streams.close_all()  # ids of an earlier child's streams mean nothing now
        self._bridge.link = self
        self._bridge.streams.write = transport.write

    def data_received(self, data: bytes) -> None:
        try:
            batch = self._reader.feed(data)
        except frames.FrameError as exc:
            log.error("native ext_proc transport sent garbage; dropping it", error=str(exc))
            assert self._transport is not None
            self._transport.close()
            return
        streams = self._bridge.streams
        if batch and batch[0].kind == frames.HELLO:
            self._bridge.hello(int(batch[0].payload))
            batch = batch[1:]
        out = streams.on_frames(batch)
        if out and self._transport is not None:
            self._transport.write(out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._bridge.lost(self)


class NativeExtProcServer:
    """The picker with its streams in a native child process (module docstring); the same
    interface as :class:`~dataplane.extproc.service.ExtProcServer` for the router process."""

    def __init__(
        self, context: PickerContext, config: ExtProcConfig, auth: AuthTable | None = None
    ) -> None:
        assert config.native is not None
        self.config = config
        self.context = context
        self.binary = Path(config.native)
        self.max_message = config.max_body_bytes + MESSAGE_SLACK_BYTES
        self.max_frame = self.max_message + 64
        identity = PickerIdentity(
            auth,
            mtls=False,
            allow_unauthenticated=config.allow_unauthenticated,
            registry=context.registry,
        )
        self.streams = NativeStreams(context, identity)
        self.restarts = Counter(
            "cacheroute_router_extproc_native_restarts",
            "Times the native ext_proc transport's process died and was started again.",
            registry=context.registry,
        )
        self.health: GrpcServer | None = None
        if config.health_listen is not None:
            self.health = GrpcServer(
                config.health_listen, service_names=[LIVENESS, READINESS, EXT_PROC_SERVICE]
            )
        self._dir = private_dir("cacheroute-extproc-")
        self.socket_path = self._dir / "picker.sock"
        self._listen = config.listen
        self._port = 0
        self._synced = False
        self._connected = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._child: asyncio.subprocess.Process | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self._hellos = 0
        self.link: _Link | None = None  # the child's connection now

    @property
    def port(self) -> int:
        return self._port

    @property
    def health_port(self) -> int | None:
        return self.health.port if self.health is not None else None

    @property
    def child_pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def start(self, *, serving: bool) -> None:
        """Start the child and wait for its first connection (raises when it cannot start)."""
        if not self.binary.is_file():
            raise RuntimeError(f"--extproc-native: no binary at {self.binary}")
        self._synced = serving
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: _Link(self), str(self.socket_path))
        if self.health is not None:
            await self.health.start(serving=False)
            await self.health.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        self._supervisor = asyncio.create_task(self._supervise(), name="extproc-native")
        async with asyncio.timeout(START_TIMEOUT_S):
            waiter = asyncio.create_task(self._connected.wait())
            done, _ = await asyncio.wait(
                {waiter, self._supervisor}, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                waiter.cancel()
                raise RuntimeError(f"the native ext_proc transport {self.binary} did not start")
        log.info(
            "endpoint picker serving (native transport)",
            address=self._listen,
            binary=str(self.binary),
            health_address=self.health.address if self.health is not None else None,
            ready=serving,
        )

    async def _supervise(self) -> None:
        """Run the child; when it dies, log it and start it again after a back-off."""
        failures = 0
        while not self._stopping:
            child = await asyncio.create_subprocess_exec(
                str(self.binary),
                "--listen", self._listen,
                "--socket", str(self.socket_path),
                "--max-message", str(self.max_message),
                "--grace", f"{self.config.grace_s:g}",
            )  # fmt: skip
            self._child = child
            hellos = self._hellos
            code = await child.wait()
            if self._stopping:
                return
            if self._port == 0:  # it never said hello: a binary that cannot run here
                log.error("native ext_proc transport failed to start", returncode=code)
                return
            self.restarts.inc()
            failures = 0 if self._hellos > hellos else failures + 1
            delay = RESTART_BACKOFF_S[min(failures, len(RESTART_BACKOFF_S) - 1)]
            log.error(
                "native ext_proc transport died; restarting it",
                returncode=code,
                pid=child.pid,
                restart_in_s=delay,
            )
            await asyncio.sleep(delay)

    def hello(self, port: int) -> None:
        """The child is listening on ``port``: a restart listens on the same one."""
        if self._port == 0:
            host = self._listen.rpartition(":")[0]
            self._listen = f"{host}:{port}"
        self._port = port
        self._hellos += 1
        self._connected.set()
        asyncio.get_running_loop().create_task(self._publish_health())

    def lost(self, link: _Link) -> None:
        """The child's connection ended: its streams end with it."""
        if link is not self.link:
            return  # an older child's connection, long replaced
        self.link = None
        self._connected.clear()
        self.streams.write = lambda _data: None
        self.streams.close_all()
        if not self._stopping:
            asyncio.get_running_loop().create_task(self._publish_health())

    async def _publish_health(self) -> None:
        if self.health is not None and not self._stopping:
            await self.health.set_serving(self._synced and self._connected.is_set())
            await self.health.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)

    async def set_serving(self, serving: bool) -> None:
        """Readiness follows the router's first sync and the child's connection."""
        self._synced = serving
        await self._publish_health()

    async def stop(self, grace_s: float) -> None:
        self._stopping = True
        if self.health is not None:
            await self.health.stop(0.0)
        child = self._child
        if child is not None and child.returncode is None:
            child.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(child.wait(), grace_s + 2.0)
            except TimeoutError:
                log.error("native ext_proc transport ignored SIGTERM; killing it", pid=child.pid)
                child.kill()
                await child.wait()
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self._server is not None:
            self._server.close()
        self.streams.close_all()
        shutil.rmtree(self._dir, ignore_errors=True)
