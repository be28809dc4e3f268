"""Bounded strings and repeated fields in every admin request and agent report.

A 50 MB ``error`` string in one agent report stayed in Redis after the agent left and was read
again four times a second; nothing bounded any text or list a client sent. :func:`check_bounds`
walks a message (nested messages included) and refuses, naming the field, a string longer than
``max_text`` characters or a repeated field with more than ``max_items`` entries. Message size
limits (:mod:`servekit.rpc_guard`) bound the bytes; this bounds what is stored and re-read.
ImportPlan's table is exempt (its own size limit; the codec checks it as a whole).
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

MAX_TEXT = 4096
MAX_ITEMS = 10_000
MAX_DEPTH = 8


def _is_map(field: FieldDescriptor) -> bool:
    kind = field.message_type
    return kind is not None and bool(kind.GetOptions().map_entry)


class BoundsError(ValueError):
    """A field over its bound; the message names it."""


def check_bounds(
    message: Message,
    *,
    max_text: int = MAX_TEXT,
    max_items: int = MAX_ITEMS,
    exempt: frozenset[str] = frozenset(),
    _prefix: str = "",
    _depth: int = 0,
) -> None:
    """Raise :class:`BoundsError` for the first field over its bound (module docstring)."""
    if _depth > MAX_DEPTH:
        raise BoundsError(f"{_prefix.rstrip('.') or 'message'}: nested too deeply")
    for field, value in message.ListFields():
        name = f"{_prefix}{field.name}"
        if name in exempt:
            continue
        repeated = field.is_repeated
        values = list(value) if repeated else [value]
        if repeated and len(values) > max_items:
            raise BoundsError(f"{name}: {len(values)} entries; at most {max_items}")
        if field.type == FieldDescriptor.TYPE_STRING:
            for text in values:
                if len(text) > max_text:
                    raise BoundsError(f"{name}: {len(text)} characters; at most {max_text}")
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not _is_map(field):
            for index, item in enumerate(values):
                where = f"{name}[{index}]." if repeated else f"{name}."
                check_bounds(
                    item, max_text=max_text, max_items=max_items, exempt=exempt,
                    _prefix=where, _depth=_depth + 1,
                )  # fmt: skip
        elif field.type == FieldDescriptor.TYPE_MESSAGE and len(value) > max_items:
            raise BoundsError(f"{name}: {len(value)} entries; at most {max_items}")
