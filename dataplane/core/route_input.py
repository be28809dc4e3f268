"""RouteRequest → the router's domain input, or :class:`InvalidRequestError` naming the field.

Validation is the servicer's first step and the only place that reads the wire message, so the
router itself (:mod:`dataplane.core.router`) only ever sees checked input:

* ``pool``: empty means "default"; otherwise ``^[a-z0-9][a-z0-9_.-]{0,62}$`` (the store schema).
* ``key``: 1-512 UTF-8 bytes, not starting with "~" (derived keys own that prefix). Empty: the key
  is derived from ``model``, ``cache_salt`` and ``prompt_prefix`` (``keys.derive_key``), and
  ``prompt_prefix`` is then required.
* prefix blocks: ``prefix_blocks`` when given (at most :data:`MAX_PREFIX_BLOCKS`, the rest is
  ignored: a leading run is still a valid prefix), else the chained 64-byte blocks of
  ``prompt_prefix``. They are computed only when asked for (:meth:`RouteInput.blocks`), since only
  the prefix-history policies and the sampled trace read them and hashing a 4 KiB prompt costs
  ~60 µs.
* bounds (characters): ``request_id`` and ``session_id`` <= :data:`MAX_REQUEST_ID`,
  ``prompt_prefix`` <= :data:`MAX_PROMPT_PREFIX`, ``model`` and ``cache_salt`` <=
  :data:`MAX_LABEL`, at most :data:`MAX_PREFIX_BLOCKS_SENT` ``prefix_blocks``: the request id is
  echoed and stored in the
  sampled trace, and nothing a caller sends may grow the router's memory without bound. Messages
  quote at most a few dozen characters of the offending value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, NoReturn

from cacheroute.v1 import routing_pb2
from dataplane.core.keys import MAX_KEY_BYTES, derive_key, hash_key, prompt_blocks
from dataplane.core.names import DEFAULT_POOL, InvalidNameError, validate_pool

MAX_PREFIX_BLOCKS = 1024
MAX_PREFIX_BLOCKS_SENT = 8 * MAX_PREFIX_BLOCKS
MAX_REQUEST_ID = 256
MAX_PROMPT_PREFIX = 64 * 1024
MAX_LABEL = 512
RESERVED_KEY_PREFIX = "~"


class InvalidRequestError(ValueError):
    """A request that cannot be routed as sent; the message names the field and the rule."""


class RouteInput(NamedTuple):
    """A validated request: the pool, the key actually used and its hash, plus what trails it."""

    pool: str
    key: str
    key_hash: int
    request_id: str
    message: routing_pb2.RouteRequest

    def blocks(self) -> tuple[int, ...]:
        """Chained prefix-block hashes, oldest first (empty when the request has no prefix)."""
        given = self.message.prefix_blocks
        if given:
            return tuple(given[:MAX_PREFIX_BLOCKS])
        prompt = self.message.prompt_prefix
        return prompt_blocks(prompt) if prompt else ()


class PoolNames:
    """Pool-name validation with a cache of names already seen valid (the hot path's fast case).

    The cache is bounded: past ``limit`` names it stops remembering, so a caller cycling through
    random valid names cannot grow it.
    """

    __slots__ = ("_limit", "known")

    def __init__(self, limit: int = 1024) -> None:
        self.known: dict[str, str] = {"": DEFAULT_POOL, DEFAULT_POOL: DEFAULT_POOL}
        self._limit = limit

    def check(self, pool: str) -> str:
        """The pool's canonical name ("" → "default"), or :class:`InvalidRequestError`."""
        name = self.known.get(pool)
        if name is not None:
            return name
        try:
            name = validate_pool(pool)
        except InvalidNameError as exc:
            raise InvalidRequestError(str(exc)) from None
        if len(self.known) < self._limit:
            self.known[pool] = name
        return name


_POOL_NAMES = PoolNames()


class KeyHashes:
    """Hashes of keys seen recently: a hot key skips re-validation and BLAKE2b.

    Bounded: when it holds ``limit`` keys it starts over (an O(1) amortised clear), so a stream
    of distinct keys costs a hash each, as without the cache, and no memory.
    """

    __slots__ = ("_hashes", "_limit")

    def __init__(self, limit: int = 65_536) -> None:
        self._hashes: dict[str, int] = {}
        self._limit = limit

    def get(self, key: str) -> int | None:
        return self._hashes.get(key)

    def put(self, key: str, key_hash: int) -> int:
        hashes = self._hashes
        if len(hashes) >= self._limit:
            hashes.clear()
        hashes[key] = key_hash
        return key_hash


_KEY_HASHES = KeyHashes()
_new = tuple.__new__  # RouteInput(...) without the NamedTuple constructor's frame (hot path)


def parse_request(
    message: routing_pb2.RouteRequest,
    pools: PoolNames = _POOL_NAMES,
    hashes: KeyHashes = _KEY_HASHES,
    wire_size: int | None = None,
) -> RouteInput:
    """Validate one request (see the module docstring).

    ``wire_size``: the message's serialized size when known. A message of at most
    :data:`MAX_REQUEST_ID` bytes cannot have a field over its bound, so the bounds are not read.
    """
    pool = pools.known.get(message.pool) or pools.check(message.pool)
    if (wire_size is None or wire_size > MAX_REQUEST_ID) and (
        len(message.request_id) > MAX_REQUEST_ID
        or len(message.prompt_prefix) > MAX_PROMPT_PREFIX
        or len(message.prefix_blocks) > MAX_PREFIX_BLOCKS_SENT
        or len(message.model) > MAX_LABEL
        or len(message.cache_salt) > MAX_LABEL
        or len(message.session_id) > MAX_REQUEST_ID
    ):
        _too_long(message)
    key = message.key
    if key:
        key_hash = hashes.get(key)  # only valid keys are remembered
        if key_hash is None:
            key_hash = hashes.put(key, hash_key(_checked(key)))
    else:
        prompt = message.prompt_prefix
        if not prompt:
            raise InvalidRequestError(
                "request has no key and no prompt_prefix: set one to route by"
            )
        key = derive_key(message.model, message.cache_salt, prompt)
        key_hash = hash_key(key)
    return _new(RouteInput, (pool, key, key_hash, message.request_id, message))


def _too_long(message: routing_pb2.RouteRequest) -> NoReturn:
    for field, size, limit, unit in (
        ("request_id", len(message.request_id), MAX_REQUEST_ID, "characters"),
        ("prompt_prefix", len(message.prompt_prefix), MAX_PROMPT_PREFIX, "characters"),
        ("prefix_blocks", len(message.prefix_blocks), MAX_PREFIX_BLOCKS_SENT, "blocks"),
        ("model", len(message.model), MAX_LABEL, "characters"),
        ("session_id", len(message.session_id), MAX_REQUEST_ID, "characters"),
        ("cache_salt", len(message.cache_salt), MAX_LABEL, "characters"),
    ):
        if size > limit:
            raise InvalidRequestError(f"{field} has {size} {unit}; the limit is {limit}")
    raise AssertionError("no field over its limit")


def _checked(key: str) -> bytes:
    if key[0] == RESERVED_KEY_PREFIX:
        raise InvalidRequestError(
            f"key must not start with {RESERVED_KEY_PREFIX!r} (reserved for derived keys)"
        )
    data = key.encode("utf-8")
    if len(data) > MAX_KEY_BYTES:
        raise InvalidRequestError(f"key is {len(data)} bytes; the limit is {MAX_KEY_BYTES}")
    return data


def parse_batch(
    messages: Sequence[routing_pb2.RouteRequest],
    limit: int,
    pools: PoolNames = _POOL_NAMES,
    hashes: KeyHashes = _KEY_HASHES,
) -> list[RouteInput]:
    """Validate a whole batch, or raise naming the first bad index (nothing is routed then)."""
    if len(messages) > limit:
        raise InvalidRequestError(f"batch has {len(messages)} requests; the limit is {limit}")
    inputs: list[RouteInput] = []
    append = inputs.append
    for index, message in enumerate(messages):
        try:
            append(parse_request(message, pools, hashes))
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"requests[{index}]: {exc}") from None
    return inputs
