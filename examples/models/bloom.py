"""BLOOM in Flax NNX around flax-posenc's ALiBi, equal to Hugging Face's BloomForCausalLM.

BLOOM has no position vectors at all: each head adds ``-m_h * (i - j)`` to the score of query
``i`` and key ``j`` (:func:`flax_posenc.alibi_bias_from_positions`, slopes from
:class:`~flax_posenc.AlibiConfig` read from ``config.json``). Hugging Face adds ``m_h * j``
instead; the two differ by a constant per query row, which the softmax removes. ALiBi has no
table, hence no limit of its own. The input block is :class:`flax_posenc.nnx.TransformerInput`
with ``position="none"`` and BLOOM's ``word_embeddings_layernorm``. Around it: pre-LayerNorm
blocks with a fused per-head ``query_key_value`` projection, a tanh-GELU MLP, ``ln_f`` and
the head tied to the word embeddings.

    model = from_pretrained("path/to/bloom")            # config.json + model.safetensors
    logits = model(ids)                                  # (batch, seq) -> (batch, seq, vocab)
    out = generate(model, ids, 20, attention_mask=mask, eos_token_id=2)  # greedy, KV cache, bucketed

Weights are read with :func:`flax_posenc.conversion.open_checkpoint` (numpy), never transformers;
tested in ``tests/test_models_bloom.py`` against transformers (ALiBi needs no table: 80 positions
decode past the 64 of the other tiny models); numbers in ``docs/models.md``.

    python examples/models/bloom.py PATH --prompt "Hello" --max-new-tokens 20
    python examples/models/bloom.py PATH --prompt-ids 59414,15 --max-new-tokens 20
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from common import LayerNorm, Linear, Weights  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc.conversion import inspect_source  # noqa: E402


class Attention(nnx.Module):
    """Self-attention with ALiBi; ``query_key_value`` output laid out ``(heads, 3, head_dim)``."""

    def __init__(self, dim: int, alibi: fp.AlibiConfig, attention_dropout: float, dropout: float, *, rngs: nnx.Rngs):
        self.alibi, self.heads, self.head_dim = alibi, alibi.num_heads, dim // alibi.num_heads
        self.query_key_value = Linear(dim, 3 * dim, ("embed", "heads"), rngs=rngs)
        self.dense = Linear(dim, dim, ("heads", "embed"), rngs=rngs)
        self.attention_dropout = nnx.Dropout(attention_dropout, rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def __call__(self, x, *, mask, layer_cache=None, start=0, positions=None, key_positions=None):
        b, s, _ = x.shape
        qkv = self.query_key_value(x).reshape(b, s, self.heads, 3, self.head_dim)
        q, k, v = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]
        layer_cache, k, v = common.cache_update(layer_cache, k, v, start)
        queries = start + jnp.arange(s) if positions is None else positions
        keys = jnp.arange(k.shape[1]) if key_positions is None else key_positions
        bias = fp.alibi_bias_from_positions(self.alibi, queries, keys)
        y = common.attention(q, k, v, mask=mask, bias=bias, dropout=self.attention_dropout).reshape(b, s, -1)
        return self.dropout(self.dense(y)), layer_cache


class Block(nnx.Module):
    """``x + attn(input_layernorm(x))``, then ``x + mlp(post_attention_layernorm(x))``."""

    def __init__(self, config: dict, alibi: fp.AlibiConfig, *, rngs: nnx.Rngs):
        dim, eps, dropout = (
            config["hidden_size"],
            config.get("layer_norm_epsilon", 1e-5),
            config.get("hidden_dropout", 0.0),
        )
        self.input_layernorm = LayerNorm(dim, eps)
        self.self_attention = Attention(dim, alibi, config.get("attention_dropout", 0.0), dropout, rngs=rngs)
        self.post_attention_layernorm = LayerNorm(dim, eps)
        self.dense_h_to_4h = Linear(dim, 4 * dim, ("embed", "mlp"), rngs=rngs)
        self.dense_4h_to_h = Linear(4 * dim, dim, ("mlp", "embed"), rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def __call__(self, x, *, mask, layer_cache=None, start=0, positions=None, key_positions=None):
        a, layer_cache = self.self_attention(
            self.input_layernorm(x),
            mask=mask,
            layer_cache=layer_cache,
            start=start,
            positions=positions,
            key_positions=key_positions,
        )
        x = x + a
        h = common.gelu_tanh(self.dense_h_to_4h(self.post_attention_layernorm(x)))
        return x + self.dropout(self.dense_4h_to_h(h)), layer_cache


class Bloom(nnx.Module):
    """BLOOM: ``TransformerInput`` (words + LayerNorm) -> blocks (ALiBi inside) -> ln_f -> tied head.

    ``scan_layers``: one stacked block run by one ``lax.scan`` (the default), or ``False``:
    separate per-layer blocks (see ``llama.Llama`` and :func:`common.make_layers`)."""

    def __init__(self, config: dict, alibi: fp.AlibiConfig, *, rngs: nnx.Rngs, scan_layers: bool = True):
        dim, eps = config["hidden_size"], config.get("layer_norm_epsilon", 1e-5)
        self.alibi = alibi
        self.embed = fp.nnx.TransformerInput.from_arguments(
            config["vocab_size"], dim, position="none", layer_norm=True, layer_norm_eps=eps, rngs=rngs
        )
        self.num_layers = config["n_layer"]
        # one Block whose parameters are stacked (n_layer, ...), run by one lax.scan; or a list (as llama.py)
        self.h = common.make_layers(lambda r: Block(config, alibi, rngs=r), self.num_layers, rngs, scan=scan_layers)
        self.head_dim = dim // alibi.num_heads
        self.ln_f = LayerNorm(dim, eps)
        self.dtype = jnp.dtype(jnp.float32)  # of the parameters and the KV cache (common.set_dtype)

    @property
    def vocab_size(self) -> int:
        return self.embed.vocab_size

    position_limit = None  # ALiBi: no table, no limit (MPT's max_seq_len would be alibi.max_positions)
    limit_name = "bloom ALiBi"

    def init_cache(self, batch: int, max_len: int) -> dict | list[dict]:
        """``{"k", "v"}`` of zeros ``(layers, batch, max_len, heads, head_dim)`` in the model's dtype
        (``scan_layers=False``: one such dict per layer, without the layer axis)."""
        args = (self.num_layers, batch, max_len, self.alibi.num_heads, self.head_dim, self.dtype)
        return common.layers_cache(self.h, *args)

    def __call__(self, input_ids, attention_mask=None, *, cache=None, start=0, positions=None):
        """Logits ``(batch, seq, vocab)``; with ``cache``: ``(logits, new_cache)`` at cache slots
        ``start ..`` (a Python int or traced). See ``gpt2.GPT2.__call__`` for the arguments.

        As transformers' ``build_alibi_tensor``, an ``attention_mask`` gives the keys positions
        that skip the padding (:func:`flax_posenc.padding_aware_positions`; padding at 0, masked);
        queries sit at ``positions`` (default ``start ..``): ALiBi's bias differs from transformers'
        ``m * key_position`` by a constant per query, which the softmax removes."""
        input_ids = jnp.asarray(input_ids)
        x = self.embed(input_ids)
        key_positions = None
        if attention_mask is not None:
            key_positions = jnp.maximum(fp.padding_aware_positions(attention_mask), 0)
        x, new_cache = common.apply_layers(
            self.h,
            x,
            input_ids,
            cache=cache,
            start=start,
            attention_mask=attention_mask,
            positions=positions,
            key_positions=key_positions,
        )
        logits = self.embed.attend(self.ln_f(x))  # the tied head
        return logits if cache is None else (logits, new_cache)


def from_pretrained(path, *, seed: int = 0, dtype=jnp.float32, scan_layers: bool = True) -> Bloom:
    """A :class:`Bloom` holding every weight of a Hugging Face BLOOM checkpoint directory;
    ``dtype``: of the parameters, the computation and the KV cache (e.g. ``jnp.bfloat16``);
    ``scan_layers``: see :class:`Bloom`."""
    w = Weights(path, prefixes=("transformer.", ""), probe="word_embeddings.weight")
    alibi = next(m.alibi for m in inspect_source(path).mechanisms if m.alibi is not None)
    # built abstractly (no random weights drawn), then every parameter filled from the file
    model = common.abstract(
        lambda: Bloom(w.config, alibi, rngs=nnx.Rngs(seed), scan_layers=scan_layers), dtype, seed=seed
    )
    common.assign(model.embed.word_embeddings, w("word_embeddings.weight"), "word_embeddings.weight")
    common.assign(
        model.embed.layer_norm["scale"], w("word_embeddings_layernorm.weight"), "word_embeddings_layernorm.weight"
    )
    common.assign(model.embed.layer_norm["bias"], w("word_embeddings_layernorm.bias"), "word_embeddings_layernorm.bias")

    def load(block: Block, layers: common.LayerWeights) -> None:
        block.input_layernorm.load(layers, "input_layernorm")
        block.post_attention_layernorm.load(layers, "post_attention_layernorm")
        block.self_attention.query_key_value.load(layers, "self_attention.query_key_value")
        block.self_attention.dense.load(layers, "self_attention.dense")
        block.dense_h_to_4h.load(layers, "mlp.dense_h_to_4h")
        block.dense_4h_to_h.load(layers, "mlp.dense_4h_to_h")

    common.load_layers(model.h, w, "h.{}.", model.num_layers, load)
    model.ln_f.load(w, "ln_f")
    common.check_filled(model, path)
    model.eval()
    return model


#: the largest KV cache :func:`generate` allocates (8 GiB): ALiBi has no position limit, so the
#: cache, sized from ``max_new_tokens``, is what bounds a request (``10**9`` new tokens of
#: bloom-560m would need 196 TB).
MAX_CACHE_BYTES = 1 << 33


def cache_bytes(model: Bloom, batch: int, prompt_len: int, max_new_tokens: int) -> int:
    """Bytes of the KV cache :func:`generate` allocates: keys and values of every layer, for the
    prompt's and the new tokens' length buckets (:func:`common.bucket`), in the model's dtype."""
    heads, head_dim = model.alibi.num_heads, model.head_dim
    slots = common.bucket(prompt_len) + common.bucket(max_new_tokens)
    return 2 * model.num_layers * batch * slots * heads * head_dim * model.dtype.itemsize


def generate(
    model: Bloom, prompt_ids, max_new_tokens: int, *, attention_mask=None, eos_token_id=None, pad_token_id=None
) -> jax.Array:
    """Greedy ids ``(batch, prompt_len + steps)``, equal to transformers' ``generate(do_sample=False)``;
    ragged batches left-padded with ``attention_mask``, rows stopping at ``eos_token_id``; see
    :func:`common.generate`. A request whose KV cache (:func:`cache_bytes`) would exceed
    :data:`MAX_CACHE_BYTES` is a one-line ValueError naming ``max_new_tokens``, before anything is
    allocated or compiled.
    """
    shape = np.shape(prompt_ids)
    counted = isinstance(max_new_tokens, (int, np.integer)) and not isinstance(max_new_tokens, bool)
    # past int32 positions common.generate's own line says so; below them the cache may still not fit
    if len(shape) == 2 and counted and shape[1] + int(max_new_tokens) <= common.MAX_POSITIONS:
        need = cache_bytes(model, shape[0], shape[1], max(int(max_new_tokens), 1))
        if need > MAX_CACHE_BYTES:
            raise ValueError(
                f"max_new_tokens: expected at most a KV cache of {MAX_CACHE_BYTES} bytes ({MAX_CACHE_BYTES / 2**30:g} GiB), "
                f"found {max_new_tokens} new tokens for a batch of {shape[0]} needing {need} bytes "
                f"({need / 2**30:.1f} GiB)"
            )
    return common.generate(
        model,
        prompt_ids,
        max_new_tokens,
        attention_mask=attention_mask,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )


if __name__ == "__main__":
    common.cli(__doc__, from_pretrained)
