"""The churn-aware replanner's working placement: keep, place, repair, revert.

:mod:`controlplane.core.replanner` decides what to try and which plan to keep; this module is the
mutable state those steps share (sets, per-destination warm loads, membership) and the moves on
it. Split out because the moves are a concept of their own: each keeps the loads and the
membership index consistent, and the repair's search lives beside the state it searches.
"""

from __future__ import annotations

import heapq

import numpy as np

from dataplane.core.table import RoutingTable

REPAIR_TARGETS = 8  # least-loaded destinations considered per repair move


def kept_members(
    previous: RoutingTable, node_ids: list[str], hashes: np.ndarray
) -> list[list[int]]:
    """Per admitted key: its previous members still in the pool (new indices), [] if new."""
    index = {node: i for i, node in enumerate(node_ids)}
    remap = np.array([index.get(n, -1) for n in previous.node_ids], dtype=np.int64)
    result: list[list[int]] = [[] for _ in range(hashes.shape[0])]
    if previous.num_keys == 0 or hashes.shape[0] == 0:
        return result
    rows = np.searchsorted(previous.key_hashes, hashes)
    rows = np.minimum(rows, previous.num_keys - 1)
    found = np.flatnonzero(previous.key_hashes[rows] == hashes)
    offsets = previous.set_offsets.astype(np.int64)
    members = remap[previous.set_members.astype(np.int64)]
    starts, ends = offsets[rows[found]].tolist(), offsets[rows[found] + 1].tolist()
    for j, a, b in zip(found.tolist(), starts, ends, strict=True):
        result[j] = [m for m in members[a:b].tolist() if m >= 0]
    return result


class Placement:
    """Sets, per-destination warm loads and membership while the replan is assembled."""

    def __init__(self, rates: list[float], replicas: list[int], weights: list[float]) -> None:
        self.rates = rates
        self.replicas = replicas
        self.weights = weights
        self.load = [0.0] * len(weights)
        self.sets: list[list[int]] = [[] for _ in rates]
        self.on_node: list[set[int]] = [set() for _ in weights]
        self.prefer_small = True  # among sufficient moves, the smallest replica (else: lowest peak)

    def share(self, key: int) -> float:
        return self.rates[key] / self.replicas[key]

    def assign(self, key: int, members: list[int]) -> None:
        share = self.share(key)
        self.sets[key] = members
        for r in members:
            self.load[r] += share
            self.on_node[r].add(key)

    def keep(self, kept: list[list[int]]) -> list[int]:
        """Step 2; returns the keys left for step 3 (new or incomplete), in admission order."""
        rest = []
        for key, live in enumerate(kept):
            k = self.replicas[key]
            if len(live) >= k:
                chosen = live
                if len(live) > k:
                    chosen = sorted(live, key=lambda r: (self.load[r] / self.weights[r], r))[:k]
                self.assign(key, sorted(chosen))
            else:
                rest.append(key)
        return rest

    def place(self, keys: list[int], kept: list[list[int]]) -> None:
        """Step 3: LPT over the remaining keys, completing kept partial sets."""
        w = self.weights
        heap = [(load / w[r], r) for r, load in enumerate(self.load)]
        heapq.heapify(heap)
        for key in keys:
            members = list(kept[key])
            skipped = []
            while len(members) < self.replicas[key]:
                entry = heapq.heappop(heap)
                if entry[1] in members:
                    skipped.append(entry)
                else:
                    members.append(entry[1])
            share = self.share(key)
            for r in members:
                self.load[r] += share
                self.on_node[r].add(key)
            for r in members[len(kept[key]) :]:
                heapq.heappush(heap, (self.load[r] / w[r], r))
            for entry in skipped:
                heapq.heappush(heap, entry)
            # kept members' entries are stale-low: refresh them
            if kept[key]:
                heap = [(load / w[r], r) for r, load in enumerate(self.load)]
                heapq.heapify(heap)
            self.sets[key] = sorted(members)

    def _move(self, key: int, source: int, dest: int, changed: set[int]) -> None:
        share = self.share(key)
        self.load[source] -= share
        self.load[dest] += share
        self.on_node[source].discard(key)
        self.on_node[dest].add(key)
        self.sets[key] = sorted([r for r in self.sets[key] if r != source] + [dest])
        changed.add(key)

    def _best_move(
        self,
        top: int,
        norm: np.ndarray,
        targets: list[int],
        changed: set[int],
        limit: float,
        budget: int,
    ) -> tuple[int, int, float, int, int] | None:
        """(new churn, insufficient, score, key, dest) of the best single move off ``top``.

        Among moves of equal churn, one that brings both destinations within ``limit`` wins
        (the smallest such replica: it disturbs the least), else the one lowering the pair's
        peak most."""
        w = self.weights
        best: tuple[int, int, float, int, int] | None = None
        spare = budget - len(changed)
        for key in self.on_node[top]:
            if spare <= 0 and key not in changed:
                continue
            share = self.share(key)
            for dest in targets:
                if dest == top or dest in self.sets[key]:
                    continue
                peak = max(norm[top] - share / w[top], norm[dest] + share / w[dest])
                if peak >= norm[top]:
                    continue
                enough = peak <= limit
                rank = (
                    int(key not in changed),
                    int(not enough),
                    share if enough and self.prefer_small else peak,
                    key,
                    dest,
                )
                if best is None or rank < best:
                    best = rank
        return best

    def _best_swap(
        self, top: int, norm: np.ndarray, targets: list[int], changed: set[int], budget: int
    ) -> tuple[int, float, int, int, int] | None:
        """(new churn, peak, key on top, dest, key on dest) of the best exchange, if one helps:
        a replica too large to move alone trades places with a smaller one."""
        w = self.weights
        best: tuple[int, float, int, int, int] | None = None
        for key in self.on_node[top]:
            share = self.share(key)
            for dest in targets:
                if dest == top or dest in self.sets[key]:
                    continue
                for other in self.on_node[dest]:
                    delta = share - self.share(other)
                    if delta <= 0 or top in self.sets[other]:
                        continue
                    peak = max(norm[top] - delta / w[top], norm[dest] + delta / w[dest])
                    cost = int(key not in changed) + int(other not in changed)
                    if len(changed) + cost > budget:
                        continue
                    rank = (cost, peak, key, dest, other)
                    if peak < norm[top] and (best is None or rank < best):
                        best = rank
        return best

    def revert(
        self, limit: float, tail: list[float], kept: list[list[int]], changed: set[int]
    ) -> None:
        """Undo repair moves that later moves made unnecessary: a changed key whose previous
        (complete) set fits again within ``limit`` goes back to it, largest replicas first."""
        w = self.weights
        for key in sorted(changed, key=lambda k: -self.share(k)):
            old = sorted(kept[key])
            if len(old) != self.replicas[key] or self.sets[key] == old:
                continue
            share = self.share(key)
            leave = [r for r in self.sets[key] if r not in old]
            enter = [r for r in old if r not in self.sets[key]]
            if all((self.load[r] + tail[r] + share) / w[r] <= limit for r in enter):
                for r in leave:
                    self.load[r] -= share
                    self.on_node[r].discard(key)
                for r in enter:
                    self.load[r] += share
                    self.on_node[r].add(key)
                self.sets[key] = old

    def repair(
        self,
        limit: float,
        tail: list[float],
        changed: set[int],
        max_moves: int,
        budget: int | None = None,
    ) -> int:
        """Step 4; returns the number of moves and exchanges made. ``budget``: the most keys
        ``changed`` may hold (moves of keys already changed are free)."""
        cap = len(self.rates) if budget is None else budget
        w = self.weights
        moves = 0
        while moves < max_moves:
            norm = np.array([(a + t) / x for a, t, x in zip(self.load, tail, w, strict=True)])
            top = int(norm.argmax())
            if norm[top] <= limit:
                break
            targets = np.argsort(norm, kind="stable")[:REPAIR_TARGETS].tolist()
            move = self._best_move(top, norm, targets, changed, limit, cap)
            if move is not None:
                self._move(move[3], top, move[4], changed)
            else:
                swap = self._best_swap(top, norm, targets, changed, cap)
                if swap is None:
                    break
                _, _, key, dest, other = swap
                self._move(key, top, dest, changed)
                self._move(other, dest, top, changed)
            moves += 1
        return moves
