"""Build the simulator's prefix KV cache in C (``sim._prefix_cache``) next to its Python twin.

    .venv/bin/python scripts/build_sim_native.py [--require] [--quiet]

One ``cc -O2`` call (≈ 2 s) compiles ``native/simcache/prefix_cache.c`` into
``sim/_prefix_cache<EXT_SUFFIX>``, in the source tree as ``pip install -e`` puts any extension
module (the file is ignored by git). The source's SHA-256 is compiled in, and
:mod:`sim.cache_impl` loads the module only when that digest is the current source's, so an
edited source is never served by a stale build; this script rebuilds only then. ``make demo`` and
``make test`` run it first. Without a C compiler or Python's headers it says so and exits 0: the
simulator then runs the Python class, the same answers at about half the speed. ``--require``
(CI) makes that an error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from sim.cache_impl import SOURCE, native_path, source_digest  # noqa: E402

FLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-DNDEBUG")


def _say(text: str, *, quiet: bool = False) -> None:
    if not quiet:
        print(f"build_sim_native: {text}", file=sys.stderr, flush=True)


def built_digest(path: Path) -> str | None:
    """The source digest compiled into ``path``, read without importing it (None: no file)."""
    if not path.exists():
        return None
    marker = b"cacheroute-source-digest:"
    data = path.read_bytes()
    at = data.find(marker)
    if at < 0:
        return None
    return data[at + len(marker) : at + len(marker) + 64].decode("ascii", "replace")


def build(target: Path) -> None:
    """Compile the source into ``target`` (written beside it, then renamed into place)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise OSError("no C compiler (cc or gcc) on PATH")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        raise OSError(f"Python's headers are missing ({include}/Python.h)")
    digest = source_digest()
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so.tmp", delete=False) as out:
        partial = Path(out.name)
    command = [compiler, *FLAGS, f"-I{include}", f'-DSOURCE_DIGEST="{digest}"',
               str(SOURCE), "-o", str(partial)]  # fmt: skip
    try:
        subprocess.run(command, check=True, stdout=sys.stderr)
        partial.replace(target)  # atomic: a running simulator keeps the file it mapped
    finally:
        partial.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--require", action="store_true", help="fail when it cannot be built")
    parser.add_argument("--quiet", action="store_true", help="say nothing when it is up to date")
    args = parser.parse_args()
    target = native_path()
    if built_digest(target) == source_digest():
        _say(f"{target.relative_to(ROOT)} is up to date", quiet=args.quiet)
        return 0
    try:
        build(target)
    except (OSError, subprocess.CalledProcessError) as exc:
        _say(f"NOT BUILT ({exc}); the simulator runs its Python cache instead")
        return 1 if args.require else 0
    _say(f"built {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
