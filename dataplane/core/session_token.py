"""Session tokens: an opaque string naming (pool, node, table generation), with a check.

Every decision of a session-aware policy returns a token (``RouteDecision.session_token``, the
HTTP front's ``x-session-token`` response header, llm-d's convention); a client that echoes it on
the conversation's next turn (``RouteRequest.session_token``, the ``x-session-token`` request
header) asks for the same node. Routers keep no session state: the token carries it.

Format: ``s1.`` + base64url(``pool \\x1f node_id \\x1f generation``) + ``.`` + 8 hex digits of
the project's key hash (:func:`dataplane.core.keys.hash_key`) over ``"session:" + payload``. The
check is an integrity check against corruption and guessing, not a secret: a client can mint a
token for any node, which lets it ask for a node within the load bound and nothing more.

A token is *honoured* only when it parses, its check matches, it names this pool and the table
generation the router serves, and its node is a member; otherwise it is ignored (never an error)
and counted by why (:class:`Ignored`): ``malformed`` (not a token, or a bad check: forged or
corrupted), ``foreign`` (another pool, or a node that is not a member), ``stale`` (another table
generation). The router resolves valid tokens through :class:`SessionTokens`, a map built once
per (pool, membership, generation), so the hot path costs one dict lookup.
"""

from __future__ import annotations

import base64
import binascii
from enum import StrEnum
from typing import NamedTuple

from dataplane.core.keys import hash_key

PREFIX = "s1."
MAX_TOKEN = 512  # characters; longer is malformed without decoding
_SEP = "\x1f"


class Ignored(StrEnum):
    """Why a token sent by a client was not honoured."""

    MALFORMED = "malformed"
    FOREIGN = "foreign"
    STALE = "stale"


class SessionToken(NamedTuple):
    pool: str
    node_id: str
    generation: int


def _check(payload: str) -> str:
    return f"{hash_key('session:' + payload) & 0xFFFFFFFF:08x}"


def encode(pool: str, node_id: str, generation: int) -> str:
    payload = f"{pool}{_SEP}{node_id}{_SEP}{generation}"
    body = base64.urlsafe_b64encode(payload.encode("utf-8")).rstrip(b"=").decode("ascii")
    return f"{PREFIX}{body}.{_check(payload)}"


def decode(token: str) -> SessionToken | None:
    """The token's fields, or None when it is malformed or its check does not match."""
    if len(token) > MAX_TOKEN or not token.startswith(PREFIX):
        return None
    body, dot, check = token[len(PREFIX) :].rpartition(".")
    if not dot or not body:
        return None
    try:
        payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if check != _check(payload):
        return None
    parts = payload.split(_SEP)
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return SessionToken(parts[0], parts[1], int(parts[2]))


class SessionTokens:
    """The valid tokens of one pool under one membership and table generation."""

    __slots__ = ("by_node", "generation", "nodes", "pool")

    def __init__(self, pool: str, node_ids: tuple[str, ...], generation: int) -> None:
        self.pool = pool
        self.generation = generation
        self.by_node = tuple(encode(pool, node, generation) for node in node_ids)
        self.nodes = {token: index for index, token in enumerate(self.by_node)}

    def node(self, token: str) -> int | Ignored:
        """The node index a valid token names, else why it is ignored."""
        index = self.nodes.get(token)
        if index is not None:
            return index
        parsed = decode(token)
        if parsed is None:
            return Ignored.MALFORMED
        if parsed.pool != self.pool:
            return Ignored.FOREIGN
        if parsed.generation != self.generation:
            return Ignored.STALE
        return Ignored.FOREIGN  # a well-formed token of this pool for a node that is not a member
