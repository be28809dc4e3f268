"""Which entry of a pick served: the gateway's fallbacks reported, the hold moved to the server.

Apart from the stream's state machine (:mod:`dataplane.extproc.stream`): the gateway tries a
pick's endpoints in order, so every entry before the one that served failed to connect, and the
request's load belongs to the node that answered, not to the one first chosen.
"""

from __future__ import annotations

import time

from dataplane.extproc.context import PickerContext
from dataplane.extproc.pick import Pick
from dataplane.requests.holds import Hold


def settle(
    ctx: PickerContext, caller: str, chosen: Pick, pool: str, served: str, hold: Hold | None
) -> tuple[int, Hold | None] | None:
    """The served entry's index and the hold on it; None when the first entry served (or the
    served endpoint is unknown): nothing changes."""
    if not served or served not in chosen.endpoints:
        return None
    index = chosen.endpoints.index(served)
    if index == 0:
        return None
    ids = chosen.view.nodes.ids
    for failed in chosen.nodes[:index]:
        ctx.feedback.report_as(caller, pool, ids[failed], "connect")
    ctx.metrics.fallback()
    if hold is not None:
        ctx.holds.release(hold)
        now = time.time()
        node = chosen.nodes[index]
        chosen.view.record(node, now)
        hold = ctx.holds.take_node(pool, chosen.view, node, now)
    return index, hold
