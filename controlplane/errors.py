"""The control plane's domain errors (the store's are in :mod:`cacheroute_state.interfaces`).

Servicers map them to gRPC status codes in :mod:`controlplane.services.rpc`::

    InvalidArgumentError, and the cores' own request errors      INVALID_ARGUMENT
      (InvalidNameError, TableError, PlanError, InvalidReportError,
      InvalidAddressError, UnknownPolicyError, WireError)
    PlanNotFoundError, NodeNotFoundError                         NOT_FOUND
    ConflictError, PreconditionError                             FAILED_PRECONDITION
    PlanMismatchError, NodeIdTakenError                          ALREADY_EXISTS
    StreamSupersededError                                        ABORTED
    ShuttingDownError                                            UNAVAILABLE
    StoreUnavailableError                                        UNAVAILABLE
    NotBuiltError                                                UNIMPLEMENTED
    anything else (a bug, not the caller's fault)                INTERNAL

A bare ``ValueError`` from deep inside (a numpy or parsing slip) is a bug and answers INTERNAL with
a logged traceback; only the domain types above tell the caller to fix the request.
"""

from __future__ import annotations


class InvalidArgumentError(ValueError):
    """The request itself is wrong (a missing field, a value out of range): the caller fixes it."""


class PreconditionError(Exception):
    """The cluster is not in the state a request needs (no nodes, no traffic, no previous plan)."""


class NodeNotFoundError(Exception):
    """No such node in the pool's registry."""


class NotBuiltError(Exception):
    """A feature the API declares but this release does not implement yet."""


class NodeIdTakenError(Exception):
    """Another live agent stream already reports under this node id from another address."""


class StreamSupersededError(Exception):
    """This agent stream no longer owns its node (a newer stream took it over, or it was
    removed)."""


class ShuttingDownError(Exception):
    """This control-plane instance is stopping; the client should reconnect (to another one)."""
