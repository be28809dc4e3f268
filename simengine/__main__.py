"""``python -m simengine``: simulated engines behind an OpenAI-compatible API, until SIGTERM.

One engine per ``--listen`` (repeatable)::

    python -m simengine --listen 127.0.0.1:9100 --listen 127.0.0.1:9101 \\
        --profile llama-3.3-70b-fp8-tp2-h100 --speedup 1

Each engine serves ``/v1/completions``, ``/v1/chat/completions`` (with and without ``stream``),
``/v1/models``, ``/health``, ``/metrics`` (vLLM v1 names plus ``cacheroute_sim_info``) and the
admin ``POST /reset_prefix_cache``. Simulated seconds = wall seconds × ``--speedup``. In
``CACHEROUTE_LISTEN`` several addresses are separated by spaces or ``;``; in a config file
``listen`` may be a list. Bodies may carry ``"cacheroute": {"blocks": [...], "prompt_tokens": N}``
to give a request's exact prefix blocks (docs/components/localcluster.md).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence

import structlog

from servekit.flags import (
    HelpFormatter,
    RepeatedFlag,
    add_log_flags,
    non_negative_float,
    positive_float,
    positive_int,
)
from servekit.grpc_server import wait_for_signal
from servekit.logging import configure_logging
from servekit.settings import SettingsError, add_config_flag, document_env, parse_settings
from sim.engine_model import DEFAULT_PROFILE, PROFILES, get_profile
from simengine.server import EngineOptions, EngineServer, split_listen

log = structlog.get_logger("simengine")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m simengine",
        description="Simulated LLM engines: OpenAI-compatible HTTP, vLLM v1 metrics.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=HelpFormatter,
    )
    add_config_flag(p)
    p.add_argument(
        "--listen",
        action=RepeatedFlag,
        default=[],
        metavar="HOST:PORT",
        help="one engine on this address (repeatable; port 0: any free port, logged)",
    )
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        choices=sorted(PROFILES),
        help=f"engine cost and capacity profile (sim/engine_model.py; default {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--speedup",
        type=positive_float,
        default=1.0,
        help="simulated seconds per wall second (1: real time)",
    )
    p.add_argument(
        "--kv-blocks", type=positive_int, default=None, help="override the profile's KV blocks"
    )
    p.add_argument("--model", default="", help="served model name (default: the profile's name)")
    p.add_argument(
        "--stream-interval",
        type=non_negative_float,
        default=0.0,
        help="wall seconds between streamed chunks of a request (0: one per decode step)",
    )
    add_log_flags(p)
    document_env(p)
    return p


def listen_addresses(value: object) -> list[str]:
    """--listen values from flags (a list), env (a string) or a config file (a string or list)."""
    if isinstance(value, str):
        items = [x for x in re.split(r"[\s;]+", value) if x]
    elif isinstance(value, list):
        items = [str(x) for x in value]
    else:
        raise SettingsError(f"listen: expected HOST:PORT values, got {value!r}")
    if not items:
        raise SettingsError("give at least one --listen HOST:PORT")
    for item in items:
        try:
            split_listen(item)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
    return items


async def serve(listen: Sequence[str], options: EngineOptions) -> int:
    servers = [EngineServer(address, options) for address in listen]
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
    except OSError as exc:
        log.error("could not start an engine", error=str(exc))
        for server in servers:
            await server.stop()
        return 1
    sig = await wait_for_signal()
    log.info("stopping", signal=sig)
    for server in servers:
        await server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parse_settings(parser, argv)
        listen = listen_addresses(args.listen)
    except SettingsError as exc:
        parser.error(str(exc))
    profile = get_profile(args.profile).with_overrides(kv_blocks=args.kv_blocks)
    options = EngineOptions(
        profile=profile,
        model=args.model or profile.name,
        speedup=args.speedup,
        stream_interval_s=args.stream_interval,
    )
    configure_logging("simengine", json=args.log_format == "json", level=args.log_level)
    return asyncio.run(serve(listen, options))


if __name__ == "__main__":
    sys.exit(main())
