"""Pieces the reference models share: reading a checkpoint, layers, attention, the KV cache,
greedy decoding and one training step.

Everything here is either a pure function of arrays (attention, masks, norms, the cache update:
usable from NNX and Linen alike) or a small NNX module holding parameters with logical axis
names (``"embed"``, ``"heads"``, ``"kv"``, ``"mlp"``, ``"vocab"``) so a model shards with rules
such as ``(("heads", "model"), ("kv", "model"), ("mlp", "model"))`` (see ``docs/models.md``).

Shapes: activations are ``(batch, seq, width)``; queries/keys/values ``(batch, seq, heads,
head_dim)`` (Flax's attention layout, the one :func:`flax_posenc.apply_rope` expects); a cache
is a list, one ``{"k", "v"}`` dict per layer, of ``(batch, max_len, kv_heads, head_dim)``.

>>> import jax.numpy as jnp
>>> q = k = v = jnp.ones((1, 3, 2, 4))
>>> attention(q, k, v, mask=causal_mask(3, 3, start=0)).shape
(1, 3, 2, 4)
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import flax_posenc as fp
from flax_posenc.conversion.readers import fail, nearest_keys
from flax_posenc.conversion.sources import open_checkpoint

# ----------------------------------------------------------------------------- checkpoints


class Weights:
    """A Hugging Face checkpoint read with flax_posenc.conversion: its config and its tensors.

    Tensors are read one at a time as float32 numpy (safetensors memory-mapped, ``.bin`` only with
    ``weights_only=True``); no transformers, no torch for safetensors.

    Args:
      path: checkpoint directory (``config.json`` + weights) or anything
        :func:`flax_posenc.conversion.sources.open_checkpoint` accepts.
      prefixes: candidate key prefixes of the base model (``"transformer."`` in a
        ``GPT2LMHeadModel`` checkpoint, none in a ``GPT2Model`` one); the first one under which
        ``probe`` exists is used.
      probe: a key every checkpoint of the family holds (without prefix).

    Raises:
      CheckpointError: unreadable checkpoint, or none of the prefixes holds ``probe`` (one line).
    """

    def __init__(self, path, *, prefixes: tuple[str, ...], probe: str):
        self.path = path
        ckpt = open_checkpoint(path)
        self.config, self.reader = ckpt.config, ckpt.reader
        self.keys = set(self.reader.keys())
        found = [p for p in prefixes if p + probe in self.keys]
        if not found:
            raise fail(
                ckpt.weights_path,
                f"tensor {probe!r} under one of the prefixes {prefixes}",
                f"keys such as {nearest_keys(probe, self.keys)}",
            )
        self.prefix = found[0]

    def has(self, key: str, *, prefixed: bool = True) -> bool:
        return (self.prefix + key if prefixed else key) in self.keys

    def __call__(self, key: str, *, transpose: bool = False, prefixed: bool = True) -> np.ndarray:
        """The tensor ``prefix + key`` as float32 (``transpose``: a torch Linear's ``(out, in)``
        weight as a Flax kernel ``(in, out)``)."""
        full = self.prefix + key if prefixed else key
        if full not in self.keys:
            raise fail(self.path, f"tensor {full!r}", f"no such tensor (close: {nearest_keys(full, self.keys)})")
        value = np.asarray(self.reader.read(full), np.float32)
        return value.T if transpose else value


def assign(param: nnx.Param, value: np.ndarray, name: str) -> None:
    """Set a parameter from a checkpoint array, refusing a shape mismatch with one line."""
    if tuple(param.shape) != tuple(value.shape):
        raise ValueError(f"{name}: expected shape {tuple(param.shape)}, found {tuple(value.shape)}")
    param.set_value(jnp.asarray(value, param.dtype))


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


def run_layers(layers, x, input_ids, *, cache=None, start=0, attention_mask=None):
    """Run decoder ``layers`` over ``x`` with the causal mask; ``(x, new_cache)``.

    ``cache`` is one ``{"k", "v"}`` dict per layer (or ``None`` without a cache); positions start
    at ``start`` (a Python int or traced), keys may be masked with ``attention_mask``.
    """
    k_len = input_ids.shape[1] if cache is None else cache[0]["k"].shape[1]
    mask = causal_mask(input_ids.shape[1], k_len, start=start, key_mask=attention_mask)
    new_cache = []
    for i, layer in enumerate(layers):
        x, layer_cache = layer(x, mask=mask, layer_cache=None if cache is None else cache[i], start=start)
        new_cache.append(layer_cache)
    return x, new_cache


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


def cache_update(layer_cache: dict | None, k: jax.Array, v: jax.Array, start: int | jax.Array):
    """Write this step's ``k, v`` at ``start`` (static or traced); return the new layer cache and
    the keys/values to attend to (the whole cache, or just ``k, v`` without one)."""
    if layer_cache is None:
        return None, k, v
    index = (0, start, 0, 0)
    new = {
        "k": jax.lax.dynamic_update_slice(layer_cache["k"], k.astype(layer_cache["k"].dtype), index),
        "v": jax.lax.dynamic_update_slice(layer_cache["v"], v.astype(layer_cache["v"].dtype), index),
    }
    return new, new["k"], new["v"]


# ----------------------------------------------------------------------------- decoding


def check_generation_length(prompt_len: int, max_new_tokens: int, limit: int | None, what: str) -> None:
    """Raise :class:`~flax_posenc.PositionLimitError` at trace time unless the whole sequence
    (prompt + new tokens) fits ``limit`` positions (``None``: no limit)."""
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected a positive Python integer, got {max_new_tokens!r}")
    if limit is not None and prompt_len + max_new_tokens > limit:
        total = prompt_len + max_new_tokens
        raise fp.PositionLimitError(
            f"{what} holds {limit} positions (0..{limit - 1}); a prompt of {prompt_len} tokens plus "
            f"max_new_tokens={max_new_tokens} needs {total}, {total - limit} past the end"
        )


def generate(model, prompt_ids, max_new_tokens: int) -> jax.Array:
    """Greedy decoding with a KV cache, all in one jitted function (prefill + ``lax.scan``).

    ``model`` offers ``model(ids, cache=cache, start=start) -> (logits, cache)``,
    ``model.init_cache(batch, max_len)`` and ``model.position_limit`` / ``model.limit_name``.
    Inside the scan the position is the traced ``start`` of each step.

    Args:
      prompt_ids: ``(batch, prompt_len)`` integers (no padding).
      max_new_tokens: a Python int.

    Returns:
      ``(batch, prompt_len + max_new_tokens)`` int32: the prompt followed by the new tokens.

    Raises:
      PositionLimitError: prompt + new tokens past the model's limit, while tracing, before
        anything runs. (Each traced ``start`` inside the loop is also guarded by the library:
        a position past the limit there would fail at run time, never clamp.)
    """
    prompt = jnp.asarray(prompt_ids, jnp.int32)
    if prompt.ndim != 2:
        raise ValueError(f"prompt_ids: expected shape (batch, prompt_len), got {tuple(prompt.shape)}")
    check_generation_length(prompt.shape[1], max_new_tokens, model.position_limit, model.limit_name)
    graphdef, state = nnx.split(model)
    return _generate(graphdef, state, prompt, max_new_tokens)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _generate(graphdef, state, prompt, max_new_tokens):
    model = nnx.merge(graphdef, state)
    return greedy_decode(
        lambda ids, cache, start: model(ids, cache=cache, start=start), model.init_cache, prompt, max_new_tokens
    )


def greedy_decode(forward, init_cache, prompt: jax.Array, max_new_tokens: int) -> jax.Array:
    """The decoding loop itself, for any framework (call it inside ``jax.jit``).

    ``forward(ids, cache, start) -> (logits, cache)`` and ``init_cache(batch, max_len)``: one
    prefill of the prompt at ``start=0``, then a ``lax.scan`` of ``max_new_tokens - 1`` steps, each
    feeding the last token at the traced position ``start``. Returns prompt + new tokens.
    """
    batch, prompt_len = prompt.shape
    logits, cache = forward(prompt, init_cache(batch, prompt_len + max_new_tokens), 0)
    first = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)

    def step(carry, _):
        token, cache, start = carry  # start: a traced int32, the position of `token`
        logits, cache = forward(token[:, None], cache, start)
        return (jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32), cache, start + 1), token

    (last, _, _), tokens = jax.lax.scan(step, (first, cache, jnp.int32(prompt_len)), None, length=max_new_tokens - 1)
    return jnp.concatenate([prompt, tokens.T, last[:, None]], axis=1)


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
    """Parse ``"15496,11,995"`` (the ``--prompt`` of the model scripts) into token ids."""
    try:
        return [int(t) for t in text.replace(" ", ",").split(",") if t]
    except ValueError:
        raise SystemExit(f"--prompt: expected comma-separated token ids such as 15496,11,995, got {text!r}") from None


def cli(description: str, load, argv=None) -> None:
    """The shared ``python examples/models/<model>.py PATH --prompt IDS --max-new-tokens N``."""
    import argparse

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="Hugging Face checkpoint directory (config.json + model.safetensors)")
    parser.add_argument("--prompt", default="0", help="prompt token ids, comma-separated (default: 0)")
    parser.add_argument("--max-new-tokens", type=int, default=20, help="tokens to generate greedily (default: 20)")
    args = parser.parse_args(argv)
    try:
        model = load(args.path)
        ids = generate(model, [ids_argument(args.prompt)], args.max_new_tokens)
    except (fp.PositionLimitError, fp.CheckpointError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    print(",".join(str(int(t)) for t in ids[0]))
