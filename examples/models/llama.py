"""Llama in Flax NNX around flax-posenc's RoPE, equal to Hugging Face's LlamaForCausalLM.

Positions enter only through :func:`flax_posenc.apply_rope_qk` on queries and keys, with the
:class:`~flax_posenc.RopeConfig` read from ``config.json`` by
:func:`flax_posenc.conversion.rope_for_layer` (``rope_theta``, and
``rope_scaling``/``rope_parameters`` such as Llama 3.1's ``llama3`` type). Its ``limit``
(``max_position_embeddings``, or the scaled limit if larger) is the context limit: a position past
it raises :class:`~flax_posenc.PositionLimitError`. The token embedding is a
:class:`flax_posenc.nnx.TransformerInput` with ``position="none"``. Around them: pre-RMSNorm
blocks with grouped-query attention (``num_key_value_heads`` < ``num_attention_heads``) and a
SiLU-gated MLP, a final RMSNorm and the ``lm_head`` (tied when ``tie_word_embeddings``).

    model = from_pretrained("path/to/llama")            # config.json + model.safetensors
    logits = model(ids)                                  # (batch, seq) -> (batch, seq, vocab)
    out = generate(model, ids, 20, attention_mask=mask, eos_token_id=2)  # greedy, KV cache, bucketed

Weights are read with :func:`flax_posenc.conversion.open_checkpoint` (numpy), never transformers;
tested in ``tests/test_models_llama.py`` against transformers (llama3 scaling, grouped-query
attention, untied head); numbers in ``docs/models.md``.

    python examples/models/llama.py PATH --prompt "What is RoPE?" --max-new-tokens 20
    python examples/models/llama.py PATH --prompt-ids 1,15043 --max-new-tokens 20
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
import serving  # noqa: E402
from common import LayerNorm, Linear, Weights  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc.conversion import rope_for_layer  # noqa: E402


class Attention(nnx.Module):
    """Grouped-query attention with RoPE on queries and keys."""

    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int, rope: fp.RopeConfig, bias: bool, *, rngs):
        self.heads, self.kv_heads, self.head_dim, self.rope = heads, kv_heads, head_dim, rope
        self.q_proj = Linear(dim, heads * head_dim, ("embed", "heads"), bias=bias, rngs=rngs)
        self.k_proj = Linear(dim, kv_heads * head_dim, ("embed", "kv"), bias=bias, rngs=rngs)
        self.v_proj = Linear(dim, kv_heads * head_dim, ("embed", "kv"), bias=bias, rngs=rngs)
        self.o_proj = Linear(heads * head_dim, dim, ("heads", "embed"), bias=bias, rngs=rngs)

    def __call__(self, x, *, mask, layer_cache=None, start=0, positions=None):
        b, s, _ = x.shape
        q = self.q_proj(x).reshape(b, s, self.heads, self.head_dim)
        k = self.k_proj(x).reshape(b, s, self.kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(b, s, self.kv_heads, self.head_dim)
        q, k = fp.apply_rope_qk(q, k, self.rope, positions, start=start)  # one cos/sin for both
        layer_cache, k, v = common.cache_update(layer_cache, k, v, start)
        return self.o_proj(common.attention(q, k, v, mask=mask).reshape(b, s, -1)), layer_cache


class Block(nnx.Module):
    """``x + attn(norm(x))``, then ``x + down(silu(gate(norm(x))) * up(norm(x)))``."""

    def __init__(self, config: dict, rope: fp.RopeConfig, *, rngs: nnx.Rngs):
        dim, inner, eps = config["hidden_size"], config["intermediate_size"], config.get("rms_norm_eps", 1e-6)
        heads = config["num_attention_heads"]
        self.input_layernorm = LayerNorm(dim, eps, rms=True)
        self.self_attn = Attention(
            dim,
            heads,
            config.get("num_key_value_heads") or heads,
            rope.head_dim,
            rope,
            config.get("attention_bias", False),
            rngs=rngs,
        )
        self.post_attention_layernorm = LayerNorm(dim, eps, rms=True)
        bias = config.get("mlp_bias", False)
        self.gate_proj = Linear(dim, inner, ("embed", "mlp"), bias=bias, rngs=rngs)
        self.up_proj = Linear(dim, inner, ("embed", "mlp"), bias=bias, rngs=rngs)
        self.down_proj = Linear(inner, dim, ("mlp", "embed"), bias=bias, rngs=rngs)

    def __call__(self, x, *, mask, layer_cache=None, start=0, positions=None):
        a, layer_cache = self.self_attn(
            self.input_layernorm(x), mask=mask, layer_cache=layer_cache, start=start, positions=positions
        )
        x = x + a
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(jax.nn.silu(self.gate_proj(h)) * self.up_proj(h)), layer_cache


class Llama(nnx.Module):
    """Llama: token embedding -> blocks (RoPE inside attention) -> RMSNorm -> lm_head.

    Args:
      config: ``config.json`` as a dict; ``rope``: its :class:`~flax_posenc.RopeConfig`.
      rngs: ``nnx.Rngs`` (``params`` for a fresh model).
      scan_layers: one stacked block run by one ``lax.scan`` (the default: a new bucket compiles
        in seconds whatever the depth), or ``False``: separate per-layer blocks in a Python loop
        (compile grows with the layers, decoding is faster on CPU; see
        :func:`common.make_layers`). The same numbers in float32.
    """

    def __init__(self, config: dict, rope: fp.RopeConfig, *, rngs: nnx.Rngs, scan_layers: bool = True):
        dim, vocab = config["hidden_size"], config["vocab_size"]
        self.rope, self.kv_heads = rope, config.get("num_key_value_heads") or config["num_attention_heads"]
        self.embed = fp.nnx.TransformerInput.from_arguments(vocab, dim, position="none", rngs=rngs)
        self.num_layers = config["num_hidden_layers"]
        # one Block whose parameters are stacked (num_layers, ...), run by one lax.scan; or a list
        self.layers = common.make_layers(lambda r: Block(config, rope, rngs=r), self.num_layers, rngs, scan=scan_layers)
        self.norm = LayerNorm(dim, config.get("rms_norm_eps", 1e-6), rms=True)
        tied = config.get("tie_word_embeddings", False)
        self.lm_head = None if tied else Linear(dim, vocab, ("embed", "vocab"), bias=False, rngs=rngs)
        self.dtype = jnp.dtype(jnp.float32)  # of the parameters and the KV cache (common.set_dtype)

    @property
    def vocab_size(self) -> int:
        return self.embed.vocab_size

    @property
    def position_limit(self) -> int | None:
        return self.rope.limit

    @property
    def limit_name(self) -> str:
        return f"llama {self.rope.rope_type} RoPE"

    def init_cache(self, batch: int, max_len: int) -> dict | list[dict]:
        """``{"k", "v"}`` of zeros ``(layers, batch, max_len, kv_heads, head_dim)`` in the model's dtype
        (``scan_layers=False``: one such dict per layer, without the layer axis)."""
        args = (self.num_layers, batch, max_len, self.kv_heads, self.rope.head_dim, self.dtype)
        return common.layers_cache(self.layers, *args)

    def __call__(self, input_ids, attention_mask=None, *, cache=None, start=0, positions=None):
        """Logits ``(batch, seq, vocab)``; with ``cache``: ``(logits, new_cache)`` at cache slots
        ``start ..`` (a Python int or traced), per-row RoPE ``positions`` ``(batch, seq)`` (default
        ``start ..``). See ``gpt2.GPT2.__call__`` for the arguments."""
        input_ids = jnp.asarray(input_ids)
        x = self.embed(input_ids)
        x, new_cache = common.apply_layers(
            self.layers, x, input_ids, cache=cache, start=start, attention_mask=attention_mask, positions=positions
        )
        x = self.norm(x)
        logits = self.embed.attend(x) if self.lm_head is None else self.lm_head(x)
        return logits if cache is None else (logits, new_cache)


def from_pretrained(path, *, seed: int = 0, dtype=jnp.float32, scan_layers: bool = True) -> Llama:
    """A :class:`Llama` holding every weight of a Hugging Face Llama checkpoint directory;
    ``dtype``: of the parameters, the computation and the KV cache (e.g. ``jnp.bfloat16``);
    ``scan_layers``: see :class:`Llama`."""
    w = Weights(path, prefixes=("model.", ""), probe="embed_tokens.weight")
    rope = rope_for_layer(path, 0)  # every Llama layer has the same RoPE
    # built abstractly (no random weights drawn), then every parameter filled from the file
    model = common.abstract(lambda: Llama(w.config, rope, rngs=nnx.Rngs(seed), scan_layers=scan_layers), dtype)
    common.assign(model.embed.word_embeddings, w("embed_tokens.weight"), "embed_tokens.weight")

    def load(block: Block, layers: common.LayerWeights) -> None:
        block.input_layernorm.load(layers, "input_layernorm")
        block.post_attention_layernorm.load(layers, "post_attention_layernorm")
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(block.self_attn, name).load(layers, "self_attn." + name)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(block, name).load(layers, "mlp." + name)

    common.load_layers(model.layers, w, "layers.{}.", model.num_layers, load)
    model.norm.load(w, "norm")
    if model.lm_head is not None:
        common.assign(model.lm_head.kernel, w("lm_head.weight", transpose=True, prefixed=False), "lm_head.weight")
    common.check_filled(model, path)
    return model


def generate(
    model: Llama,
    prompt_ids,
    max_new_tokens: int,
    *,
    attention_mask=None,
    eos_token_id=None,
    pad_token_id=None,
    sink_tokens: int | None = None,
    window: int | None = None,
) -> jax.Array:
    """Greedy ids ``(batch, prompt_len + steps)``, equal to transformers' ``generate(do_sample=False)``;
    ragged batches left-padded with ``attention_mask``, rows stopping at ``eos_token_id``; see
    :func:`common.generate`. With ``sink_tokens`` and ``window``: a cache of ``window`` slots with
    attention sinks and a context shift (keys re-rotated exactly), see :mod:`serving`.

    Raises ``PositionLimitError`` when the longest prompt + new tokens exceed the RoPE limit
    (with a window: when the window does).
    """
    if sink_tokens is not None or window is not None:  # opt-in: a context shift (examples/models/serving.py)
        return serving.generate_with_sinks(
            model,
            prompt_ids,
            max_new_tokens,
            sink_tokens=sink_tokens,
            window=window,
            attention_mask=attention_mask,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
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
