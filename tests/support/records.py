"""Damaging stored records on purpose, on the twin or a real Redis (no tests here)."""

from __future__ import annotations

import redis

from cacheroute_state import memory, schema

KEY = schema.pool_key("default", "active")


def corrupt_pointer(state_url: str, *, wrong_type: bool = False) -> None:
    """Garbage in the pointer record's ``pb`` field (or the key holding a string), as a bad
    restore or a hand edit leaves it."""
    if state_url.startswith(memory.SCHEME):
        memory.memory_state(state_url).hashes[KEY]["pb"] = b"\xff\xff\xff"
        return
    client = redis.Redis.from_url(state_url)
    if wrong_type:
        client.delete(KEY)
        client.set(KEY, b"not a hash")
    else:
        client.hset(KEY, "pb", b"\xff\xff\xff")
    client.close()
