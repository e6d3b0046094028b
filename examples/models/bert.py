"""BERT in Flax NNX around flax-posenc's input block, equal to Hugging Face's BertModel.

The embedding (words + learned positions + token types, LayerNorm) is
:class:`flax_posenc.nnx.TransformerInput` loaded with ``from_pretrained``; its table (512 rows
in BERT and all-MiniLM-L6-v2) is the limit: 513 tokens raise
:class:`~flax_posenc.PositionLimitError` while tracing. :meth:`Bert.extend_positions` grows the
table (``tile``: the trained rows repeated) so longer inputs run. Around it: post-LayerNorm
encoder layers (bidirectional attention over the real tokens, erf-GELU MLP).

    model = from_pretrained("path/to/all-MiniLM-L6-v2")
    hidden = model(input_ids, attention_mask)             # (batch, seq) -> (batch, seq, width)
    sentence = mean_pool(hidden, attention_mask)          # (batch, width), sentence-transformers' pooling

Weights are read with :func:`flax_posenc.conversion.open_checkpoint` (numpy), never transformers;
tokenize with any WordPiece tokenizer (the tests use transformers' on the checkpoint's
``tokenizer.json``). Tested on the real all-MiniLM-L6-v2 in ``tests/test_models_bert.py``.

    python examples/models/bert.py PATH --ids 101,7592,2088,102
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


class Layer(nnx.Module):
    """``x = LN(x + attention(x))``, then ``x = LN(x + W2 gelu(W1 x))``."""

    def __init__(self, config: dict, *, rngs: nnx.Rngs):
        dim, inner, eps = config["hidden_size"], config["intermediate_size"], config.get("layer_norm_eps", 1e-12)
        self.heads, self.head_dim = config["num_attention_heads"], dim // config["num_attention_heads"]
        self.query = Linear(dim, dim, ("embed", "heads"), rngs=rngs)
        self.key = Linear(dim, dim, ("embed", "heads"), rngs=rngs)
        self.value = Linear(dim, dim, ("embed", "heads"), rngs=rngs)
        self.attention_output = Linear(dim, dim, ("heads", "embed"), rngs=rngs)
        self.attention_norm = LayerNorm(dim, eps)
        self.intermediate = Linear(dim, inner, ("embed", "mlp"), rngs=rngs)
        self.output = Linear(inner, dim, ("mlp", "embed"), rngs=rngs)
        self.output_norm = LayerNorm(dim, eps)
        self.dropout = nnx.Dropout(config.get("hidden_dropout_prob", 0.1), rngs=rngs)
        self.attention_dropout = nnx.Dropout(config.get("attention_probs_dropout_prob", 0.1), rngs=rngs)

    def __call__(self, x, mask):
        b, s, _ = x.shape
        q, k, v = (f(x).reshape(b, s, self.heads, self.head_dim) for f in (self.query, self.key, self.value))
        a = common.attention(q, k, v, mask=mask, dropout=self.attention_dropout).reshape(b, s, -1)
        x = self.attention_norm(x + self.dropout(self.attention_output(a)))
        h = common.gelu_exact(self.intermediate(x))
        return self.output_norm(x + self.dropout(self.output(h)))


class Bert(nnx.Module):
    """BERT encoder: ``TransformerInput`` (words, positions, types, LayerNorm) -> layers.

    Args:
      config: ``config.json`` as a dict; ``embed``: the input block.
    """

    def __init__(self, config: dict, embed: fp.nnx.TransformerInput, *, rngs: nnx.Rngs):
        self.embed = embed
        # dropout beside the block (from_pretrained builds it without a dropout RNG stream)
        self.embed_dropout = nnx.Dropout(config.get("hidden_dropout_prob", 0.1), rngs=rngs)
        self.layers = nnx.List([Layer(config, rngs=rngs) for _ in range(config["num_hidden_layers"])])

    @property
    def position_limit(self) -> int:
        return self.embed.spec.position.num_positions

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None) -> jax.Array:
        """Last hidden state ``(batch, seq, width)`` of ``input_ids`` ``(batch, seq)``.

        ``attention_mask``: 1 for real tokens, 0 for padding (default all 1);
        ``token_type_ids``: segment ids (default all 0). More tokens than the position table
        holds raise ``PositionLimitError`` while tracing.
        """
        input_ids = jnp.asarray(input_ids)
        if attention_mask is None:
            attention_mask = jnp.ones(input_ids.shape, jnp.int32)
        x = self.embed_dropout(self.embed(input_ids, token_type_ids=token_type_ids))
        mask = common.padding_mask(jnp.asarray(attention_mask), input_ids.shape[1])
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def extend_positions(self, num_positions: int, *, method: str = "tile") -> None:
        """Grow the position table in place to ``num_positions`` rows (fine-tune before trusting it)."""
        self.embed = self.embed.extend_positions(num_positions, method=method)


def mean_pool(hidden: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Mean of the real tokens' vectors, ``(batch, width)`` (sentence-transformers' pooling)."""
    mask = jnp.asarray(attention_mask, hidden.dtype)[..., None]
    return (hidden * mask).sum(1) / jnp.maximum(mask.sum(1), 1e-9)


def from_pretrained(path, *, seed: int = 0) -> Bert:
    """A :class:`Bert` holding every encoder weight of a Hugging Face BERT checkpoint
    (``BertModel`` keys, or ``bert.``-prefixed ones of a task model)."""
    w = Weights(path, prefixes=("bert.", ""), probe="embeddings.word_embeddings.weight")
    model = Bert(w.config, fp.nnx.TransformerInput.from_pretrained(path), rngs=nnx.Rngs(seed))
    for i, layer in enumerate(model.layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            getattr(layer, name).load(w, p + "attention.self." + name)
        layer.attention_output.load(w, p + "attention.output.dense")
        layer.attention_norm.load(w, p + "attention.output.LayerNorm")
        layer.intermediate.load(w, p + "intermediate.dense")
        layer.output.load(w, p + "output.dense")
        layer.output_norm.load(w, p + "output.LayerNorm")
    model.eval()
    return model


def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "path", type=Path, help="Hugging Face BERT checkpoint directory (config.json + model.safetensors)"
    )
    parser.add_argument("--ids", default="101,102", help="token ids, comma-separated (default: 101,102)")
    args = parser.parse_args(argv)
    try:
        hidden = from_pretrained(args.path)(jnp.asarray([common.ids_argument(args.ids)]))
    except (fp.PositionLimitError, fp.CheckpointError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    print(
        "sentence embedding (first 8 of", hidden.shape[-1], "):", mean_pool(hidden, jnp.ones(hidden.shape[:2]))[0, :8]
    )


if __name__ == "__main__":
    main()
