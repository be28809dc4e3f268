"""A real engine for tests: llama.cpp's ``llama-server`` with a tiny random-weight GGUF model.

The binary comes from ``scripts/build_llamacpp.py`` (cached under the user's cache directory).
The model is written at test time with the ``gguf`` package: a llama-architecture model with
random F32 weights (2 layers, hidden 128, 4 query heads, 2 KV heads, feed-forward 256, context
4096, ≈ 1.6 MB) and a SentencePiece-style vocabulary whose byte-fallback tokens make any UTF-8
text tokenizable (≈ 1 token per character), plus a ChatML template. Its text is random; tests
assert on token counts, cached tokens and metrics, never on text (requests use temperature 0 and
``ignore_eos`` so that each returns exactly ``max_tokens`` tokens).
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import gguf  # a test-only dependency (dev extras)
import numpy as np

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_CTX = 128, 2, 4, 2, 256, 4096
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_model(path: Path, seed: int = 0) -> Path:
    """Write the tiny model (module docstring) to ``path``."""
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
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
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

    def tensor(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    head_dim = N_EMBD // N_HEAD
    tensor("token_embd.weight", n_vocab, N_EMBD)
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    tensor("output.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        tensor(f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD)
        tensor(f"blk.{i}.attn_k.weight", N_HEAD_KV * head_dim, N_EMBD)
        tensor(f"blk.{i}.attn_v.weight", N_HEAD_KV * head_dim, N_EMBD)
        tensor(f"blk.{i}.attn_output.weight", N_EMBD, N_EMBD)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        tensor(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def start_server(
    binary: Path, model: Path, port: int, log: Path, alias: str = "tiny"
) -> subprocess.Popen[bytes]:
    """``llama-server`` on 127.0.0.1:``port`` with metrics, 2 slots, 1 thread, a bounded cache."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
             "--metrics", "-c", str(N_CTX), "-np", "2", "-t", "1", "-cram", "64",
             "--no-webui", "--alias", alias],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"llama-server on {port} not healthy within {timeout_s} s")
        time.sleep(0.05)
