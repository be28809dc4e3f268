"""A retry's second destination: the next member of the key's set, else power-of-two choices.

The first destination is the router's own decision (``Router.route``, the pool's policy). When it
fails before the first byte, the retry goes to the least-loaded other eligible member of the
key's destination set in the active table; when there is none (a cold key, no table, or every
other member down), to the less loaded of two random other eligible nodes. The failed node is
excluded even if its load snapshot still calls it healthy.
"""

from __future__ import annotations

import random

from dataplane.core.load_view import LoadView


def alternate(view: LoadView, key_hash: int, failed: int, rng: random.Random) -> int | None:
    """The retry's node index in ``view``, or None when no other node is eligible."""
    loads = view.loads
    table = view.table
    if table is not None:
        members = table.destinations(key_hash) or ()
        others = [m for m in members if m != failed and view.is_eligible(m)]
        if others:
            return min(others, key=lambda m: loads[m])
    eligible = [n for n in view.eligible_nodes if n != failed]
    if not eligible:
        return None
    if len(eligible) == 1:
        return eligible[0]
    a, b = rng.sample(eligible, 2)
    return a if loads[a] <= loads[b] else b
