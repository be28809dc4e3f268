"""The HTTP front's options, apart from the front itself: the flags and the router's config
read them, and a router without ``--http-listen`` then never imports aiohttp."""

from __future__ import annotations

from dataclasses import dataclass, field

from dataplane.http_front.connections import ConnectionLimits
from dataplane.openai_api.request_keys import DEFAULT_KEY_HEADERS


@dataclass(frozen=True)
class FrontConfig:
    """Options of the front (``python -m dataplane --help``: the ``--http-*`` flags)."""

    listen: str = "127.0.0.1:0"
    max_body_bytes: int = 16 * 1024 * 1024
    connect_timeout_s: float = 2.0
    first_byte_timeout_s: float = 120.0
    first_byte_floor_s: float = 10.0  # the adaptive timeout's lower bound (first_byte.py)
    key_from_user: bool = False
    model_pools: dict[str, str] = field(default_factory=dict)
    key_headers: tuple[str, ...] = DEFAULT_KEY_HEADERS
    seed: int = 0
    shutdown_timeout_s: float = 5.0  # open responses get this long on stop, then are cut
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)  # connections.py
