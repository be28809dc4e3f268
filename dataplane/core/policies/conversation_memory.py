"""This router's memory of where each conversation's last turn went: bounded, two generations.

A conversation whose turn spilled (its member was over the load bound) has its newest history on
the spill node; with no token echoed, rendezvous hashing alone sends the next turn back to its
member, which lacks that turn. The router that made the spill remembers it and follows it, as an
echoed token would. Other routers, which never saw the conversation, still agree on its member
(the memory refines the shared rule; it never replaces it).

Memory is bounded: entries go into the *current* generation; once it holds ``capacity // 2``
entries it becomes the *previous* one and the older previous generation is dropped, so at most
``capacity`` entries are kept and a conversation seen within the last ``capacity // 2`` decisions
is always found (an approximate LRU with two dict operations per decision).
"""

from __future__ import annotations


class ConversationMemory:
    """conversation hash XOR key hash → NodeSet index of its last decision (module docstring).

    The key is part of the entry: two tenants whose chats open with the same turn are two
    conversations, and one must not follow the other's node."""

    __slots__ = ("_current", "_half", "_previous", "nodes_id")

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"conversation memory needs capacity >= 2, got {capacity}")
        self._half = capacity // 2
        self._current: dict[int, int] = {}
        self._previous: dict[int, int] = {}
        self.nodes_id = 0  # id() of the NodeSet the indices refer to (0: none yet)

    def get(self, conversation: int) -> int:
        """The node of the conversation's last decision, or -1."""
        found = self._current.get(conversation)
        if found is None:
            found = self._previous.get(conversation, -1)
        return found

    def put(self, conversation: int, node: int) -> None:
        current = self._current
        if len(current) >= self._half and conversation not in current:
            self._previous = current
            current = self._current = {}
        current[conversation] = node

    def clear(self, nodes_id: int) -> None:
        """Forget everything (node indices refer to another NodeSet from now on)."""
        self._current, self._previous = {}, {}
        self.nodes_id = nodes_id

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)
