"""A request's conversation identity, derived alike by every router from the request alone.

Conversation affinity (:mod:`dataplane.core.policies.cacheroute_conversation`) needs an id that is
the same on every turn of one conversation and differs between conversations, with no token to
echo and no state shared between routers. In order:

1. a session header the client already sends: ``x-session-id`` (llm-d), ``x-claude-code-session-id``
   (Claude Code), ``x-dynamo-session-id`` (NVIDIA Dynamo); its first :data:`MAX_SESSION_ID`
   characters;
2. the Responses API's ``conversation`` (a string or ``{"id": ...}``);
3. the **first turn**: a chat's messages up to and including the first ``user`` message (the
   Responses API's ``instructions`` and ``input`` items alike), hashed. Every later turn of an
   OpenAI-style conversation re-sends them unchanged, and two conversations with one system prompt
   differ in their first user message;
4. else none (``""``): a completions or embeddings prompt has no turn structure, and a Responses
   request that continues with ``previous_response_id`` does not carry its first turn. The
   policy then treats the request as its own conversation (the request id).

Whether the request *opens* its conversation (:func:`opens_conversation`) is read from the same
body: a chat's ``messages`` (a Responses request's ``input`` items) with no ``assistant``,
``tool`` or ``function`` message, and no ``previous_response_id``. Anything else, and any body
without turn structure, is not known to open one (False): the default policy then keeps the
conversation's own, looser, bound.

The id is ``"h:"`` + the header's value, ``"c:"`` + the conversation, or ``"m:"`` + the CRC-32 and
the byte length of the first turn rendered as :mod:`.prompts` renders messages, in hex (the whole
first turn: a long shared system prompt in front of it must not hide the user message). CRC-32
runs at several GB/s where BLAKE2b took ~6 µs for a 4 KiB turn; an id is an affinity hint, not a
secret, and two conversations that collide only share a member.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from dataplane.openai_api.prompts import content_text

SESSION_HEADERS = ("x-session-id", "x-claude-code-session-id", "x-dynamo-session-id")
MAX_SESSION_ID = 256


def conversation_id(body: Mapping[str, Any], headers: Mapping[str, str], endpoint: str) -> str:
    """The request's conversation identity, or "" when it has none (module docstring)."""
    for name in SESSION_HEADERS:
        value = _text(headers.get(name))
        if value:
            return ("h:" + value)[:MAX_SESSION_ID]
    if endpoint == "chat":
        return _first_turn(body.get("messages"), "")
    if endpoint == "responses":
        named = body.get("conversation")
        if isinstance(named, dict):
            named = named.get("id")
        if isinstance(named, str) and named:
            return ("c:" + _text(named))[:MAX_SESSION_ID]
        if body.get("previous_response_id"):
            return ""
        instructions = body.get("instructions")
        head = f"system: {instructions}\n" if isinstance(instructions, str) and instructions else ""
        given = body.get("input")
        if isinstance(given, str):
            given = [{"role": "user", "content": given}]
        return _first_turn(given, head)
    return ""


EARLIER_TURN_ROLES = frozenset(("assistant", "tool", "function"))
EARLIER_TURN_ITEMS = frozenset(("function_call", "function_call_output", "reasoning"))  # Responses


def opens_conversation(body: Mapping[str, Any], endpoint: str) -> bool:
    """True when the request's prompt holds no earlier turn (module docstring)."""
    if endpoint == "chat":
        messages = body.get("messages")
    elif endpoint == "responses":
        if body.get("previous_response_id"):
            return False
        messages = body.get("input")
        if isinstance(messages, str):
            return True
    else:
        return False
    if not isinstance(messages, list) or not messages:
        return False
    for message in messages:
        if not isinstance(message, dict):
            return False
        role = message.get("role", "")
        if role in EARLIER_TURN_ROLES or message.get("type") in EARLIER_TURN_ITEMS:
            return False
    return True


def _first_turn(messages: object, head: str) -> str:
    """``"m:"`` + the CRC-32 and length of the messages up to the first user message, or ""."""
    if not isinstance(messages, list):
        return ""
    data = head.encode("utf-8", "surrogatepass")
    crc, size = zlib.crc32(data), len(data)
    for message in messages:
        if not isinstance(message, dict):
            return ""
        role = message.get("role", "")
        data = f"{role}: {content_text(message.get('content'))}\n".encode("utf-8", "surrogatepass")
        crc, size = zlib.crc32(data, crc), size + len(data)
        if role == "user":
            return f"m:{crc:08x}{size:x}"
    return ""


def _text(value: object) -> str:
    """A header or field value that a message can carry (valid UTF-8), else ""."""
    if not isinstance(value, str):
        return ""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return ""
    return value
