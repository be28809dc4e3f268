"""Garbage and mutated messages to every method of every service of both servers (issue 23,
acceptance): a control-plane and a router subprocess on a real Redis get, per method, a bounded
number of random byte strings and of valid requests with bytes flipped, cut or appended. The
status codes are tallied: never UNKNOWN or INTERNAL, no traceback in either server's log, and
both servers still up. (Before: garbage to the router's Release, health and reflection answered
UNKNOWN with a traceback; health Watch on the control plane failed for every request.) The
router's Endpoint Picker port (``ExternalProcessor/Process``, health, reflection) gets the same
(issue 32: a bad ``:status`` answered UNKNOWN with a traceback).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from cacheroute.v1 import admin_pb2, agent_pb2, routing_pb2
from cacheroute_state.embedded import EmbeddedRedis
from tests.support.faults import Fleet, Proc

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow, pytest.mark.timeout(240)]
PER_METHOD = 12  # garbage and mutated each: ~550 calls in all, a few seconds
FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
SERVICES = {
    "controlplane": [
        admin_pb2.DESCRIPTOR.services_by_name["PlanService"],
        admin_pb2.DESCRIPTOR.services_by_name["NodeService"],
        agent_pb2.DESCRIPTOR.services_by_name["AgentService"],
        health_pb2.DESCRIPTOR.services_by_name["Health"],
        reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"],
    ],
    "router": [
        routing_pb2.DESCRIPTOR.services_by_name["RouterService"],
        health_pb2.DESCRIPTOR.services_by_name["Health"],
        reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"],
    ],
    "picker": [
        external_processor_pb2.DESCRIPTOR.services_by_name["ExternalProcessor"],
        health_pb2.DESCRIPTOR.services_by_name["Health"],
        reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"],
    ],
}


def seed_message(descriptor: Descriptor, depth: int = 0) -> Message:
    """A request with every scalar set to a plausible value (nested messages two deep)."""
    message = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth < 2 and not field.message_type.GetOptions().map_entry:
                child = seed_message(field.message_type, depth + 1)
                if field.is_repeated:
                    getattr(message, field.name).append(child)
                else:
                    getattr(message, field.name).CopyFrom(child)
            continue
        value: object
        if field.type == FieldDescriptor.TYPE_STRING:
            value = "p0000000000000000" if "version" in field.name else "default"
        elif field.type == FieldDescriptor.TYPE_BYTES:
            value = b"\x01\x02"
        elif field.type == FieldDescriptor.TYPE_BOOL:
            value = True
        elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            value = 1.0
        elif field.type == FieldDescriptor.TYPE_ENUM:
            value = field.enum_type.values[-1].number
        else:
            value = 1
        if field.is_repeated:
            getattr(message, field.name).append(value)
        else:
            setattr(message, field.name, value)
    return message


def mutated(data: bytes, rng: random.Random) -> bytes:
    raw = bytearray(data or b"\x00")
    kind = rng.randrange(3)
    if kind == 0:
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
    elif kind == 1:
        del raw[rng.randrange(len(raw)) :]
    else:
        raw += rng.randbytes(rng.randint(1, 16))
    return bytes(raw)


def payloads(method: MethodDescriptor, rng: random.Random) -> Iterator[bytes]:
    seed = seed_message(method.input_type).SerializeToString()
    for _ in range(PER_METHOD):
        yield rng.randbytes(rng.randint(1, 200))
        yield mutated(seed, rng)


def call(channel: grpc.Channel, method: MethodDescriptor, data: bytes) -> grpc.StatusCode:
    path = f"/{method.containing_service.full_name}/{method.name}"
    plain = {"request_serializer": None, "response_deserializer": None}
    try:
        if method.client_streaming:
            stream = channel.stream_stream(path, **plain)  # type: ignore[arg-type]
            for _ in stream(iter([data]), timeout=2.0):
                pass
        elif method.server_streaming:
            for _ in channel.unary_stream(path, **plain)(data, timeout=1.0):  # type: ignore[arg-type]
                break  # a Watch that answers streams on: one answer is enough
        else:
            channel.unary_unary(path, **plain)(data, timeout=5.0)  # type: ignore[arg-type]
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, Proc]]]:
    redis = EmbeddedRedis().start()
    fleet = Fleet(tmp_path_factory.mktemp("fuzz-every") / "logs")
    try:
        import asyncio  # noqa: PLC0415

        cp = fleet.controlplane("cp", redis.url)
        router = fleet.router("router", redis.url, "--extproc-listen", "127.0.0.1:0")
        cp_address = asyncio.run(cp.logged("control plane serving", "listen"))[0]
        router_address = asyncio.run(router.logged("router serving", "address"))[0]
        picker_port = asyncio.run(router.logged("router serving", "extproc_port"))[0]
        yield {
            "controlplane": (cp_address, cp),
            "router": (router_address, router),
            "picker": (f"127.0.0.1:{picker_port}", router),
        }
    finally:
        fleet.stop()
        redis.stop()


@pytest.mark.parametrize("server", ["controlplane", "router", "picker"])
def test_garbage_and_mutations_to_every_rpc_never_answer_unknown_or_internal(
    servers: dict[str, tuple[str, Proc]], server: str
) -> None:
    address, proc = servers[server]
    rng = random.Random(23)
    tally: Counter[tuple[str, str]] = Counter()
    bad = []
    with grpc.insecure_channel(address) as channel:
        for service in SERVICES[server]:
            for method in service.methods:
                for data in payloads(method, rng):
                    code = call(channel, method, data)
                    tally[(method.name, code.name)] += 1
                    if code in FORBIDDEN:
                        bad.append((method.name, code.name, data[:40]))
    proc.check()  # still running
    print(sorted(tally.items()))  # the tally, for the report (pytest -s)
    assert not bad, bad[:10]
    methods = {m for s in SERVICES[server] for m in (x.name for x in s.methods)}
    assert {name for name, _ in tally} == methods  # every method was called
    assert "Traceback" not in Path(proc.log_path).read_text(errors="replace")
