"""The auth file's format, shared by the control plane (roles) and routers (client names).

YAML, a list of clients: ``{name, role, sha256}`` (``sha256``: the hex SHA-256 of the client's
bearer token, so the file holds no secret) or ``{name, role, subject}`` (an mTLS certificate
subject standing for a token). ``role`` is ``read``, ``write`` or ``agent``; what each may call
is the control plane's business (:mod:`controlplane.services.auth`); a router only names its
``Route`` callers by it (:mod:`dataplane.requests.planning_gate`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import yaml

from servekit.file_modes import writable_by_others

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
QUOTE_LIMIT = 40


def _clip(value: str) -> str:
    return repr(value) if len(value) <= QUOTE_LIMIT else f"{value[:QUOTE_LIMIT]!r}..."


class Role(StrEnum):
    READ = "read"
    WRITE = "write"
    AGENT = "agent"


class AuthFileError(ValueError):
    """An auth file that cannot be used; names the entry and the field."""


@dataclass(frozen=True)
class Client:
    name: str
    role: Role


@dataclass(frozen=True)
class AuthTable:
    """Token hashes and certificate subjects → clients."""

    by_hash: dict[str, Client]
    by_subject: dict[str, Client]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_auth(entries: object) -> AuthTable:
    """Validate the YAML list (module docstring) into an :class:`AuthTable`."""
    if not isinstance(entries, list) or not entries:
        raise AuthFileError("the auth file must be a non-empty YAML list of clients")
    by_hash: dict[str, Client] = {}
    by_subject: dict[str, Client] = {}
    names: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"entry {index}"
        if not isinstance(entry, dict):
            raise AuthFileError(f"{where}: expected a mapping with name, role and sha256/subject")
        unknown = set(entry) - {"name", "role", "sha256", "subject"}
        if unknown:
            raise AuthFileError(f"{where}: unknown field(s) {sorted(unknown)}")
        name = str(entry.get("name") or "").strip()
        if not name or name in names:
            raise AuthFileError(f"{where}: name must be present and unique, got {_clip(name)}")
        names.add(name)
        try:
            role = Role(str(entry.get("role", "")))
        except ValueError:
            raise AuthFileError(f"{where} ({name}): role must be read, write or agent") from None
        client = Client(name, role)
        digest, subject = entry.get("sha256"), entry.get("subject")
        if (digest is None) == (subject is None):
            raise AuthFileError(f"{where} ({name}): give exactly one of sha256 and subject")
        if digest is not None:
            digest = str(digest).lower()
            if not SHA256_HEX.match(digest):
                raise AuthFileError(f"{where} ({name}): sha256 must be 64 hex digits")
            by_hash[digest] = client
        else:
            by_subject[str(subject)] = client
    return AuthTable(by_hash, by_subject)


def load_auth_file(path: Path) -> AuthTable:
    """The table of ``path``; AuthFileError (one line) when unreadable, writable by group or
    others (anyone could add a write-role hash; readable is fine, it holds no secret) or bad."""
    try:
        loose = writable_by_others(path)
        if loose is not None:
            raise AuthFileError(
                f"--auth-file {path}: {loose} lets other users add clients; chmod go-w {path}"
            )
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise AuthFileError(f"--auth-file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise AuthFileError(f"--auth-file {path}: not YAML{at} ({problem})") from None
    try:
        return parse_auth(data)
    except AuthFileError as exc:
        raise AuthFileError(f"--auth-file {path}: {exc}") from None


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The bearer token of ``metadata`` (None: no authorization header; "": not a bearer)."""
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            scheme, _, token = text.strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None
