"""Side-by-side benchmark: input block, decode step, training step, sinusoids, RoPE, compile time, cost curves.

    python benchmarks/run.py            # both malloc settings, all sections (~15 min on 2 loaded cores)
    python benchmarks/run.py --quick    # smoke run: tiny sizes, default environment in-process, 3 short rounds
    python benchmarks/run.py --single   # default environment only (GPU runs: benchmarks/device.sh)
    python benchmarks/run.py --figure docs/figures/cost_curves.png   # also draw the cost curves

Every candidate of a section runs in the same process on the same inputs, **interleaved**: each
of ``--rounds`` rounds (default 3) times every candidate in turn (a few synchronised calls each,
``block_until_ready``, cycling through several input batches), so load from other jobs hits all
candidates alike. A candidate's time is the median of its calls within a round; the table shows
the median over rounds and every ratio is computed within each round, reported as median
[min-max] over rounds. Each malloc environment is a separate child process (glibc reads
``MALLOC_*`` at start-up): the default, and the page-fault-avoiding opt-in
``MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000``. The machine load
(``/proc/loadavg``) before and after each section is printed beside it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MALLOC_OPT_IN = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "1000000000"}
ROUNDS = 3
SETTLE_S = 0.01  # pause between timed calls, so one candidate's spinning threads do not slow the next


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def interleaved(cands: dict, *, rounds: int, calls: int) -> dict[str, list[float]]:
    """Per-round median seconds of each candidate; ``cands[name] = (fn, inputs, sync)``.

    ``fn(x)`` is called ``calls`` times per round per candidate, candidates taking turns, after
    two warm-up calls each (compilation)."""
    for fn, inputs, sync in cands.values():
        for x in inputs[:2]:
            sync(fn(x))
    out = {name: [] for name in cands}
    for _ in range(rounds):
        samples = {name: [] for name in cands}
        for i in range(calls):
            for name, (fn, inputs, sync) in cands.items():
                x = inputs[i % len(inputs)]
                start = time.perf_counter()
                sync(fn(x))
                samples[name].append(time.perf_counter() - start)
                time.sleep(
                    SETTLE_S
                )  # untimed: the previous candidate's worker threads (PyTorch's OpenMP spin-wait) go idle
        for name in cands:
            out[name].append(statistics.median(samples[name]))
    return out


def looped(fn, inner: int):
    """``fn`` called ``inner`` times back to back (microsecond-scale steps; dispatch is async)."""

    def run(x):
        for _ in range(inner):
            out = fn(x)
        return out

    return run


def rows_for(section: str, times: dict, load: tuple, *, per_call: int = 1, **extra) -> list[dict]:
    rows = []
    for name, runs in times.items():
        meta = extra.get(name, {})
        rows.append(dict(section=section, name=name, runs=[t / per_call for t in runs], load=load, **meta))
    return rows


def _torch_device():
    """("cuda", its sync) when JAX runs on a GPU and torch sees one, else ("cpu", no-op)."""
    import jax
    import torch

    if jax.default_backend() == "gpu" and torch.cuda.is_available():
        return "cuda", (lambda _: torch.cuda.synchronize())
    return "cpu", (lambda _: None)


def _jsync(out):
    import jax

    return jax.block_until_ready(out)


def block_section(quick: bool, rounds: int) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from flax import nnx

    import flax_posenc as fp

    batch, seq, dim, vocab, positions = (2, 128, 64, 1000, 256) if quick else (16, 1024, 768, 50257, 1024)
    calls = 3 if quick else 7
    rng = np.random.default_rng(0)
    ids_np = [rng.integers(0, vocab, (batch, seq), dtype=np.int32) for _ in range(4)]
    ids = [jnp.asarray(x) for x in ids_np]
    on_gpu = jax.default_backend() == "gpu"
    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    tsync = (lambda _: torch.cuda.synchronize()) if device == "cuda" else (lambda _: None)
    tids = [torch.from_numpy(x.astype(np.int64)).to(device) for x in ids_np]
    from transformers import GPT2Config, GPT2Model

    rows = []
    for dtype_name, dtype, tdtype in (
        ("float32", jnp.float32, torch.float32),
        ("bfloat16", jnp.bfloat16, torch.bfloat16),
    ):
        load0 = loadavg()
        cands = {}
        for kind in ("learned", "sinusoidal"):
            block = fp.nnx.TransformerInput.from_arguments(
                vocab, dim, num_positions=positions, position=kind, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0)
            )
            graphdef, state = nnx.split(block)
            embed = jax.jit(lambda s, x, g=graphdef: nnx.merge(g, s)(x))  # the README's path
            cands[f"flax-posenc {kind} (jax.jit + split/merge)"] = (lambda x, e=embed, s=state: e(s, x), ids, _jsync)
            if kind == "learned":
                params = block.params()
                plain_take = jax.jit(
                    lambda p, x: jnp.take(p["word_embeddings"], x, axis=0) + p["position_embeddings"][: x.shape[-1]]
                )
                cands["hand-written jnp.take + add (jax.jit)"] = (
                    lambda x, f=plain_take, p=params: f(p, x),
                    ids,
                    _jsync,
                )
        wte = nnx.Embed(vocab, dim, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0))
        wpe = nnx.Embed(positions, dim, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(1))
        g2, s2 = nnx.split(nnx.List([wte, wpe]))

        def plain(s, x, g=g2):
            te, pe = nnx.merge(g, s)
            return te(x) + pe(jnp.arange(x.shape[-1]))

        plain_jit = jax.jit(plain)
        cands["plain nnx.Embed block (jax.jit)"] = (lambda x, s=s2: plain_jit(s, x), ids, _jsync)
        big = [jnp.asarray(rng.standard_normal((batch, seq, dim), dtype=np.float32), dtype) for _ in range(2)]
        cands["floor: XLA elementwise a+1 (fresh output)"] = (
            jax.jit(lambda a: a + jnp.asarray(1, a.dtype)),
            big,
            _jsync,
        )
        torch.manual_seed(0)
        config = GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=dim, n_layer=1, n_head=max(1, dim // 64))
        model = GPT2Model(config).eval().to(device).to(tdtype)

        def hf(x, model=model):
            with torch.no_grad():
                pos = torch.arange(x.shape[-1], device=x.device).unsqueeze(0)
                return model.wte(x) + model.wpe(pos)

        cands["Hugging Face GPT-2 wte+wpe (PyTorch)"] = (hf, tids, tsync)
        times = interleaved(cands, rounds=rounds, calls=calls)
        nbytes = batch * seq * dim * (4 if dtype_name == "float32" else 2)
        for r in rows_for("input block", times, (load0, loadavg())):
            r.update(dtype=dtype_name, gbps=nbytes / statistics.median(r["runs"]) / 1e9)
            rows.append(r)
        del big
    return rows


def decode_section(quick: bool, rounds: int) -> list[dict]:
    """Batch 1, one token, traced ``start``, overflow guard on (``on_overflow="error"``)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import flax_posenc as fp

    vocab, dim, positions = (1000, 64, 256) if quick else (50257, 768, 1024)
    inner = 20 if quick else 100
    load0 = loadavg()
    block = fp.nnx.TransformerInput.from_arguments(vocab, dim, num_positions=positions, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(block)
    params = block.params()
    word, wpe = params["word_embeddings"], params["position_embeddings"]
    merged = jax.jit(lambda s, ids, t: nnx.merge(graphdef, s)(ids, start=t))
    functional = jax.jit(functools.partial(fp.block.transformer_input, block.spec))  # the README's decode path (step 4)
    by_hand = jax.jit(lambda p, ids, t: p["word_embeddings"][ids] + p["position_embeddings"][t])
    by_hand_const = jax.jit(lambda ids, t: word[ids] + wpe[t])  # tables closed over (baked in)
    steps = [(jnp.array([[42 + i]], jnp.int32), jnp.int32(100 + i)) for i in range(4)]
    cands = {
        "flax-posenc nnx.merge under jax.jit": (
            looped(lambda a: merged(state, a[0], a[1]), inner),
            steps,
            _jsync,
        ),
        "flax-posenc functional: jax.jit(partial(fp.block.transformer_input, spec))(params, ...) (README path)": (
            looped(lambda a: functional(params, a[0], start=a[1]), inner),
            steps,
            _jsync,
        ),
        "hand-written word[ids] + wpe[t], tables as arguments (jax.jit)": (
            looped(lambda a: by_hand(params, a[0], a[1]), inner),
            steps,
            _jsync,
        ),
        "hand-written word[ids] + wpe[t], tables closed over (jax.jit)": (
            looped(lambda a: by_hand_const(a[0], a[1]), inner),
            steps,
            _jsync,
        ),
    }
    times = interleaved(cands, rounds=rounds, calls=5 if quick else 15)
    return [
        dict(r, dtype="float32", us=True)
        for r in rows_for(
            "decode step (batch 1, one token, traced start, guard on)", times, (load0, loadavg()), per_call=inner
        )
    ]


def training_section(quick: bool, rounds: int) -> list[dict]:
    """value_and_grad of sum(x**2) to both tables, guard on, vs hand-written take+add and PyTorch."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from flax import nnx

    import flax_posenc as fp

    batch, seq, dim, vocab, positions = (2, 128, 64, 1000, 256) if quick else (16, 1024, 768, 50257, 1024)
    load0 = loadavg()
    rng = np.random.default_rng(3)
    ids_np = [rng.integers(0, vocab, (batch, seq), dtype=np.int32) for _ in range(3)]
    ids = [jnp.asarray(x) for x in ids_np]
    block = fp.nnx.TransformerInput.from_arguments(vocab, dim, num_positions=positions, rngs=nnx.Rngs(0))
    params = block.params()
    spec = block.spec
    pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))

    def loss_ours(p, x):  # traced position_ids: the guard runs
        return jnp.sum(jnp.square(fp.block.transformer_input(spec, p, x, position_ids=pos)))

    def loss_plain(p, x):
        y = jnp.take(p["word_embeddings"], x, axis=0) + jnp.take(p["position_embeddings"], pos, axis=0)
        return jnp.sum(jnp.square(y))

    ours = jax.jit(jax.value_and_grad(loss_ours))
    plain = jax.jit(jax.value_and_grad(loss_plain))
    device, tsync = _torch_device()
    wte = torch.nn.Embedding(vocab, dim).to(device)
    wpe = torch.nn.Embedding(positions, dim).to(device)
    with torch.no_grad():
        wte.weight.copy_(torch.from_numpy(np.asarray(params["word_embeddings"])))
        wpe.weight.copy_(torch.from_numpy(np.asarray(params["position_embeddings"])))
    tids = [torch.from_numpy(x.astype(np.int64)).to(device) for x in ids_np]
    tpos = torch.from_numpy(np.asarray(pos, np.int64)).to(device)

    def hf(x):
        wte.weight.grad = wpe.weight.grad = None
        loss = (wte(x) + wpe(tpos)).square().sum()
        loss.backward()
        return loss

    v0, g0 = ours(params, ids[0])
    v1, g1 = plain(params, ids[0])
    same = all(np.array_equal(np.asarray(g0[k]), np.asarray(g1[k])) for k in g1)
    hf(tids[0])
    close = np.allclose(np.asarray(g0["word_embeddings"]), wte.weight.grad.cpu().numpy(), rtol=1e-5, atol=1e-4)
    cands = {
        "flax-posenc functional value_and_grad, guard on (jax.jit)": (lambda x: ours(params, x), ids, _jsync),
        "hand-written jnp.take + add value_and_grad (jax.jit)": (lambda x: plain(params, x), ids, _jsync),
        "PyTorch nn.Embedding wte+wpe forward + backward": (hf, tids, tsync),
    }
    times = interleaved(cands, rounds=rounds, calls=3 if quick else 5)
    note = {
        "flax-posenc functional value_and_grad, guard on (jax.jit)": dict(
            note=f"grads bit-equal to hand-written: {same}; to PyTorch within 1e-5: {close}"
        )
    }
    return [
        dict(r, dtype="float32")
        for r in rows_for("training step (forward + backward to both tables)", times, (load0, loadavg()), **note)
    ]


def sinusoid_section(quick: bool, rounds: int) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import flax_posenc as fp

    batch, seq, dim = (2, 128, 64) if quick else (16, 1024, 768)
    load0 = loadavg()
    rng = np.random.default_rng(1)
    positions = [jnp.asarray(rng.integers(0, 2**24, (batch, seq)), jnp.int32) for _ in range(4)]
    w = jnp.asarray(fp.sinusoidal_frequencies(dim), jnp.float32)

    @jax.jit
    def naive(p):
        angle = p[..., None].astype(jnp.float32) * w
        return jnp.stack([jnp.sin(angle), jnp.cos(angle)], -1).reshape(*p.shape, dim)

    exact = jax.jit(lambda p: fp.sinusoidal_encoding(p, dim))
    p_np = np.asarray(positions[0], np.float64)
    ref = np.empty(p_np.shape + (dim,))
    angle = p_np[..., None] * fp.sinusoidal_frequencies(dim)
    ref[..., 0::2], ref[..., 1::2] = np.sin(angle), np.cos(angle)
    cands = {
        "exact sinusoidal_encoding": (exact, positions, _jsync),
        "naive float32 sin(p * w)": (naive, positions, _jsync),
    }
    times = interleaved(cands, rounds=rounds, calls=3 if quick else 7)
    notes = {
        k: dict(note=f"max error {float(np.abs(np.asarray(f(positions[0]), np.float64) - ref).max()):.2e}")
        for k, (f, _, _) in cands.items()
    }
    return [
        dict(r, dtype="float32")
        for r in rows_for("sinusoids at traced positions < 2**24", times, (load0, loadavg()), **notes)
    ]


def rope_section(quick: bool, rounds: int) -> list[dict]:
    """RoPE on q and k: prefill (static positions arange(T)) and traced positions, vs HF Llama."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    import flax_posenc as fp

    batch, seq, heads, head_dim = (2, 128, 4, 64) if quick else (4, 1024, 16, 128)
    loadavg()
    rng = np.random.default_rng(2)
    cfg = fp.RopeConfig(head_dim=head_dim, rope_theta=500000.0)
    qk_np = [rng.standard_normal((2, batch, seq, heads, head_dim), dtype=np.float32) for _ in range(3)]
    starts = [int(s) for s in rng.integers(0, 2**20, 3)]
    static = [jnp.asarray(x) for x in qk_np]
    traced = [(jnp.asarray(x), jnp.asarray(s + np.arange(seq), jnp.int32)) for x, s in zip(qk_np, starts)]
    inv = jnp.asarray(fp.rope_inverse_frequencies(cfg)[0], jnp.float32)

    prefill = jax.jit(lambda qk: fp.apply_rope_qk(qk[0], qk[1], cfg))  # default positions: known, host float64
    decode = jax.jit(lambda a: fp.apply_rope_qk(a[0][0], a[0][1], cfg, a[1]))

    def naive_rope(qk, pos):
        angle = pos[:, None].astype(jnp.float32) * inv
        cos, sin = jnp.cos(angle)[:, None, :], jnp.sin(angle)[:, None, :]
        x1, x2 = qk[..., : head_dim // 2], qk[..., head_dim // 2 :]
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    naive_static = jax.jit(lambda qk: naive_rope(qk, jnp.arange(seq)))
    naive_traced = jax.jit(lambda a: naive_rope(*a))
    hf_config = LlamaConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        head_dim=head_dim,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    device, tsync = _torch_device()
    emb = LlamaRotaryEmbedding(hf_config).to(device)
    hf_static = [
        (torch.from_numpy(x.transpose(0, 1, 3, 2, 4).copy()).to(device), torch.arange(seq, device=device)[None])
        for x in qk_np
    ]
    hf_traced = [
        (
            torch.from_numpy(x.transpose(0, 1, 3, 2, 4).copy()).to(device),
            torch.from_numpy((s + np.arange(seq))[None]).to(device),
        )
        for x, s in zip(qk_np, starts)
    ]

    def hf(args):
        qk, pos = args
        with torch.no_grad():
            cos, sin = emb(qk, pos)
            return apply_rotary_pos_emb(qk[0], qk[1], cos, sin)

    def reference(start):
        angle = (start + np.arange(seq, dtype=np.float64))[:, None] * fp.rope_inverse_frequencies(cfg)[0]
        x1, x2 = qk_np[0][..., : head_dim // 2].astype(np.float64), qk_np[0][..., head_dim // 2 :].astype(np.float64)
        c, s_ = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        return np.concatenate([x1 * c - x2 * s_, x2 * c + x1 * s_], axis=-1)

    def error(out, start):
        got = (
            np.stack([np.asarray(o, np.float64) for o in out])
            if isinstance(out, tuple)
            else np.asarray(out, np.float64)
        )
        if isinstance(out, tuple) and isinstance(out[0], torch.Tensor):
            got = np.stack([o.cpu().numpy() for o in out]).transpose(0, 1, 3, 2, 4)
        return f"max error vs float64 {float(np.abs(got - reference(start)).max()):.1e}"

    rows = []
    for section, cands, start in (
        (
            "RoPE prefill: q and k at positions arange(T) (static)",
            {
                "flax-posenc apply_rope_qk (host float64 cos/sin)": (prefill, static, _jsync),
                "naive float32 cos(p * w) (jax.jit)": (naive_static, static, _jsync),
                "Hugging Face Llama rotary + apply_rotary_pos_emb (PyTorch)": (hf, hf_static, tsync),
            },
            0,
        ),
        (
            "RoPE at traced positions < 2**20 (decode-style)",
            {
                "flax-posenc apply_rope_qk (exact angles)": (decode, traced, _jsync),
                "naive float32 cos(p * w) (jax.jit)": (naive_traced, traced, _jsync),
                "Hugging Face Llama rotary + apply_rotary_pos_emb (PyTorch)": (hf, hf_traced, tsync),
            },
            starts[0],
        ),
    ):
        load = loadavg()
        times = interleaved(cands, rounds=rounds, calls=3 if quick else 5)
        notes = {k: dict(note=error(f(data[0]), start)) for k, (f, data, _) in cands.items()}
        rows += [dict(r, dtype="float32") for r in rows_for(section, times, (load, loadavg()), **notes)]
    return rows


def compile_section(quick: bool, rounds: int) -> list[dict]:
    """Seconds to lower + compile a fresh jit of each function (no cache): median of 5 per round."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import flax_posenc as fp

    batch, seq, dim, vocab, positions = (2, 128, 64, 1000, 256) if quick else (16, 1024, 768, 50257, 1024)
    heads, head_dim = (4, 64) if quick else (16, 128)
    load0 = loadavg()
    ids = jnp.zeros((batch, seq), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))
    qk = jnp.zeros((batch, seq, heads, head_dim), jnp.float32)
    cfg = fp.RopeConfig(head_dim=head_dim)
    # an abstract argument: lowering with ``pos[0]`` ran (and compiled) the eager slice inside the
    # timed call after every ``jax.clear_caches()``, ~50 ms charged to traced RoPE before 2026-11-30
    pos_shape = jax.ShapeDtypeStruct((seq,), jnp.int32)

    def block_fn(kind, traced):
        b = fp.nnx.TransformerInput.from_arguments(vocab, dim, num_positions=positions, position=kind, rngs=nnx.Rngs(0))
        spec, params = b.spec, b.params()
        if traced:
            return lambda: (
                jax.jit(lambda p, x, q: fp.block.transformer_input(spec, p, x, position_ids=q))
                .lower(params, ids, pos)
                .compile()
            )
        return lambda: jax.jit(lambda p, x: fp.block.transformer_input(spec, p, x)).lower(params, ids).compile()

    from compile_baselines import naive_rope as make_naive_rope
    from compile_baselines import plain_embed_block

    plain, s2 = plain_embed_block(vocab, dim, positions)
    naive_rope = make_naive_rope(cfg, seq)

    cands = {
        "flax-posenc block, learned": block_fn("learned", False),
        "flax-posenc block, sinusoidal (static positions)": block_fn("sinusoidal", False),
        "flax-posenc block, sinusoidal (traced position_ids)": block_fn("sinusoidal", True),
        "plain nnx.Embed block": lambda: jax.jit(plain).lower(s2, ids).compile(),
        "flax-posenc apply_rope (static positions)": lambda: (
            jax.jit(lambda x: fp.apply_rope(x, cfg)).lower(qk).compile()
        ),
        "flax-posenc apply_rope (traced positions)": lambda: (
            jax.jit(lambda x, p: fp.apply_rope(x, cfg, p)).lower(qk, pos_shape).compile()
        ),
        "naive RoPE (float32 cos/sin on device)": lambda: jax.jit(naive_rope).lower(qk).compile(),
    }

    def fresh(f):  # no in-memory cache: every call traces, lowers and compiles again
        def run(_):
            jax.clear_caches()
            return f()

        return run

    # A single compile varies by up to 2x from one to the next on the same input (allocator and
    # thread-pool state), so a round's time is the median of 5 fresh compiles (1 with --quick).
    calls = 1 if quick else 5
    times = interleaved({k: (fresh(f), [None], lambda _: None) for k, f in cands.items()}, rounds=rounds, calls=calls)
    return [
        dict(r, dtype="float32")
        for r in rows_for("compile time (lower + compile, fresh jit)", times, (load0, loadavg()))
    ]


def curves_section(quick: bool, rounds: int) -> list[dict]:
    """Time vs sequence length, batch and vocabulary for the block and RoPE (one process)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    import flax_posenc as fp

    rng = np.random.default_rng(4)
    dim, heads, head_dim = (64, 2, 64) if quick else (768, 8, 128)
    seqs = (128, 512) if quick else (128, 256, 512, 1024, 2048, 4096, 8192)
    batches = (1, 2) if quick else (1, 2, 4, 8, 16)
    vocabs = (1000, 4000) if quick else (1000, 8000, 32000, 50257, 128000)
    rows = []
    blocks = {}

    def block(vocab, positions):
        key = (vocab, positions)
        if key not in blocks:
            b = fp.nnx.TransformerInput.from_arguments(vocab, dim, num_positions=positions, rngs=nnx.Rngs(0))
            blocks[key] = (b.spec, b.params(), jax.jit(fp.block.transformer_input, static_argnums=0))
        return blocks[key]

    cfg = fp.RopeConfig(head_dim=head_dim)
    rope = jax.jit(lambda x: fp.apply_rope(x, cfg))
    points = []
    for seq in seqs:
        points.append(("seq", seq, 1, 50257 if not quick else 1000))
    for batch in batches:
        points.append(("batch", 1024 if not quick else 128, batch, 50257 if not quick else 1000))
    for vocab in vocabs:
        points.append(("vocab", 1024 if not quick else 128, 4 if not quick else 1, vocab))
    for axis, seq, batch, vocab in points:
        load0 = loadavg()
        spec, params, fn = block(vocab, max(seqs))
        ids = [jnp.asarray(rng.integers(0, vocab, (batch, seq)), jnp.int32) for _ in range(2)]
        qk = [jnp.asarray(rng.standard_normal((batch, seq, heads, head_dim), dtype=np.float32)) for _ in range(2)]
        cands = {"block": (lambda x: fn(spec, params, x), ids, _jsync)}
        if axis != "vocab":
            cands["RoPE"] = (rope, qk, _jsync)
        times = interleaved(cands, rounds=rounds, calls=3 if quick else 5)
        for r in rows_for("cost curves", times, (load0, loadavg())):
            rows.append(dict(r, dtype="float32", axis=axis, seq=seq, batch=batch, vocab=vocab))
    return rows


SECTIONS = ("block", "decode", "training", "sinusoid", "rope", "compile", "curves")


def child(quick: bool, rounds: int, sections) -> None:
    print(json.dumps(run_sections(quick, rounds, sections)))


def run_sections(quick: bool, rounds: int, sections) -> list[dict]:
    funcs = dict(
        block=block_section,
        decode=decode_section,
        training=training_section,
        sinusoid=sinusoid_section,
        rope=rope_section,
        compile=compile_section,
        curves=curves_section,
    )
    rows = []
    for name in sections:
        rows += funcs[name](quick, rounds)
    return rows


def machine() -> str:
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, jax {jax.__version__} on {jax.default_backend()}, Python {platform.python_version()}"


def fmt_ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def _find(rows, section_prefix, name, dtype="float32"):
    for r in rows:
        if r["section"].startswith(section_prefix) and r["name"] == name and r.get("dtype", "float32") == dtype:
            return r["runs"]
    return None


def ratio(rows, a, b) -> list[float] | None:
    """Per-round ratio time(a) / time(b); a and b are (section prefix, name, dtype)."""
    ta, tb = _find(rows, *a), _find(rows, *b)
    if ta is None or tb is None:
        return None
    return [x / y for x, y in zip(ta, tb)]


HF = "Hugging Face GPT-2 wte+wpe (PyTorch)"
OURS = "flax-posenc learned (jax.jit + split/merge)"
FLOOR = "floor: XLA elementwise a+1 (fresh output)"
HF_ROPE = "Hugging Face Llama rotary + apply_rotary_pos_emb (PyTorch)"
TARGETS = (  # (label, numerator, denominator, target) — the ratio numerator/denominator per round
    (
        "float32 block: HF PyTorch / ours (>= 2)",
        ("input block", HF, "float32"),
        ("input block", OURS, "float32"),
        ">= 2",
    ),
    (
        "float32 block: ours / XLA floor (<= 1.15)",
        ("input block", OURS, "float32"),
        ("input block", FLOOR, "float32"),
        "<= 1.15",
    ),
    (
        "bfloat16 block: HF PyTorch / ours (>= 1)",
        ("input block", HF, "bfloat16"),
        ("input block", OURS, "bfloat16"),
        ">= 1",
    ),
    (
        "bfloat16 block: ours / hand-written jnp.take + add",
        ("input block", OURS, "bfloat16"),
        ("input block", "hand-written jnp.take + add (jax.jit)", "bfloat16"),
        "",
    ),
    (
        "float32 block: ours / hand-written jnp.take + add",
        ("input block", OURS, "float32"),
        ("input block", "hand-written jnp.take + add (jax.jit)", "float32"),
        "",
    ),
    (
        "decode: functional / hand-written, tables as arguments (<= 1.15)",
        (
            "decode",
            "flax-posenc functional: jax.jit(partial(fp.block.transformer_input, spec))(params, ...) (README path)",
        ),
        ("decode", "hand-written word[ids] + wpe[t], tables as arguments (jax.jit)"),
        "<= 1.15",
    ),
    (
        "decode: functional / hand-written, tables closed over",
        (
            "decode",
            "flax-posenc functional: jax.jit(partial(fp.block.transformer_input, spec))(params, ...) (README path)",
        ),
        ("decode", "hand-written word[ids] + wpe[t], tables closed over (jax.jit)"),
        "",
    ),
    (
        "decode: nnx.merge path / hand-written, tables as arguments",
        ("decode", "flax-posenc nnx.merge under jax.jit"),
        ("decode", "hand-written word[ids] + wpe[t], tables as arguments (jax.jit)"),
        "",
    ),
    (
        "training: PyTorch / ours (>= 2)",
        ("training", "PyTorch nn.Embedding wte+wpe forward + backward"),
        ("training", "flax-posenc functional value_and_grad, guard on (jax.jit)"),
        ">= 2",
    ),
    (
        "training: ours / hand-written take+add (<= 1.1)",
        ("training", "flax-posenc functional value_and_grad, guard on (jax.jit)"),
        ("training", "hand-written jnp.take + add value_and_grad (jax.jit)"),
        "<= 1.1",
    ),
    (
        "exact / naive sinusoids (<= 1)",
        ("sinusoids", "exact sinusoidal_encoding"),
        ("sinusoids", "naive float32 sin(p * w)"),
        "<= 1",
    ),
    (
        "RoPE prefill: HF PyTorch / ours (>= 1)",
        ("RoPE prefill", HF_ROPE),
        ("RoPE prefill", "flax-posenc apply_rope_qk (host float64 cos/sin)"),
        ">= 1",
    ),
    (
        "RoPE traced: HF PyTorch / ours",
        ("RoPE at traced", HF_ROPE),
        ("RoPE at traced", "flax-posenc apply_rope_qk (exact angles)"),
        "",
    ),
    (
        "compile: learned block / plain nnx.Embed (<= 1.5)",
        ("compile", "flax-posenc block, learned"),
        ("compile", "plain nnx.Embed block"),
        "<= 1.5",
    ),
    (
        "compile: sinusoidal static block / plain nnx.Embed (<= 1.5)",
        ("compile", "flax-posenc block, sinusoidal (static positions)"),
        ("compile", "plain nnx.Embed block"),
        "<= 1.5",
    ),
    (
        "compile: sinusoidal traced block / plain nnx.Embed (<= 1.5)",
        ("compile", "flax-posenc block, sinusoidal (traced position_ids)"),
        ("compile", "plain nnx.Embed block"),
        "<= 1.5",
    ),
    (
        "compile: apply_rope static / naive RoPE (<= 1.5)",
        ("compile", "flax-posenc apply_rope (static positions)"),
        ("compile", "naive RoPE (float32 cos/sin on device)"),
        "<= 1.5",
    ),
    (
        "compile: apply_rope traced / naive RoPE (<= 1.5)",
        ("compile", "flax-posenc apply_rope (traced positions)"),
        ("compile", "naive RoPE (float32 cos/sin on device)"),
        "<= 1.5",
    ),
)


def target_ratios(rows) -> dict[str, dict]:
    """Every target ratio found in ``rows``: per-round values, median, range, and whether the whole range meets it."""
    out = {}
    for label, a, b, target in TARGETS:
        values = ratio(rows, a, b)
        if values is None:
            continue
        met = None
        if target:
            op, bound = target.split()
            met = all(v >= float(bound) for v in values) if op == ">=" else all(v <= float(bound) for v in values)
        out[label] = dict(
            values=values, median=statistics.median(values), min=min(values), max=max(values), target=target, met=met
        )
    return out


def report(results: dict[str, list[dict]]) -> str:
    envs = list(results)
    lines = [f"Machine: {machine()}", f"Rounds per candidate: {len(results[envs[0]][0]['runs'])} (interleaved)", ""]
    base = results[envs[0]]
    sections = dict.fromkeys(r["section"] for r in base if r["section"] != "cost curves")
    for section in sections:
        lines.append(f"## {section}")
        loads = "; ".join(f"{e}: load {next(r['load'] for r in results[e] if r['section'] == section)}" for e in envs)
        lines.append(f"(load average before/after: {loads})")
        unit = (
            "us"
            if any(r.get("us") for r in base if r["section"] == section)
            else ("s" if section.startswith("compile") else "ms")
        )
        scale = {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
        header = "| candidate | dtype | " + " | ".join(f"{e}: {unit} median [range]" for e in envs) + " | note |"
        lines += [header, "|" + "---|" * (3 + len(envs))]
        for i, r in enumerate(base):
            if r["section"] != section:
                continue
            cells = []
            for e in envs:
                runs = [t * scale for t in results[e][i]["runs"]]
                cells.append(f"{statistics.median(runs):.3g} [{min(runs):.3g}-{max(runs):.3g}]")
            lines.append(f"| {r['name']} | {r.get('dtype', '')} | " + " | ".join(cells) + f" | {r.get('note', '')} |")
        lines.append("")
    curves = [r for r in base if r["section"] == "cost curves"]
    if curves:
        lines.append("## cost curves (ms, median [range]; block: GPT-2 shaped learned block, RoPE: 8 heads x 128)")
        lines += [
            "| axis | seq | batch | vocab | candidate | " + " | ".join(envs) + " |",
            "|" + "---|" * (5 + len(envs)),
        ]
        for i, r in enumerate(base):
            if r["section"] != "cost curves":
                continue
            cells = []
            for e in envs:
                runs = [t * 1e3 for t in results[e][i]["runs"]]
                cells.append(f"{statistics.median(runs):.3g} [{min(runs):.3g}-{max(runs):.3g}]")
            lines.append(
                f"| {r['axis']} | {r['seq']} | {r['batch']} | {r['vocab']} | {r['name']} | " + " | ".join(cells) + " |"
            )
        lines.append("")
    lines.append("## Ratios (the issue's targets): median [min-max] over rounds; met only if the whole range is")
    for e in envs:
        lines.append(f"- {e}:")
        for label, t in target_ratios(results[e]).items():
            verdict = "" if t["met"] is None else (" MET" if t["met"] else " not met")
            lines.append(f"  - {label}: {fmt_ratio(t['values'])}{verdict}")
    return "\n".join(lines)


def figure(results: dict[str, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env = list(results)[0]
    rows = [r for r in results[env] if r["section"] == "cost curves"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, axis, key in zip(axes, ("seq", "batch", "vocab"), ("seq", "batch", "vocab")):
        for name, marker in (("block", "o"), ("RoPE", "s")):
            pts = [
                (r[key], statistics.median(r["runs"]) * 1e3) for r in rows if r["axis"] == axis and r["name"] == name
            ]
            if not pts:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker=marker, label=name)
            if axis != "vocab" and len(xs) > 1:  # the linear fit through the origin and the largest point
                ax.plot(xs, [ys[-1] * x / xs[-1] for x in xs], ":", color="gray")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(axis)
        ax.set_ylabel("ms (median)")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(f"flax-posenc cost curves ({env}; dotted: linear through the largest point)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, default environment only (smoke test)")
    parser.add_argument(
        "--single", action="store_true", help="default environment only (GPU runs: benchmarks/device.sh)"
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds (>= 3 for a range)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--figure", help="write the cost-curve figure (PNG) here")
    parser.add_argument("--json", help="also write the raw rows (per environment) here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; expected a subset of {SECTIONS}")
    if args.child:
        child(args.quick, args.rounds, sections)
        return
    single = args.quick or args.single
    envs = {"default malloc": {}} if single else {"default malloc": {}, "MALLOC_* opt-in": MALLOC_OPT_IN}
    results = {}
    if args.quick:  # one environment, the default one: no child process needed, no settling pauses
        global SETTLE_S
        SETTLE_S = 0.0
        envs, results["default malloc"] = {}, run_sections(True, args.rounds, sections)
    for name, extra in envs.items():
        env = {**os.environ, **extra}
        cmd = [sys.executable, __file__, "--child", "--rounds", str(args.rounds), "--sections", ",".join(sections)]
        out = subprocess.run(cmd + (["--quick"] if args.quick else []), env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"benchmark child ({name}) failed:\n{out.stderr[-3000:]}")
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "targets": {e: target_ratios(r) for e, r in results.items()}}, f, indent=1)
    if args.figure:
        figure(results, args.figure)


if __name__ == "__main__":
    main()
