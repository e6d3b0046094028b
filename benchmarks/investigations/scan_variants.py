"""Decode-step variants of the scanned Llama (issue 38 item 2), interleaved in one process.

    L=30 VARS=scan,noslice,unroll2,ynn_off,ynn_dot,mulred,unrolled R=5 N=5 python benchmarks/investigations/scan_variants.py
    L=30 VARS='scan,fused,unrolled,unrolled:xla_backend_optimization_level=0' python benchmarks/investigations/scan_variants.py

SmolLM2-shaped layers (random weights), batch 4, 96 cache slots, one token per step. Variants:
``scan`` (examples/models/llama.py as is: stacked weights, one lax.scan); ``noslice`` (the same scan
with one unstacked layer's weights closed over: no per-layer weight slice; wrong numbers, and the
one layer stays in cache, so a lower bound); ``unrollK`` (``lax.scan(unroll=K)``); ``ynn_off`` /
``ynn_dot`` (``compiler_options`` ``xla_cpu_experimental_ynn_fusion_type`` = "" (Eigen dots) /
``LIBRARY_FUSION_TYPE_DOT``); ``mulred`` (every Linear as multiply + sum, so the slice fuses into
the reduction); ``fused`` (q/k/v one matmul, gate/up one: MaxText's ``fused_qkv``/``fused_mlp``);
``unrolled`` (separate per-layer arrays, a Python loop: the structure before issue 38);
``unrolled:FLAG=V;FLAG=V`` (the same, compiled with XLA ``compiler_options``). Per variant: wall and process CPU time per step (CPU time moves less under load), median of
R rounds of N steps, and the ratio to the first variant per round. Not a test.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "models"))
import common
import jax
import jax.numpy as jnp
import llama
from flax import nnx

import flax_posenc as fp

L = int(os.environ.get("L", 30))
VARS = os.environ.get("VARS", "scan,noslice,unrolled").split(",")
config = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=L,
    num_attention_heads=9,
    num_key_value_heads=3,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
rope = fp.RopeConfig(head_dim=64, max_position_embeddings=8192, rope_theta=100000.0)
model = llama.Llama(config, rope, rngs=nnx.Rngs(0))
B, S = 4, 96
mask = jnp.ones((B, S), bool)
tok = jnp.ones((B, 1), jnp.int32)
pos = jnp.full((B, 1), 40, jnp.int32)
graphdef, state = nnx.split(model)
cache = model.init_cache(B, S)
t = jnp.int32(40)


def f_scan(state, cache, t):
    return nnx.merge(graphdef, state)(tok, mask, cache=cache, start=t, positions=pos)


orig_call = common.Linear.__call__


def mulred_call(self, x):
    k = self.kernel[...]
    y = jnp.sum(x[..., :, None] * k, axis=-2)
    return y if self.bias is None else y + self.bias[...]


lg, lstate = nnx.split(model.layers)
per_layer = (
    [jax.tree.map(lambda x: jnp.array(x[i]), lstate) for i in range(L)]
    if any(v.startswith("unrolled") for v in VARS)
    else None
)


def f_unrolled(state, layers, cache, t):
    m = nnx.merge(graphdef, state)
    x = m.embed(tok)
    msk = common.causal_mask(1, S, start=t, key_mask=mask)
    ks, vs = [], []
    for i in range(L):
        x, c = nnx.merge(lg, layers[i])(
            x, mask=msk, layer_cache={"k": cache["k"][i], "v": cache["v"][i]}, start=t, positions=pos
        )
        ks.append(c["k"])
        vs.append(c["v"])
    return m.embed.attend(m.norm(x)), {"k": jnp.stack(ks), "v": jnp.stack(vs)}


def make_scan_layers(mode, unroll=1):
    def scan_layers(layers, x, input_ids, *, cache=None, start=0, attention_mask=None, **layer_kwargs):
        k_len = input_ids.shape[1] if cache is None else cache["k"].shape[2]
        mask_ = common.causal_mask(input_ids.shape[1], k_len, start=start, key_mask=attention_mask)
        gd, st = nnx.split(layers)
        count = jax.tree.leaves(st)[0].shape[0]
        if mode == "noslice":
            fixed = jax.tree.map(lambda a: a[0], st)

        def body(carry, xs):
            x, cache = carry
            layer_state, index = xs if mode != "noslice" else (fixed, xs)
            layer_cache = None if cache is None else {**cache, "layer": index}
            x, cache = nnx.merge(gd, layer_state)(x, mask=mask_, layer_cache=layer_cache, start=start, **layer_kwargs)
            return (x, cache), None

        xs = (st, jnp.arange(count)) if mode != "noslice" else jnp.arange(count)
        (x, cache), _ = jax.lax.scan(body, (x, cache), xs, unroll=unroll)
        return x, cache

    return scan_layers


def fused_scan_layers(layers, qkv_w, gu_w, x, *, cache, start, attention_mask, positions):
    """``fused``: q/k/v as one matmul and gate/up as one (MaxText's fused_qkv / fused_mlp), the
    fused kernels stacked (layers, 576, 960) and (layers, 576, 3072), concatenated once outside
    the step; the same numbers."""
    mask_ = common.causal_mask(x.shape[1], cache["k"].shape[2], start=start, key_mask=attention_mask)
    gd, st = nnx.split(layers)
    count = qkv_w.shape[0]

    def body(carry, xs):
        x, cache = carry
        layer_state, qkv, gu, index = xs
        layer = nnx.merge(gd, layer_state)  # its q/k/v/gate/up kernels unused: their slices are dead code
        at = layer.self_attn
        b, s_, _ = x.shape
        hd = at.head_dim
        y = layer.input_layernorm(x) @ qkv
        q = y[..., : at.heads * hd].reshape(b, s_, at.heads, hd)
        k = y[..., at.heads * hd : (at.heads + at.kv_heads) * hd].reshape(b, s_, at.kv_heads, hd)
        v = y[..., (at.heads + at.kv_heads) * hd :].reshape(b, s_, at.kv_heads, hd)
        q, k = fp.apply_rope_qk(q, k, at.rope, positions, start=start)
        new_cache, k, v = common.cache_update({**cache, "layer": index}, k, v, start)
        x = x + at.o_proj(common.attention(q, k, v, mask=mask_).reshape(b, s_, -1))
        g, u = jnp.split(layer.post_attention_layernorm(x) @ gu, 2, axis=-1)
        return (x + layer.down_proj(jax.nn.silu(g) * u), new_cache), None

    (x, cache), _ = jax.lax.scan(body, (x, cache), (st, qkv_w, gu_w, jnp.arange(count)))
    return x, cache


def compile_patched(scan_fn):
    orig = common.scan_layers
    common.scan_layers = scan_fn

    def f(state, cache, t):
        return nnx.merge(graphdef, state)(tok, mask, cache=cache, start=t, positions=pos)

    try:
        return jax.jit(f).lower(state, cache, t).compile()
    finally:
        common.scan_layers = orig


fns = {}


def compile_variant(name):
    t0 = time.perf_counter()
    if name == "scan":
        c = jax.jit(f_scan).lower(state, cache, t).compile()
        args = (state, cache, t)
    elif name in ("ynn_off", "ynn_dot"):
        value = "" if name == "ynn_off" else "LIBRARY_FUSION_TYPE_DOT"
        opts = {"xla_cpu_experimental_ynn_fusion_type": value}
        c = jax.jit(f_scan).lower(state, cache, t).compile(compiler_options=opts)
        args = (state, cache, t)
    elif name.startswith("flag:"):
        opts = {}
        for kv in name[5:].split(";"):
            k, v = kv.split("=", 1)
            opts[k] = {"True": True, "False": False}.get(v, v)
        c = jax.jit(f_scan).lower(state, cache, t).compile(compiler_options=opts)
        args = (state, cache, t)
    elif name == "fused":
        lay = model.layers
        at = lay.self_attn
        qkv_w = jnp.concatenate([at.q_proj.kernel[...], at.k_proj.kernel[...], at.v_proj.kernel[...]], axis=-1)
        gu_w = jnp.concatenate([lay.gate_proj.kernel[...], lay.up_proj.kernel[...]], axis=-1)

        def f_fused(state, qkv_w, gu_w, cache, t):
            m = nnx.merge(graphdef, state)
            x, cache = fused_scan_layers(
                m.layers, qkv_w, gu_w, m.embed(tok), cache=cache, start=t, attention_mask=mask, positions=pos
            )
            return m.embed.attend(m.norm(x)), cache

        c = jax.jit(f_fused).lower(state, qkv_w, gu_w, cache, t).compile()
        args = (state, qkv_w, gu_w, cache, t)
    elif name == "noslice":
        c = compile_patched(make_scan_layers("noslice"))
        args = (state, cache, t)
    elif name.startswith("unroll") and name[6:].isdigit():
        c = compile_patched(make_scan_layers("xs", int(name[6:])))
        args = (state, cache, t)
    elif name == "mulred":
        common.Linear.__call__ = mulred_call

        def f_mulred(state, cache, t):
            return nnx.merge(graphdef, state)(tok, mask, cache=cache, start=t, positions=pos)

        try:
            c = jax.jit(f_mulred).lower(state, cache, t).compile()
            args = (state, cache, t)
        finally:
            common.Linear.__call__ = orig_call
    elif name == "unrolled" or name.startswith("unrolled:"):
        opts = {}
        for kv in name[9:].split(";") if ":" in name else []:
            k, v = kv.split("=", 1)
            opts[k] = {"True": True, "False": False}.get(v, v)
        c = jax.jit(f_unrolled).lower(state, per_layer, cache, t).compile(compiler_options=opts or None)
        args = (state, per_layer, cache, t)
    print(f"{name}: compile {time.perf_counter() - t0:.1f} s", flush=True)
    if os.environ.get("DUMP"):
        open(f"{os.environ['DUMP']}/{name.replace(':', '_').replace('=', '_')}.hlo", "w").write(c.as_text())
    return c, args


ref = None
for name in VARS:
    c, args = compile_variant(name)
    out = c(*args)
    if ref is None:
        ref = out[0]
    print(f"  max |logits - {VARS[0]}| = {float(jnp.abs(out[0] - ref).max()):.2e}", flush=True)
    fns[name] = (c, args)

N = int(os.environ.get("N", 10))
cpu = {k: [] for k in VARS}


def bench(c, args, n=N, name=None):
    jax.block_until_ready(c(*args))
    t0 = time.perf_counter()
    p0 = time.process_time()
    for _ in range(n):
        out = c(*args)
    jax.block_until_ready(out)
    cpu[name].append((time.process_time() - p0) / n)
    return (time.perf_counter() - t0) / n


res = {k: [] for k in fns}
R = int(os.environ.get("R", 5))
for r in range(R):
    for name, (c, args) in fns.items():
        res[name].append(bench(c, args, name=name))
    print(
        f"round {r}: " + " ".join(f"{k} {v[-1] * 1e3:.1f}" for k, v in res.items()),
        "load",
        os.getloadavg()[0],
        flush=True,
    )
base = VARS[0]
for k, v in res.items():
    ratios = [a / b for a, b in zip(v, res[base])]
    print(
        f"{k}: median {statistics.median(v) * 1e3:.1f} ms  min {min(v) * 1e3:.1f}  ratio to {base} median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
    )
for k, v in cpu.items():
    ratios = [a / b for a, b in zip(v, cpu[base])]
    print(
        f"{k}: cpu median {statistics.median(v) * 1e3:.1f} ms  min {min(v) * 1e3:.1f}  ratio to {base} median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
    )
