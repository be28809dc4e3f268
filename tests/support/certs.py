"""Test certificates made with the real ``openssl``: a CA, a server and two clients."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certs(tmp: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and two client certificates (by CN)."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", str(tmp / "ca.key"), "-out", str(tmp / "ca.pem"))  # fmt: skip
    paths = {"ca": tmp / "ca.pem"}
    for name, subject, ext in (
        ("server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("agent", "/CN=agents.rack7", "subjectAltName=DNS:agents.rack7"),
        ("ops", "/CN=ops.admin", "subjectAltName=DNS:ops.admin"),
    ):
        key, csr, pem = tmp / f"{name}.key", tmp / f"{name}.csr", tmp / f"{name}.pem"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key),
                 "-out", str(csr))  # fmt: skip
        (tmp / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(tmp / "ca.pem"), "-CAkey",
                 str(tmp / "ca.key"), "-CAcreateserial", "-days", "1", "-out", str(pem),
                 "-extfile", str(tmp / f"{name}.ext"))  # fmt: skip
        paths[name], paths[f"{name}.key"] = pem, key
    return paths
