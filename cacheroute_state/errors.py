"""The state stores' error types, one tree, so a caller can catch what it can handle.

::

    StoreError
    ├── StoreUnavailableError   the backing store cannot be reached (callers degrade, then retry)
    ├── PlanNotFoundError       no such plan version in the pool
    ├── ConflictError           compare-and-set lost: the pointer moved (carries the current one)
    ├── CorruptRecordError      a stored record does not decode (names it; also a DecodeError)
    └── PlanMismatchError       a version id already stored with different content
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from cacheroute.v1 import cluster_pb2


class StoreError(Exception):
    """Base of the store's errors."""


class StoreUnavailableError(StoreError):
    """The store could not be reached or timed out."""


class PlanNotFoundError(StoreError):
    """The plan version does not exist in the pool."""


class ConflictError(StoreError):
    """The active pointer is not at the expected generation any more."""

    def __init__(self, message: str, current: cluster_pb2.ActivePointer | None) -> None:
        super().__init__(message)
        self.current = current


class CorruptRecordError(StoreError, DecodeError):
    """A stored record that does not decode. ``record`` names its key; ``generation`` is what
    its generation field holds (0 when unreadable), so a move can overwrite it (also a
    DecodeError: readers that keep what they hold on a bad record keep doing so)."""

    def __init__(self, record: str, generation: int, detail: str) -> None:
        super().__init__(f"record {record} is corrupt ({detail}); overwrite it with a rollout, "
                         "a rollback or `cachectl plan disable`")  # fmt: skip
        self.record = record
        self.generation = generation


class PlanInUseError(StoreError):
    """A plan that may not be deleted: the active version or the rollback target."""


class PlanMismatchError(StoreError):
    """A version id is already stored with other content (a hash collision or a forged id)."""
