"""Envoy ext_proc messages in and out: headers, the pick, body echoes, immediate answers.

The Gateway API Inference Extension's Endpoint Picker protocol (proposal 004) on the wire:

* the pick goes out twice with one value, as header ``x-gateway-destination-endpoint`` and as
  dynamic metadata ``envoy.lb`` / ``x-gateway-destination-endpoint``: ``ip:port[,ip:port...]``,
  the decision first, then the fallbacks in order; the route cache is cleared so the route is
  chosen again with the new header;
* the candidate subset comes in as filter metadata ``envoy.lb.subset_hint`` /
  ``x-gateway-destination-endpoint-subset`` (a list of ``ip:port``);
* the endpoint that served comes back as metadata ``envoy.lb`` /
  ``x-gateway-destination-endpoint-served`` (GKE sets it), or, from a plain Envoy, as the response
  header of the same name (``deploy/envoy/envoy.yaml`` adds it with ``%UPSTREAM_REMOTE_ADDRESS%``);
* errors are an ``ImmediateResponse`` with an OpenAI-style JSON body.

Streamed bodies are echoed in chunks of at most :data:`BODY_CHUNK_BYTES` (some gateways cap a
streamed chunk at 64 KiB; the upstream EPP uses the same margin).

The pick's and the response headers' answers depend only on a few strings, so each distinct one
is built once and kept (:class:`_Memo`, bounded): building a protobuf message in Python costs tens
of microseconds, a dict lookup does not; gRPC serializes the same message object each time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

DESTINATION = "x-gateway-destination-endpoint"
SERVED = "x-gateway-destination-endpoint-served"
SUBSET = "x-gateway-destination-endpoint-subset"
LB_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
BODY_CHUNK_BYTES = 62_000
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
MEMO_LIMIT = 4096
BAD_STATUS = -1  # a :status that is not a number in 100-599


class _Memo:
    """Answers already built, by their inputs; starts over past MEMO_LIMIT entries."""

    def __init__(self) -> None:
        self._answers: dict[tuple[str, ...], Any] = {}

    def get(self, key: tuple[str, ...]) -> Any:
        return self._answers.get(key)

    def put(self, key: tuple[str, ...], answer: Any) -> Any:
        if len(self._answers) >= MEMO_LIMIT:
            self._answers.clear()
        self._answers[key] = answer
        return answer


_PICKS = _Memo()
_RESPONSE_HEADERS = _Memo()

ProcessingRequest = ext.ProcessingRequest
ProcessingResponse = ext.ProcessingResponse


def header_map(headers: Any) -> dict[str, str]:
    """An ext_proc ``HeaderMap`` as a dict, names in lower case (Envoy sends ``raw_value``)."""
    return {
        header.key.lower(): raw.decode("utf-8", "replace")
        if (raw := header.raw_value)
        else header.value
        for header in headers.headers
    }


def _metadata_value(request: Any, namespace: str, key: str) -> Any:
    filter_metadata = request.metadata_context.filter_metadata
    if namespace not in filter_metadata:
        return None
    return filter_metadata[namespace].fields.get(key)


def subset_hint(request: Any) -> frozenset[str] | None:
    """The endpoints the pick must come from, or None when the gateway set no hint."""
    value = _metadata_value(request, SUBSET_NAMESPACE, SUBSET)
    if value is None:
        return None
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        return frozenset(v.string_value for v in value.list_value.values if v.string_value)
    if kind == "string_value":  # tolerate "a,b" as well as ["a", "b"]
        return frozenset(part.strip() for part in value.string_value.split(",") if part.strip())
    return frozenset()


def _status(text: bytes) -> int:
    """A ``:status`` value, or :data:`BAD_STATUS` (garbage is ignored, never a traceback)."""
    if len(text) != 3 or not text.isdigit():
        return BAD_STATUS
    status = int(text)
    return status if 100 <= status <= 599 else BAD_STATUS


def status_and_served(request: Any) -> tuple[int, str]:
    """The response's status (0: none; :data:`BAD_STATUS`: not a number in 100-599) and the
    endpoint that answered (the ``envoy.lb`` metadata, else the response header, else "")."""
    status = 0
    served = ""
    for header in request.response_headers.headers.headers:
        key = header.key
        if key == ":status":
            status = _status(header.raw_value or header.value.encode())
        elif key == SERVED:
            served = (header.raw_value or header.value.encode()).decode("utf-8", "replace")
    value = _metadata_value(request, LB_NAMESPACE, SERVED)
    if value is not None and value.string_value:
        served = str(value.string_value)
    return status, served


def _set_headers(headers: Iterable[tuple[str, str]]) -> Any:
    return ext.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=name, raw_value=value.encode()),
                append_action=_OVERWRITE,
            )
            for name, value in headers
        ]
    )


def pick_response(endpoints: tuple[str, ...]) -> Any:
    """The request-headers answer carrying the pick (module docstring)."""
    answer = _PICKS.get(endpoints)
    if answer is not None:
        return answer
    value = ",".join(endpoints)
    metadata = struct_pb2.Struct()
    metadata.update({LB_NAMESPACE: {DESTINATION: value}})
    common = ext.CommonResponse(
        header_mutation=_set_headers([(DESTINATION, value)]), clear_route_cache=True
    )
    answer = ext.ProcessingResponse(
        request_headers=ext.HeadersResponse(response=common), dynamic_metadata=metadata
    )
    return _PICKS.put(endpoints, answer)


def body_echo(body: bytes, end_of_stream: bool, *, response: bool = False) -> list[Any]:
    """``body`` sent on unchanged as streamed body answers (request or response side)."""
    chunks = [body[i : i + BODY_CHUNK_BYTES] for i in range(0, len(body), BODY_CHUNK_BYTES)]
    if not chunks:
        chunks = [b""]
    answers = []
    for index, chunk in enumerate(chunks):
        last = end_of_stream and index == len(chunks) - 1
        common = ext.CommonResponse(
            body_mutation=ext.BodyMutation(
                streamed_response=ext.StreamedBodyResponse(body=chunk, end_of_stream=last)
            )
        )
        answer = ext.BodyResponse(response=common)
        if response:
            answers.append(ext.ProcessingResponse(response_body=answer))
        else:
            answers.append(ext.ProcessingResponse(request_body=answer))
    return answers


def request_headers_done() -> Any:
    """Request headers answered with no change (a repeated headers message is not a request)."""
    return ext.ProcessingResponse(request_headers=ext.HeadersResponse())


def trailers_done(*, response: bool = False) -> Any:
    if response:
        return ext.ProcessingResponse(response_trailers=ext.TrailersResponse())
    return ext.ProcessingResponse(request_trailers=ext.TrailersResponse())


def response_headers_done(*pairs: str) -> Any:
    """The response-headers answer, adding headers given as name, value, name, value, ..."""
    answer = _RESPONSE_HEADERS.get(pairs)
    if answer is not None:
        return answer
    headers = list(zip(pairs[::2], pairs[1::2], strict=True))
    common = ext.CommonResponse(header_mutation=_set_headers(headers))
    answer = ext.ProcessingResponse(response_headers=ext.HeadersResponse(response=common))
    return _RESPONSE_HEADERS.put(pairs, answer)


def immediate(status: int, message: str, *, kind: str, code: str, param: str | None = None) -> Any:
    """An ``ImmediateResponse``: the gateway answers ``status`` with an OpenAI-style error body."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return ext.ProcessingResponse(
        immediate_response=ext.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),
            headers=_set_headers([("content-type", "application/json")]),
            body=json.dumps(body, separators=(",", ":")).encode(),
            details=code,
        )
    )
