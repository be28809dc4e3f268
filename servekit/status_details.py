"""Typed error details on a gRPC status: the ``grpc-status-details-bin`` trailer.

gRPC's rich-status convention: the trailer holds a serialized ``google.rpc.Status`` whose
``details`` are ``Any``-packed messages; a client that knows the message type reads them, one
that does not still has the code and the message. Servers attach details with
:func:`details_trailer`, clients read them with :func:`unpack_details`, so a client branches on
typed fields (e.g. which rollout gates refused), never on the message text. This is what
``grpcio-status`` wraps (``to_status`` / ``from_call``); the twenty lines here avoid a dependency
without type stubs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2

DETAILS_KEY = "grpc-status-details-bin"
M = TypeVar("M", bound=Message)


def details_trailer(
    code: grpc.StatusCode, message: str, details: Iterable[Message]
) -> tuple[tuple[str, bytes]]:
    """Trailing metadata carrying ``details`` beside the status's code and message."""
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        status.details.add().Pack(detail)
    return ((DETAILS_KEY, status.SerializeToString()),)


def unpack_details(trailing: Iterable[tuple[str, str | bytes]] | None, kind: type[M]) -> M | None:
    """The first detail of type ``kind`` in a call's trailing metadata, None when absent."""
    for key, value in trailing or ():
        if key != DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except DecodeError:
            return None
        for detail in status.details:
            found = kind()
            if detail.Unpack(found):  # False when the detail is another type
                return found
    return None
