"""Do position encodings extrapolate on real text? Train a byte-level LM at 128, test up to 2048.

The ALiBi paper's Figure 1 (Press et al., 2022) and the Position Interpolation result (Chen et
al., 2023), at a scale two CPU cores allow. Reproduce (``--docs`` rewrites ``docs/extrapolation-text.md``,
``docs/figures/extrapolation_text.{png,json}``; without it they go to ``out/extrapolation_text/`` or ``--out``)::

    nice -n 15 .venv/bin/python examples/extrapolation_text.py --docs   # 31.9 min measured (28.9 + 3.0 for t5), 2 shared cores
    .venv/bin/python examples/extrapolation_text.py --quick --out /tmp/x    # smoke run, seconds
    .venv/bin/python examples/extrapolation_text.py --report-only --docs    # re-render docs/ from its JSON
    nice -n 15 .venv/bin/python examples/extrapolation_text.py --add t5 --docs   # one encoding, merged into the JSON

Corpus: the Python standard library's own top-level ``.py`` files (``sysconfig`` ``stdlib`` path,
``*.py`` directly in it, sorted by name), read as bytes. Split by file: every 10th file in that
order (indices 9, 19, ...) is held out, the rest is training text. The file names, byte counts and
a sha256 of each split are written to the JSON, so a run on another Python can tell it read other
text.

Model (the same for every encoding): a causal byte-level transformer, vocabulary 256,
``flax_posenc.nnx.TransformerInput`` as its input block (``embed_scale = sqrt(dim)``, GPT-2's
0.02 initializer), pre-LayerNorm layers, untied output head. Optimiser: optax AdamW, warmup +
cosine, clip 1.0. Each step draws ``batch`` random windows of ``train_length + 1`` bytes from the
training text on device, inside the ``jax.jit``-ed step.

Encodings, and exactly what each does at evaluation length ``L`` > 128:

``sinusoidal``   ``TransformerInput.from_arguments(position="sinusoidal")``: the formula's vectors at 128..L-1.
``learned``      ``TransformerInput.from_arguments(position="learned", num_positions=128)``: raises
                 ``PositionLimitError`` at trace time under ``jax.jit`` (the row says "error").
``learned+tile`` ``TransformerInput.extend_positions(L, method="tile")``: row ``p mod 128``.
``learned+linear`` ``extend_positions(L, method="linear")``: the 128 rows resampled to span L.
``rope``         ``fp.rotary_cos_sin`` with ``RopeConfig(head_dim)`` then ``fp.apply_rotary`` on q, k.
``rope+PI``      the same trained model, ``rope_type="linear"``, ``factor = L / 128`` (no fine-tune).
``rope+NTK``     ``rope_type="dynamic"``, ``factor = 1``, ``max_position_embeddings = 128``: the
                 base grows as ``(L / 128) ** (d / (d - 2))`` (Hugging Face's dynamic NTK).
``rope+YaRN``    ``rope_type="yarn"``, ``factor = L / 128``, ``original_max_position_embeddings =
                 128``, Hugging Face's defaults (beta_fast 32, beta_slow 1, attention factor).
``rope+PI ft Nx`` the trained RoPE model fine-tuned ``finetune_steps`` more steps at ``N * 128``
                 with ``rope_type="linear", factor = N`` (Chen et al.), then evaluated with that
                 fixed factor at every length; the same number of bytes per step as training.
``rope ft Nx``   the control: the same fine-tune at ``N * 128`` without interpolation.
``alibi``        ``fp.alibi_bias(heads, L)`` added to the scores (it is also the causal mask).
``t5``           ``fp.nnx.RelativePositionBias.from_arguments(heads, bidirectional=False)`` (T5's decoder buckets: 32,
                 max distance 128), one table for every layer, added to the scores; distances from
                 113 on share the last bucket, in training and past it.
``none``         no position encoding (a causal mask still leaks order).

At L <= 128 the scaled RoPE rows use factor 1 (identical to ``rope``). Every model sees the same
held-out bytes at every length: the first ``eval_bytes`` bytes of the held-out text, cut into
non-overlapping windows of ``L`` (the ALiBi paper's non-overlapping evaluation). Reported: bits per
byte (bpb) and perplexity per byte (``2 ** bpb``) over every position of each window, and over
positions 128..L-1 alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import os
import platform
import sys
import sysconfig
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import flax_posenc as fp
from flax_posenc.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # output_folder.py, also when a test imports this file
import output_folder  # noqa: E402

COMMAND = "nice -n 15 .venv/bin/python examples/extrapolation_text.py"
LN2 = math.log(2.0)


@dataclasses.dataclass(frozen=True)
class Config:
    """Every knob of the experiment (the defaults are the published run)."""

    dim: int = 64
    heads: int = 4
    layers: int = 2
    mlp: int = 256
    train_length: int = 128
    batch: int = 16
    steps: int = 300
    lr: float = 3e-3
    warmup: int = 25
    weight_decay: float = 0.01
    seeds: tuple[int, ...] = (0, 1, 2)
    eval_lengths: tuple[int, ...] = (128, 256, 512, 1024, 2048)
    eval_bytes: int = 16384
    eval_batch_bytes: int = 4096  # windows per jitted eval call: eval_batch_bytes // L (at least 1)
    finetune_factors: tuple[int, ...] = (2, 4)
    finetune_steps: int = 150
    finetune_lr: float = 1e-3
    finetune_controls: bool = True  # also fine-tune without interpolation (Chen et al.'s baseline)
    holdout_every: int = 10


# smoke run: every code path, tiny sizes, numbers meaningless except the structure checks
QUICK = Config(
    dim=32,
    heads=2,
    layers=1,
    mlp=64,
    train_length=16,
    batch=8,
    steps=100,
    lr=1e-2,
    warmup=5,
    seeds=(0,),
    eval_lengths=(16, 32),
    eval_bytes=256,
    eval_batch_bytes=256,
    finetune_factors=(2,),
    finetune_steps=3,
)

TRAINED = ("sinusoidal", "learned", "rope", "alibi", "t5", "none")
ROPE_SCALINGS = ("rope", "rope+PI", "rope+NTK", "rope+YaRN")


def variant_names(cfg: Config, encodings=TRAINED) -> list[str]:
    """The table's rows, in order, for the trained ``encodings``."""
    names = ["sinusoidal", "learned", "learned+tile", "learned+linear", *ROPE_SCALINGS]
    for n in cfg.finetune_factors:
        names.append(f"rope+PI ft {n}x")
        if cfg.finetune_controls:
            names.append(f"rope ft {n}x")
    names += ["alibi", "t5", "none"]
    base = {"learned+tile": "learned", "learned+linear": "learned"}
    return [n for n in names if base.get(n, "rope" if n.startswith("rope") else n) in encodings]


# ------------------------------------------------------------------------------------ corpus


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def load_corpus(cfg: Config) -> dict:
    """Training and held-out bytes of the stdlib's top-level ``.py`` files, split by file."""
    files = sorted(stdlib_dir().glob("*.py"))
    if len(files) < 2 * cfg.holdout_every:
        raise FileNotFoundError(f"{stdlib_dir()}: expected the Python standard library's .py files, found {len(files)}")
    train, held = [], []
    for i, path in enumerate(files):
        (held if i % cfg.holdout_every == cfg.holdout_every - 1 else train).append(path)
    train_bytes = b"".join(p.read_bytes() for p in train)
    held_bytes = b"".join(p.read_bytes() for p in held)
    if len(held_bytes) < cfg.eval_bytes + 1:
        raise ValueError(f"held-out text: expected at least {cfg.eval_bytes + 1} bytes, found {len(held_bytes)}")
    return dict(
        train=np.frombuffer(train_bytes, np.uint8),
        held=np.frombuffer(held_bytes, np.uint8),
        info=dict(
            directory=str(stdlib_dir()),
            python=platform.python_version(),
            train_files=[p.name for p in train],
            held_out_files=[p.name for p in held],
            train_bytes=len(train_bytes),
            held_out_bytes=len(held_bytes),
            train_sha256=hashlib.sha256(train_bytes).hexdigest(),
            held_out_sha256=hashlib.sha256(held_bytes).hexdigest(),
        ),
    )


def unigram_bpb(train: np.ndarray, scored: np.ndarray) -> float:
    """Bits per byte of the training text's byte frequencies (add-one) on the ``scored`` bytes."""
    counts = np.bincount(train, minlength=256).astype(np.float64) + 1.0
    logp = np.log2(counts / counts.sum())
    return float(-logp[scored].mean())


# --------------------------------------------------------------------------------- the model


class Block(nnx.Module):
    """Pre-LayerNorm causal layer: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, cfg: Config, *, rngs: nnx.Rngs):
        self.heads, self.head_dim = cfg.heads, cfg.dim // cfg.heads
        self.ln1 = nnx.LayerNorm(cfg.dim, rngs=rngs)
        self.qkv = nnx.Linear(cfg.dim, 3 * cfg.dim, rngs=rngs)
        self.out = nnx.Linear(cfg.dim, cfg.dim, rngs=rngs)
        self.ln2 = nnx.LayerNorm(cfg.dim, rngs=rngs)
        self.up = nnx.Linear(cfg.dim, cfg.mlp, rngs=rngs)
        self.down = nnx.Linear(cfg.mlp, cfg.dim, rngs=rngs)

    def __call__(self, x, bias, rotary):
        b, n, _ = x.shape
        q, k, v = jnp.split(self.qkv(self.ln1(x)).reshape(b, n, 3 * self.heads, self.head_dim), 3, axis=2)
        if rotary is not None:  # (n, head_dim // 2) each, the head axis inserted here
            cos, sin = rotary[0][:, None, :], rotary[1][:, None, :]
            q, k = fp.apply_rotary(q, cos, sin), fp.apply_rotary(k, cos, sin)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.head_dim) + bias
        attn = jax.nn.softmax(scores, axis=-1)
        x = x + self.out(jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, n, -1))
        return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))


class ByteLM(nnx.Module):
    """Causal byte LM; ``encoding`` is one of :data:`TRAINED`."""

    def __init__(self, cfg: Config, encoding: str, *, rngs: nnx.Rngs):
        self.encoding = encoding
        self.heads = cfg.heads
        position = encoding if encoding in ("sinusoidal", "learned") else "none"
        self.embed = fp.nnx.TransformerInput.from_arguments(
            256,
            cfg.dim,
            position=position,
            num_positions=cfg.train_length if position == "learned" else None,
            embed_scale=math.sqrt(cfg.dim),
            rngs=rngs,
            position_name=f"learned table ({cfg.train_length} rows)",
        )
        if encoding == "t5":  # T5's decoder bias: 32 causal buckets up to distance 128, one table for all layers
            causal = fp.RelativeBiasSpec(cfg.heads, fp.BucketConfig(bidirectional=False))
            self.relative_bias = fp.nnx.RelativePositionBias(causal, rngs=rngs)
        self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.layers)])
        self.ln = nnx.LayerNorm(cfg.dim, rngs=rngs)
        self.head = nnx.Linear(cfg.dim, 256, rngs=rngs)

    def __call__(self, tokens, rotary=None):
        """``(batch, n)`` bytes -> ``(batch, n, 256)`` logits; ``rotary``: ``(cos, sin)`` for RoPE."""
        n = tokens.shape[-1]
        x = self.embed(tokens)
        if self.encoding == "alibi":
            bias = fp.alibi_bias(self.heads, n)  # (heads, n, n); the causal mask is in it
        else:
            causal = jnp.tril(jnp.ones((n, n), bool))
            allowed = self.relative_bias(n, n) if self.encoding == "t5" else 0.0
            bias = jnp.where(causal, allowed, jnp.finfo(jnp.float32).min)
        if self.encoding != "rope":
            rotary = None
        for block in self.blocks:
            x = block(x, bias, rotary)
        return self.head(self.ln(x))


def copy_model(model: ByteLM) -> ByteLM:
    """A copy with its own buffers (training donates them, so a shared one would be deleted)."""
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(jnp.copy, state))


def rope_config(cfg: Config, scaling: str, length: int, factor: float | None = None) -> fp.RopeConfig:
    """The RoPE config a row uses at evaluation length ``length``.

    No ``max_position_embeddings`` limit is set (``dynamic`` needs it as its reference length and has
    no limit): the rows measure reading past the trained length, which a limit would refuse.
    """
    head_dim, trained = cfg.dim // cfg.heads, cfg.train_length
    ratio = max(1.0, length / trained)
    if scaling == "rope" or (scaling != "PI-fixed" and ratio == 1.0):
        return fp.RopeConfig(head_dim=head_dim)
    if scaling == "rope+PI":
        return fp.RopeConfig(head_dim=head_dim, rope_type="linear", factor=ratio)
    if scaling == "PI-fixed":
        return fp.RopeConfig(head_dim=head_dim, rope_type="linear", factor=float(factor))
    if scaling == "rope+NTK":
        return fp.RopeConfig(head_dim=head_dim, rope_type="dynamic", factor=1.0, max_position_embeddings=trained)
    if scaling == "rope+YaRN":
        return fp.RopeConfig(
            head_dim=head_dim, rope_type="yarn", factor=ratio, original_max_position_embeddings=trained
        )
    raise ValueError(f"scaling: unknown {scaling!r}")


def rotary_tables(config: fp.RopeConfig, length: int) -> tuple[jax.Array, jax.Array]:
    """``(cos, sin)``, ``(length, head_dim // 2)``, from the library, outside ``jit`` (exact angles)."""
    return fp.rotary_cos_sin(np.arange(length), config, seq_len=length)


# ---------------------------------------------------------------------------------- training


def loss_fn(model: ByteLM, windows, rotary) -> jax.Array:
    logits = model(windows[:, :-1], rotary)
    return optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:]).mean()


@functools.cache
def make_train_step(graphdef, length: int, batch: int, chunk: int, schedule: tuple):
    """A jitted ``(params, opt_state, keys, data, rotary) -> (params, opt_state, losses)``.

    ``jax.jit`` over ``nnx.split``/``nnx.merge``, ``chunk`` optimizer steps per call (a
    ``lax.scan`` over ``keys``: one dispatch per chunk, not per step); each step draws ``batch``
    windows of ``length + 1`` bytes from ``data`` on device. Parameters and optimizer state are
    donated. Cached: the same graph and schedule reuse one compiled step across seeds.
    """
    tx = optimizer(*schedule)

    def one(carry, key):
        params, opt_state, data, rotary = carry
        starts = jax.random.randint(key, (batch,), 0, data.shape[0] - length - 1)
        windows = jax.vmap(lambda s: jax.lax.dynamic_slice(data, (s,), (length + 1,)))(starts).astype(jnp.int32)
        loss, grads = jax.value_and_grad(lambda p: loss_fn(nnx.merge(graphdef, p), windows, rotary))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, data, rotary), loss

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def steps(params, opt_state, keys, data, rotary):
        (params, opt_state, _, _), losses = jax.lax.scan(one, (params, opt_state, data, rotary), keys)
        return params, opt_state, losses

    return steps


def optimizer(steps: int, lr: float, warmup: int, weight_decay: float) -> optax.GradientTransformation:
    """AdamW, linear warmup then cosine decay to lr / 20, global-norm clipping at 1."""
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, steps, end_value=lr / 20)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=weight_decay))


def train(
    model: ByteLM,
    data,
    *,
    steps: int,
    lr: float,
    warmup: int,
    weight_decay: float,
    length: int,
    batch: int,
    rotary,
    seed: int,
    chunk: int = 25,
) -> tuple[ByteLM, list[float]]:
    """``steps`` AdamW steps at ``length``; returns the trained model and the mean loss (bpb) of each chunk."""
    graphdef, params = nnx.split(model)
    schedule = (steps, lr, warmup, weight_decay)
    opt_state = optimizer(*schedule).init(params)
    chunk = min(chunk, steps)
    if steps % chunk:
        raise ValueError(f"steps: expected a multiple of the chunk {chunk}, got {steps}")
    step = make_train_step(graphdef, length, batch, chunk, schedule)
    keys = jax.random.split(jax.random.key(10_000 + seed), steps).reshape(steps // chunk, chunk)
    losses = []
    with Progress(steps, desc=f"seed {seed} length {length}") as bar:
        for i in range(steps // chunk):
            params, opt_state, loss = step(params, opt_state, keys[i], data, rotary)
            losses.append(float(loss.mean()) / LN2)
            bar.update(chunk, bpb=f"{losses[-1]:.3f}")
    return nnx.merge(graphdef, params), losses


# -------------------------------------------------------------------------------- evaluation


@functools.partial(jax.jit, static_argnums=0)
def _position_nll(graphdef, state, windows, rotary):
    """Summed negative log-likelihood (nats) per position over the batch: ``(n,)``."""
    logits = nnx.merge(graphdef, state)(windows[:, :-1], rotary)
    return optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:]).sum(0)


def eval_windows(held: np.ndarray, cfg: Config, length: int) -> np.ndarray:
    """``(eval_bytes // length, length + 1)`` non-overlapping windows of the held-out text."""
    count = cfg.eval_bytes // length
    index = np.arange(count)[:, None] * length + np.arange(length + 1)[None, :]
    return held[index].astype(np.int32)


def position_nll(model: ByteLM, windows: np.ndarray, rotary, cfg: Config) -> np.ndarray:
    """Mean NLL in bits per position, ``(length,)``; raises what the model raises."""
    graphdef, state = nnx.split(model)
    length = windows.shape[1] - 1
    per_call = max(1, cfg.eval_batch_bytes // length)
    total = np.zeros(length)
    for i in range(0, len(windows), per_call):
        total += np.asarray(_position_nll(graphdef, state, jnp.asarray(windows[i : i + per_call]), rotary))
    return total / len(windows) / LN2


def position_bands(cfg: Config, length: int) -> list[tuple[int, int]]:
    """``[0, 128), [128, 256), ...``: position ranges bounded by the evaluation lengths."""
    edges = [0, *sorted(n for n in cfg.eval_lengths if n <= length)]
    return list(zip(edges[:-1], edges[1:]))


def score(curve: np.ndarray, cfg: Config) -> dict:
    """bpb over the whole window, over positions ``train_length..`` alone, and per band of positions."""
    past = curve[cfg.train_length :]
    bands = {f"{a}-{b - 1}": float(curve[a:b].mean()) for a, b in position_bands(cfg, len(curve))}
    return dict(whole=float(curve.mean()), past=float(past.mean()) if past.size else None, bands=bands)


def evaluate_learned(cfg: Config, learned: ByteLM, windows: np.ndarray, out: dict) -> str:
    """The learned table as is (``"error"`` past its rows) and extended by tile / linear interpolation."""
    length, limit_error = windows.shape[1] - 1, ""
    try:
        out["learned"][length] = score(position_nll(learned, windows, None, cfg), cfg)
    except fp.PositionLimitError as e:
        out["learned"][length] = "error"
        limit_error = f"PositionLimitError: {e}"
    for method in ("tile", "linear"):
        model = learned
        if length > cfg.train_length:
            model = copy_model(learned)
            model.embed = learned.embed.extend_positions(length, method=method)
        out[f"learned+{method}"][length] = score(position_nll(model, windows, None, cfg), cfg)
    return limit_error


def evaluate_seed(cfg: Config, models: dict, finetuned: dict, held: np.ndarray) -> tuple[dict, str]:
    """``{variant: {length: {"whole", "past"} | "error"}}`` for one seed, and the learned table's error."""
    out: dict[str, dict] = {name: {} for name in variant_names(cfg, models)}
    limit_error = ""
    for length in cfg.eval_lengths:
        windows = eval_windows(held, cfg, length)
        for name in ("sinusoidal", "alibi", "t5", "none"):
            if name in models:
                out[name][length] = score(position_nll(models[name], windows, None, cfg), cfg)
        if "learned" in models:
            limit_error = evaluate_learned(cfg, models["learned"], windows, out) or limit_error
        for scaling in ROPE_SCALINGS if "rope" in models else ():
            rotary = rotary_tables(rope_config(cfg, scaling, length), length)
            out[scaling][length] = score(position_nll(models["rope"], windows, rotary, cfg), cfg)
        for name, (model, config) in finetuned.items():
            rotary = rotary_tables(config, length)
            out[name][length] = score(position_nll(model, windows, rotary, cfg), cfg)
    return out, limit_error


# ---------------------------------------------------------------------------------------- run


def run_seed(
    cfg: Config, seed: int, train_data, held: np.ndarray, log, encodings=TRAINED
) -> tuple[dict, dict, str, dict]:
    """Train ``encodings`` (and, with RoPE, the fine-tunes) from ``seed``; evaluate; return results,
    losses, timing. Each encoding's run depends only on the seed, never on the others."""
    models, losses, timing = {}, {}, {}
    rotary = rotary_tables(rope_config(cfg, "rope", cfg.train_length), cfg.train_length)
    common = dict(weight_decay=cfg.weight_decay, seed=seed)
    for name in encodings:
        t0 = time.perf_counter()
        model = ByteLM(cfg, name, rngs=nnx.Rngs(seed))
        models[name], losses[name] = train(
            model,
            train_data,
            steps=cfg.steps,
            lr=cfg.lr,
            warmup=cfg.warmup,
            length=cfg.train_length,
            batch=cfg.batch,
            rotary=rotary if name == "rope" else None,
            **common,
        )
        timing[f"train {name}"] = time.perf_counter() - t0
        log(f"seed {seed} trained {name:<11} final loss {losses[name][-1]:.3f} bpb ({timing[f'train {name}']:.1f} s)")
    finetuned = {}
    for n in cfg.finetune_factors if "rope" in models else ():
        length, batch = n * cfg.train_length, max(1, cfg.batch // n)
        kinds = [(f"rope+PI ft {n}x", rope_config(cfg, "PI-fixed", length, factor=n))]
        if cfg.finetune_controls:
            kinds.append((f"rope ft {n}x", rope_config(cfg, "rope", length)))
        for name, config in kinds:
            t0 = time.perf_counter()
            model, losses[name] = train(
                copy_model(models["rope"]),
                train_data,
                steps=cfg.finetune_steps,
                lr=cfg.finetune_lr,
                warmup=max(1, cfg.finetune_steps // 10),
                length=length,
                batch=batch,
                rotary=rotary_tables(config, length),
                **common,
            )
            finetuned[name] = (model, config)
            timing[f"finetune {name}"] = time.perf_counter() - t0
            log(
                f"seed {seed} fine-tuned {name:<14} final loss {losses[name][-1]:.3f} bpb ({timing[f'finetune {name}']:.1f} s)"
            )
    t0 = time.perf_counter()
    results, limit_error = evaluate_seed(cfg, models, finetuned, held)
    timing["evaluate"] = time.perf_counter() - t0
    log(f"seed {seed} evaluated ({timing['evaluate']:.1f} s)")
    return results, losses, limit_error, timing


def summarise(per_seed: list[dict], cfg: Config) -> dict:
    """``{variant: {length: {"whole": stats, "past": stats} | "error"}}``; stats: mean, min, max, seeds."""

    def stats(values):
        return dict(
            mean=float(np.mean(values)),
            min=float(np.min(values)),
            max=float(np.max(values)),
            seeds=[float(v) for v in values],
        )

    summary = {}
    for name in [n for n in variant_names(cfg) if n in per_seed[0]]:
        rows = {}
        for length in cfg.eval_lengths:
            runs = [r[name][str(length)] for r in per_seed]
            if any(r == "error" for r in runs):
                rows[str(length)] = "error"
                continue
            rows[str(length)] = {"whole": stats([r["whole"] for r in runs])}
            if runs[0]["past"] is not None:
                rows[str(length)]["past"] = stats([r["past"] for r in runs])
            rows[str(length)]["bands"] = {
                band: float(np.mean([r["bands"][band] for r in runs])) for band in runs[0]["bands"]
            }
        summary[name] = rows
    return summary


def run(cfg: Config, out: Path, command: str, log=print, encodings=TRAINED, previous: dict | None = None) -> dict:
    """Train and evaluate ``encodings`` for every seed; write the JSON and the report.

    ``previous``: the results of an earlier run with the same config, whose rows are kept (``--add``):
    the new encodings' runs are independent of the old ones, so the merged table is what one run of
    all of them gives.
    """
    start = time.perf_counter()
    corpus = load_corpus(cfg)
    train_data = jnp.asarray(corpus["train"])
    scored = corpus["held"][1 : cfg.eval_bytes + 1]
    per_seed, losses, timing = [], {}, {}
    limit_error = ""
    for seed in cfg.seeds:
        results, seed_losses, error, seed_timing = run_seed(cfg, seed, train_data, corpus["held"], log, encodings)
        limit_error = error or limit_error
        per_seed.append({n: {str(k): v for k, v in r.items()} for n, r in results.items()})
        for k, v in seed_losses.items():
            losses.setdefault(k, []).append(v)
        for k, v in seed_timing.items():
            timing.setdefault(k, []).append(v)
    wall = time.perf_counter() - start
    runs = [dict(encodings=list(encodings), command=command, wall_s=wall)]
    if previous is not None:
        if previous["config"] != json.loads(json.dumps(dataclasses.asdict(cfg))):
            raise ValueError("--add: the saved results were made with another config; run everything instead")
        merged = []
        for old, new in zip(previous["per_seed"], per_seed):
            row = dict(old)
            row.update(new)
            merged.append({n: row[n] for n in variant_names(cfg) if n in row})
        per_seed = merged
        losses = {**previous["losses"], **losses}
        timing = {**{k: [v["mean"]] for k, v in previous["timing_s"].items()}, **timing}
        limit_error = limit_error or previous["limit_error"]
        earlier = previous.get("runs") or [
            dict(
                encodings=[n for n in TRAINED if n in previous["losses"]],
                command=previous["command"],
                wall_s=previous["wall_s"],
            )
        ]
        runs = earlier + runs
        command = previous["command"]
    results = dict(
        command=command,
        wall_s=sum(r["wall_s"] for r in runs),
        runs=runs,
        cores=os.cpu_count(),
        machine=dict(
            platform=platform.platform(),
            processor=platform.machine(),
            jax=jax.__version__,
            backend=jax.default_backend(),
        ),
        config=dataclasses.asdict(cfg),
        corpus=corpus["info"],
        unigram_bpb=unigram_bpb(corpus["train"], scored),
        summary=summarise(per_seed, cfg),
        per_seed=per_seed,
        losses=losses,
        limit_error=limit_error,
        timing_s={k: dict(mean=float(np.mean(v)), max=float(np.max(v))) for k, v in timing.items()},
    )
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "figures" / "extrapolation_text.json").write_text(json.dumps(results, indent=1))
    report(results, out)
    log(
        f"wrote {out / 'extrapolation-text.md'} and {out / 'figures'}/extrapolation_text.{{png,json}} "
        f"in {results['wall_s']:.1f} s"
    )
    return results


# ------------------------------------------------------------------------------------- report

STYLE = {
    "sinusoidal": dict(color="tab:blue", marker="o"),
    "learned": dict(color="tab:orange", marker="X", linestyle="none", ms=9),
    "learned+tile": dict(color="tab:orange", marker="s"),
    "learned+linear": dict(color="tab:brown", marker="s", linestyle="--"),
    "rope": dict(color="tab:green", marker="^"),
    "rope+PI": dict(color="tab:olive", marker="^", linestyle="--"),
    "rope+NTK": dict(color="tab:cyan", marker="^", linestyle="-."),
    "rope+YaRN": dict(color="tab:purple", marker="^", linestyle=":"),
    "alibi": dict(color="tab:red", marker="D"),
    "t5": dict(color="magenta", marker="P"),
    "none": dict(color="gray", marker=".", linestyle=":"),
}
FT_COLORS = ("black", "tab:pink", "darkgoldenrod", "slateblue")


def style(name: str, i: int) -> dict:
    if name in STYLE:
        return STYLE[name]
    return dict(color=FT_COLORS[i % len(FT_COLORS)], marker="v", linestyle="-" if "PI" in name else "--")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    cfg = results["config"]
    summary = results["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for ax, part, title in (
        (axes[0], "whole", "over the whole window"),
        (axes[1], "past", f"over positions {cfg['train_length']}..L-1 alone"),
    ):
        for i, (name, rows) in enumerate(summary.items()):
            pts = [(int(n), r[part]) for n, r in rows.items() if r != "error" and part in r]
            if not pts:
                continue
            xs = [p[0] for p in pts]
            mean = [2 ** p[1]["mean"] for p in pts]
            kw = {"ms": 4, **style(name, i)}
            ax.plot(xs, mean, label=name if part == "whole" else None, lw=1.6, **kw)
            ax.fill_between(
                xs,
                [2 ** p[1]["min"] for p in pts],
                [2 ** p[1]["max"] for p in pts],
                color=style(name, i)["color"],
                alpha=0.15,
                lw=0,
            )
        ax.axhline(
            2 ** results["unigram_bpb"],
            color="k",
            lw=0.8,
            ls=":",
            label="unigram baseline" if part == "whole" else None,
        )
        ax.axvline(cfg["train_length"], color="k", lw=0.6, alpha=0.4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks(cfg["eval_lengths"], [str(n) for n in cfg["eval_lengths"]])
        ax.set_xlabel(f"evaluation length L (bytes); trained at {cfg['train_length']}")
        ax.set_title(f"perplexity per byte {title}")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("perplexity per byte (log; band: min-max over seeds)")
    axes[0].annotate(
        f"learned: PositionLimitError past {cfg['train_length']}",
        (0.02, 0.02),
        xycoords="axes fraction",
        fontsize=8,
        va="bottom",
        color="tab:orange",
    )
    fig.legend(fontsize=8, loc="center right")
    fig.suptitle(
        f"Byte-level LM on Python stdlib source, trained at {cfg['train_length']}, {len(cfg['seeds'])} seed(s)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cell(row, part: str, unit: str) -> str:
    if row == "error":
        return "error"
    if part not in row:
        return "-"
    s = row[part]
    if unit == "ppl":
        return f"{2 ** s['mean']:.2f} ({2 ** s['min']:.2f}-{2 ** s['max']:.2f})"
    return f"{s['mean']:.3f} ({s['min']:.3f}-{s['max']:.3f})"


def table(results: dict, part: str, unit: str) -> str:
    lengths = results["config"]["eval_lengths"]
    trained = results["config"]["train_length"]
    shown = [n for n in lengths if part == "whole" or n > trained]
    lines = ["| encoding | " + " | ".join(f"L={n}" for n in shown) + " |", "|---|" + "---:|" * len(shown)]
    for name, rows in results["summary"].items():
        lines.append(f"| {name} | " + " | ".join(cell(rows[str(n)], part, unit) for n in shown) + " |")
    return "\n".join(lines)


def band_table(results: dict) -> str:
    longest = str(max(results["config"]["eval_lengths"]))
    bands = next(rows[longest]["bands"] for rows in results["summary"].values() if rows[longest] != "error")
    lines = ["| encoding | " + " | ".join(f"pos {b}" for b in bands) + " |", "|---|" + "---:|" * len(bands)]
    for name, rows in results["summary"].items():
        row = rows[longest]
        cells = ["error"] * len(bands) if row == "error" else [f"{row['bands'][b]:.3f}" for b in bands]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(results: dict) -> str:
    """Plain sentences, each computed from the measured numbers (see :func:`markdown`)."""
    cfg, s = results["config"], results["summary"]
    trained, longest = cfg["train_length"], max(cfg["eval_lengths"])
    second = sorted(cfg["eval_lengths"])[1] if len(cfg["eval_lengths"]) > 1 else longest

    def ppl(name, n, part="whole"):
        row = s[name][str(n)]
        return None if row == "error" else 2 ** row[part]["mean"]

    def ratio(name, n=longest, part="whole"):
        return ppl(name, n, part) / ppl(name, trained)

    def spread(name, n, part="whole"):
        row = s[name][str(n)][part]
        return f"{2 ** row['min']:.2f}-{2 ** row['max']:.2f}"

    lines = []
    ranking = sorted((n for n in s if s[n][str(trained)] != "error" and n in TRAINED), key=lambda n: ppl(n, trained))
    lines.append(
        f"- **At the trained length** (L = {trained}) the encodings rank: "
        + ", ".join(f"{n} {ppl(n, trained):.2f}" for n in ranking)
        + f" (unigram baseline {2 ** results['unigram_bpb']:.2f})."
    )
    jump = ppl("sinusoidal", second, "past") / ppl("sinusoidal", trained)
    growth = ppl("sinusoidal", longest, "past") / ppl("sinusoidal", second, "past")
    fails = jump > 1.3 and ppl("sinusoidal", second, "past") > ppl("none", second, "past")
    lines.append(
        f"- **Sinusoidal fails past the trained length** (Press et al.): {'holds' if fails else 'does not hold'} "
        f"here. On positions past {trained} its perplexity is {ppl('sinusoidal', second, 'past'):.2f} at "
        f"L = {second}, {jump:.1f}x its {ppl('sinusoidal', trained):.2f} at L = {trained} and "
        f"{'worse' if fails else 'not worse'} than no position encoding at all "
        f"({ppl('none', second, 'past'):.2f}). **That it blows up as L grows** "
        f"{'holds' if growth > 1.5 else 'does not hold'}: at L = {longest} it is "
        f"{ppl('sinusoidal', longest, 'past'):.2f} ({growth:.2f}x the L = {second} value); the failure is "
        f"{'a climb' if growth > 1.5 else 'a step at the trained length, then a plateau, not the climb of the paper'}."
    )
    past_lengths = [n for n in cfg["eval_lengths"] if n > trained]
    rope_curve = [ppl("rope", n, "past") for n in past_lengths]
    steady = all(b > a for a, b in zip(rope_curve, rope_curve[1:]))
    lines.append(
        f"- **Rotary degrades past the trained length**: {'holds' if rope_curve[-1] > 1.1 * ppl('rope', trained) else 'does not hold'} "
        f"here, {'steadily' if steady else 'unevenly'}: on positions past {trained}, "
        + ", ".join(f"{v:.2f} at L = {n}" for n, v in zip(past_lengths, rope_curve))
        + f" (against {ppl('rope', trained):.2f} at L = {trained}). Unlike the paper, where rotary stays well below "
        f"sinusoidal, here it starts lower "
        f"({rope_curve[0]:.2f} vs {ppl('sinusoidal', second, 'past'):.2f} at L = {second}) and ends "
        f"{'higher' if rope_curve[-1] > ppl('sinusoidal', longest, 'past') else 'lower'} "
        f"({rope_curve[-1]:.2f} vs {ppl('sinusoidal', longest, 'past'):.2f} at L = {longest})."
    )
    r = ratio("alibi")
    flat = r <= 1.05
    lines.append(
        f"- **ALiBi stays flat (or improves) as L grows**: {'holds' if flat else 'does not hold'} here: whole-window "
        f"perplexity {ppl('alibi', trained):.2f} at L = {trained} and {ppl('alibi', longest):.2f} at L = {longest} "
        f"(ratio {r:.2f}); on positions past {trained} alone: {ppl('alibi', longest, 'past'):.2f}."
    )
    zero_shot = {n: ppl(n, longest, "past") for n in ROPE_SCALINGS}
    top = min(zero_shot, key=zero_shot.get)
    lines.append(
        f"- **RoPE scalings without fine-tuning**, positions past {trained} at L = {longest}: "
        + ", ".join(f"{n} {v:.2f}" for n, v in zero_shot.items())
        + f"; the best is `{top}`"
        + (", no better than plain RoPE." if top == "rope" else ".")
    )
    best = min((n for n in s if s[n][str(longest)] != "error"), key=lambda n: ppl(n, longest))
    lines.append(f"- Best whole-window perplexity at L = {longest}: `{best}` ({ppl(best, longest):.2f}).")
    lines.append(
        f"- **A learned table cannot be read past its rows**: evaluating it at L = {second} raises "
        f"`PositionLimitError` under `jax.jit` (at trace time). Extended by tiling it reaches "
        f"{ppl('learned+tile', longest, 'past'):.2f} past {trained} at L = {longest}, by linear interpolation "
        f"{ppl('learned+linear', longest, 'past'):.2f} (no fine-tuning)."
    )
    if "none" in s:
        lines.append(
            f"- **No position encoding**: {ppl('none', trained):.2f} at L = {trained} and "
            f"{ppl('none', longest, 'past'):.2f} past {trained} at L = {longest} "
            f"({ratio('none', part='past'):.1f}x): the causal mask alone carries order."
        )
    if "t5" in s:
        r5, rr, ra = ratio("t5", part="past"), ratio("rope", part="past"), ratio("alibi", part="past")
        slow = 1.02 < r5 < rr
        lines.append(
            f"- **T5's relative bias degrades slowly** (Press et al.: between rotary and ALiBi): "
            f"{'holds' if slow and r5 > ra else 'does not hold'} here: {ppl('t5', trained):.2f} at L = {trained}, "
            f"on positions past {trained} "
            + ", ".join(f"{ppl('t5', n, 'past'):.2f} at L = {n}" for n in past_lengths)
            + f"; {r5:.2f}x its trained-length value at L = {longest}, against {rr:.2f}x for rotary, {ra:.2f}x "
            f"for ALiBi and {ratio('none', part='past'):.2f}x with no position encoding at all."
        )
    else:
        lines.append(
            "- **T5's relative bias degrades slowly** (Press et al.): not measured; "
            "`fp.relative_position_bias` (issue 13) had not landed when this was run."
        )
    for n in cfg["finetune_factors"]:
        name, control = f"rope+PI ft {n}x", f"rope ft {n}x"
        length = n * trained
        if str(length) not in s[name]:
            continue
        pi, zero, base = ppl(name, length, "past"), ppl("rope+PI", length, "past"), ppl("rope", length, "past")
        text = (
            f"- **PI + {cfg['finetune_steps']} fine-tuning steps at {n}x** (Chen et al.): past {trained} at "
            f"L = {length} perplexity {pi:.2f}, against {zero:.2f} for PI without fine-tuning and {base:.2f} "
            f"for plain RoPE; the trained model scores {ppl('rope', trained):.2f} at L = {trained}. "
        )
        text += f"The recovery {'holds' if pi < min(zero, base) else 'does not hold'} here"
        if control in s:
            ctl = ppl(control, length, "past")
            text += (
                f" (seeds {spread(name, length, 'past')}); but the same fine-tune *without* interpolation "
                f"reaches {ctl:.2f} (seeds {spread(control, length, 'past')}), so at this scale "
                + (
                    "the gain comes from fine-tuning at the longer length, not from interpolating"
                    if ctl <= pi
                    else "interpolation adds to what fine-tuning at the longer length gives"
                )
                + f". Past its fine-tuned window both degrade again (at L = {longest}: "
                f"{ppl(name, longest, 'past'):.2f} with PI, {ppl(control, longest, 'past'):.2f} without)"
            )
        lines.append(text + ".")
    return "\n".join(lines)


def markdown(results: dict) -> str:
    cfg, corpus = results["config"], results["corpus"]
    trained = cfg["train_length"]
    minutes = results["wall_s"] / 60
    runs = results.get("runs", [])
    merged = (
        ""
        if len(runs) < 2
        else (
            " This page merges " + str(len(runs)) + " invocations of the same config (each encoding's runs depend only "
            "on the seed, not on the other encodings): "
            + "; ".join(f"`{r['command']}` ({r['wall_s'] / 60:.1f} min: {', '.join(r['encodings'])})" for r in runs)
            + ". The command above runs all of them in one go."
        )
    )
    per_train = results["timing_s"].get("train rope", {}).get("mean", float("nan"))
    if "t5" in results["summary"]:
        from flax_posenc.relative_bias_config import BucketConfig

        saturation = BucketConfig(32, 128, False).saturation_distance
        t5 = (
            f"| t5 | T5's relative bias (`fp.nnx.RelativePositionBias`, decoder: 32 causal buckets, max distance "
            f"128), one (bucket, head) table shared by the layers, added to the scaled logits | the same buckets: "
            f"every distance from {saturation} on shares the last one, as in training |"
        )
    else:
        t5 = "| T5 relative bias | pending: `fp.relative_position_bias` (issue 13) had not landed when this was run | |"
    ft = ", ".join(f"{n}x" for n in cfg["finetune_factors"])
    return f"""# Do position encodings extrapolate on real text? (measured)

Reproduce (writes this page, `figures/extrapolation_text.png` and `figures/extrapolation_text.json`):

```bash
{results["command"]}
```

Generated by `examples/extrapolation_text.py` (do not edit by hand; `--report-only` re-renders it
from the JSON). This run: **{minutes:.1f} min wall time** on {results["cores"]} shared CPU cores
({results["machine"]["processor"]}, jax {results["machine"]["jax"]}, backend `{results["machine"]["backend"]}`),
{len(cfg["seeds"])} seeds ({", ".join(map(str, cfg["seeds"]))}); one training run of one encoding took
{per_train:.0f} s on average.{merged}

The question of Press et al. (ALiBi, 2022, Figure 1): train a language model at a fixed length,
evaluate it on longer inputs. And of Chen et al. (Position Interpolation, 2023): does
interpolating RoPE's positions plus a short fine-tune recover long-context perplexity?
Here at a scale two CPU cores allow.

## Setup

- **Corpus**: the Python {corpus["python"]} standard library's top-level `.py` files
  (`{corpus["directory"]}/*.py`, {len(corpus["train_files"]) + len(corpus["held_out_files"])} files), read as
  bytes. Held out by file: every {cfg["holdout_every"]}th file in name order
  ({len(corpus["held_out_files"])} files, {corpus["held_out_bytes"]:,} bytes: {", ".join(corpus["held_out_files"][:6])}, ...);
  training text: the other {len(corpus["train_files"])} files, {corpus["train_bytes"]:,} bytes. The file lists and
  sha256s are in the JSON. Nobody on this project wrote it.
- **Model** (identical for every encoding): byte-level causal transformer, vocabulary 256,
  `fp.nnx.TransformerInput` input block, {cfg["layers"]} pre-LayerNorm layers, width {cfg["dim"]},
  {cfg["heads"]} heads (head dim {cfg["dim"] // cfg["heads"]}), MLP {cfg["mlp"]}, untied output head.
- **Training** (identical data and steps for every encoding and seed): {cfg["steps"]} steps of optax AdamW
  (lr {cfg["lr"]}, warmup {cfg["warmup"]} + cosine, weight decay {cfg["weight_decay"]}, clip 1.0), batch
  {cfg["batch"]} random windows of {trained} bytes ({cfg["steps"] * cfg["batch"] * trained:,} bytes seen,
  about {cfg["steps"] * cfg["batch"] * trained / corpus["train_bytes"]:.2f} epochs). Train step and evaluation are `jax.jit`-ed.
- **Evaluation**: the first {cfg["eval_bytes"]:,} held-out bytes, cut into non-overlapping windows of L
  (the same bytes at every L), L in {", ".join(map(str, cfg["eval_lengths"]))}. Bits per byte (bpb) and
  perplexity per byte (2^bpb), averaged over every position of each window, and over positions
  {trained}..L-1 alone. Unigram baseline (training-text byte frequencies, add-one):
  **{results["unigram_bpb"]:.3f} bpb, perplexity {2 ** results["unigram_bpb"]:.2f}**.
- **Fine-tunes** (Chen et al.): from each seed's trained RoPE model, {cfg["finetune_steps"]} more steps
  (lr {cfg["finetune_lr"]}) at {ft} the training length, the same bytes per step (batch divided by the
  factor), with `rope_type="linear"` and factor N (`rope+PI ft Nx`){"; and, as the control Chen et al. compare against, the same fine-tune without interpolation (`rope ft Nx`)" if cfg["finetune_controls"] else ""}.
  Evaluated with that fixed factor at every L.

Encodings (what each does past {trained}; the module docstring of the script has the exact calls):

| row | trained with | at L > {trained} |
|---|---|---|
| sinusoidal | sinusoids added to scaled token embeddings | the formula's vectors, never seen in training |
| learned | {trained}-row learned table | `PositionLimitError` ("error") |
| learned+tile | the same model | `extend_positions(L, method="tile")`: row p mod {trained} |
| learned+linear | the same model | `extend_positions(L, method="linear")`: rows resampled to span L |
| rope | RoPE (theta 10000) on q, k | the same frequencies at new angles |
| rope+PI | the same model | `rope_type="linear"`, factor L/{trained} (no fine-tune) |
| rope+NTK | the same model | `rope_type="dynamic"` (NTK base growth, factor 1) |
| rope+YaRN | the same model | `rope_type="yarn"`, factor L/{trained}, Hugging Face defaults |
| alibi | ALiBi bias (slopes of Press et al.) | the same bias, longer |
| none | no position encoding (causal mask only) | - |
{t5}

Asked for any L > {trained} without an extension, the learned model refuses (under `jax.jit`, while
tracing); the message at L = {max(cfg["eval_lengths"])}:
`{results["limit_error"]}`.

## Results

How to read the two views. Over the whole window, a model that uses its context well gets
*better* as L grows (later bytes have more context), which is what ALiBi's curve in the paper
shows; a model that breaks past {trained} gets worse, but the first {trained} positions of every
window still pull its average toward the trained-length number. Over positions {trained}..L-1
alone, only the positions the model never saw in training count.

Perplexity per byte over the whole window (mean over seeds; min-max over seeds in brackets):

{table(results, "whole", "ppl")}

Perplexity per byte over positions {trained}..L-1 alone (what the model sees only past its training length):

{table(results, "past", "ppl")}

The same in bits per byte, whole window:

{table(results, "whole", "bpb")}

Where the loss goes at L = {max(cfg["eval_lengths"])}: bits per byte by band of positions (mean over seeds):

{band_table(results)}

![perplexity vs length](figures/extrapolation_text.png)

## Verdict

{verdict(results)}

What this measures: one small model ({cfg["layers"]} layers, width {cfg["dim"]}), {cfg["steps"]} training steps,
one corpus (Python source), {len(cfg["seeds"])} seeds, {cfg["eval_bytes"]:,} held-out bytes per length. The
papers trained 16-layer models for hours on WikiText-103; at this scale a model learns mostly local
structure, so read the numbers as what holds for small byte-level models, not as a replication.
"""


def report(results: dict, out: Path) -> None:
    plot(results, out / "figures" / "extrapolation_text.png")
    (out / "extrapolation-text.md").write_text(markdown(results))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (numbers meaningless)")
    output_folder.add_arguments(parser, what="extrapolation-text.md and figures/")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="re-render the report from OUT/figures/extrapolation_text.json without training",
    )
    parser.add_argument(
        "--add",
        action="append",
        choices=TRAINED,
        metavar="ENCODING",
        help="train and evaluate only this encoding (repeatable) and merge it into the saved "
        "results of the same config (an encoding that landed after the full run)",
    )
    args = parser.parse_args(argv)
    args.out = output_folder.resolve(parser, args, "extrapolation_text")
    if args.report_only:
        report(json.loads((args.out / "figures" / "extrapolation_text.json").read_text()), args.out)
        print(f"wrote {args.out / 'extrapolation-text.md'} from the saved results")
        return
    cfg = QUICK if args.quick else Config()
    command = COMMAND + (" --quick" if args.quick else "") + (" --docs" if args.docs else "")
    log = lambda m: print(m, flush=True)  # noqa: E731
    if args.add:
        saved = args.out / "figures" / "extrapolation_text.json"
        if not saved.exists():
            parser.error(f"--add: expected the saved results {saved}, found none")
        adding = tuple(dict.fromkeys(args.add))
        run(
            cfg,
            args.out,
            command + "".join(f" --add {n}" for n in adding),
            log=log,
            encodings=adding,
            previous=json.loads(saved.read_text()),
        )
    else:
        run(cfg, args.out, command, log=log)


if __name__ == "__main__":
    main()
