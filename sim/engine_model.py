"""Engine profiles and the step-time model of one destination (CALIBRATION.md §1).

One engine step runs the prefill chunks scheduled in it and one decode token for every running
request that is past its prefill. Its duration is

    prefill part (only when the step holds prefill chunks), summed over the chunks i:
        c0 + Σ_i [ a·new_i + s·seq_i + d·new_i·seq_i ]      new = uncached tokens of the chunk,
                                                             seq = context through the chunk end
    decode part (only when requests are decoding):
        t_w + k·Σ_j context_j

The prefill terms are Preble's fitted 70B TP2 H100 formula (WukLab/preble ``model_equations.py``)
applied per chunk, with the per-token coefficient ``a`` refitted to NIM's fp8 measurement (the
Preble fit is for a bf16 engine); the decode terms are the NIM inter-token latency at concurrency
1 and CALIBRATION's per-context-token growth. The other two profiles are derived from the 70B one
by model shape, precision and GPU count; each profile's ``derivation`` says how.

Scheduling knobs are vLLM V1's defaults for the OpenAI server on ≥ 70 GiB GPUs other than A100
(``EngineArgs.get_batch_defaults`` in ``vllm/engine/arg_utils.py``): 8,192 batched tokens per step,
1,024 running sequences.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from sim.types import BLOCK_TOKENS


class UnknownProfileError(ValueError):
    """An engine profile name that is not in :data:`PROFILES`."""


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """Cost and capacity of one destination. Times in milliseconds, capacity in 16-token blocks."""

    name: str
    kv_blocks: int
    prefill_overhead_ms: float  # c0: once per step that holds any prefill
    prefill_ms_per_token: float  # a: per uncached token
    prefill_ms_per_context: float  # s: per context token of a prefill chunk (KV reads)
    prefill_ms_per_token_context: float  # d: per uncached token x context token (attention)
    decode_base_ms: float  # t_w: once per step that holds decoding requests (weight reads)
    decode_ms_per_context: float  # k: per context token of each decoding request
    max_batched_tokens: int = 8192  # chunked-prefill budget per step (decode tokens count too)
    max_running: int = 1024  # max_num_seqs
    block_tokens: int = BLOCK_TOKENS
    derivation: str = ""
    ttft_offset_ms: float = 0.0  # constant added to every TTFT (a harness's own latency)

    def prefill_chunk_ms(self, new: int, seq: int) -> float:
        """Cost of one chunk of ``new`` uncached tokens ending at context length ``seq``."""
        return new * (self.prefill_ms_per_token + self.prefill_ms_per_token_context * seq) + (
            self.prefill_ms_per_context * seq
        )

    def step_ms(self, prefill_ms: float, decoding: int, decode_context: int) -> float:
        """Duration of a step whose chunks cost ``prefill_ms`` (sum of :meth:`prefill_chunk_ms`)."""
        total = 0.0
        if prefill_ms > 0.0:
            total += self.prefill_overhead_ms + prefill_ms
        if decoding:
            total += self.decode_base_ms + self.decode_ms_per_context * decode_context
        return total

    def slowed(
        self, factor: float, ttft_offset_ms: float, *, name: str, note: str
    ) -> EngineProfile:
        """Every step-time coefficient × ``factor``, plus a constant TTFT offset (calibration)."""
        if not factor > 0 or ttft_offset_ms < 0:
            raise ValueError(f"factor must be > 0 and offset >= 0, got {factor}, {ttft_offset_ms}")
        return replace(
            self,
            name=name,
            prefill_overhead_ms=self.prefill_overhead_ms * factor,
            prefill_ms_per_token=self.prefill_ms_per_token * factor,
            prefill_ms_per_context=self.prefill_ms_per_context * factor,
            prefill_ms_per_token_context=self.prefill_ms_per_token_context * factor,
            decode_base_ms=self.decode_base_ms * factor,
            decode_ms_per_context=self.decode_ms_per_context * factor,
            ttft_offset_ms=ttft_offset_ms,
            derivation=note,
        )

    def with_overrides(
        self,
        *,
        kv_blocks: int | None = None,
        max_batched_tokens: int | None = None,
        max_running: int | None = None,
    ) -> EngineProfile:
        """A copy with capacity or scheduling knobs replaced (``--kv-blocks``, tests)."""
        return replace(
            self,
            kv_blocks=self.kv_blocks if kv_blocks is None else kv_blocks,
            max_batched_tokens=(
                self.max_batched_tokens if max_batched_tokens is None else max_batched_tokens
            ),
            max_running=self.max_running if max_running is None else max_running,
        )


# --- Llama-3.3-70B fp8, TP2 on 2x H100 ---------------------------------------------------------
# Preble's fitted terms (bf16 70B, TP2 H100): c0 = 18.67 ms, s = 0.002685 ms, d = 7.44e-7 ms.
# a: NIM 1.8.0 measured TTFT 406.8 ms for a 5,000-token prompt at concurrency 1. That prompt is
# one 5,000-token chunk (< 8,192), so 406.8 = c0 + 5000·a + s·5000 + d·5000² → a = 0.07122 ms.
_C0_70B = 18.67
_S_70B = 0.002685
_D_70B = 7.44e-7
_A_70B = (406.8 - _C0_70B - _S_70B * 5000 - _D_70B * 5000 * 5000) / 5000
# k: CALIBRATION "+0.055 µs per context token in the batch". t_w: NIM ITL 18.58 ms at
# concurrency 1 with a mean context of 5,250 tokens (5,000 in + half of 500 out).
_K_70B = 0.055e-3
_TW_70B = 18.58 - _K_70B * 5250

LLAMA_70B = EngineProfile(
    name="llama-3.3-70b-fp8-tp2-h100",
    kv_blocks=40_071,
    prefill_overhead_ms=_C0_70B,
    prefill_ms_per_token=_A_70B,
    prefill_ms_per_context=_S_70B,
    prefill_ms_per_token_context=_D_70B,
    decode_base_ms=_TW_70B,
    decode_ms_per_context=_K_70B,
    derivation=(
        "KV 40,071 blocks measured in the CacheRoute paper; c0, s, d from Preble's 70B TP2 H100 "
        "fit; a fitted to NIM TTFT 406.8 ms at 5,000 tokens; t_w from NIM ITL 18.58 ms at "
        "concurrency 1; k = 0.055 µs per context token (CALIBRATION.md §1)"
    ),
)

# --- Llama-3.1-8B bf16, 1x H100 -----------------------------------------------------------------
# CALIBRATION: overhead 5-15 ms (→ 10), ≈ 0.03 ms/token (30-40K tokens/s → 1/35K s = 0.02857 ms),
# decode 6-7 ms at batch ≈ 1 (→ 6.5), +0.05 µs per context token, KV ≈ 435-450K tokens
# (→ 442,400 tokens = 27,650 blocks). Attention terms scale the 70B ones by per-GPU attention
# work: 8B has 32 layers x 32 query heads on one GPU, 70B TP2 80 x 64 / 2 → 1024 / 2560 = 0.4.
_ATTN_8B = (32 * 32) / (80 * 64 / 2)

LLAMA_8B = EngineProfile(
    name="llama-3.1-8b-bf16-h100",
    kv_blocks=27_650,
    prefill_overhead_ms=10.0,
    prefill_ms_per_token=1000.0 / 35_000.0,
    prefill_ms_per_context=_S_70B * _ATTN_8B,
    prefill_ms_per_token_context=_D_70B * _ATTN_8B,
    decode_base_ms=6.5,
    decode_ms_per_context=0.05e-3,
    derivation=(
        "CALIBRATION.md §1 ranges at their midpoints: KV 442,400 tokens, 35K prefill tokens/s, "
        "10 ms overhead, 6.5 ms decode step, 0.05 µs per context token; attention terms = 70B "
        "terms x 0.4 (per-GPU layers x query heads)"
    ),
)

# --- Qwen3-32B bf16, TP2 on 2x H100 ------------------------------------------------------------
# KV: 64 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 256 KiB per token; CALIBRATION's
# ≈ 50 GB free per GPU pair / 262,144 B = 190,735 tokens = 11,920 blocks.
# Prefill per token ∝ parameters / (GPUs x precision speed-up): 32.8B bf16 on 2 GPUs vs 70.6B
# fp8 (2x bf16 tensor throughput) on 2 GPUs → a = a_70B x (32.8 / 70.6) x 2 = 0.929 a_70B,
# ≈ 13.3K tokens/s, between the 70B and the 8B. Decode weight reads ∝ weight bytes per GPU:
# 65.6 GB / 2 vs 70.6 GB / 2 → t_w = t_w,70B x 0.929; k ∝ KV bytes per token: 256 / 320 KiB.
# Attention terms: 64 layers x 64 query heads vs 80 x 64 → 0.8 of the 70B ones.
_LIN_32B = (32.8 / 70.6) * 2.0
_WEIGHTS_32B = 65.6 / 70.6
_ATTN_32B = (64 * 64) / (80 * 64)

QWEN_32B = EngineProfile(
    name="qwen3-32b-bf16-tp2-h100",
    kv_blocks=int(50e9 / (2 * 64 * 8 * 128 * 2)) // BLOCK_TOKENS,
    prefill_overhead_ms=_C0_70B,
    prefill_ms_per_token=_A_70B * _LIN_32B,
    prefill_ms_per_context=_S_70B * _ATTN_32B,
    prefill_ms_per_token_context=_D_70B * _ATTN_32B,
    decode_base_ms=_TW_70B * _WEIGHTS_32B,
    decode_ms_per_context=_K_70B * 256 / 320,
    derivation=(
        "KV = 50 GB free per GPU pair / 256 KiB per token; prefill per token = 70B x 0.929 "
        "(parameters 32.8B vs 70.6B, bf16 at half fp8's tensor throughput); decode base = 70B x "
        "0.929 (weight bytes); k = 70B x 256/320 (KV bytes); attention = 70B x 0.8 (layers)"
    ),
)

# --- the paper's testbed: the 70B profile slowed down, fitted on Flat-LB observations only -------
# The frozen fit (scripts/calibrate_paper.py → sim/calibrated/paper_testbed.json) gives a factor
# on every step-time coefficient and a constant TTFT offset; absent a freeze, no profile.
PAPER_TESTBED_NAME = "paper-testbed"
CALIBRATED_DIR = Path(__file__).parent / "calibrated"
PAPER_TESTBED_FILE = CALIBRATED_DIR / "paper_testbed.json"


def paper_testbed(frozen: dict[str, object] | None = None) -> EngineProfile | None:
    """The ``paper-testbed`` profile from the frozen calibration (or ``frozen``), if any."""
    if frozen is None:
        if not PAPER_TESTBED_FILE.is_file():
            return None
        frozen = json.loads(PAPER_TESTBED_FILE.read_text())
    engine = frozen["engine"]
    assert isinstance(engine, dict)
    return LLAMA_70B.slowed(
        float(engine["slowdown"]),
        float(engine["ttft_offset_ms"]),
        name=PAPER_TESTBED_NAME,
        note=(
            f"llama-3.3-70b-fp8-tp2-h100 x {float(engine['slowdown']):g} on every step-time "
            f"coefficient + {float(engine['ttft_offset_ms']):g} ms TTFT offset, fitted on the "
            "paper's Flat-LB observations only (sim/calibrated/paper_testbed.json)"
        ),
    )


_TESTBED = paper_testbed()
PROFILES: dict[str, EngineProfile] = {
    p.name: p for p in (LLAMA_70B, LLAMA_8B, QWEN_32B, _TESTBED) if p is not None
}
DEFAULT_PROFILE = LLAMA_70B.name


def get_profile(name: str) -> EngineProfile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(PROFILES)
        raise UnknownProfileError(f"unknown engine profile {name!r}; known: {known}") from None
