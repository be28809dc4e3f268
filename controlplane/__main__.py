"""``python -m controlplane``: run one control-plane instance until SIGTERM or SIGINT."""

from __future__ import annotations

from servekit.blas import limit_blas_threads
from servekit.startup_gc import freeze_startup, pause_for_startup

limit_blas_threads()  # first: numpy, imported below, reads it once
if __name__ == "__main__":
    pause_for_startup()  # until the server serves (servekit/startup_gc.py)

import asyncio
import sys
from collections.abc import Sequence

import structlog

from cacheroute_state.embedded import EmbeddedRedisError, stored_password
from controlplane.config import ControlPlaneConfig, parse_config
from controlplane.server import ControlPlane
from servekit.logging import configure_logging
from servekit.options import SettingsError
from servekit.signals import run_until_signal


async def serve(config: ControlPlaneConfig) -> int:
    plane = ControlPlane(config)
    log = structlog.get_logger("controlplane")
    try:
        await plane.start()
        freeze_startup()  # what start-up built lives as long as the process
    except (OSError, EmbeddedRedisError, ValueError) as exc:  # ValueError: the auth file
        log.error("could not start", error=str(exc))
        await plane.stop()
        return 1
    except BaseException:
        await plane.stop()
        raise
    sig = await run_until_signal(plane.stop)
    log.info("exiting", signal=sig)
    return 0


def show_redis_url(config: ControlPlaneConfig) -> int:
    """``python -m controlplane redis-url [options]``: the URL routers use to reach the embedded
    Redis of these options, with its generated password (printed only here, never logged)."""
    data_dir = config.embedded_data_dir()
    password = stored_password(data_dir) if data_dir is not None else None
    host = config.embedded_redis_bind.split()[0]
    host = "HOST" if host in ("0.0.0.0", "::", "*") else host
    secret = f":{password}@" if password else ""
    print(f"redis://{secret}{host}:{config.embedded_redis_port}/0")
    if password is None:
        where = f"stored in {data_dir}" if data_dir is not None else "kept (no data directory)"
        print(f"(no password {where}: loopback-only or not started yet)", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args.pop(0) if args[:1] == ["redis-url"] else ""
    try:
        config = parse_config(args if command else argv)
    except SettingsError as exc:
        print(f"controlplane: error: {exc}", file=sys.stderr)
        return 2
    if command:
        return show_redis_url(config)
    configure_logging("controlplane", json=config.log_json, level=config.log_level)
    try:
        return asyncio.run(serve(config))
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were set
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
