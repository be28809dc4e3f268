"""A router without ``--http-listen`` (a Route server, an Endpoint Picker) does not load aiohttp:
about 0.2 s of CPU on every start, which a picker replica restarting under load pays again."""

from __future__ import annotations

import subprocess
import sys

from tests.support.scripts import ROOT

PROBE = """
import sys
import dataplane.__main__, dataplane.extproc.native_bridge, dataplane.extproc.service
from dataplane.options.builder import config_from
print(sorted(m for m in sys.modules if m == "aiohttp" or m.startswith("aiohttp.")))
"""


def test_the_routers_entry_point_and_picker_import_no_aiohttp() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_http_front_still_brings_it_when_it_starts() -> None:
    probe = "import sys, dataplane.http_front.app; print('aiohttp.web' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.stdout.strip() == "True", out.stderr
