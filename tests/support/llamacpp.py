"""A real engine for tests and the real-engine benchmark: llama.cpp's ``llama-server`` with a tiny
random-weight GGUF model.

The binary comes from ``scripts/build_llamacpp.py`` (cached under the user's cache directory):
:func:`require_binary` finds it for a test (skipped without it, failed under
``CACHEROUTE_REQUIRE_LLAMACPP=1`` as ``.ci/run`` sets, built by the test itself with
``CACHEROUTE_BUILD_LLAMACPP=1``). The model is written at test time with the ``gguf`` package: a
llama-architecture model with random F32 weights (default 2 layers, hidden 128, 4 query heads,
2 KV heads, feed-forward 256, context 4096, ≈ 1.6 MB; the benchmark's is 4 layers, hidden 256)
and a SentencePiece-style vocabulary whose byte-fallback tokens make any UTF-8 text tokenizable
(≈ 1 token per character), plus a ChatML template. Its text is random; tests assert on token
counts, cached tokens and metrics, never on text (requests use temperature 0 and ``ignore_eos``
so that each returns exactly ``max_tokens`` tokens).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import gguf  # a test-only dependency (dev extras)
import numpy as np

from servekit.processes import free_port
from tests.support.scripts import ROOT, load_script, require_built
from tests.support.timing import StartDeadline

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_CTX = 128, 2, 4, 2, 256, 4096
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def cached_binary() -> Path:
    """Where ``scripts/build_llamacpp.py`` keeps the binary for this machine (may not exist)."""
    path: Path = load_script("scripts/build_llamacpp.py").cached_binary()
    return path


def require_binary() -> Path:
    """The cached binary for a test; skips (or fails, or builds) without it (module docstring)."""
    log = ROOT / ".llamacpp-build.log"
    return require_built("scripts/build_llamacpp.py", "LLAMACPP", "llama-server", log)


@dataclass(frozen=True)
class ModelShape:
    layers: int = N_LAYER
    hidden: int = N_EMBD
    feed_forward: int = N_FF
    context: int = N_CTX


# Slow enough per uncached token that a cache hit is visible in TTFT, small enough to load fast.
BENCH_MODEL = ModelShape(layers=4, hidden=256, feed_forward=512, context=8192)


def write_model(path: Path, seed: int = 0, shape: ModelShape = ModelShape()) -> Path:
    """Write the tiny model (module docstring) to ``path``."""
    n_embd, n_layer, n_ff = shape.hidden, shape.layers, shape.feed_forward
    rng = np.random.default_rng(seed)
    tokens: list[bytes] = [b"<unk>", b"<s>", b"</s>", b"<|im_start|>", b"<|im_end|>"]
    types = [2, 3, 3, 3, 3]  # UNKNOWN, CONTROL...
    tokens += [f"<0x{b:02X}>".encode() for b in range(256)]
    types += [6] * 256  # BYTE
    words = [f"\u2581{chr(97 + a)}{chr(97 + b)}" for a in range(26) for b in range(10)]
    tokens += [w.encode() for w in words]
    types += [1] * len(words)  # NORMAL
    n_vocab = len(tokens)
    scores = [0.0] * 261 + [-float(i) for i in range(len(words))]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("cacheroute-tiny")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(n_embd // N_HEAD)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # ALL_F32
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHATML)

    def tensor(name: str, *dims: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(dims) * 0.02).astype(np.float32))

    head_dim = n_embd // N_HEAD
    tensor("token_embd.weight", n_vocab, n_embd)
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    tensor("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        tensor(f"blk.{i}.attn_q.weight", n_embd, n_embd)
        tensor(f"blk.{i}.attn_k.weight", N_HEAD_KV * head_dim, n_embd)
        tensor(f"blk.{i}.attn_v.weight", N_HEAD_KV * head_dim, n_embd)
        tensor(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        tensor(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        tensor(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def start_server(
    binary: Path,
    model: Path,
    port: int,
    log: Path,
    alias: str = "tiny",
    *,
    slots: int = 2,
    context: int = N_CTX,
    ram_cache_mib: int = 64,
    threads: int = 1,
) -> subprocess.Popen[bytes]:
    """``llama-server`` on 127.0.0.1:``port`` with metrics: ``slots`` slots sharing ``context``
    tokens, ``threads`` threads, a RAM prompt cache of ``ram_cache_mib`` (0: none)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
             "--metrics", "-c", str(context), "-np", str(slots), "-t", str(threads),
             "-cram", str(ram_cache_mib), "--no-webui", "--alias", alias],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc


def wait_healthy(
    port: int,
    proc: subprocess.Popen[bytes],
    timeout_s: float = 60.0,
    *,
    deadline: StartDeadline | None = None,
) -> None:
    """Until the engine answers /health: ``timeout_s`` seconds of the machine's time, or as long
    as ``deadline`` says (tests/support/timing.py)."""
    if deadline is None:
        with StartDeadline(timeout_s) as own:
            return wait_healthy(port, proc, deadline=own)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if deadline.expired():
            raise RuntimeError(f"llama-server on {port} not healthy in {deadline.describe()}")
        time.sleep(0.05)


def metrics_page(address: str) -> str:
    """The engine's ``/metrics`` text."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text: str = reply.read().decode()
    return text


def prompt_counters(address: str) -> tuple[float, float]:
    """(cached, processed) prompt tokens so far, from the engine's own counters."""
    values: dict[str, float] = {}
    for line in metrics_page(address).splitlines():
        name, _, value = line.partition(" ")
        if name in ("llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"):
            values[name] = float(value)
    return values["llamacpp:prompt_tokens_cached_total"], values["llamacpp:prompt_tokens_total"]


def complete(address: str, prompt: str, max_tokens: int = 4) -> dict[str, int]:
    """One non-streamed ``/v1/completions`` request; its usage (prompt and cached tokens)."""
    body = {
        "model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True,
    }  # fmt: skip
    request = urllib.request.Request(
        f"http://{address}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        usage = json.loads(reply.read())["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return {"prompt": int(usage["prompt_tokens"]), "cached": int(details.get("cached_tokens", 0))}


# The capture's requests: two prefixes, each asked twice, so the page shows real cache hits.
CAPTURE_PROMPTS = tuple(
    f"{context} shared by every question of this tenant. " * 6 + f"question {q}"
    for context in ("Billing context", "Shipping context")
    for q in (1, 2)
)


def capture_page(binary: Path, work: Path) -> tuple[str, dict[str, int]]:
    """A fresh ``/metrics`` page of the real binary after :data:`CAPTURE_PROMPTS` (one slot, no
    RAM cache), and what the answers' usage said in total (``prompt``, ``cached`` tokens)."""
    port = free_port()
    proc = start_server(
        binary, write_model(work / "capture.gguf"), port, work / "capture.log", slots=1,
        ram_cache_mib=0,
    )  # fmt: skip
    try:
        wait_healthy(port, proc)
        truth = {"prompt": 0, "cached": 0}
        for prompt in CAPTURE_PROMPTS:
            usage = complete(f"127.0.0.1:{port}", prompt)
            truth = {k: truth[k] + usage[k] for k in truth}
        return metrics_page(f"127.0.0.1:{port}"), truth
    finally:
        proc.terminate()
        proc.wait(timeout=10)
