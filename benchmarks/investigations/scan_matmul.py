"""30 chained (4, 576) x (576, 1536) matmuls, each layer's weight taken four ways (issue 38 item 2).

    R=15 python benchmarks/investigations/scan_matmul.py

``F``: static slices ``W[i]`` of one stacked array in a Python loop; ``A``: ``W[i]`` with a traced
``i`` in a ``fori_loop`` (XLA CPU copies the slice out, then the dot); ``B``: the transposed stack,
multiply + sum (the slice fuses into the reduction); ``C``: 30 separate arrays, a Python loop (no
slice); ``D``: ``A`` on the transposed stack. Wall and process CPU time per call, medians of R
rounds of 20 calls, interleaved. Not a test.
"""

import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

L, B, DIN, DOUT = 30, 4, 576, 1536
rng = np.random.default_rng(0)
W = jnp.asarray(rng.standard_normal((L, DIN, DOUT), np.float32) * 0.02)
WT = jnp.asarray(np.ascontiguousarray(np.swapaxes(np.asarray(W), 1, 2)))
Ws = [jnp.asarray(np.asarray(W[i])) for i in range(L)]
x = jnp.asarray(rng.standard_normal((B, DIN), np.float32))


def norm(y):
    y = y[:, :DIN]
    return y * jax.lax.rsqrt(jnp.mean(y * y, -1, keepdims=True))


def A(W, x):
    return jax.lax.fori_loop(0, L, lambda i, x: norm(x @ W[i]), x)


def Bf(WT, x):
    return jax.lax.fori_loop(0, L, lambda i, x: norm(jnp.sum(x[:, None, :] * WT[i][None], -1)), x)


def C(Ws, x):
    for w in Ws:
        x = norm(x @ w)
    return x


def D(WT, x):
    return jax.lax.fori_loop(0, L, lambda i, x: norm(jnp.einsum("bi,oi->bo", x, WT[i])), x)


def E(WT, x):  # reduce with precision highest & HIGHEST dot
    return jax.lax.fori_loop(0, L, lambda i, x: norm(jax.lax.dot_general(x, WT[i], (((1,), (1,)), ((), ())))), x)


def F(W, x):
    for i in range(L):
        x = norm(x @ W[i])
    return x


progs = {
    "F static W[i]": (jax.jit(F), W),
    "A dot W[i]": (jax.jit(A), W),
    "B mulred WT[i]": (jax.jit(Bf), WT),
    "C unrolled": (jax.jit(C), Ws),
    "D dot WT[i]": (jax.jit(D), WT),
}
ref = None
for k, (f, w) in progs.items():
    y = f(w, x)
    ref = y if ref is None else ref
    print(k, float(jnp.abs(y - ref).max()))
res = {k: [] for k in progs}
cpu = {k: [] for k in progs}
for _ in range(int(os.environ.get("R", 7))):
    for k, (f, w) in progs.items():
        f(w, x).block_until_ready()
        t0 = time.perf_counter()
        p0 = time.process_time()
        for _ in range(20):
            y = f(w, x)
        y.block_until_ready()
        pass
        res[k].append((time.perf_counter() - t0) / 20 * 1e3)
        cpu[k].append((time.process_time() - p0) / 20 * 1e3)
print("load", os.getloadavg())
for k in progs:
    print(
        f"{k}: wall median {statistics.median(res[k]):.2f} ms min {min(res[k]):.2f}; cpu median {statistics.median(cpu[k]):.2f} min {min(cpu[k]):.2f}"
    )
