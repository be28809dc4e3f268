"""``python -m simengine``: simulated engines behind an OpenAI-compatible API, until SIGTERM.

One engine per ``--listen`` (repeatable)::

    python -m simengine --listen 127.0.0.1:9100 --listen 127.0.0.1:9101 \\
        --profile llama-3.3-70b-fp8-tp2-h100 --speedup 1

Each engine serves ``/v1/completions``, ``/v1/chat/completions`` (with and without ``stream``),
``/v1/models``, ``/health``, ``/metrics`` (vLLM v1 names plus ``cacheroute_sim_info``) and the
admin ``POST /reset_prefix_cache``. Simulated seconds = wall seconds × ``--speedup``. In
``CACHEROUTE_LISTEN`` several addresses are separated by spaces or ``;``; in a config file
``listen`` may be a list. Bodies may carry ``"cacheroute": {"blocks": [...], "prompt_tokens": N}``
to give a request's exact prefix blocks (docs/components/localcluster.md). ``--kv-events-port``
publishes each engine's KV-cache events as vLLM does (ZMQ PUB + replay ROUTER).
"""

from __future__ import annotations

from servekit.blas import limit_blas_threads
from servekit.startup_gc import freeze_startup, pause_for_startup

limit_blas_threads()  # first: numpy, imported below, reads it once
if __name__ == "__main__":
    pause_for_startup()  # until the server serves (servekit/startup_gc.py)

import argparse
import asyncio
import sys
from collections.abc import Sequence

import structlog

from servekit.flags import (
    LOG_FORMAT,
    LOG_LEVEL,
    add_version_flag,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from servekit.logging import configure_logging
from servekit.options import Option, OptionSet, SettingsError, list_option
from servekit.signals import wait_for_signal
from sim.engine_model import DEFAULT_PROFILE, PROFILES, get_profile
from simengine.server import EngineOptions, EngineServer, split_listen

log = structlog.get_logger("simengine")

LISTEN = list_option(
    "listen",
    "one engine on this address (repeatable; port 0: any free port, logged)",
    split_listen,
    metavar="HOST:PORT",
)
PROFILE = Option(
    "profile", DEFAULT_PROFILE, str,
    "engine cost and capacity profile (sim/engine_model.py)", choices=tuple(sorted(PROFILES)),
)  # fmt: skip
SPEEDUP = Option("speedup", 1.0, positive_float, "simulated seconds per wall second (1: real time)")
KV_BLOCKS: Option[int | None] = Option(
    "kv_blocks", None, positive_int, "override the profile's KV blocks"
)
MODEL = Option("model", "", str, "served model name (empty: the profile's name)")
STREAM_INTERVAL = Option(
    "stream_interval", 0.0, non_negative_float,
    "wall seconds between streamed chunks of a request (0: one per decode step)",
)  # fmt: skip
KV_EVENTS_PORT: Option[int | None] = Option(
    "kv_events_port", None, non_negative_int,
    "publish vLLM KV-cache events: engine i on PORT+2i, its replay socket on PORT+2i+1 "
    "(0: free ports, logged)", shown_default="off",
)  # fmt: skip
OPTIONS = OptionSet(
    LISTEN, PROFILE, SPEEDUP, KV_BLOCKS, MODEL, STREAM_INTERVAL, KV_EVENTS_PORT, LOG_FORMAT,
    LOG_LEVEL,
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = OPTIONS.parser(
        prog="python -m simengine",
        description="Simulated LLM engines: OpenAI-compatible HTTP, vLLM v1 metrics.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    add_version_flag(parser)
    return parser


def listen_addresses(value: object) -> list[str]:
    """--listen values from flags (a list), env (a string) or a config file (a string or list)."""
    items = LISTEN.convert(value, "listen")
    if not items:
        raise SettingsError("give at least one --listen HOST:PORT")
    return items


async def serve(listen: Sequence[str], options: EngineOptions) -> int:
    servers = [EngineServer(address, options, index=i) for i, address in enumerate(listen)]
    try:
        for server in servers:
            await server.start()
            log.info(
                "engine serving",
                url=server.url,
                model=options.model,
                profile=options.profile.name,
                kv_blocks=options.profile.kv_blocks,
                speedup=options.speedup,
            )
            if server.kv_events is not None:
                log.info(
                    "kv events publishing",
                    url=server.url,
                    endpoint=server.kv_events.endpoint,
                    replay_endpoint=server.kv_events.replay_endpoint,
                )
    except OSError as exc:
        log.error("could not start an engine", error=str(exc))
        for server in servers:
            await server.stop()
        return 1
    freeze_startup()  # what start-up built lives as long as the process
    sig = await wait_for_signal()
    log.info("stopping", signal=sig)
    for server in servers:
        await server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = OPTIONS.parse(parser, argv)
        listen = listen_addresses(LISTEN.value(args))
    except SettingsError as exc:
        parser.error(str(exc))
    profile = get_profile(PROFILE.value(args)).with_overrides(kv_blocks=KV_BLOCKS.value(args))
    options = EngineOptions(
        profile=profile,
        model=MODEL.value(args) or profile.name,
        speedup=SPEEDUP.value(args),
        stream_interval_s=STREAM_INTERVAL.value(args),
        kv_events_port=KV_EVENTS_PORT.value(args),
    )
    configure_logging(
        "simengine", json=LOG_FORMAT.value(args) == "json", level=LOG_LEVEL.value(args)
    )
    return asyncio.run(serve(listen, options))


if __name__ == "__main__":
    sys.exit(main())
