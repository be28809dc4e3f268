"""The connection to a control plane: ``--target`` and friends, stubs, deadlines, error mapping.

Every online command calls the admin API through :meth:`AdminClient.call`, which applies the
deadline and turns a refusal into a one-line :class:`CliError` (exit status 2) that keeps the
server's message, e.g. ``FAILED_PRECONDITION: pool default: the active pointer is at
generation 3 ...``.
"""

from __future__ import annotations

import argparse
import getpass
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from cachectl.errors import CliError
from servekit.client_token import TOKEN_ENV, TokenFileError, read_token

if TYPE_CHECKING:  # grpc is imported when a client is made: offline commands start faster
    import grpc

    from servekit.tls import ClientTlsConfig

DEFAULT_TARGET = "127.0.0.1:50051"
TARGET_ENV = "CACHEROUTE_TARGET"
DEFAULT_TIMEOUT_S = 10.0
_OPTIONS = (
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
)
Resp = TypeVar("Resp")
M = TypeVar("M", bound=Message)


class AdminError(CliError):
    """The control plane refused a call or could not be reached; ``code`` says which, and
    ``trailing`` holds the status's typed details (read them with :meth:`detail`)."""

    def __init__(
        self,
        message: str,
        code: grpc.StatusCode,
        trailing: Sequence[tuple[str, str | bytes]] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.trailing = tuple(trailing)

    def detail(self, kind: type[M]) -> M | None:
        """The refusal's typed detail of type ``kind`` (e.g. ``ActivationRefused``), if sent."""
        from servekit.status_details import unpack_details  # noqa: PLC0415 - imports grpc

        return unpack_details(self.trailing, kind)


def add_target_flags(parser: argparse.ArgumentParser) -> None:
    """Flags of every command that talks to a control plane."""
    group = parser.add_argument_group("control plane")
    group.add_argument(
        "--target",
        metavar="HOST:PORT",
        help=f"control-plane address (default: ${TARGET_ENV} or {DEFAULT_TARGET})",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="seconds to wait for an answer (default: %(default)s)",
    )
    group.add_argument("--tls-ca", type=Path, metavar="PEM", help="CA bundle: connect with TLS")
    group.add_argument("--tls-cert", type=Path, metavar="PEM", help="client certificate (mTLS)")
    group.add_argument("--tls-key", type=Path, metavar="PEM", help="client private key (mTLS)")
    group.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help=f"file holding the bearer token (default: ${TOKEN_ENV}; never on the command line)",
    )
    group.add_argument(
        "--actor", help="who to record in the audit trail (default: cachectl:$USER; without "
        "authentication the server records it as unverified:ACTOR, with it the token's name)"
    )  # fmt: skip


def actor(args: argparse.Namespace) -> str:
    named: str | None = getattr(args, "actor", None)
    if named:
        return named
    try:
        return f"cachectl:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cachectl"


def target(args: argparse.Namespace) -> str:
    chosen: str | None = getattr(args, "target", None)
    return chosen or os.environ.get(TARGET_ENV) or DEFAULT_TARGET


def _one_line(text: str) -> str:
    return " ".join(text.split())


class AdminClient:
    """Blocking stubs of one control plane; use as a context manager."""

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float,
        tls: ClientTlsConfig | None = None,
        token: str | None = None,
    ) -> None:
        import grpc  # noqa: PLC0415 - see the TYPE_CHECKING import

        from cacheroute.v1 import admin_pb2_grpc  # noqa: PLC0415

        self.address = address
        self.timeout_s = timeout_s
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None
        try:
            if tls is None:
                self.channel = grpc.insecure_channel(address, options=_OPTIONS)
            else:
                credentials = tls.channel_credentials()
                self.channel = grpc.secure_channel(address, credentials, options=_OPTIONS)
        except OSError as exc:
            raise CliError(f"--tls: cannot read {exc.filename}: {exc.strerror}") from None
        self.plans = admin_pb2_grpc.PlanServiceStub(self.channel)
        self.nodes = admin_pb2_grpc.NodeServiceStub(self.channel)

    def call(self, method: Callable[..., Resp], request: Message) -> Resp:
        """Call ``method(request)`` with the deadline; refusals become a CliError."""
        import grpc  # noqa: PLC0415

        try:
            return method(request, timeout=self.timeout_s, metadata=self.metadata)
        except grpc.RpcError as exc:
            trailing = exc.trailing_metadata() if isinstance(exc, grpc.Call) else None
            raise AdminError(self.describe(exc), exc.code(), trailing or ()) from None

    def describe(self, exc: grpc.RpcError) -> str:
        import grpc  # noqa: PLC0415

        code: grpc.StatusCode = exc.code()
        details = _one_line(exc.details() or "")
        if code is grpc.StatusCode.UNAVAILABLE and details.startswith(("redis ", "store ")):
            return f"the control plane at {self.address} answered, but its store is down: {details}"
        if code is grpc.StatusCode.UNAVAILABLE:
            return (
                f"cannot reach the control plane at {self.address} ({details}); "
                f"is it running? (--target or ${TARGET_ENV})"
            )
        if code is grpc.StatusCode.UNAUTHENTICATED:
            return f"UNAUTHENTICATED: {details} (set ${TOKEN_ENV} or --token-file)"
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"the control plane at {self.address} did not answer within {self.timeout_s} s"
        return f"{code.name}: {details}"

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect(args: argparse.Namespace) -> AdminClient:
    """A client for the command's ``--target`` (and TLS flags)."""
    timeout = float(getattr(args, "timeout", DEFAULT_TIMEOUT_S))
    if not timeout > 0:
        raise CliError(f"--timeout must be positive, got {timeout}")
    ca: Path | None = getattr(args, "tls_ca", None)
    cert: Path | None = getattr(args, "tls_cert", None)
    key: Path | None = getattr(args, "tls_key", None)
    if (cert is None) != (key is None):
        raise CliError("--tls-cert and --tls-key go together")
    if cert is not None and ca is None:
        raise CliError("--tls-cert needs --tls-ca")
    from servekit.tls import ClientTlsConfig  # noqa: PLC0415 - imports grpc

    tls = ClientTlsConfig(ca, cert, key) if ca is not None else None
    return AdminClient(target(args), timeout_s=timeout, tls=tls, token=token(args))


def token(args: argparse.Namespace, environ: dict[str, str] | None = None) -> str | None:
    """The bearer token (:mod:`servekit.client_token`); a bad ``--token-file`` is a CliError."""
    path: Path | None = getattr(args, "token_file", None)
    try:
        return read_token(path, environ)
    except TokenFileError as exc:
        raise CliError(str(exc)) from None


def to_json(message: Message) -> dict[str, Any]:
    """A response as JSON-ready data (proto3 JSON mapping, field names as in the .proto)."""
    return MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def age_text(at_unix_ms: int, now_ms: int | None = None) -> str:
    """How long ago, compactly: 850ms, 12s, 5m, 3h, 2d ("-" when unknown)."""
    if at_unix_ms <= 0:
        return "-"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return duration_text(max(0, now - at_unix_ms))


def duration_text(ms: int) -> str:
    if ms < 0:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
