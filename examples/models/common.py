"""Pieces the reference models share: reading a checkpoint, layers, attention, the KV cache,
greedy decoding (ragged batches, stopping, length buckets), one training step and the command line.

Everything here is either a pure function of arrays (attention, masks, norms, the cache update:
usable from NNX and Linen alike) or a small NNX module holding parameters with logical axis
names (``"embed"``, ``"heads"``, ``"kv"``, ``"mlp"``, ``"vocab"``) so a model shards with rules
such as ``(("heads", "model"), ("kv", "model"), ("mlp", "model"))`` (see ``docs/models.md``).

Shapes: activations are ``(batch, seq, width)``; queries/keys/values ``(batch, seq, heads,
head_dim)`` (Flax's attention layout, the one :func:`flax_posenc.apply_rope` expects). The decoders
stack their layers (:func:`stacked`, run by :func:`scan_layers`; Linen: ``nn.scan``) and their cache
is ``{"k", "v"}`` of ``(layers, batch, max_len, kv_heads, head_dim)`` (:func:`init_stacked_cache`);
with ``scan_layers=False`` (:func:`make_layers`) they hold separate per-layer modules, run by
:func:`run_layers` with :func:`init_cache`, one ``{"k", "v"}`` per layer.

>>> import jax.numpy as jnp
>>> q = k = v = jnp.ones((1, 3, 2, 4))
>>> attention(q, k, v, mask=causal_mask(3, 3, start=0)).shape
(1, 3, 2, 4)
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import flax_posenc as fp
from flax_posenc.conversion import open_checkpoint
from flax_posenc.limits import describe_limit
from flax_posenc.pretrained import device_array

# ----------------------------------------------------------------------------- checkpoints


def refuse_gguf(path) -> None:
    """One ``CheckpointError`` line for a GGUF file: the example models read Hugging Face
    checkpoints only (``docs/models.md`` says how to turn a GGUF into one)."""
    if str(path).lower().endswith(".gguf"):
        raise fp.CheckpointError(
            f"{path}: expected a Hugging Face checkpoint directory (config.json + model.safetensors), found a GGUF "
            "file, which the example models do not read (docs/models.md: from a GGUF to a checkpoint directory)"
        )


class Weights:
    """A Hugging Face checkpoint read with :func:`flax_posenc.conversion.open_checkpoint`: its
    config and its tensors under the base model's key prefix.

    Tensors are read one at a time as float32 numpy (safetensors: only that tensor's bytes;
    ``.bin`` only with ``weights_only=True``); no transformers, no torch for safetensors.

    Args:
      path: checkpoint directory (``config.json`` + weights) or anything
        :func:`flax_posenc.conversion.open_checkpoint` accepts.
      prefixes: candidate key prefixes of the base model (``"transformer."`` in a
        ``GPT2LMHeadModel`` checkpoint, none in a ``GPT2Model`` one); the first one under which
        ``probe`` exists is used.
      probe: a key every checkpoint of the family holds (without prefix).

    Raises:
      CheckpointError: unreadable checkpoint, none of the prefixes holds ``probe``, a missing
        tensor (one line naming the file and the tensor).
    """

    def __init__(self, path, *, prefixes: tuple[str, ...], probe: str):
        refuse_gguf(path)
        self.path = path
        self.checkpoint = open_checkpoint(path)
        self.config = self.checkpoint.config
        found = [p for p in prefixes if p + probe in self.checkpoint]
        if not found:
            raise fp.CheckpointError(
                f"{self.checkpoint.weights_path}: expected a tensor {probe!r} under one of the prefixes "
                f"{prefixes}, found none of {[p + probe for p in prefixes]} among its {len(self.checkpoint)} tensors"
            )
        self.prefix = found[0]

    def has(self, key: str, *, prefixed: bool = True) -> bool:
        return (self.prefix + key if prefixed else key) in self.checkpoint

    def __call__(self, key: str, *, transpose: bool = False, prefixed: bool = True) -> np.ndarray:
        """The tensor ``prefix + key`` as float32 (``transpose``: a torch Linear's ``(out, in)``
        weight as a Flax kernel ``(in, out)``)."""
        value = np.asarray(self.checkpoint.tensor(self.prefix + key if prefixed else key), np.float32)
        return value.T if transpose else value


class LayerWeights:
    """The tensors of ``count`` layers ``template.format(i) + key``, stacked on a leading axis
    ``(count, ...)``: what a layer stack (:func:`stacked`) loads, with the ``Weights`` interface.
    With ``index``: layer ``index``'s tensors alone, unstacked (one module of :func:`make_layers`' list)."""

    def __init__(self, weights: Weights, template: str, count: int, *, index: int | None = None):
        self.weights, self.template, self.count, self.index = weights, template, count, index

    def has(self, key: str, *, prefixed: bool = True) -> bool:
        return self.weights.has(self.template.format(self.index or 0) + key, prefixed=prefixed)

    def __call__(self, key: str, *, transpose: bool = False, prefixed: bool = True) -> np.ndarray:
        if self.index is not None:
            return self.weights(self.template.format(self.index) + key, transpose=transpose, prefixed=prefixed)
        first = self.weights(self.template.format(0) + key, transpose=transpose, prefixed=prefixed)
        out = np.empty((self.count, *first.shape), first.dtype)
        out[0] = first
        for i in range(1, self.count):
            out[i] = self.weights(self.template.format(i) + key, transpose=transpose, prefixed=prefixed)
        return out


def assign(param: nnx.Param, value: np.ndarray, name: str) -> None:
    """Set a parameter (concrete, or abstract from ``nnx.eval_shape``) from a checkpoint array,
    in the parameter's dtype, refusing a shape mismatch with one line."""
    if tuple(param.shape) != tuple(value.shape):
        raise ValueError(f"{name}: expected shape {tuple(param.shape)}, found {tuple(value.shape)}")
    param.set_value(device_array(value, param.dtype))  # an aligned host copy, adopted by JAX


def abstract(make, dtype=jnp.float32, *, seed: int = 0):
    """``make()`` built with ``nnx.eval_shape``: every parameter a ``ShapeDtypeStruct`` of ``dtype``
    (floating ones), nothing initialised; fill them with :func:`assign`, then :func:`check_filled`.

    RNG streams (dropout's, which no checkpoint holds) are made concrete: counts 0, keys drawn from
    ``seed`` (one per stream and per layer of a stack)."""
    dtype = float_dtype(dtype)  # floating dtypes only: one line otherwise
    model = nnx.eval_shape(make)
    for _, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        value = variable.get_value()
        if jnp.issubdtype(value.dtype, jnp.floating) and value.dtype != dtype:
            variable.set_value(jax.ShapeDtypeStruct(value.shape, dtype))
    for i, (_, variable) in enumerate(nnx.to_flat_state(nnx.state(model, nnx.RngState))):
        value = variable.get_value()
        if isinstance(variable, nnx.RngKey):
            keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), i), max(1, math.prod(value.shape)))
            variable.set_value(keys.reshape(value.shape))
        else:
            variable.set_value(jnp.zeros(value.shape, value.dtype))
    model.dtype = dtype
    return model


def check_filled(model, path) -> None:
    """Refuse (one line) a model built by :func:`abstract` with a parameter the checkpoint did not fill."""
    for key, variable in nnx.to_flat_state(nnx.state(model)):
        if isinstance(variable.get_value(), jax.ShapeDtypeStruct):
            name = ".".join(map(str, key))
            raise fp.CheckpointError(f"{path}: expected a tensor for the parameter {name}, found none")


def param(value: jax.Array, axes: tuple) -> nnx.Param:
    """A parameter carrying logical axis names (read by ``nnx.get_partition_spec``)."""
    return nnx.Param(value, out_sharding=axes, eager_sharding=False)


# ----------------------------------------------------------------------------- layers (NNX)


class Linear(nnx.Module):
    """``x @ kernel + bias``; ``kernel`` is ``(d_in, d_out)`` with logical axes ``axes``."""

    def __init__(self, d_in: int, d_out: int, axes: tuple, *, bias: bool = True, rngs: nnx.Rngs):
        self.kernel = param(nnx.initializers.normal(0.02)(rngs.params(), (d_in, d_out)), axes)
        self.bias = param(jnp.zeros((d_out,)), axes[1:]) if bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        y = x @ self.kernel[...]
        return y if self.bias is None else y + self.bias[...]

    def load(self, weights: Weights, key: str, *, transpose: bool = True) -> None:
        """From ``key.weight`` (a torch ``(out, in)`` Linear unless ``transpose=False``) and ``key.bias``."""
        assign(self.kernel, weights(key + ".weight", transpose=transpose), key + ".weight")
        if self.bias is not None:
            assign(self.bias, weights(key + ".bias"), key + ".bias")


class LayerNorm(nnx.Module):
    """LayerNorm (``rms=False``: GPT-2/BERT/BLOOM) or RMSNorm (``rms=True``: Llama) over the width,
    computed in float32 as PyTorch does."""

    def __init__(self, dim: int, eps: float, *, rms: bool = False):
        self.eps, self.rms = eps, rms
        self.scale = param(jnp.ones((dim,)), ("embed",))
        self.bias = None if rms else param(jnp.zeros((dim,)), ("embed",))

    def __call__(self, x: jax.Array) -> jax.Array:
        if not self.rms:
            return fp.block.layer_norm(x, self.scale[...], self.bias[...], self.eps)
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + self.eps)
        return (self.scale[...] * y.astype(x.dtype)).astype(x.dtype)

    def load(self, weights: Weights, key: str, *, scale: str = "weight", bias: str = "bias") -> None:
        assign(self.scale, weights(f"{key}.{scale}"), f"{key}.{scale}")
        if self.bias is not None:
            assign(self.bias, weights(f"{key}.{bias}"), f"{key}.{bias}")


def gelu_tanh(x: jax.Array) -> jax.Array:
    """GPT-2's ``gelu_new`` and BLOOM's gelu: the tanh approximation."""
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gelu_exact(x: jax.Array) -> jax.Array:
    """BERT's gelu (erf)."""
    return jax.nn.gelu(x, approximate=False)


# ----------------------------------------------------------------------------- attention


def run_layers(layers, x, input_ids, *, cache=None, start=0, attention_mask=None, **layer_kwargs):
    """Run decoder ``layers`` over ``x`` with the causal mask; ``(x, new_cache)``.

    ``cache`` is one ``{"k", "v"}`` dict per layer (or ``None`` without a cache); the tokens are
    written at cache slot ``start`` (a Python int or traced), keys may be masked with
    ``attention_mask`` ``(batch, keys)``; ``layer_kwargs`` (per-row ``positions``, ALiBi's
    ``key_positions``) go to every layer.
    """
    k_len = input_ids.shape[1] if cache is None else cache[0]["k"].shape[1]
    mask = causal_mask(input_ids.shape[1], k_len, start=start, key_mask=attention_mask)
    new_cache = []
    for i, layer in enumerate(layers):
        x, layer_cache = layer(
            x, mask=mask, layer_cache=None if cache is None else cache[i], start=start, **layer_kwargs
        )
        new_cache.append(layer_cache)
    return x, new_cache


def stacked(make, count: int, rngs: nnx.Rngs):
    """``count`` layers ``make(rngs)`` as one module whose parameters have a leading layer axis
    (``nnx.vmap`` over split rngs: MaxText's ``scan_layers``); run it with :func:`scan_layers`.
    The layer axis carries no logical name (``None``: replicated, never sharded)."""

    @nnx.split_rngs(splits=count)
    @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: None})
    def create(rngs):
        return make(rngs)

    return create(rngs)


def make_layers(make, count: int, rngs: nnx.Rngs, *, scan: bool = True):
    """The decoder's ``count`` layers ``make(rngs)``: one stacked module (``scan=True``, the default:
    :func:`stacked`, one compiled layer whatever ``count``) or an ``nnx.List`` of separate modules
    (``scan=False``: MaxText's ``scan_layers=False``; the program holds every layer, so its compile
    grows with ``count``, but each layer's weights are arrays of their own, which XLA CPU's dots
    read in place instead of copying them out of a stack every step). Run either with
    :func:`apply_layers`, load either with :func:`load_layers`, cache with :func:`layers_cache`."""
    if scan:
        return stacked(make, count, rngs)
    return nnx.List([make(rngs) for _ in range(count)])


def apply_layers(layers, x, input_ids, **kwargs):
    """Run :func:`make_layers`' result: :func:`scan_layers` for a stack, :func:`run_layers` for a list."""
    return (run_layers if isinstance(layers, nnx.List) else scan_layers)(layers, x, input_ids, **kwargs)


def layers_cache(layers, count: int, batch: int, max_len: int, kv_heads: int, head_dim: int, dtype) -> dict | list:
    """An empty cache for :func:`make_layers`' result: :func:`init_stacked_cache` for a stack,
    :func:`init_cache` (one ``{"k", "v"}`` per layer) for a list."""
    make = init_cache if isinstance(layers, nnx.List) else init_stacked_cache
    return make(count, batch, max_len, kv_heads, head_dim, dtype)


def load_layers(layers, weights: Weights, template: str, count: int, load) -> None:
    """Fill :func:`make_layers`' result from ``template.format(i)`` tensors: ``load(module, source)`` once
    with every layer's tensors stacked (a stack) or once per layer with its own (a list)."""
    if isinstance(layers, nnx.List):
        for i, layer in enumerate(layers):
            load(layer, LayerWeights(weights, template, count, index=i))
    else:
        load(layers, LayerWeights(weights, template, count))


def scan_layers(layers, x, input_ids, *, cache=None, start=0, attention_mask=None, **layer_kwargs):
    """:func:`run_layers` for a layer stack (:func:`stacked`): one ``lax.scan`` over the layers, so
    the program holds one layer whatever their number (compile time does not grow with it).

    ``cache`` is ``{"k", "v"}`` of ``(layers, batch, slots, kv_heads, head_dim)``
    (:func:`init_stacked_cache`) or ``None``; returns ``(x, new_cache)``.
    """
    k_len = input_ids.shape[1] if cache is None else cache["k"].shape[2]
    mask = causal_mask(input_ids.shape[1], k_len, start=start, key_mask=attention_mask)
    # rngs: the layers' dropout streams (none in Llama); written back only when a layer drew from
    # them (training), so that eval mode mutates nothing (e.g. a model closed over by jax.jit)
    graphdef, state, rngs = nnx.split(layers, nnx.Not(nnx.RngState), nnx.RngState)
    drawn = []

    def body(carry, xs):  # the whole cache rides in the carry: each layer writes its slot in place
        x, cache = carry
        layer_state, layer_rngs, index = xs
        layer_cache = None if cache is None else {**cache, "layer": index}
        before = jax.tree.leaves(layer_rngs)  # (merge shares layer_rngs' variables: read them first)
        layer = nnx.merge(graphdef, layer_state, layer_rngs)
        x, cache = layer(x, mask=mask, layer_cache=layer_cache, start=start, **layer_kwargs)
        new_rngs = nnx.state(layer, nnx.RngState)
        drawn.append(any(a is not b for a, b in zip(before, jax.tree.leaves(new_rngs))))
        return (x, cache), new_rngs

    count = jax.tree.leaves(state)[0].shape[0]
    (x, cache), rngs = jax.lax.scan(body, (x, cache), (state, rngs, jnp.arange(count)))
    if any(drawn):
        nnx.update(layers, rngs)
    return x, cache


def causal_mask(q_len: int, k_len: int, *, start: int | jax.Array = 0, key_mask: jax.Array | None = None) -> jax.Array:
    """``(batch|1, 1, q_len, k_len)`` booleans: query ``i`` (at position ``start + i``) sees key ``j``
    iff ``j <= start + i`` (and ``key_mask[b, j]``). Cache slots not yet written lie after every
    query, so the same mask hides them."""
    allowed = jnp.arange(k_len)[None, :] <= start + jnp.arange(q_len)[:, None]
    allowed = allowed[None, None]
    if key_mask is not None:
        allowed = allowed & key_mask.astype(bool)[:, None, None, :]
    return allowed


def padding_mask(attention_mask: jax.Array, q_len: int) -> jax.Array:
    """``(batch, 1, q_len, k_len)``: bidirectional attention to every real (mask 1) key (BERT)."""
    return jnp.broadcast_to(
        attention_mask.astype(bool)[:, None, None, :], (attention_mask.shape[0], 1, q_len, attention_mask.shape[1])
    )


def attention(q, k, v, *, mask: jax.Array, bias: jax.Array | None = None, dropout=None) -> jax.Array:
    """Softmax attention, float32 scores: ``softmax(q k^T / sqrt(d) + bias, masked) v``.

    Args:
      q: ``(batch, q_len, heads, d)``; k, v: ``(batch, k_len, kv_heads, d)`` with ``heads`` a
        multiple of ``kv_heads`` (grouped-query attention repeats each kv head).
      mask: booleans broadcastable to ``(batch, heads, q_len, k_len)``; False hides a key.
      bias: added to the scores (ALiBi), broadcastable like ``mask``.
      dropout: applied to the attention probabilities (an ``nnx.Dropout``, off in eval mode).

    Returns:
      ``(batch, q_len, heads, d)``. A query whose keys are all masked gets a uniform average
      (never NaN), as Hugging Face's ``finfo.min`` masks do.
    """
    groups = q.shape[2] // k.shape[2]
    if groups > 1:
        k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / np.float32(math.sqrt(q.shape[-1]))
    if bias is not None:
        scores = scores + bias.astype(jnp.float32)
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    if dropout is not None:
        probs = dropout(probs)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


# ----------------------------------------------------------------------------- KV cache


def init_cache(layers: int, batch: int, max_len: int, kv_heads: int, head_dim: int, dtype=jnp.float32) -> list[dict]:
    """An empty cache: per layer ``{"k", "v"}`` of zeros ``(batch, max_len, kv_heads, head_dim)``."""
    shape = (batch, max_len, kv_heads, head_dim)
    return [{"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)} for _ in range(layers)]


def init_stacked_cache(layers: int, batch: int, max_len: int, kv_heads: int, head_dim: int, dtype=jnp.float32) -> dict:
    """An empty cache of a layer stack: ``{"k", "v"}`` of zeros ``(layers, batch, max_len, kv_heads, head_dim)``."""
    shape = (layers, batch, max_len, kv_heads, head_dim)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


def cache_update(layer_cache: dict | None, k: jax.Array, v: jax.Array, start: int | jax.Array):
    """Write this step's ``k, v`` at ``start`` (static or traced); return the new layer cache and
    the keys/values to attend to (the whole cache, or just ``k, v`` without one). A stacked cache
    (``{"k", "v", "layer"}``, :func:`scan_layers`) is returned whole, layer ``layer`` written."""
    if layer_cache is None:
        return None, k, v
    if "layer" in layer_cache:  # a stacked cache (layers, batch, slots, heads, d): write this layer's slot
        i = layer_cache["layer"]
        at = (i, 0, start, 0, 0)
        new = {
            "k": jax.lax.dynamic_update_slice(layer_cache["k"], k.astype(layer_cache["k"].dtype)[None], at),
            "v": jax.lax.dynamic_update_slice(layer_cache["v"], v.astype(layer_cache["v"].dtype)[None], at),
        }
        return new, new["k"][i], new["v"][i]
    index = (0, start, 0, 0)
    new = {
        "k": jax.lax.dynamic_update_slice(layer_cache["k"], k.astype(layer_cache["k"].dtype), index),
        "v": jax.lax.dynamic_update_slice(layer_cache["v"], v.astype(layer_cache["v"].dtype), index),
    }
    return new, new["k"], new["v"]


# ----------------------------------------------------------------------------- decoding


#: the most positions a sequence may reach on device (int32 positions), with no model limit (ALiBi)
MAX_POSITIONS = 2**31 - 1


def check_generation_length(prompt_len: int, max_new_tokens: int, limit: int | None, what: str) -> None:
    """Raise :class:`~flax_posenc.PositionLimitError` before compiling unless the whole sequence
    (the longest real prompt + new tokens) fits ``limit`` positions (``None``: no limit)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected a positive Python integer, got {max_new_tokens!r}")
    if limit is None and prompt_len + max_new_tokens > MAX_POSITIONS:  # positions are int32 on device
        raise ValueError(
            f"max_new_tokens: expected at most {MAX_POSITIONS - prompt_len} (int32 positions: a prompt of "
            f"{prompt_len} tokens plus new tokens up to {MAX_POSITIONS}), got {max_new_tokens}"
        )
    if limit is not None and prompt_len + max_new_tokens > limit:
        total = prompt_len + max_new_tokens
        raise fp.PositionLimitError(
            f"{describe_limit(what, limit)}; a prompt of {prompt_len} tokens plus "
            f"max_new_tokens={max_new_tokens} needs {total}, {total - limit} past the end"
        )


def bucket(n: int, minimum: int = 8) -> int:
    """The length bucket of ``n``: the smallest power of two ``>= max(n, minimum)``.

    >>> [bucket(n) for n in (1, 8, 9, 100)]
    [8, 8, 16, 128]
    """
    return max(minimum, 1 << (int(n) - 1).bit_length())


def _token_id(value, name: str, vocab_size: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < vocab_size:
        raise ValueError(f"{name}: expected a token id in 0..{vocab_size - 1} (the vocabulary), got {value!r}")
    return int(value)


class Request:
    """A validated greedy-decoding request, laid out on the host (numpy) for the bucketed program.

    The prompt is left-padded further to its bucket ``prompt_bucket`` (:func:`bucket`), the new
    tokens get ``new_bucket`` cache slots; ``max_new_tokens``, ``eos_token_id`` and
    ``pad_token_id`` travel as arrays, so one compiled program serves every prompt length and
    every ``max_new_tokens`` of a bucket. Every check here is on the host, before compiling.
    """

    def __init__(
        self, prompt_ids, max_new_tokens, *, attention_mask, eos_token_id, pad_token_id, vocab_size, limit, what
    ):
        prompt = _as_prompt(prompt_ids, attention_mask)
        batch, length = prompt.shape
        if attention_mask is None:
            mask = np.ones((batch, length), bool)
        else:
            mask = _left_padded_mask(attention_mask, prompt.shape)
        if prompt.size and (prompt.min() < 0 or prompt.max() >= vocab_size):
            bad = prompt[(prompt < 0) | (prompt >= vocab_size)][0]
            raise ValueError(f"prompt_ids: expected token ids in 0..{vocab_size - 1} (the vocabulary), found {bad}")
        eos = _token_id(eos_token_id, "eos_token_id", vocab_size)
        pad = _token_id(pad_token_id, "pad_token_id", vocab_size)
        pad = eos if pad is None else pad  # transformers: pad_token_id defaults to eos_token_id
        self.lengths = mask.sum(axis=1)
        check_generation_length(int(self.lengths.max()), max_new_tokens, limit, what)
        self.prompt, self.mask, self.max_new_tokens = prompt, mask, int(max_new_tokens)
        self.prompt_bucket, self.new_bucket = bucket(length), bucket(max_new_tokens)
        extra = self.prompt_bucket - length
        fill = 0 if pad is None else pad
        self.padded_prompt = np.pad(prompt, ((0, 0), (extra, 0)), constant_values=fill).astype(np.int32)
        self.padded_mask = np.pad(mask, ((0, 0), (extra, 0)))
        self.scalars = (
            np.int32(self.max_new_tokens),
            np.int32(-1 if eos is None else eos),  # -1: no token stops a row
            np.int32(fill),
        )

    def result(self, new_tokens, steps) -> jax.Array:
        """The prompt as given followed by the ``steps`` new tokens: ``(batch, prompt_len + steps)``."""
        new = np.asarray(new_tokens)[:, : int(steps)]
        return jax.device_put(np.concatenate([self.prompt, new], axis=1).astype(np.int32))  # no compilation


def _as_prompt(prompt_ids, attention_mask) -> np.ndarray:
    if isinstance(prompt_ids, (list, tuple)) and prompt_ids and all(isinstance(r, (list, tuple)) for r in prompt_ids):
        lengths = sorted({len(r) for r in prompt_ids})
        if len(lengths) > 1:
            raise ValueError(
                f"attention_mask: a ragged batch (prompt_ids rows of {lengths[0]} to {lengths[-1]} tokens) needs "
                "left padding to one length and an attention_mask (1 for real tokens, 0 for padding)"
            )
    prompt = np.asarray(prompt_ids)
    if prompt.ndim != 2 or prompt.shape[1] == 0 or not np.issubdtype(prompt.dtype, np.integer):
        raise ValueError(
            f"prompt_ids: expected integer token ids of shape (batch, prompt_len), got dtype {prompt.dtype}, "
            f"shape {tuple(prompt.shape)}"
        )
    return prompt.astype(np.int64)


def _left_padded_mask(attention_mask, shape) -> np.ndarray:
    mask = np.asarray(attention_mask)
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"attention_mask: expected shape {tuple(shape)} like prompt_ids, got {tuple(mask.shape)}")
    if not np.isin(mask, (0, 1)).all():
        raise ValueError(
            f"attention_mask: expected 0 (padding) or 1 (real token), found {mask[~np.isin(mask, (0, 1))][0]!r}"
        )
    mask = mask.astype(bool)
    for row, m in enumerate(mask):
        if not m.any():
            raise ValueError(f"attention_mask: row {row} has no real token (all 0)")
        if (np.diff(m.astype(np.int8)) < 0).any():
            raise ValueError(
                f"attention_mask: expected left padding (0s, then 1s) in every row; row {row} is "
                f"{''.join('1' if v else '0' for v in m)} (a 0 after a 1)"
            )
    return mask


def generate(model, prompt_ids, max_new_tokens: int, *, attention_mask=None, eos_token_id=None, pad_token_id=None):
    """Greedy decoding with a KV cache: one compiled program per length bucket (NNX models).

    ``model`` offers ``model(ids, attention_mask, cache=, start=, positions=) -> (logits, cache)``,
    ``model.init_cache(batch, max_len)`` (the cache in the model's dtype), ``model.vocab_size``
    and ``model.position_limit`` / ``model.limit_name``.

    Args:
      prompt_ids: ``(batch, prompt_len)`` token ids; a ragged batch left-padded to one length.
      max_new_tokens: a Python int, the most new tokens per row.
      attention_mask: ``(batch, prompt_len)``, 1 for real tokens, 0 for the left padding (required
        for a ragged batch). Positions come from it (:func:`flax_posenc.padding_aware_positions`):
        each row's first real token is position 0.
      eos_token_id: a row stops after producing it (the whole call stops when every row has).
      pad_token_id: what follows a stopped row's ``eos_token_id`` (default: ``eos_token_id``).

    Returns:
      ``(batch, prompt_len + steps)`` int: the prompt as given, then the new tokens; ``steps`` is
      ``max_new_tokens``, or fewer when every row stopped earlier. Equal to transformers'
      ``generate(do_sample=False, ...)`` with the same arguments.

    Raises:
      ValueError: a ragged batch without ``attention_mask``, a mask that is not left padding,
        a token id outside the vocabulary (one line naming the argument).
      PositionLimitError: the longest prompt + ``max_new_tokens`` past the model's limit, before
        compiling; the traced positions inside the loop are guarded by the library at run time.
    """
    request = Request(
        prompt_ids,
        max_new_tokens,
        attention_mask=attention_mask,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        vocab_size=model.vocab_size,
        limit=model.position_limit,
        what=model.limit_name,
    )
    graphdef, state = nnx.split(model)
    new, steps = _generate_nnx(
        graphdef, request.new_bucket, state, request.padded_prompt, request.padded_mask, *request.scalars
    )
    return request.result(new, steps)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _generate_nnx(graphdef, new_bucket, state, prompt, mask, max_new_tokens, eos, pad):
    model = nnx.merge(graphdef, state)

    def forward(ids, key_mask, cache, start, positions):
        return model(ids, key_mask, cache=cache, start=start, positions=positions)

    return greedy_decode(forward, model.init_cache, prompt, mask, max_new_tokens, eos, pad, new_bucket)


def greedy_decode(forward, init_cache, prompt, mask, max_new_tokens, eos, pad, new_bucket: int):
    """The decoding loop itself, for any framework (call it inside ``jax.jit``).

    Args:
      forward: ``forward(ids, key_mask, cache, start, positions) -> (logits, cache)``: ``ids``
        written at cache slot ``start`` (traced), at per-row ``positions`` ``(batch, len)``,
        attending to the cache slots where ``key_mask`` ``(batch, slots)`` is true.
      init_cache: ``init_cache(batch, slots)``.
      prompt, mask: ``(batch, prompt_bucket)`` left-padded ids and their mask.
      max_new_tokens, eos, pad: traced int32 scalars (``eos`` -1: never stop).
      new_bucket: static, the cache slots for new tokens (``>= max_new_tokens``).

    One prefill of the prompt (positions from the mask), then a ``lax.while_loop`` feeding the
    last token of every row at slot ``prompt_bucket + i - 1`` and position ``row_length + i - 1``
    until ``max_new_tokens`` tokens or every row has produced ``eos``; a stopped row gets ``pad``.

    Returns:
      ``(new_tokens (batch, new_bucket), steps)``: the first ``steps`` columns are the output.
    """
    batch, prompt_len = prompt.shape
    key_mask = jnp.concatenate([mask, jnp.ones((batch, new_bucket), bool)], axis=1)
    positions = jnp.maximum(fp.padding_aware_positions(mask), 0)  # padding: position 0, as transformers
    logits, cache = forward(prompt, key_mask, init_cache(batch, prompt_len + new_bucket), 0, positions)
    lengths = mask.sum(axis=1, dtype=jnp.int32)[:, None]  # real tokens per row: the next position
    first = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)
    out = jnp.full((batch, new_bucket), pad, jnp.int32).at[:, 0].set(first)

    def keep_going(carry):
        i, _, _, _, done = carry
        return (i < max_new_tokens) & ~done.all()

    def step(carry):
        i, token, cache, out, done = carry  # token: the new token i - 1 of every row
        where = fp.padding_aware_positions(jnp.ones((batch, 1), jnp.int32), start=lengths + i - 1)
        logits, cache = forward(token[:, None], key_mask, cache, prompt_len + i - 1, where)
        token = jnp.where(done, pad, jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32))
        out = jax.lax.dynamic_update_slice(out, token[:, None], (0, i))
        return i + 1, token, cache, out, done | (token == eos)

    carry = (jnp.int32(1), first, cache, out, first == eos)
    steps, _, _, out, _ = jax.lax.while_loop(keep_going, step, carry)
    return out, steps


def float_dtype(dtype) -> np.dtype:
    """``dtype`` as a ``jnp.dtype`` when it is a floating type (parameters, computation and cache).

    Raises ``ValueError`` (one line) for anything else: an integer or boolean dtype would cast
    every weight and generate garbage.

    >>> float_dtype("bfloat16").name
    'bfloat16'
    """
    try:
        got = jnp.dtype(dtype)
    except TypeError:
        got = None
    if got is None or not jnp.issubdtype(got, jnp.floating):
        raise ValueError(
            f"dtype: expected a floating dtype (float32, bfloat16, float16, float64), got {getattr(got, 'name', dtype)!r}"
        )
    return got


def cast_floats(tree, dtype):
    """Every floating array of ``tree`` (an ``nnx.State`` or a variables dict) cast to ``dtype``."""
    dtype = float_dtype(dtype)
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def set_dtype(model, dtype):
    """Cast an NNX model's floating parameters to ``dtype`` in place; its cache follows (``model.dtype``)."""
    nnx.update(model, cast_floats(nnx.state(model), dtype))
    model.dtype = float_dtype(dtype)
    return model


# ----------------------------------------------------------------------------- training


def causal_lm_loss(model, ids: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy of ``ids`` ``(batch, seq)`` under ``model(ids) -> logits``."""
    import optax

    logits = model(ids[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), ids[:, 1:]).mean()


@nnx.jit
def train_step(model, optimizer, ids):
    """One optax step on ``causal_lm_loss`` (call ``model.train()`` first for dropout); returns the loss.

    ``optimizer`` is an ``nnx.Optimizer(model, tx, wrt=nnx.Param)``.
    """
    loss, grads = nnx.value_and_grad(causal_lm_loss)(model, ids)
    optimizer.update(model, grads)
    return loss


def ids_argument(text: str) -> list[int]:
    """Parse ``"15496,11,995"`` (``--prompt-ids``, and the old ``--prompt``) into token ids."""
    try:
        return [int(t) for t in text.replace(" ", ",").split(",") if t]
    except ValueError:
        raise SystemExit(
            f"--prompt-ids: expected comma-separated token ids such as 15496,11,995, got {text!r}"
        ) from None


def looks_like_ids(text: str) -> bool:
    """True for the old ``--prompt`` form: comma-separated integers only (``"15496,11,995"``, ``"0"``)."""
    return bool(re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", text))


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")


def load_tokenizer(path):
    """The checkpoint's own tokenizer (``transformers.AutoTokenizer``), or ``None`` when the
    directory holds no tokenizer file."""
    if not any((Path(path) / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def encode_prompts(tokenizer, texts: list[str], *, chat: bool = True) -> list[list[int]]:
    """Token ids of each text; through the tokenizer's chat template (one user turn and the
    generation prompt) when it has one and ``chat``."""
    rows = []
    for text in texts:
        if chat and getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
            rows.append(list(tokenizer(text, add_special_tokens=False)["input_ids"]))
        else:
            rows.append(list(tokenizer(text)["input_ids"]))
    return rows


def left_pad(rows: list[list[int]], pad_token_id: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, attention_mask)`` of a ragged list of rows, left-padded to the longest."""
    length = max(len(r) for r in rows)
    ids = np.full((len(rows), length), 0 if pad_token_id is None else pad_token_id, np.int64)
    mask = np.zeros((len(rows), length), np.int64)
    for i, row in enumerate(rows):
        if row:
            ids[i, length - len(row) :], mask[i, length - len(row) :] = row, 1
    return ids, mask


def special_ids(path, tokenizer) -> tuple[int | None, int | None]:
    """``(eos_token_id, pad_token_id)`` of a checkpoint: ``generation_config.json``, then
    ``config.json``, then the tokenizer (a list of eos ids: the first)."""
    import json

    found = {}
    for name in ("generation_config.json", "config.json"):
        file = Path(path) / name
        if file.is_file():
            data = json.loads(file.read_text())
            if not isinstance(data, dict):
                raise ValueError(f"{file}: expected a JSON object, found {type(data).__name__}")
            for key in ("eos_token_id", "pad_token_id"):
                if found.get(key) is None and data.get(key) is not None:
                    value = data[key]
                    found[key] = value[0] if isinstance(value, list) and value else value
    if tokenizer is not None:
        for key in ("eos_token_id", "pad_token_id"):
            if found.get(key) is None:
                found[key] = getattr(tokenizer, key, None)
    return found.get("eos_token_id"), found.get("pad_token_id")


DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def cli(description: str, load, argv=None, *, run=None) -> None:
    """The shared ``python examples/models/<model>.py PATH --prompt TEXT --max-new-tokens N``.

    ``load(path, dtype=...)`` builds the model; ``run(model, ids, max_new_tokens, **kwargs)``
    decodes (default :func:`generate`). Text goes through the checkpoint's tokenizer (its chat
    template when it has one); ``--prompt-ids`` (or an old-style ``--prompt 15496,11,995``)
    takes token ids and prints ids. Several ``--prompt`` make one left-padded batch.
    """
    import argparse

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="Hugging Face checkpoint directory (config.json + model.safetensors)")
    parser.add_argument(
        "--prompt",
        action="append",
        help="prompt text, tokenized by the checkpoint's tokenizer (chat template when it has one); repeat for a "
        "batch. A value of comma-separated integers only (the old form, e.g. 15496,11,995) is read as token ids",
    )
    parser.add_argument("--prompt-ids", action="append", help="prompt token ids, comma-separated; repeat for a batch")
    parser.add_argument("--max-new-tokens", type=int, default=20, help="tokens to generate greedily (default: 20)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="parameters and KV cache dtype")
    parser.add_argument("--no-chat-template", action="store_true", help="tokenize the text as is")
    parser.add_argument("--no-eos", action="store_true", help="do not stop at the checkpoint's eos_token_id")
    args = parser.parse_args(argv)
    texts = [p for p in args.prompt or [] if not looks_like_ids(p)]
    id_rows = [ids_argument(p) for p in (args.prompt_ids or []) + [p for p in args.prompt or [] if looks_like_ids(p)]]
    if texts and id_rows:
        parser.error("--prompt: give either text or token ids, not both")
    if not texts and not id_rows:
        id_rows = [[0]]
    run = run or generate
    try:
        refuse_gguf(args.path)  # before the tokenizer: a GGUF holds one, but these models read no GGUF
        tokenizer = load_tokenizer(args.path)
        if texts and tokenizer is None:
            raise ValueError(
                f"--prompt: {args.path} has no tokenizer ({', '.join(TOKENIZER_FILES)}); pass --prompt-ids"
            )
        eos, pad = special_ids(args.path, tokenizer)
        eos = None if args.no_eos else eos
        rows = encode_prompts(tokenizer, texts, chat=not args.no_chat_template) if texts else id_rows
        ids, mask = left_pad(rows, pad if pad is not None else eos)
        model = load(args.path, dtype=DTYPES[args.dtype])
        out = run(model, ids, args.max_new_tokens, attention_mask=mask, eos_token_id=eos, pad_token_id=pad)
    except (fp.PositionLimitError, fp.CheckpointError, ValueError, OSError) as e:
        raise SystemExit(f"error: {e}") from None
    except (MemoryError, jax.errors.JaxRuntimeError) as e:  # e.g. a cache too large for the device: one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SystemExit(f"error: {type(e).__name__}: {first[:300]}") from None
    out = np.asarray(out)
    for row, new in zip(rows, out[:, ids.shape[1] :]):
        if texts:
            print(tokenizer.decode([int(t) for t in new], skip_special_tokens=True))
        else:
            print(",".join(str(int(t)) for t in [*row, *new]))
