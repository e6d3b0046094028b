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


# ----------------------------------------------------------------------------- LongRoPE's switch


class _PinnedRope(fp.RopeConfig):
    """A ``longrope`` config whose frequencies do not follow the length: the short set (or the long
    set, copied into ``short_factor``) at every position, so decoding needs no ``seq_len``."""

    @property
    def needs_length(self) -> bool:
        return False


def pinned_ropes(rope: fp.RopeConfig) -> tuple[fp.RopeConfig, fp.RopeConfig]:
    """``(short, long)``: ``rope`` (LongRoPE) pinned to its short factors and to its long ones.

    Raises:
      ValueError: not a ``longrope`` config (no long factors to switch to).
    """
    if rope.rope_type != "longrope" or rope.long_factor is None:
        raise ValueError(
            f"rope: a LongRoPE switch needs rope_type 'longrope' with long_factor, got rope_type {rope.rope_type!r}"
        )
    fields = {f: getattr(rope, f) for f in rope.__dataclass_fields__}
    return _PinnedRope(**fields), _PinnedRope(**{**fields, "short_factor": rope.long_factor})


def _split_with_rope(model, rope):
    """``nnx.split(model)`` with every ``rope`` attribute equal to ``model.rope`` set to ``rope``."""
    old = model.rope
    nodes = [node for _, node in nnx.iter_graph(model) if getattr(node, "rope", None) == old]
    for node in nodes:
        node.rope = rope
    try:
        return nnx.split(model)
    finally:
        for node in nodes:
            node.rope = old


def switch_cache(cache, rope: fp.RopeConfig, *, length: int):
    """Re-rotate the keys of a cache written with LongRoPE's short factors to its long ones.

    ``cache``: a pytree with ``"k"`` leaves ``(..., batch, slots, kv_heads, head_dim)``, slot ``i``
    at position ``i``; ``length``: the ``seq_len`` the keys were rotated at (at most
    ``original_max_position_embeddings``). Exactly the keys a new prefill past the switch would
    make (:func:`flax_posenc.rotate_keys` with ``to_seq_len = original + 1``).
    """
    original = rope.original_max_position_embeddings

    def switch(path, x):
        if getattr(path[-1], "key", None) != "k":
            return x
        where = np.arange(x.shape[x.ndim - 3])
        return fp.rotate_keys(x, 0, rope, positions=where, seq_len=length, to_seq_len=original + 1).astype(x.dtype)

    return jax.tree_util.tree_map_with_path(switch, cache)


def generate_longrope(
    model, prompt_ids, max_new_tokens: int, *, at_switch: str = "rotate", return_logits: bool = False
):
    """Greedy decoding across LongRoPE's switch, the cache re-rotated instead of a new prefill.

    The prompt (unpadded rows of one length) and the tokens up to position
    ``original_max_position_embeddings - 1`` use the short factors; before the token at position
    ``original_max_position_embeddings`` every cached key moves to the long factors
    (:func:`switch_cache`), and decoding goes on with them: transformers' Phi-3 drops its cache
    there and runs a new prefill with the long factors (``Phi3ForCausalLM.prepare_inputs_for_generation``).
    Layer 0's keys are then exactly the prefill's; deeper layers keep the values they computed
    with the short factors in view (``docs/serving.md`` measures both). ``at_switch="prefill"``
    does what transformers does instead (a new prefill of the ``original`` tokens with the long
    factors, inside the same program): equal for any depth.

    Returns:
      ``(batch, prompt_len + max_new_tokens)`` ids (and the new tokens' logits with ``return_logits``).

    Raises:
      ValueError: not a LongRoPE model, a padded prompt, ``max_new_tokens`` < 1, an unknown ``at_switch``.
      PositionLimitError: the whole sequence past the model's limit.
    """
    prompt = np.asarray(prompt_ids)
    if prompt.ndim != 2 or not np.issubdtype(prompt.dtype, np.integer) or prompt.shape[1] == 0:
        raise ValueError(f"prompt_ids: expected (batch, prompt_len) integer ids, got shape {prompt.shape}")
    steps = _count("max_new_tokens", max_new_tokens, 1)
    if at_switch not in ("rotate", "prefill"):
        raise ValueError(f"at_switch: expected 'rotate' (re-rotate the cached keys) or 'prefill', got {at_switch!r}")
    short, long = pinned_ropes(model.rope)
    limit = model.rope.limit
    total = prompt.shape[1] + steps
    if limit is not None and total > limit:
        raise fp.PositionLimitError(
            f"max_new_tokens: {fp.describe_limit('longrope RoPE', limit)}; a prompt of {prompt.shape[1]} tokens "
            f"plus max_new_tokens={steps} needs {total}, {total - limit} past the end"
        )
    short_def, state = _split_with_rope(model, short)
    long_def, _ = _split_with_rope(model, long)
    ids, logits = _decode_longrope(
        short_def, long_def, model.rope, steps, at_switch == "prefill", state, jnp.asarray(prompt, jnp.int32)
    )
    ids = jnp.concatenate([jnp.asarray(prompt, jnp.int32), ids], axis=1)
    return (ids, logits) if return_logits else ids


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _decode_longrope(short_def, long_def, rope, steps: int, prefill: bool, state, prompt):
    batch, prompt_len = prompt.shape
    original = rope.original_max_position_embeddings
    short, long = nnx.merge(short_def, state), nnx.merge(long_def, state)
    first_model = short if prompt_len <= original else long
    logits, cache = first_model(prompt, None, cache=first_model.init_cache(batch, prompt_len + steps), start=0)
    last = logits[:, -1].astype(jnp.float32)
    token = jnp.argmax(last, axis=-1).astype(jnp.int32)
    out = jnp.zeros((batch, steps), jnp.int32).at[:, 0].set(token)
    all_logits = jnp.zeros((batch, steps, last.shape[-1]), jnp.float32).at[:, 0].set(last)

    def run(model):
        def step(i, carry):  # feed new token i - 1 at position prompt_len + i - 1
            token, cache, out, all_logits = carry
            logits, cache = model(token[:, None], None, cache=cache, start=prompt_len + i - 1)
            last = logits[:, -1].astype(jnp.float32)
            token = jnp.argmax(last, axis=-1).astype(jnp.int32)
            return token, cache, out.at[:, i].set(token), all_logits.at[:, i].set(last)

        return step

    carry = (token, cache, out, all_logits)
    switch = max(1, min(steps, original - prompt_len + 1))  # the first i fed at position >= original
    if prompt_len <= original:
        carry = jax.lax.fori_loop(1, switch, run(short), carry)
        if switch < steps and prefill:  # transformers' way: a new prefill of the first `original` tokens
            token, cache, out, all_logits = carry
            seen = jnp.concatenate([prompt, out[:, : original - prompt_len]], axis=1)
            _, cache = long(seen, None, cache=long.init_cache(batch, prompt_len + steps), start=0)
            carry = (token, cache, out, all_logits)
        elif switch < steps:  # the switch: the cached keys move to the long factors
            token, cache, out, all_logits = carry
            carry = (token, switch_cache(cache, rope, length=original), out, all_logits)
    carry = jax.lax.fori_loop(switch, steps, run(long), carry)
    return carry[2], carry[3]
