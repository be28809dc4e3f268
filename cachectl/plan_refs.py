"""Where a plan argument points: a plan file, or a version stored in the control plane.

Every ``plan`` command that reads a plan (``show``, ``route``, ``diff``) takes either, as the
user has it at hand (issue 34: ``route`` and ``diff`` took only one kind): an argument naming an
existing file is that file, anything else is a stored version looked up with ``--target``. A
miss says both: no such file, and what the control plane said about the version.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cachectl.admin_client import TARGET_ENV, AdminError, connect
from cachectl.errors import CliError
from cachectl.plan_offline import read_plan
from cacheroute.v1 import admin_pb2
from dataplane.core.names import VERSION_PATTERN
from dataplane.core.table import RoutingTable, TableError
from dataplane.core.table_codec import table_from_proto


def plan_file(ref: str) -> Path | None:
    """The plan file ``ref`` names, or None when no such path exists (a stored version id)."""
    path = Path(ref)
    if path.is_file():
        return path
    if path.exists():
        raise CliError(f"{ref}: not a plan file")
    return None


def fetch_plan(
    args: argparse.Namespace, request: admin_pb2.GetPlanRequest
) -> admin_pb2.GetPlanResponse:
    """``GetPlan`` for a version the user typed where a plan file could have been, with errors
    that name both readings."""
    version = request.version
    if not VERSION_PATTERN.match(version):
        raise CliError(f"{version}: no such plan file (nor a plan version: p + 16 hex digits)")
    with connect(args) as client:
        try:
            return client.call(client.plans.GetPlan, request)
        except AdminError as exc:
            if exc.code.name == "NOT_FOUND":
                raise CliError(
                    f"{version}: no such plan file, and the control-plane at {client.address} "
                    f"has no stored version {version} in pool {request.pool or 'default'} "
                    "(`cachectl plan list` shows the stored ones)"
                ) from None
            if exc.code.name == "UNAVAILABLE":
                raise CliError(
                    f"{version}: no such plan file, and no control-plane answered at "
                    f"{client.address} to look it up as a stored version (is it running? "
                    f"--target or ${TARGET_ENV})"
                ) from None
            raise


def stored_table(args: argparse.Namespace, version: str) -> RoutingTable:
    """The whole table of a stored version."""
    request = admin_pb2.GetPlanRequest(
        pool=getattr(args, "pool", "") or "", version=version, top_keys=1, include_table=True
    )
    answer = fetch_plan(args, request)
    try:
        return table_from_proto(answer.table)
    except TableError as exc:
        raise CliError(f"{version}: the stored table is not valid: {exc}") from None


def read_table(args: argparse.Namespace, ref: str) -> RoutingTable:
    """The plan ``ref`` names: a file (fully validated), else a stored version."""
    path = plan_file(ref)
    return read_plan(path) if path is not None else stored_table(args, ref)
