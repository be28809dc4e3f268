"""What ``cachectl sim``'s flags mean: values checked and turned into a workload and settings.

Apart from :mod:`cachectl.sim_cmd` (the handlers) so every flag's rule and error message is read
in one place; a bad value is a :class:`CliError` that names the flag.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from cachectl.errors import CliError
from dataplane.core.policies.registry import POLICIES
from sim import presets
from sim.calibration import single_destination_knee
from sim.engine_model import EngineProfile, UnknownProfileError, get_profile
from sim.planning import placement_of
from sim.study import STEADY_WARMUP_S, RunSettings
from sim.types import Workload
from sim.workloads.registry import make_workload


def parse_floats(flag: str, text: str) -> tuple[float, ...]:
    """Comma-separated positive numbers (``--slo``, ``--ladder``)."""
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CliError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise CliError(f"{flag}: expected positive numbers, got {text!r}")
    return values


def parse_ints(flag: str, text: str) -> tuple[int, ...]:
    """Comma-separated integers, at least one (``--seeds``)."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CliError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values:
        raise CliError(f"{flag}: expected at least one integer")
    return values


def check_positive(flag: str, value: float | None) -> None:
    """A value, when given, is > 0."""
    if value is not None and not value > 0:
        raise CliError(f"{flag}: must be > 0, got {value}")


def check_policies(flag: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Every name is a registered policy; returns the names."""
    for name in names:
        if name not in POLICIES:
            raise CliError(f"{flag}: unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return names


def _profile(args: argparse.Namespace, preset: presets.Preset) -> EngineProfile:
    try:
        profile = get_profile(args.profile or preset.profile)
    except UnknownProfileError as exc:
        raise CliError(f"--profile: {exc}") from None
    check_positive("--kv-blocks", args.kv_blocks)
    return profile.with_overrides(kv_blocks=args.kv_blocks)


def option_value(text: str) -> Any:
    """``--option`` values: an int, a float, else the string itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_workload(args: argparse.Namespace, preset: presets.Preset) -> Workload:
    """The workload from the registry, with the preset's options and the command's overrides."""
    options: dict[str, Any] = dict(preset.options)
    if args.top_k is not None:
        options["top_k"] = args.top_k
    if args.trace is not None:
        options["path"] = args.trace
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--option: expected NAME=VALUE, got {item!r}")
        options[name] = option_value(value)
    try:
        return make_workload(args.workload, **options)
    except (ValueError, TypeError, OSError) as exc:
        raise CliError(f"--workload {args.workload}: {exc}") from None


def run_settings(
    args: argparse.Namespace,
    preset: presets.Preset,
    workload: Workload,
    policies: tuple[str, ...],
    abort_above_s: float | None,
) -> RunSettings:
    """The run's settings from the flags, the preset and (when a placement needs it) q_cap."""
    for flag in (
        "duration", "plan_window", "timeout", "snapshot_ms", "q_cap", "knee_slo", "tree_sync_ms",
    ):  # fmt: skip
        check_positive("--" + flag.replace("_", "-"), getattr(args, flag))
    if args.warmup is not None and not 0 <= args.warmup < args.duration:
        raise CliError(f"--warmup: must be in [0, --duration), got {args.warmup}")
    for flag, value in (("--nodes", args.nodes), ("--routers", args.routers)):
        if value is not None and value < 1:
            raise CliError(f"{flag}: must be >= 1, got {value}")
    if args.slots < 0:
        raise CliError(f"--slots: must be >= 0, got {args.slots}")
    profile = _profile(args, preset)
    warmup = min(STEADY_WARMUP_S, args.duration / 5) if args.warmup is None else args.warmup
    prewarm = _prewarm(args.prewarm)
    q_cap = args.q_cap
    if q_cap is None and any(placement_of(p) is not None for p in policies):
        started = time.perf_counter()
        q_cap = single_destination_knee(workload, profile, slo_s=args.knee_slo).q_cap
        print(
            f"q_cap = {q_cap:.3f} req/s (single-destination knee at p99 <= {args.knee_slo:g} s,"
            f" measured in {time.perf_counter() - started:.1f} s)",
            file=sys.stderr,
        )
    return RunSettings(
        profile=profile,
        q_cap=q_cap or 1.0,
        nodes=args.nodes or preset.nodes,
        routers=args.routers,
        duration_s=args.duration,
        warmup_s=warmup,
        plan_window_s=args.plan_window,
        slots_per_node=args.slots,
        snapshot_interval_s=args.snapshot_ms / 1000.0,
        timeout_s=args.timeout,
        abort_above_s=abort_above_s,
        prewarm_s=prewarm,
        cache_outputs=not args.no_output_cache,
        front=args.front,
        echo_tokens=not args.no_session_echo,
        tree_sync_s=None if args.tree_sync_ms is None else args.tree_sync_ms / 1000.0,
        policy_params=_policy_params(args.policy_param),
    )


def _policy_params(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--policy-param POLICY.NAME=VALUE`` items as {policy: {name: value}}, names checked."""
    params: dict[str, dict[str, Any]] = {}
    for item in items:
        target, sep, value = item.partition("=")
        policy, dot, name = target.partition(".")
        if not sep or not dot or not policy or not name:
            raise CliError(f"--policy-param: expected POLICY.NAME=VALUE, got {item!r}")
        check_policies("--policy-param", (policy,))
        params.setdefault(policy, {})[name] = option_value(value)
    for policy, values in params.items():
        try:
            POLICIES[policy](**values)
        except (TypeError, ValueError) as exc:
            raise CliError(f"--policy-param {policy}: {exc}") from None
    return params


def _prewarm(text: str) -> float | None:
    """``--prewarm``: ``auto`` (the convergence check) or seconds >= 0."""
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"--prewarm: expected 'auto' or seconds, got {text!r}") from None
    if not value >= 0:
        raise CliError(f"--prewarm: must be >= 0 seconds, got {text!r}")
    return value
