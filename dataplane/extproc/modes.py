"""The Envoy processing modes the picker serves, besides the streamed default: fewer messages.

The default recipe (``deploy/envoy/envoy.yaml``) streams the request body
(``FULL_DUPLEX_STREAMED``) and asks for the response trailers: four to five messages each way per
request, each one a Python gRPC step (most of the picker's cost, docs/benchmarks.md). Envoy tells
the picker its mode in the stream's first message (``protocol_config``), and the picker follows:

* request body ``NONE`` (``deploy/envoy/envoy-headers-only.yaml``, for gateways whose clients
  send the key in a header): the decision is made at the request headers; a request without a key
  header is spread by power-of-two choices (no key to keep, not counted for planning, as a
  bodiless request) since no body will come. With response trailers skipped too, the response
  headers are the last message: they end the request's hold (completion-aware load then covers
  the time to the answer's first byte, not to its end) and feed passive health.
* request body ``BUFFERED`` (``deploy/envoy/envoy-buffered.yaml``, for keys in the body): the
  headers are let through at once, the whole body comes in one message, and its answer carries
  the pick (header mutation, ``envoy.lb`` metadata, route cache cleared) with the body unchanged:
  no echo of the body. Envoy buffers the body up to the listener's buffer limit
  (``per_connection_buffer_limit_bytes``) and answers 413 itself past it.

Without ``protocol_config`` (an older Envoy) the picker assumes the streamed default.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as modes
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from google.protobuf import struct_pb2

from dataplane.extproc import wire

_BodySendMode = modes.ProcessingMode.BodySendMode


class BodyMode(Enum):
    STREAMED = "streamed"  # FULL_DUPLEX_STREAMED (or STREAMED), or unknown: the default recipe
    BUFFERED = "buffered"  # the whole body in one message, after the headers' answer
    NONE = "none"  # no body message comes


def body_mode(message: Any) -> BodyMode:
    """The request body mode Envoy announced in the stream's first message."""
    if not message.HasField("protocol_config"):
        return BodyMode.STREAMED
    mode = message.protocol_config.request_body_mode
    if mode == _BodySendMode.NONE:
        return BodyMode.NONE
    if mode == _BodySendMode.BUFFERED:  # not BUFFERED_PARTIAL: a cut body has no key to read
        return BodyMode.BUFFERED
    return BodyMode.STREAMED


HEADERS_CONTINUE = ext.ProcessingResponse(request_headers=ext.HeadersResponse())
BODY_CONTINUE = ext.ProcessingResponse(request_body=ext.BodyResponse())
_BODY_PICKS: dict[tuple[str, ...], Any] = {}


def body_pick(endpoints: tuple[str, ...]) -> Any:
    """The buffered body's answer carrying the pick, the body passed on unchanged (memoized)."""
    answer = _BODY_PICKS.get(endpoints)
    if answer is not None:
        return answer
    value = ",".join(endpoints)
    metadata = struct_pb2.Struct()
    metadata.update({wire.LB_NAMESPACE: {wire.DESTINATION: value}})
    mutation = wire.pick_response(endpoints).request_headers.response.header_mutation
    common = ext.CommonResponse(header_mutation=mutation, clear_route_cache=True)
    answer = ext.ProcessingResponse(
        request_body=ext.BodyResponse(response=common), dynamic_metadata=metadata
    )
    if len(_BODY_PICKS) >= wire.MEMO_LIMIT:
        _BODY_PICKS.clear()
    _BODY_PICKS[endpoints] = answer
    return answer
