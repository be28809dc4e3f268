"""Synthetic ext_proc messages, as Envoy sends them, and readers of the picker's answers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from google.protobuf import struct_pb2

from dataplane.extproc import wire


def _header_map(headers: Mapping[str, str]) -> Any:
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
    )


def request_headers(
    headers: Mapping[str, str] | None = None,
    *,
    path: str = "/v1/chat/completions",
    end_of_stream: bool = False,
    subset: Sequence[str] | None = None,
) -> Any:
    """Request headers (``:method``, ``:path`` first); ``subset``: the gateway's hint."""
    base = {":method": "POST" if not end_of_stream else "GET", ":path": path}
    message = ext.ProcessingRequest(
        request_headers=ext.HttpHeaders(
            headers=_header_map({**base, **(headers or {})}), end_of_stream=end_of_stream
        )
    )
    if subset is not None:
        hint = struct_pb2.Struct()
        hint.update({wire.SUBSET: list(subset)})
        message.metadata_context.filter_metadata[wire.SUBSET_NAMESPACE].CopyFrom(hint)
    return message


def request_body(chunk: bytes, end_of_stream: bool) -> Any:
    return ext.ProcessingRequest(request_body=ext.HttpBody(body=chunk, end_of_stream=end_of_stream))


def body_chunks(body: bytes, size: int) -> list[Any]:
    """``body`` as Envoy streams it: chunks of ``size`` bytes, the last one ending the stream."""
    parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    return [request_body(p, i == len(parts) - 1) for i, p in enumerate(parts)]


def response_headers(
    status: int = 200, *, served: str | None = None, end_of_stream: bool = False
) -> Any:
    headers = {":status": str(status), "content-type": "application/json"}
    if served is not None:
        headers[wire.SERVED] = served
    return ext.ProcessingRequest(
        response_headers=ext.HttpHeaders(headers=_header_map(headers), end_of_stream=end_of_stream)
    )


def raw_response_headers(headers: Mapping[str, str]) -> Any:
    """Response headers exactly as given (no ``:status`` added): for malformed ones."""
    return ext.ProcessingRequest(response_headers=ext.HttpHeaders(headers=_header_map(headers)))


def response_body(chunk: bytes, end_of_stream: bool) -> Any:
    return ext.ProcessingRequest(
        response_body=ext.HttpBody(body=chunk, end_of_stream=end_of_stream)
    )


def chat_body(content: str = "hello", **fields: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], **fields}
    return json.dumps(body).encode()


# -- reading answers ----------------------------------------------------------------------------


def set_headers(answer: Any, phase: str = "request_headers") -> dict[str, str]:
    common = getattr(answer, phase).response
    return {h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers}


def picked(answers: Iterable[Any]) -> list[str]:
    """The endpoints of the pick in ``answers`` (its header; checked equal to its metadata)."""
    for answer in answers:
        if answer.WhichOneof("response") == "request_headers":
            header = set_headers(answer)[wire.DESTINATION]
            lb = answer.dynamic_metadata.fields[wire.LB_NAMESPACE].struct_value
            assert lb.fields[wire.DESTINATION].string_value == header
            assert answer.request_headers.response.clear_route_cache
            return header.split(",")
    raise AssertionError(f"no pick in {list(answers)!r}")


def echoed(answers: Iterable[Any], phase: str = "request_body") -> tuple[bytes, bool]:
    """The body the answers pass on, and whether the last one ends the stream."""
    body = b""
    end = False
    for answer in answers:
        if answer.WhichOneof("response") == phase:
            streamed = getattr(answer, phase).response.body_mutation.streamed_response
            body += streamed.body
            end = streamed.end_of_stream
    return body, end


def immediate(answers: Sequence[Any]) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of the one ImmediateResponse in ``answers``."""
    [answer] = answers
    assert answer.WhichOneof("response") == "immediate_response"
    reply = answer.immediate_response
    return reply.status.code, json.loads(reply.body)
