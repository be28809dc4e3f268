"""``python -m controlplane``: run one control-plane instance until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

import structlog

from cacheroute_state.embedded import EmbeddedRedisError
from controlplane.config import ControlPlaneConfig, parse_config
from controlplane.server import ControlPlane
from servekit.grpc_server import run_until_signal
from servekit.logging import configure_logging
from servekit.options import SettingsError


async def serve(config: ControlPlaneConfig) -> int:
    plane = ControlPlane(config)
    log = structlog.get_logger("controlplane")
    try:
        await plane.start()
    except (OSError, EmbeddedRedisError) as exc:
        log.error("could not start", error=str(exc))
        await plane.stop()
        return 1
    except BaseException:
        await plane.stop()
        raise
    sig = await run_until_signal(plane.stop)
    log.info("exiting", signal=sig)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(argv)
    except SettingsError as exc:
        print(f"controlplane: error: {exc}", file=sys.stderr)
        return 2
    configure_logging("controlplane", json=config.log_json, level=config.log_level)
    try:
        return asyncio.run(serve(config))
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were set
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
