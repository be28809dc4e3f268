"""The installed version, for every ``--version`` (standard library only: cheap to import)."""

from __future__ import annotations

from importlib import metadata


def package_version() -> str:
    """The ``cacheroute`` distribution's version ("unknown" from a bare source tree)."""
    try:
        return metadata.version("cacheroute")
    except metadata.PackageNotFoundError:
        return "unknown"
