"""Positions while serving: a context shift with attention sinks for the example RoPE decoders.

When the KV cache of ``window`` slots is full, :func:`shift_cache` keeps the first
``sink_tokens`` slots (StreamingLLM's attention sinks), drops the ``(window - sink_tokens) // 2``
oldest tokens after them (llama.cpp's context shift) and moves the rest back, re-rotating their
keys with :func:`flax_posenc.rotate_keys` (exact angles: the keys equal RoPE applied at their new
positions within float32 rounding). Positions then never pass ``window - 1``: decoding goes on
past the model's limit. The cache is any pytree whose ``"k"``/``"v"`` leaves are ``(...,
batch, slots, kv_heads, head_dim)`` (a list of per-layer dicts, or the layers stacked on a
leading axis), so this does not depend on how a model holds its layers.

What it equals. Layer 0's keys and values depend only on the token and its position, so after a
shift they are exactly those of a new prefill of the kept tokens at their new positions; deeper
layers' cached keys and values were computed with the dropped tokens in view (as in llama.cpp and
StreamingLLM), which a new prefill would not see. ``tests/test_serving.py`` checks a one-layer
Llama against transformers' ``LlamaForCausalLM`` re-run on the kept tokens at every step (logits
within 1e-5 of their scale, the same greedy ids); ``docs/serving.md`` has the numbers.

    ids = generate_with_sinks(model, prompt_ids, 64, sink_tokens=4, window=32)
    ids = llama.generate(model, prompt_ids, 64, sink_tokens=4, window=32)   # the same
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import flax_posenc as fp


def _count(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}: expected a Python int >= {low}, got {value!r}")
    return int(value)


def check_sinks(sink_tokens, window, *, prompt_len: int, rope) -> tuple[int, int, int]:
    """``(sink_tokens, window, drop)`` checked on the host, before compiling (one line each).

    Raises:
      ValueError: counts that are not ints, sinks that leave fewer than 2 droppable slots, a
        prompt longer than the window, a rope whose frequencies depend on the length.
      PositionLimitError: a window past the rope's limit.
    """
    sink_tokens, window = _count("sink_tokens", sink_tokens, 0), _count("window", window, 2)
    if sink_tokens + 2 > window:
        raise ValueError(
            f"sink_tokens: expected at most window - 2 = {window - 2} (sinks plus at least two droppable slots in "
            f"the cache of {window}), got {sink_tokens}"
        )
    if prompt_len > window:
        raise ValueError(f"window: expected at least the prompt's {prompt_len} tokens, got {window}")
    if not isinstance(rope, fp.RopeConfig):
        raise TypeError(f"model: a context shift needs a RopeConfig model (rotate_keys), got {type(rope).__name__}")
    if rope.needs_length:
        raise ValueError(
            f"window: a context shift keeps positions below window, but rope_type {rope.rope_type!r} changes its "
            "frequencies with the length; use a rope whose frequencies are fixed"
        )
    if rope.limit is not None and window > rope.limit:
        raise fp.PositionLimitError(
            f"window: {fp.describe_limit(f'{rope.rope_type} RoPE', rope.limit)}; a cache window of {window} "
            f"positions needs {window}, {window - rope.limit} past the end"
        )
    return sink_tokens, window, (window - sink_tokens) // 2


def shift_cache(cache, rope: fp.RopeConfig, *, sink_tokens: int, drop: int):
    """Drop slots ``sink_tokens .. sink_tokens + drop - 1`` of a full cache and move the rest back.

    Args:
      cache: a pytree whose leaves under a ``"k"`` key are RoPE-rotated keys and under ``"v"``
        values, each ``(..., batch, slots, kv_heads, head_dim)``; slot ``i`` holds position ``i``.
      rope: the keys' :class:`~flax_posenc.RopeConfig`.
      sink_tokens, drop: static ints.

    Returns:
      The cache with the kept slots ``0 .. slots - drop - 1`` (keys re-rotated by ``-drop``:
      :func:`flax_posenc.rotate_keys`) and zeros in the last ``drop`` slots.
    """

    def shift(path, x):
        axis = x.ndim - 3
        slots = x.shape[axis]
        sinks = jax.lax.slice_in_dim(x, 0, sink_tokens, axis=axis)
        moved = jax.lax.slice_in_dim(x, sink_tokens + drop, slots, axis=axis)
        if getattr(path[-1], "key", None) == "k":
            where = np.arange(sink_tokens + drop, slots)  # static: the correcting angle on the host, float64
            moved = fp.rotate_keys(moved, -drop, rope, positions=where).astype(x.dtype)
        empty = jnp.zeros(x.shape[:axis] + (drop,) + x.shape[axis + 1 :], x.dtype)
        return jnp.concatenate([sinks, moved, empty], axis=axis)

    return jax.tree_util.tree_map_with_path(shift, cache)


def generate_with_sinks(
    model,
    prompt_ids,
    max_new_tokens: int,
    *,
    sink_tokens: int,
    window: int,
    attention_mask=None,
    eos_token_id=None,
    pad_token_id=None,
    return_logits: bool = False,
):
    """Greedy decoding in a cache of ``window`` slots with attention sinks and a context shift.

    ``model`` is an NNX RoPE decoder of the examples (``model(ids, mask, cache=, start=) ->
    (logits, cache)``, ``model.init_cache``, ``model.rope``, ``model.vocab_size``). The prompt
    (every row of one length: no padding) is prefilled at positions ``0 ..``; whenever the cache
    is full, :func:`shift_cache` runs before the next token. One ``jit`` per prompt length and
    ``max_new_tokens``.

    Returns:
      ``(batch, prompt_len + max_new_tokens)`` ids (rows that produced ``eos_token_id`` continue
      with ``pad_token_id``), and with ``return_logits`` the logits of every new token
      ``(batch, max_new_tokens, vocab)`` too.

    Raises:
      ValueError, PositionLimitError: see :func:`check_sinks`; a padded batch; ``max_new_tokens`` < 1.
    """
    prompt = np.asarray(prompt_ids)
    if prompt.ndim != 2 or not np.issubdtype(prompt.dtype, np.integer) or prompt.shape[1] == 0:
        raise ValueError(f"prompt_ids: expected (batch, prompt_len) integer ids, got shape {prompt.shape}")
    if attention_mask is not None and not np.all(np.asarray(attention_mask) == 1):
        raise ValueError("attention_mask: a context shift keeps one cache layout for every row; pass unpadded rows")
    steps = _count("max_new_tokens", max_new_tokens, 1)
    sinks, window, drop = check_sinks(sink_tokens, window, prompt_len=prompt.shape[1], rope=model.rope)
    eos = -1 if eos_token_id is None else int(eos_token_id)
    pad = eos if pad_token_id is None else int(pad_token_id)
    graphdef, state = nnx.split(model)
    ids, logits = _decode(graphdef, sinks, window, drop, steps, state, jnp.asarray(prompt, jnp.int32), eos, max(pad, 0))
    ids = jnp.concatenate([jnp.asarray(prompt, jnp.int32), ids], axis=1)
    return (ids, logits) if return_logits else ids


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _decode(graphdef, sinks: int, window: int, drop: int, steps: int, state, prompt, eos, pad):
    model = nnx.merge(graphdef, state)
    batch, prompt_len = prompt.shape
    logits, cache = model(prompt, None, cache=model.init_cache(batch, window), start=0)
    last = logits[:, -1].astype(jnp.float32)
    token = jnp.argmax(last, axis=-1).astype(jnp.int32)
    out = jnp.zeros((batch, steps), jnp.int32).at[:, 0].set(token)
    all_logits = jnp.zeros((batch, steps, last.shape[-1]), jnp.float32).at[:, 0].set(last)

    def step(i, carry):
        token, cache, n, out, all_logits, done = carry
        cache, n = jax.lax.cond(
            n == window,
            lambda c: (shift_cache(c, model.rope, sink_tokens=sinks, drop=drop), n - drop),
            lambda c: (c, n),
            cache,
        )
        logits, cache = model(token[:, None], None, cache=cache, start=n)
        last = logits[:, -1].astype(jnp.float32)
        token = jnp.where(done, pad, jnp.argmax(last, axis=-1).astype(jnp.int32))
        out = out.at[:, i].set(token)
        return token, cache, n + 1, out, all_logits.at[:, i].set(last), done | (token == eos)

    carry = (token, cache, jnp.int32(prompt_len), out, all_logits, token == eos)
    _, _, _, out, all_logits, _ = jax.lax.fori_loop(1, steps, step, carry)
    return out, all_logits
