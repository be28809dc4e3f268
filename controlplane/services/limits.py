"""Per-method request size limits of the control plane, checked before a request is parsed.

Every admin and agent message is small (a report is a few hundred bytes, the largest admin
request a few KiB), so each method gets ``--max-request-bytes`` (1 MiB); only ``ImportPlan``
carries a whole table and gets ``--max-import-bytes`` (256 MiB: a 1M-key table). gRPC's core
enforces one limit per server, so the server-wide one is the largest of these and the smaller
ones are applied by :mod:`servekit.rpc_guard` on the received bytes, after authentication.
"""

from __future__ import annotations

from collections.abc import Callable

IMPORT_METHOD = "/cacheroute.v1.PlanService/ImportPlan"
DEFAULT_REQUEST_BYTES = 1024 * 1024
DEFAULT_IMPORT_BYTES = 256 * 1024 * 1024


def limit_of(request_bytes: int, import_bytes: int) -> Callable[[str], int]:
    def limit(method: str) -> int:
        return import_bytes if method == IMPORT_METHOD else request_bytes

    return limit
