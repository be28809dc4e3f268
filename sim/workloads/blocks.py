"""Fast deterministic synthetic block ids for simulated prompts.

The simulator compares prompts only through ``SimRequest.blocks``: equal leading ids mean an equal
cached prefix. Real routers hash prompt *bytes* (``dataplane.core.keys.prompt_blocks``, BLAKE2b); a
simulated prompt has no bytes, so its block ids are **synthetic**: integers mixed with splitmix64
from an abstract description of the content. They are never compared with key hashes or with
``prompt_blocks`` output, and BLAKE2b per block would be ~50x too slow for a capacity study that
generates millions of blocks per run.

Two builders cover every workload:

* :func:`segment_blocks` for synthetic prompts described as a sequence of *segments* (template,
  context, retrieved block, history turns, current turn), each an opaque content id and a length in
  tokens. The id of the block ending at token ``e`` identifies the prefix ``[0, e)`` exactly: it
  chains the (id, length) of every earlier segment, then the id of the segment holding token
  ``e - 1`` and the offset of ``e`` inside it. Two prompts therefore share block ``i`` exactly when
  it ends at the same token in both and all tokens up to there are the same, whatever the segment
  lengths are (a segment boundary need not fall on a block boundary, as in a real prompt).
* :func:`sub_blocks` for traces whose ids cover coarser blocks (Mooncake 512 tokens, Claude Code
  64): each coarse id, already a prefix identity, is split into 16-token sub-block ids
  ``mix(coarse, j)``, which keeps prefix equality.

Every output id is masked to 63 bits so it also fits a signed int64 array.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from sim.gc_pause import gc_paused
from sim.types import BLOCK_TOKENS

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

ID_MASK = (1 << 63) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_U64_MASK = (1 << 64) - 1


def splitmix64(x: npt.ArrayLike) -> U64:
    """The splitmix64 finaliser, elementwise on uint64 (a bijection with good avalanche)."""
    z = np.asarray(x, dtype=np.uint64) + np.uint64(_GOLDEN)  # a new array: updated in place below
    z ^= z >> np.uint64(30)
    z *= np.uint64(_M1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_M2)
    z ^= z >> np.uint64(31)
    return z


def mix(parent: npt.ArrayLike, value: npt.ArrayLike) -> U64:
    """Chain ``value`` onto ``parent``: ``splitmix64(parent ^ splitmix64(value))``."""
    return splitmix64(np.asarray(parent, dtype=np.uint64) ^ splitmix64(value))


def _splitmix64_int(x: int) -> int:
    z = (x + _GOLDEN) & _U64_MASK
    z = ((z ^ (z >> 30)) * _M1) & _U64_MASK
    z = ((z ^ (z >> 27)) * _M2) & _U64_MASK
    return z ^ (z >> 31)


def mix_int(parent: int, value: int) -> int:
    """Scalar :func:`mix` on Python ints (for namespaces and tags); equal to ``mix``."""
    return _splitmix64_int((parent & _U64_MASK) ^ _splitmix64_int(value & _U64_MASK))


def segment_blocks(seg_ids: U64, seg_lens: I64, req_seg_start: I64) -> tuple[U64, I64]:
    """Block ids of requests made of segments (see the module docstring).

    ``seg_ids``/``seg_lens`` list every request's segments back to back; request ``r`` owns
    ``[req_seg_start[r], req_seg_start[r + 1])``. Segment lengths must be >= 1 (an empty segment
    would change ids without changing content). Returns the flat block ids and, per request, the
    start of its blocks (length ``n + 1``); request ``r`` has ``ceil(tokens_r / 16)`` blocks.
    """
    n_seg = len(seg_ids)
    counts = np.diff(req_seg_start)
    pos = np.arange(n_seg, dtype=np.int64) - np.repeat(req_seg_start[:-1], counts)
    # inner[s] identifies "the segments before s, then s's content": the block ending at offset o
    # of s is mix(inner[s], o). after[s] = mix(inner[s], len_s) is the prefix through the end of s
    # (equal to the id of a block ending exactly there) and is the parent of the next segment.
    inner = np.zeros(n_seg, dtype=np.uint64)
    after = np.zeros(n_seg, dtype=np.uint64)
    order = np.argsort(pos, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(pos, minlength=1))))
    for k in range(len(bounds) - 1):
        idx = order[bounds[k] : bounds[k + 1]]
        parent = after[idx - 1] if k else np.zeros(len(idx), dtype=np.uint64)
        inner[idx] = mix(parent, seg_ids[idx])
        after[idx] = mix(inner[idx], seg_lens[idx].astype(np.uint64))

    seg_end = np.cumsum(seg_lens)
    tok_base = np.concatenate(([0], seg_end))[req_seg_start]  # request r: tokens [base_r, base_r+1)
    n_blocks = -(-np.diff(tok_base) // BLOCK_TOKENS)
    req_block_start = np.concatenate(([0], np.cumsum(n_blocks))).astype(np.int64)
    # Global end token of every block: base + 16 (i + 1), the last one clipped to the request end.
    shift = np.repeat(tok_base[:-1] - BLOCK_TOKENS * req_block_start[:-1], n_blocks)
    glob = BLOCK_TOKENS * np.arange(1, int(req_block_start[-1]) + 1, dtype=np.int64) + shift
    nonempty = n_blocks > 0
    glob[req_block_start[1:][nonempty] - 1] = tok_base[1:][nonempty]
    seg = np.searchsorted(seg_end, glob, side="left")
    offset = glob - (seg_end - seg_lens)[seg]
    # mix(inner[seg], offset), with splitmix64(offset) looked up: offsets are small.
    offset_hash = splitmix64(np.arange(int(seg_lens.max(initial=0)) + 1, dtype=np.uint64))
    return splitmix64(inner[seg] ^ offset_hash[offset]), req_block_start


def sub_blocks(coarse: U64, coarse_start: I64, tokens: I64, coarse_tokens: int) -> tuple[U64, I64]:
    """Split coarse prefix-identity ids into 16-token sub-block ids.

    Request ``r`` owns coarse ids ``coarse[coarse_start[r]:coarse_start[r + 1]]`` and has
    ``tokens[r]`` prompt tokens, so ``ceil(tokens[r] / 16)`` sub-blocks; sub-block ``k`` is
    ``mix(coarse[k // per], k % per)`` with ``per = coarse_tokens // 16``. Sub-blocks past the
    coarse ids (a trailing partial coarse block the trace gives no id for) must be handled by the
    caller before: here every sub-block needs a coarse id.
    """
    per = coarse_tokens // BLOCK_TOKENS
    n_blocks = -(-tokens // BLOCK_TOKENS)
    have = np.diff(coarse_start) * per
    if np.any(n_blocks > have):
        raise ValueError("a request has more 16-token blocks than its coarse ids cover")
    req_block_start = np.concatenate(([0], np.cumsum(n_blocks))).astype(np.int64)
    local = np.arange(req_block_start[-1], dtype=np.int64) - np.repeat(
        req_block_start[:-1], n_blocks
    )
    parent = coarse[np.repeat(coarse_start[:-1], n_blocks) + local // per]
    sub_hash = splitmix64(np.arange(per, dtype=np.uint64))  # mix(parent, j) with j looked up
    return splitmix64(parent ^ sub_hash[local % per]), req_block_start


def to_tuples(ids: U64, req_block_start: I64) -> list[tuple[int, ...]]:
    """Per-request tuples of 63-bit Python ints (what ``SimRequest.blocks`` holds)."""
    flat = (ids & np.uint64(ID_MASK)).tolist()
    starts = req_block_start.tolist()
    with gc_paused():
        return [tuple(flat[a:b]) for a, b in itertools.pairwise(starts)]
