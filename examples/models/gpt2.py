"""GPT-2 in Flax NNX around flax-posenc's input block, equal to Hugging Face's GPT2LMHeadModel.

The token + learned position embedding is :class:`flax_posenc.nnx.TransformerInput` loaded
with ``from_pretrained``: its 1024-row table is the context limit, and a position past it is a
:class:`~flax_posenc.PositionLimitError`, never a clamp. Around it: pre-LayerNorm blocks
(causal attention, tanh-GELU MLP), a final LayerNorm and the head tied to the word embeddings.

    model = from_pretrained("path/to/gpt2")             # config.json + model.safetensors
    logits = model(ids)                                  # (batch, seq) -> (batch, seq, vocab)
    out = generate(model, ids, 20, attention_mask=mask, eos_token_id=50256)  # greedy, KV cache, bucketed

Weights are read with :func:`flax_posenc.conversion.open_checkpoint` (numpy), never transformers;
tested against transformers in ``tests/test_models_gpt2.py``; numbers in ``docs/models.md``.

    python examples/models/gpt2.py PATH --prompt "Hello, world" --max-new-tokens 20
    python examples/models/gpt2.py PATH --prompt-ids 15496,11,995 --max-new-tokens 20
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from common import LayerNorm, Linear, Weights  # noqa: E402

import flax_posenc as fp  # noqa: E402


class Attention(nnx.Module):
    """Causal multi-head self-attention with a fused ``c_attn`` (width -> 3 x width) projection."""

    def __init__(self, dim: int, heads: int, attn_pdrop: float, resid_pdrop: float, *, rngs: nnx.Rngs):
        self.heads, self.head_dim = heads, dim // heads
        self.c_attn = Linear(dim, 3 * dim, ("embed", "heads"), rngs=rngs)
        self.c_proj = Linear(dim, dim, ("heads", "embed"), rngs=rngs)
        self.attn_dropout = nnx.Dropout(attn_pdrop, rngs=rngs)
        self.dropout = nnx.Dropout(resid_pdrop, rngs=rngs)

    def __call__(self, x, *, mask, layer_cache=None, start=0):
        b, s, _ = x.shape
        q, k, v = jnp.split(self.c_attn(x).reshape(b, s, 3 * self.heads, self.head_dim), 3, axis=2)
        layer_cache, k, v = common.cache_update(layer_cache, k, v, start)
        y = common.attention(q, k, v, mask=mask, dropout=self.attn_dropout).reshape(b, s, -1)
        return self.dropout(self.c_proj(y)), layer_cache


class Block(nnx.Module):
    """``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, config: dict, *, rngs: nnx.Rngs):
        dim, eps = config["n_embd"], config.get("layer_norm_epsilon", 1e-5)
        inner = config.get("n_inner") or 4 * dim
        dropout = config.get("resid_pdrop", 0.1)
        self.ln_1, self.ln_2 = LayerNorm(dim, eps), LayerNorm(dim, eps)
        self.attn = Attention(dim, config["n_head"], config.get("attn_pdrop", 0.1), dropout, rngs=rngs)
        self.c_fc = Linear(dim, inner, ("embed", "mlp"), rngs=rngs)
        self.c_proj = Linear(inner, dim, ("mlp", "embed"), rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def __call__(self, x, *, mask, layer_cache=None, start=0):
        a, layer_cache = self.attn(self.ln_1(x), mask=mask, layer_cache=layer_cache, start=start)
        x = x + a
        x = x + self.dropout(self.c_proj(common.gelu_tanh(self.c_fc(self.ln_2(x)))))
        return x, layer_cache


class GPT2(nnx.Module):
    """GPT-2: ``TransformerInput`` (wte + wpe) -> blocks -> ln_f -> tied head.

    Args:
      config: the checkpoint's ``config.json`` as a dict (``n_embd``, ``n_head``, ``n_layer``,
        ``n_positions``, ``vocab_size``, ``layer_norm_epsilon``, ``*_pdrop``).
      embed: the input block (built by :func:`from_pretrained`, or fresh when ``None``).
      rngs: ``nnx.Rngs`` (``params`` for a fresh model, ``dropout`` for training).
      scan_layers: one stacked block run by one ``lax.scan`` (the default), or ``False``:
        separate per-layer blocks (see ``llama.Llama`` and :func:`common.make_layers`).
    """

    def __init__(
        self,
        config: dict,
        embed: fp.nnx.TransformerInput | None = None,
        *,
        rngs: nnx.Rngs,
        scan_layers: bool = True,
    ):
        dim = config["n_embd"]
        self.heads, self.head_dim = config["n_head"], dim // config["n_head"]
        self.embed = embed or fp.nnx.TransformerInput.from_arguments(
            config["vocab_size"],
            dim,
            num_positions=config["n_positions"],
            position_name="gpt2 position table",
            rngs=rngs,
        )
        # embd_pdrop beside the block: TransformerInput.from_pretrained builds the block abstractly,
        # without a dropout RNG stream of its own; nnx.Dropout follows model.train()/eval() as well
        self.embed_dropout = nnx.Dropout(config.get("embd_pdrop", 0.1), rngs=rngs)
        self.num_layers = config["n_layer"]
        # one Block whose parameters are stacked (n_layer, ...), run by one lax.scan; or a list (as llama.py)
        self.h = common.make_layers(lambda r: Block(config, rngs=r), self.num_layers, rngs, scan=scan_layers)
        self.ln_f = LayerNorm(dim, config.get("layer_norm_epsilon", 1e-5))
        self.dtype = jnp.dtype(jnp.float32)  # of the parameters and the KV cache (common.set_dtype)

    @property
    def vocab_size(self) -> int:
        return self.embed.vocab_size

    @property
    def position_limit(self) -> int:
        return self.embed.num_positions

    @property
    def limit_name(self) -> str:
        return self.embed.spec.position.name

    def init_cache(self, batch: int, max_len: int) -> dict | list[dict]:
        """``{"k", "v"}`` of zeros ``(layers, batch, max_len, heads, head_dim)`` in the model's dtype
        (``scan_layers=False``: one such dict per layer, without the layer axis)."""
        return common.layers_cache(self.h, self.num_layers, batch, max_len, self.heads, self.head_dim, self.dtype)

    def __call__(self, input_ids, attention_mask=None, *, cache=None, start=0, positions=None):
        """Logits ``(batch, seq, vocab)`` of ``input_ids`` ``(batch, seq)``.

        With ``cache`` (from :meth:`init_cache`) the tokens are written at cache slots ``start ..``
        (a Python int or a traced scalar) and ``(logits, new_cache)`` is returned.
        ``attention_mask`` ``(batch, keys)``: 1 for real tokens (keys = the cache length with one).
        ``positions`` ``(batch, seq)``: per-row positions (a left-padded batch: from the mask);
        default ``start ..``. A known position past ``n_positions`` raises ``PositionLimitError``
        while tracing, a traced one fails at run time.
        """
        input_ids = jnp.asarray(input_ids)
        embedded = (
            self.embed(input_ids, start=start) if positions is None else self.embed(input_ids, position_ids=positions)
        )
        x = self.embed_dropout(embedded)
        x, new_cache = common.apply_layers(
            self.h, x, input_ids, cache=cache, start=start, attention_mask=attention_mask
        )
        logits = self.embed.attend(self.ln_f(x))  # the tied head
        return logits if cache is None else (logits, new_cache)

    def extend_positions(self, num_positions: int, *, method: str = "tile") -> None:
        """Grow the position table in place (see ``TransformerInput.extend_positions``)."""
        self.embed = self.embed.extend_positions(num_positions, method=method)


def from_pretrained(path, *, seed: int = 0, dtype=jnp.float32, scan_layers: bool = True) -> GPT2:
    """A :class:`GPT2` holding every weight of a Hugging Face GPT-2 checkpoint.

    ``path``: a directory with ``config.json`` and ``model.safetensors`` (``GPT2Model`` or
    ``GPT2LMHeadModel``); ``dtype``: of the parameters, the computation and the KV cache (e.g.
    ``jnp.bfloat16``); ``scan_layers``: see :class:`GPT2`. Raises ``CheckpointError`` (one line) for a missing or malformed tensor.
    """
    w = Weights(path, prefixes=("transformer.", ""), probe="wte.weight")
    # built abstractly (no random weights drawn), then every parameter filled from the file
    model = common.abstract(lambda: GPT2(w.config, rngs=nnx.Rngs(seed), scan_layers=scan_layers), dtype, seed=seed)
    embed = fp.nnx.TransformerInput.from_pretrained(path)
    nnx.update(embed, common.cast_floats(nnx.state(embed), model.dtype))
    model.embed = embed

    def load(block: Block, layers: common.LayerWeights) -> None:
        block.ln_1.load(layers, "ln_1")
        block.ln_2.load(layers, "ln_2")
        block.attn.c_attn.load(layers, "attn.c_attn", transpose=False)  # Conv1D: already (in, out)
        block.attn.c_proj.load(layers, "attn.c_proj", transpose=False)
        block.c_fc.load(layers, "mlp.c_fc", transpose=False)
        block.c_proj.load(layers, "mlp.c_proj", transpose=False)

    common.load_layers(model.h, w, "h.{}.", model.num_layers, load)
    model.ln_f.load(w, "ln_f")
    common.check_filled(model, path)
    model.eval()
    return model


def generate(
    model: GPT2, prompt_ids, max_new_tokens: int, *, attention_mask=None, eos_token_id=None, pad_token_id=None
) -> jax.Array:
    """Greedy ids ``(batch, prompt_len + steps)``, equal to transformers' ``generate(do_sample=False)``;
    ragged batches left-padded with ``attention_mask``, rows stopping at ``eos_token_id``; see
    :func:`common.generate`.

    Raises ``PositionLimitError`` when the longest prompt + new tokens exceed ``n_positions``.
    """
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
