"""The router's end of the native ext_proc transport: frames in, the Python picker's answers out.

Each stream the native server (native/extproc/) carries runs the very state machine the Python
picker runs, :class:`~dataplane.extproc.stream.PickerStream`, on the router's event loop: the
same decision (``Router.route`` through :func:`~dataplane.extproc.pick.pick`), holds, passive
health, metrics and answer bytes (:mod:`dataplane.extproc.wire`). Only the carrying of the gRPC
stream moved out of Python. What :class:`~dataplane.extproc.service.ExternalProcessor` does per
stream is done here per frame: a message that does not parse, or that the stream cannot use,
ends that stream with INVALID_ARGUMENT (other streams go on); a body not complete within
``body_timeout_s`` is answered 408; the gateway's half-close ends the stream OK; the stream's end,
however it comes, releases what it held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError

from dataplane.extproc import native_frames as frames
from dataplane.extproc.context import PickerContext
from dataplane.extproc.identity import PROCESS_METHOD, REFUSAL, PickerIdentity
from dataplane.extproc.service import MALFORMED
from dataplane.extproc.stream import PickerStream
from dataplane.extproc.wire import ProcessingRequest

log = structlog.get_logger("dataplane.extproc")
_INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]
_UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]


class CallerOf:
    """What the caller rules read of a gRPC call, from the native side's OPEN frame."""

    def __init__(self, peer: str, authorization: str) -> None:
        self._peer = peer
        self._metadata = (("authorization", authorization),) if authorization else ()

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}  # the native transport serves no TLS (dataplane/options/builder.py refuses it)


class _Open:
    __slots__ = ("stream", "timer")

    def __init__(self, stream: PickerStream) -> None:
        self.stream = stream
        self.timer: asyncio.TimerHandle | None = None


class NativeStreams:
    """Every stream of one native server; :meth:`on_frames` answers a batch with one batch."""

    def __init__(self, context: PickerContext, identity: PickerIdentity) -> None:
        self.ctx = context
        self.identity = identity
        self.write: Callable[[bytes], None] = lambda _data: None  # set by the socket's link
        self._open: dict[int, _Open] = {}

    @property
    def open_streams(self) -> int:
        return len(self._open)

    def on_frames(self, batch: list[frames.Frame]) -> bytes:
        """The answers to one read's frames, as one write."""
        out: list[bytes] = []
        for kind, sid, payload in batch:
            if kind == frames.MESSAGE:
                self._message(sid, payload, out)
            elif kind == frames.OPEN:
                self._opened(sid, payload, out)
            elif kind == frames.HALF_CLOSE:
                if self._end(sid):
                    out.append(frames.encode(frames.END, sid))
            elif kind == frames.GONE:
                self._end(sid)
        return b"".join(out)

    def close_all(self) -> None:
        """The native server is gone: every stream ends (holds released, budgets given back)."""
        for sid in list(self._open):
            self._end(sid)

    def _opened(self, sid: int, payload: bytes, out: list[bytes]) -> None:
        peer, _, authorization = payload.decode("utf-8", "replace").partition("\n")
        caller: Any = CallerOf(peer, authorization)  # read as a grpc.aio call's context
        if self.identity.required and not self.identity.name(PROCESS_METHOD, caller):
            out.append(frames.abort(sid, _UNAUTHENTICATED, REFUSAL))
            return
        self._open[sid] = _Open(PickerStream(self.ctx, self.ctx.feedback.caller(caller)))
        self.ctx.metrics.streams.inc()

    def _message(self, sid: int, payload: bytes, out: list[bytes]) -> None:
        entry = self._open.get(sid)
        if entry is None:
            return  # ended already (an answer, a timeout or a refusal came first)
        stream = entry.stream
        try:
            answers = stream.on_message(ProcessingRequest.FromString(payload))
        except (DecodeError, *MALFORMED) as exc:
            log.info("malformed ext_proc message", error=f"{type(exc).__name__}: {exc}")
            self._end(sid)
            out.append(frames.abort(sid, _INVALID, f"malformed ext_proc message: {exc}"))
            return
        out.extend(frames.encode(frames.MESSAGE, sid, a.SerializeToString()) for a in answers)
        if stream.done:
            self._end(sid)
            out.append(frames.encode(frames.END, sid))
        elif stream.waiting_since is not None:
            if entry.timer is None:
                left = stream.waiting_since + self.ctx.config.body_timeout_s - time.monotonic()
                loop = asyncio.get_running_loop()
                entry.timer = loop.call_later(max(0.0, left), self._timed_out, sid)
        elif entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None

    def _timed_out(self, sid: int) -> None:
        entry = self._open.get(sid)
        if entry is None:
            return
        answer = entry.stream.timed_out()
        self._end(sid)
        message = frames.encode(frames.MESSAGE, sid, answer.SerializeToString())
        self.write(message + frames.encode(frames.END, sid))

    def _end(self, sid: int) -> bool:
        """End stream ``sid``; whether it was open."""
        entry = self._open.pop(sid, None)
        if entry is None:
            return False
        if entry.timer is not None:
            entry.timer.cancel()
        entry.stream.close()
        self.ctx.metrics.streams.dec()
        return True
