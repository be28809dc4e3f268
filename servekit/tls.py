"""TLS settings for servers and clients (mTLS when a client CA is given).

Every server takes an optional :class:`TlsConfig`; without one it listens in plaintext, which is
what the local cluster and the tests use. grpc is imported where credentials are made, so the
flags that declare these settings cost processes without gRPC (the simulated engines) nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


@dataclass(frozen=True)
class TlsConfig:
    cert_file: Path
    key_file: Path
    # CA bundle that client certificates must chain to; set to require mTLS.
    client_ca_file: Path | None = None

    def server_credentials(self) -> grpc.ServerCredentials:
        import grpc  # noqa: PLC0415 - see the module docstring

        ca = self.client_ca_file.read_bytes() if self.client_ca_file else None
        return grpc.ssl_server_credentials(
            [(self.key_file.read_bytes(), self.cert_file.read_bytes())],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )


@dataclass(frozen=True)
class ClientTlsConfig:
    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None

    def channel_credentials(self) -> grpc.ChannelCredentials:
        import grpc  # noqa: PLC0415 - see the module docstring

        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_file.read_bytes(),
            private_key=self.key_file.read_bytes() if self.key_file else None,
            certificate_chain=self.cert_file.read_bytes() if self.cert_file else None,
        )
