"""Do absolute position encodings extrapolate? Train at lengths <= 64, test up to 256.

Reproduce (5.3 min measured on 2 shared CPU cores, 3 seeds; ``--docs`` rewrites ``docs/extrapolation.md``
and ``docs/figures/extrapolation.png``; without it they go to ``out/extrapolation/`` or ``--out``)::

    .venv/bin/python examples/extrapolation.py --docs
    .venv/bin/python examples/extrapolation.py --quick --out /tmp/x   # smoke run, a few seconds

The task: **copy the token K places back.** Input: ``L`` random tokens from a vocabulary of
``V``; target at position ``i >= K``: the input token at ``i - K`` (positions ``< K`` are not
scored). Position is everything here: the model sees each token once, the same bag of tokens in
another order has other targets, and the attention is bidirectional (an encoder, as BERT) so
nothing but the position encoding tells a token where it is (a causal mask would leak position,
and a model without any encoding scores chance, ``1/V``: the ``none`` row checks that). The rule
is the same at every length and needs only the *relative* offset ``K``, so a model that learned
it the way the rule is stated would score at 256 what it scores at 64; whatever it loses past 64
is what its *absolute* encoding costs. (Reversal, the other classic, is no use here: its answer
at length 128 needs positions it never saw, so it fails by construction, not by encoding.)

The model: a 2-layer pre-LayerNorm encoder, width 64, 4 heads (``nnx.MultiHeadAttention``),
MLP 256, with ``flax_posenc.nnx.TransformerInput`` as its input block; AdamW, fixed seeds.
Training sequences have lengths 8..64 (half of each batch at exactly 64, so every one of the 64
positions is trained every step), padded to 64 with a key mask; batches are drawn on device
inside the jitted step.

The train step is ``jax.jit`` over ``nnx.split``/``nnx.merge`` with the parameters and the
optimizer state donated. Measured against ``nnx.jit(donate_argnums=(0, 1))`` with an
``nnx.Optimizer`` (batch 64, 2 shared CPU cores): 115 vs 123 ms/step (learned), 153 vs 137
ms/step (sinusoidal), i.e. no difference that survives the noise of a shared machine (the
models are tiny, so the table copies the README warns about cost nothing here); the split/merge
form was kept, as the README recommends.

The variants, and exactly what each does past the trained length 64:

``sinusoidal``
    Vaswani et al.'s fixed encoding (``embed_scale = sqrt(64)`` on tokens, as in the paper),
    computed by formula at every position: positions 64..255 get the sinusoids of 64..255,
    which the model has never seen.
``learned``, evaluated four ways (one trained model, a 64-row table, GPT-2 style)
    ``learned/tile``: the table extended with ``extend_table(method="tile")`` (Longformer's copy
    init): position ``p`` reads row ``p mod 64``.
    ``learned/linear``: ``extend_table(method="linear")`` to the evaluation length: the 64
    trained rows are resampled so they span all ``L`` positions (position interpolation,
    without the fine-tuning that usually follows it); lengths <= 64 use the table as is.
    ``learned/cubic``: the same with the cubic kernel.
    ``learned/clamp``: position ``p`` reads row ``min(p, 63)``: what JAX's ``x[i]`` silently
    does past the end of a table (flax-posenc raises ``PositionLimitError`` instead, so the
    clamped table is built explicitly).
``none``
    no position encoding: the chance baseline.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import flax_posenc as fp
from flax_posenc.extend import extend_table
from flax_posenc.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # output_folder.py, also when a test imports this file
import output_folder  # noqa: E402

COMMAND = ".venv/bin/python examples/extrapolation.py"


@dataclasses.dataclass(frozen=True)
class Config:
    """Every knob of the experiment (the defaults are the published run)."""

    vocab: int = 16
    offset: int = 4  # K: the target at i is the token at i - K
    dim: int = 64
    heads: int = 4
    layers: int = 2
    mlp: int = 256
    train_length: int = 64
    batch: int = 32
    steps: int = 600
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 50
    seeds: tuple[int, ...] = (0, 1, 2)
    eval_lengths: tuple[int, ...] = (32, 64, 96, 128, 192, 256)
    eval_sequences: int = 256


# smoke run: every code path, a smaller model, numbers meaningless
QUICK = Config(
    dim=32, heads=2, layers=1, mlp=64, steps=20, batch=8, warmup=5, seeds=(0,), eval_lengths=(32, 96), eval_sequences=8
)

TRAINED_VARIANTS = ("sinusoidal", "learned", "none")
# how the learned table is read past the trained length, evaluated on the one trained model
LEARNED_READS = ("tile", "linear", "cubic", "clamp")


# --------------------------------------------------------------------------------- the model


class EncoderLayer(nnx.Module):
    """Pre-LayerNorm encoder layer: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, dim: int, heads: int, mlp: int, *, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(dim, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(heads, dim, decode=False, deterministic=True, rngs=rngs)
        self.ln2 = nnx.LayerNorm(dim, rngs=rngs)
        self.up = nnx.Linear(dim, mlp, rngs=rngs)
        self.down = nnx.Linear(mlp, dim, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))


class CopyBackModel(nnx.Module):
    """Input block (``fp.nnx.TransformerInput``) -> encoder layers -> LayerNorm -> vocab logits."""

    def __init__(self, cfg: Config, position: str, *, rngs: nnx.Rngs):
        self.embed = make_input_block(cfg, position, cfg.train_length, rngs=rngs)
        self.layers = nnx.List([EncoderLayer(cfg.dim, cfg.heads, cfg.mlp, rngs=rngs) for _ in range(cfg.layers)])
        self.ln = nnx.LayerNorm(cfg.dim, rngs=rngs)
        self.head = nnx.Linear(cfg.dim, cfg.vocab, rngs=rngs)

    def __call__(self, tokens: jax.Array, lengths: jax.Array) -> jax.Array:
        """``(batch, L)`` tokens, ``(batch,)`` true lengths -> ``(batch, L, vocab)`` logits."""
        x = self.embed(tokens)
        keys = jnp.arange(tokens.shape[1])[None, :] < lengths[:, None]  # (batch, L): real tokens
        mask = keys[:, None, None, :]  # (batch, heads=1, query=1, key)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.ln(x))


def make_input_block(cfg: Config, position: str, num_positions: int, *, rngs: nnx.Rngs) -> fp.nnx.TransformerInput:
    """The variant's input block: learned (GPT-2 style), sinusoidal (Vaswani) or none."""
    if position == "learned":
        return fp.nnx.TransformerInput.from_arguments(cfg.vocab, cfg.dim, num_positions=num_positions, rngs=rngs)
    if position == "sinusoidal":
        return fp.nnx.TransformerInput.from_arguments(
            cfg.vocab, cfg.dim, position="sinusoidal", embed_scale=math.sqrt(cfg.dim), rngs=rngs
        )
    return fp.nnx.TransformerInput.from_arguments(cfg.vocab, cfg.dim, position="none", rngs=rngs)


def with_position_table(model: CopyBackModel, cfg: Config, table: np.ndarray) -> CopyBackModel:
    """A copy of ``model`` whose learned input block holds ``table`` (any number of rows)."""
    graphdef, state = nnx.split(model)
    out = nnx.merge(graphdef, state)  # a copy sharing no Variables with ``model``
    block = nnx.eval_shape(lambda: make_input_block(cfg, "learned", table.shape[0], rngs=nnx.Rngs(0)))
    block.word_embeddings.set_value(model.embed.word_embeddings[...])
    block.position_embeddings.set_value(jnp.asarray(table))
    out.embed = block
    return out


# ---------------------------------------------------------------------------------- the task


def make_batch(key: jax.Array, cfg: Config, batch: int, length: int, *, ragged: bool) -> tuple[jax.Array, ...]:
    """``(tokens, lengths, targets, weights)`` for the copy-K-back task.

    ``ragged``: half the rows get a random length in ``[8, length]`` (padded; the key mask and
    the zero weights hide the padding), half the full ``length``.
    """
    k_tok, k_len, k_full = jax.random.split(key, 3)
    tokens = jax.random.randint(k_tok, (batch, length), 0, cfg.vocab)
    lengths = jnp.full((batch,), length)
    if ragged:
        short = jax.random.randint(k_len, (batch,), 8, length + 1)
        lengths = jnp.where(jax.random.bernoulli(k_full, 0.5, (batch,)), lengths, short)
    idx = jnp.arange(length)
    targets = jnp.roll(tokens, cfg.offset, axis=1)  # targets[:, i] = tokens[:, i - K]
    weights = ((idx[None, :] >= cfg.offset) & (idx[None, :] < lengths[:, None])).astype(jnp.float32)
    return tokens, lengths, targets, weights


def loss_fn(model: CopyBackModel, tokens, lengths, targets, weights) -> jax.Array:
    logits = model(tokens, lengths)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return (losses * weights).sum() / weights.sum()


def make_train_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation, cfg: Config):
    """A jitted ``(params, opt_state, key) -> (params, opt_state, loss)``; buffers donated.

    ``jax.jit`` over ``nnx.split``/``nnx.merge`` (the README's fast path); the batch is drawn on
    device inside the step.
    """

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, key):
        batch = make_batch(key, cfg, cfg.batch, cfg.train_length, ragged=True)
        loss, grads = jax.value_and_grad(lambda p: loss_fn(nnx.merge(graphdef, p), *batch))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def train(cfg: Config, position: str, seed: int) -> tuple[CopyBackModel, list[float]]:
    """Train one variant from ``seed``; returns the model and the loss every 50 steps."""
    model = CopyBackModel(cfg, position, rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model, nnx.Param)
    schedule = optax.warmup_cosine_decay_schedule(0.0, cfg.lr, cfg.warmup, cfg.steps, end_value=cfg.lr / 20)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=cfg.weight_decay))
    opt_state = tx.init(params)
    step = make_train_step(graphdef, tx, cfg)
    keys = jax.random.split(jax.random.key(1000 + seed), cfg.steps)
    losses = []
    with Progress(cfg.steps, desc=f"{position} seed {seed}") as bar:
        for i in range(cfg.steps):
            params, opt_state, loss = step(params, opt_state, keys[i])
            if i % 50 == 0 or i == cfg.steps - 1:
                losses.append(float(loss))
                bar.update(0, loss=f"{losses[-1]:.3f}")
            bar.update()
    return nnx.merge(graphdef, params), losses


# ------------------------------------------------------------------------------- evaluation


@functools.partial(jax.jit, static_argnums=0)
def _predict(graphdef, state, tokens, lengths):
    return nnx.merge(graphdef, state)(tokens, lengths).argmax(-1)


def correct_per_position(model: CopyBackModel, batch) -> np.ndarray:
    """``(L,)`` fraction of correct predictions at each position (NaN where nothing is scored)."""
    tokens, lengths, targets, weights = batch
    graphdef, state = nnx.split(model)
    pred = _predict(graphdef, state, tokens, lengths)
    hits = np.asarray((pred == targets) * weights).sum(0)
    counts = np.asarray(weights).sum(0)
    return np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)


def read_past_end(table: np.ndarray, length: int, read: str) -> np.ndarray:
    """The ``(length, dim)`` table a learned model reads at ``length`` > its rows.

    ``"tile"``, ``"linear"``, ``"cubic"``: :func:`flax_posenc.extend.extend_table`;
    ``"clamp"``: row ``min(p, rows - 1)``, JAX's silent out-of-bounds read, made explicit.
    """
    if read == "clamp":
        return table[np.minimum(np.arange(length), table.shape[0] - 1)]
    return extend_table(table, length, method=read)


def evaluate(cfg: Config, models: dict[str, CopyBackModel], seed: int) -> dict[str, dict[int, np.ndarray]]:
    """Per-position accuracy of every evaluated variant at every evaluation length."""
    out: dict[str, dict[int, np.ndarray]] = {}
    learned = models["learned"]
    table = np.asarray(learned.embed.position_embeddings[...])
    for length in cfg.eval_lengths:
        batch = make_batch(jax.random.key(7_000 + length), cfg, cfg.eval_sequences, length, ragged=False)
        for name in ("sinusoidal", "none"):
            out.setdefault(name, {})[length] = correct_per_position(models[name], batch)
        for read in LEARNED_READS:
            name = f"learned/{read}"
            if length <= cfg.train_length:
                acc = correct_per_position(learned, batch)
            else:
                acc = correct_per_position(with_position_table(learned, cfg, read_past_end(table, length, read)), batch)
            out.setdefault(name, {})[length] = acc
    return out


def check_limit_is_enforced(cfg: Config, model: CopyBackModel) -> str:
    """The unextended 64-row table refuses length 96 (no silent clamp): returns the error line."""
    tokens, lengths, *_ = make_batch(jax.random.key(0), cfg, 1, cfg.train_length + 32, ragged=False)
    try:
        model(tokens, lengths)
    except fp.PositionLimitError as e:
        return str(e)
    raise AssertionError("a 64-row table read at length 96 should raise PositionLimitError")


# ----------------------------------------------------------------------------------- report


def summarise(per_seed: list[dict[str, dict[int, np.ndarray]]], cfg: Config) -> dict[str, dict]:
    """Accuracy per variant and length: mean over seeds, per-seed values, and for each length
    the accuracy inside the trained window (positions < 64) and beyond it."""
    names = list(per_seed[0])
    result = {}
    for name in names:
        rows = {}
        for length in cfg.eval_lengths:
            runs = [r[name][length] for r in per_seed]
            overall = [float(np.nanmean(a)) for a in runs]
            inside = [float(np.nanmean(a[: cfg.train_length])) for a in runs]
            beyond = [float(np.nanmean(a[cfg.train_length :])) for a in runs if length > cfg.train_length]
            rows[length] = dict(
                mean=float(np.mean(overall)),
                seeds=overall,
                inside=float(np.mean(inside)),
                beyond=float(np.mean(beyond)) if beyond else None,
            )
        result[name] = rows
    return result


def per_position_curves(per_seed: list[dict[str, dict[int, np.ndarray]]], length: int) -> dict[str, np.ndarray]:
    """Seed-averaged accuracy per position at ``length`` (NaN at the unscored positions < K)."""
    return {name: np.mean([r[name][length] for r in per_seed], axis=0) for name in per_seed[0]}


STYLE = {
    "sinusoidal": dict(color="tab:blue", marker="o"),
    "learned/tile": dict(color="tab:orange", marker="s"),
    "learned/linear": dict(color="tab:green", marker="^"),
    "learned/cubic": dict(color="tab:olive", marker="v", linestyle=":"),
    "learned/clamp": dict(color="tab:red", marker="x", linestyle="--"),
    "none": dict(color="gray", marker=".", linestyle=":"),
}


def plot(summary: dict, curves: dict[str, np.ndarray], cfg: Config, path: Path) -> None:
    """Accuracy vs length per variant (trained length marked), and accuracy vs position at the
    longest length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    lengths = list(cfg.eval_lengths)
    for name, rows in summary.items():
        ax.plot(lengths, [rows[n]["mean"] for n in lengths], label=name, **STYLE.get(name, {}))
    for a in (ax, ax2):
        a.axvline(cfg.train_length, color="black", linewidth=0.8)
        a.axhline(1 / cfg.vocab, color="gray", linewidth=0.6, linestyle="--")
        a.set_ylim(0, 1.02)
        a.grid(alpha=0.3)
    ax.text(cfg.train_length, 0.03, " trained length", fontsize=8)
    ax.set_xticks(lengths)
    ax.set_xlabel("evaluation length L")
    ax.set_ylabel(f"accuracy (copy the token {cfg.offset} back)")
    ax.set_title(f"accuracy vs length (trained on lengths <= {cfg.train_length})")
    ax.legend(fontsize=8)
    longest = max(lengths)
    window = 8
    for name, acc in curves.items():
        smooth = np.convolve(np.nan_to_num(acc[cfg.offset :]), np.ones(window) / window, mode="valid")
        ax2.plot(
            np.arange(len(smooth)) + cfg.offset + window // 2,
            smooth,
            label=name,
            color=STYLE[name]["color"],
            linestyle=STYLE[name].get("linestyle", "-"),
        )
    ax2.set_xlabel(f"position in a sequence of length {longest}")
    ax2.set_ylabel(f"accuracy (moving mean over {window} positions)")
    ax2.set_title(f"where the errors are, at L = {longest}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(
    summary: dict, cfg: Config, *, command: str, wall: float, losses: dict, limit_error: str, figure: str, cores: int
) -> str:
    """The report: command, setup, results table, figure, and a plain reading of the numbers."""
    lengths = list(cfg.eval_lengths)
    longest = max(lengths)
    head = "| variant | " + " | ".join(f"L={n}" for n in lengths) + " |"
    lines = [head, "|---|" + "---:|" * len(lengths)]
    for name, rows in summary.items():
        cells = []
        for n in lengths:
            r = rows[n]
            spread = f" ({min(r['seeds']):.2f}-{max(r['seeds']):.2f})" if len(r["seeds"]) > 1 else ""
            cells.append(f"{r['mean']:.3f}{spread}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    split_lines = [f"| variant | positions < {cfg.train_length} | positions >= {cfg.train_length} |", "|---|---:|---:|"]
    for name, rows in summary.items():
        r = rows[longest]
        beyond = "-" if r["beyond"] is None else f"{r['beyond']:.3f}"
        split_lines.append(f"| {name} | {r['inside']:.3f} | {beyond} |")
    split_table = "\n".join(split_lines)
    past = [n for n in lengths if n > cfg.train_length]
    beyond_lines = ["| variant | " + " | ".join(f"L={n}" for n in past) + " |", "|---|" + "---:|" * len(past)]
    for name, rows in summary.items():
        beyond_lines.append(f"| {name} | " + " | ".join(f"{rows[n]['beyond']:.3f}" for n in past) + " |")
    beyond_table = "\n".join(beyond_lines)
    first = past[0] if past else longest
    sin = summary.get("sinusoidal", {}).get(first)
    example = (
        f" For example `sinusoidal` scores {sin['mean']:.3f} at L = {first} over all scored positions, but "
        f"{sin['beyond']:.3f} on positions {cfg.train_length}..{first - 1} alone ({sin['inside']:.3f} on the "
        f"positions below {cfg.train_length})."
        if sin and sin["beyond"] is not None
        else ""
    )
    final_losses = ", ".join(f"{k} {np.mean([curve[-1] for curve in v]):.3f}" for k, v in losses.items())
    return f"""# Do absolute position encodings extrapolate? (measured)

Reproduce:

```bash
{command}
```

Generated by `examples/extrapolation.py` (do not edit by hand). This run: {wall / 60:.1f} min wall
time on {cores} CPU cores ({platform.machine()}, jax {jax.__version__}, backend
`{jax.default_backend()}`), {len(cfg.seeds)} seed(s) per variant ({", ".join(map(str, cfg.seeds))}).

The lesson's claim: an absolute encoding (a learned table, or fixed sinusoids) does not carry a
model past the length it was trained at. Here a tiny transformer learns a rule that holds at
every length, is trained on lengths <= {cfg.train_length} and is tested up to {longest}.

## Setup

- **Task: copy the token {cfg.offset} places back.** {cfg.vocab} random tokens per position; the
  target at position i >= {cfg.offset} is the input token at i - {cfg.offset} (chance:
  1/{cfg.vocab} = {1 / cfg.vocab:.3f}). Only relative position matters to the rule, so it is
  defined, and equally hard, at any length: what a model loses past {cfg.train_length} is what its
  *absolute* encoding costs it. Attention is bidirectional (an encoder), so the encoding is the
  only source of position (the `none` row: the model without one).
- **Model**: `flax_posenc.nnx.TransformerInput` (the library's input block) -> {cfg.layers}
  pre-LayerNorm encoder layers (width {cfg.dim}, {cfg.heads} heads, MLP {cfg.mlp}) -> vocab logits.
  AdamW (lr {cfg.lr}, warmup {cfg.warmup} + cosine, weight decay {cfg.weight_decay}, clip 1.0),
  {cfg.steps} steps of {cfg.batch} sequences of lengths 8..{cfg.train_length} (half exactly
  {cfg.train_length}). Final training loss (mean over seeds): {final_losses}.
- **Evaluation**: {cfg.eval_sequences} fresh sequences per length (the same for every variant),
  accuracy over all scored positions.

What each variant does past the trained length {cfg.train_length}:

| variant | trained | positions >= {cfg.train_length} |
|---|---|---|
| sinusoidal | sinusoids (Vaswani, tokens scaled by sqrt({cfg.dim})) | the formula's values at 64..{longest - 1}, never seen in training |
| learned/tile | learned {cfg.train_length}-row table (GPT-2 style) | `extend_table(method="tile")`: position p reads row p mod {cfg.train_length} (Longformer's copy init) |
| learned/linear | the same trained model | `extend_table(method="linear")` to L rows: the {cfg.train_length} rows resampled to span L positions (position interpolation, no fine-tuning) |
| learned/cubic | the same trained model | `extend_table(method="cubic")`, likewise |
| learned/clamp | the same trained model | row min(p, {cfg.train_length - 1}): what JAX's `x[i]` does silently; flax-posenc refuses instead (below), so it is asked for explicitly |
| none | no position encoding | - |

At L <= {cfg.train_length} all four `learned/*` rows are the same model reading the same table.
Asked for length {cfg.train_length + 32} without an extension, the library refuses:
`PositionLimitError: {limit_error}`.

## Results

Accuracy per evaluation length (mean over seeds; per-seed range in brackets):

{table}

The accuracies above average over every scored position: the ones inside the trained window and
the ones past it together, so just past {cfg.train_length} they mostly measure the trained
window.{example} Past the trained length alone (positions {cfg.train_length}..L-1, mean over seeds):

{beyond_table}

At L = {longest}, inside the trained window and beyond it:

{split_table}

![accuracy vs length]({figure})

## Reading

{reading(summary, cfg)}
"""


def reading(summary: dict, cfg: Config) -> str:
    """The numbers in words: per variant, in the trained range and past it. Every verdict below
    is decided by the numbers (thresholds in the code), the mechanisms by how each variant reads
    past the trained length."""
    t, k = cfg.train_length, cfg.offset
    longest = max(cfg.eval_lengths)
    inside = max((n for n in cfg.eval_lengths if n <= t), default=min(cfg.eval_lengths))
    past = [n for n in cfg.eval_lengths if n > t]

    def mean(name: str, n: int) -> float:
        return summary[name][n]["mean"]

    def curve(name: str) -> str:
        return ", ".join(f"{mean(name, n):.2f} at {n}" for n in past)

    def split(name: str) -> str:
        r = summary[name][longest]
        return f"{r['inside']:.2f} on positions 0..{t - 1} and {r['beyond']:.2f} on positions {t}..{longest - 1}"

    def versus_none(name: str) -> str:
        r, blind = summary[name][longest]["beyond"], summary["none"][longest]["beyond"]
        where = "close to" if abs(r - blind) <= 0.02 else ("above" if r > blind else "below")
        return f"positions {t}..{longest - 1} score {r:.3f}, {where} the order-blind `none` there ({blind:.3f})"

    def window_holds(name: str) -> bool:
        return summary[name][longest]["inside"] >= 0.9

    learned = [n for n in summary if n.startswith("learned/")]
    positional = ["sinusoidal", *learned]
    fitted = min(mean(n, inside) for n in positional)
    best = max(positional, key=lambda n: mean(n, longest))
    kept = mean(best, longest) >= 0.9 * mean(best, inside)
    worst = min(positional, key=lambda n: mean(n, longest))
    solved = (
        "every position-aware variant solves the task"
        if fitted >= 0.95
        else "not every position-aware variant fits the task"
    )
    holds = "keep working" if window_holds("sinusoidal") else "do not keep working either"
    clamp = (
        "so the trained window still works and everything past it is lost"
        if window_holds("learned/clamp")
        else "and the trained window is disturbed as well"
    )
    return f"""\
**Inside the trained range** {solved}: accuracy at L = {inside} is at least {fitted:.3f}. Without
positions (`none`) the model scores {mean("none", inside):.3f}: with attention blind to order its best
guess is the sequence's most common token, a little above 1/{cfg.vocab} = {1 / cfg.vocab:.3f}, less
so as L grows ({mean("none", longest):.3f} at {longest}).

**Past it**, the best variant at L = {longest} is `{best}` with {mean(best, longest):.3f}, against
{mean(best, inside):.3f} at L = {inside}: {"it keeps most of the rule" if kept else "no variant keeps the rule"}.
Read the long-length accuracies against the trained window's share of the scored positions:
at L = {longest}, {t - k} of the {longest - k} scored positions ({(t - k) / (longest - k):.3f}) lie
below {t}, so a model right there and at the order-blind level elsewhere scores about
{((t - k) + (longest - t) * summary["none"][longest]["beyond"]) / (longest - k):.2f}.

- `sinusoidal`: {curve("sinusoidal")}. At L = {longest}: {split("sinusoidal")}. The trained
  positions {holds} with {longest - t} unfamiliar positions around them; {versus_none("sinusoidal")}.
  "{k} back" is the same
  rotation of the sinusoids at every position, yet what the network learned is tied to the
  codes of positions 0..{t - 1}.
- `learned/tile`: {curve("learned/tile")}. At L = {longest}: {split("learned/tile")}. Tiling
  gives positions p, p + {t}, p + {2 * t}, ... the same row, so at L = {longest} a token has up to
  {math.ceil(longest / t)} indistinguishable candidates for "{k} back", the trained window included.
- `learned/linear` and `learned/cubic`: {curve("learned/linear")} (linear); {curve("learned/cubic")}
  (cubic). Interpolation keeps the codes but squeezes L positions into {t}: "{k} back" becomes
  {k} x {t - 1}/(L - 1) trained steps, an offset the model never saw; at L = {longest} even the
  first {t} positions score {summary["learned/linear"][longest]["inside"]:.3f} (linear), and
  {versus_none("learned/linear")}: a confident wrong pointer does worse than no order at all.
  Position interpolation is meant to be followed by fine-tuning (`examples/finetune_extended.py` shows the mechanics);
  without it, {"it is the worst read here" if worst in ("learned/linear", "learned/cubic") else f"the worst read here is `{worst}`"}.
- `learned/clamp`: {curve("learned/clamp")}. At L = {longest}: {split("learned/clamp")}. Every
  position past {t - 1} reads row {t - 1}, {clamp}: the failure JAX's silent clamp gives, with
  no error.

What this measures: one small task, one model size, {len(cfg.seeds)} seed(s), no fine-tuning after
extending. It tests the lesson's claim in that setting only.
"""


# ------------------------------------------------------------------------------------- main


def report(results: dict, out: Path) -> None:
    """Write ``extrapolation.md`` and ``figures/extrapolation.png`` under ``out`` from the saved
    results (``figures/extrapolation.json``)."""
    cfg = Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in results["config"].items()})
    summary = {name: {int(n): r for n, r in rows.items()} for name, rows in results["summary"].items()}
    curves = {name: np.asarray(v, dtype=float) for name, v in results["curves"].items()}
    plot(summary, curves, cfg, out / "figures" / "extrapolation.png")
    doc = markdown(
        summary,
        cfg,
        command=results["command"],
        wall=results["wall_s"],
        losses=results["losses"],
        limit_error=results["limit_error"],
        figure="figures/extrapolation.png",
        cores=results["cores"],
    )
    (out / "extrapolation.md").write_text(doc)


def run(cfg: Config, out: Path, command: str) -> dict:
    """Train every variant for every seed, evaluate, save the results and write the report."""
    start = time.perf_counter()
    per_seed, losses = [], {}
    limit_error = ""
    for seed in cfg.seeds:
        models = {}
        for position in TRAINED_VARIANTS:
            t0 = time.perf_counter()
            models[position], curve = train(cfg, position, seed)
            losses.setdefault(position, []).append(curve)
            print(
                f"trained {position:<10} seed {seed}: final loss {curve[-1]:.4f} ({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
        limit_error = check_limit_is_enforced(cfg, models["learned"])
        per_seed.append(evaluate(cfg, models, seed))
    summary = summarise(per_seed, cfg)
    curves = per_position_curves(per_seed, max(cfg.eval_lengths))
    results = dict(
        command=command,
        wall_s=time.perf_counter() - start,
        cores=os.cpu_count(),
        config=dataclasses.asdict(cfg),
        summary=summary,
        losses=losses,
        limit_error=limit_error,
        curves={name: [None if np.isnan(x) else float(x) for x in v] for name, v in curves.items()},
    )
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "figures" / "extrapolation.json").write_text(json.dumps(results, indent=1))
    report(results, out)
    for name, rows in summary.items():
        print(f"{name:<15} " + "  ".join(f"L={n}:{rows[n]['mean']:.3f}" for n in cfg.eval_lengths))
    print(
        f"wrote {out / 'extrapolation.md'} and {out / 'figures'}/extrapolation.{{png,json}} "
        f"in {results['wall_s']:.1f} s",
        flush=True,
    )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (numbers meaningless)")
    output_folder.add_arguments(parser, what="extrapolation.md and figures/")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="re-render the report from OUT/figures/extrapolation.json without training",
    )
    args = parser.parse_args(argv)
    out = output_folder.resolve(parser, args, "extrapolation")
    if args.report_only:
        report(json.loads((out / "figures" / "extrapolation.json").read_text()), out)
        print(f"wrote {out / 'extrapolation.md'} from the saved results")
        return
    cfg = QUICK if args.quick else Config()
    command = COMMAND + (" --quick" if args.quick else "") + (" --docs" if args.docs else "")
    run(cfg, out, command)


if __name__ == "__main__":
    main()
