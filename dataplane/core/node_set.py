"""Membership and a routing table translated into its index space.

Apart from the load view (:mod:`dataplane.core.load_view`) because they change on different
events: a NodeSet and a table's binding to it only when membership or the table changes, the
loads on every snapshot and decision. Policies index nodes by position in a NodeSet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dataplane.core.load_columns import membership_digest
from dataplane.core.table import RoutingTable


class NodeSet:
    """Immutable membership: ids and addresses in a fixed index order.

    Policies and load views index nodes by position here; a membership change makes a new
    NodeSet (and policies that cache per-node structures notice by identity).
    """

    __slots__ = ("_digest", "addresses", "ids", "index")

    def __init__(self, ids: Sequence[str], addresses: Sequence[str] | None = None) -> None:
        if len(set(ids)) != len(ids):
            raise ValueError("node ids are not unique")
        if addresses is not None and len(addresses) != len(ids):
            raise ValueError(f"{len(addresses)} addresses for {len(ids)} nodes")
        self.ids: tuple[str, ...] = tuple(ids)
        self.addresses: tuple[str, ...] = tuple(addresses) if addresses else self.ids
        self.index: dict[str, int] = {node: i for i, node in enumerate(self.ids)}
        self._digest = b""

    @property
    def digest(self) -> bytes:
        """:func:`~dataplane.core.load_columns.membership_digest` of this set (computed once)."""
        if not self._digest:
            self._digest = membership_digest(self.ids, self.addresses)
        return self._digest

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"NodeSet({list(self.ids)!r})"


@dataclass(frozen=True, eq=False)
class BoundTable:
    """A routing table with its destinations translated into a NodeSet's index space.

    ``to_node[m]`` is the NodeSet index of table destination ``m``, or -1 when that destination is
    not a member any more (it is then treated like an unhealthy member).
    """

    table: RoutingTable
    nodes: NodeSet
    to_node: tuple[int, ...]

    def destinations(self, key_hash: int) -> list[int] | None:
        """NodeSet indices of a warm key's destination set (-1 for departed members)."""
        members = self.members(key_hash)
        return None if members is None else list(members)

    def members(self, key_hash: int) -> tuple[int, ...] | None:
        """:meth:`destinations` as a tuple the caller must not keep (the hot path's form)."""
        members = self.table.destinations(key_hash)
        if members is None:
            return None
        to_node = self.to_node
        return tuple([to_node[m] for m in members])


def bind_table(table: RoutingTable, nodes: NodeSet) -> BoundTable:
    index = nodes.index
    return BoundTable(table, nodes, tuple(index.get(node, -1) for node in table.node_ids))
