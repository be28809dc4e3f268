"""The frames between the native ext_proc transport and the router (native/extproc/).

One Unix stream socket carries every stream's messages both ways, so each frame names its stream:
``u32 length`` (little endian, of what follows) ``| u8 kind | u64 stream | payload``. The native
side writes whatever it has queued when the socket is free in one write, and the router answers
everything one read brought in one write: the streams' messages travel in batches, not one
system call and one event-loop wake-up each.

Kinds from the native side: :data:`HELLO` (stream 0, the bound port in ASCII), :data:`OPEN`
(``peer "\\n" authorization``), :data:`MESSAGE` (a serialized ``ProcessingRequest``),
:data:`HALF_CLOSE` (the gateway sent its last message), :data:`GONE` (the stream ended, however).
From the router: :data:`MESSAGE` (a serialized ``ProcessingResponse``), :data:`END` (finish the
stream OK), :data:`ABORT` (``u8`` gRPC status code, then the text).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

HELLO = 1
OPEN = 2
MESSAGE = 3
HALF_CLOSE = 4
GONE = 5
END = 6
ABORT = 7
_HEAD = struct.Struct("<IBQ")
_AFTER_LENGTH = 1 + 8


class FrameError(ValueError):
    """The socket carried something that is not a frame (a length out of bounds)."""


class Frame(NamedTuple):
    kind: int
    stream: int
    payload: bytes


def encode(kind: int, stream: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack(_AFTER_LENGTH + len(payload), kind, stream) + payload


def abort(stream: int, code: int, text: str) -> bytes:
    """An ABORT frame: the stream ends with gRPC status ``code`` and ``text``."""
    return encode(ABORT, stream, bytes((code,)) + text.encode("utf-8", "replace"))


class FrameReader:
    """Cuts a byte stream into frames; ``max_frame`` bounds one frame's length."""

    def __init__(self, max_frame: int) -> None:
        self._buffer = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> list[Frame]:
        """The complete frames ``data`` finishes; raises :class:`FrameError` on a bad length."""
        buffer = self._buffer
        buffer += data
        at = 0
        end = len(buffer)
        head = _HEAD
        frames: list[Frame] = []
        while end - at >= 4:
            length = int.from_bytes(buffer[at : at + 4], "little")
            if length < _AFTER_LENGTH or length > self._max:
                raise FrameError(f"frame length {length} out of bounds")
            if end - at < 4 + length:
                break
            _, kind, stream = head.unpack_from(buffer, at)
            frames.append(Frame(kind, stream, bytes(buffer[at + 13 : at + 4 + length])))
            at += 4 + length
        del buffer[:at]
        return frames
