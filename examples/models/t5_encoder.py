"""A T5 / mT5 encoder in Flax NNX built from flax-posenc's relative position bias.

The whole encoder of ``T5EncoderModel`` (RMS LayerNorm without bias or mean, unscaled attention
with the learned bucketed bias of block 0 shared by every layer, ReLU or gated-GELU feed-forward),
loaded from a Hugging Face checkpoint and equal to transformers' ``last_hidden_state`` within
1e-4 in float32 (``tests/test_relative_bias.py::test_t5_encoder_example``).

    model = from_pretrained("path/to/t5")             # a directory, .safetensors or Hub id
    hidden = model(input_ids, attention_mask=mask)   # (batch, seq, d_model)

UMT5 (a table per layer) and LongT5 (local attention) are not covered.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import flax_posenc as fp
from flax_posenc.conversion import open_checkpoint
from flax_posenc.lookup import lookup_rows
from flax_posenc.overflow import Limit


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """T5LayerNorm: ``weight * x / sqrt(mean(x**2) + eps)`` (no mean subtraction, no bias), in float32."""
    x32 = x.astype(jnp.float32)
    return weight * (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps))


class T5Encoder(nnx.Module):
    """``T5EncoderModel`` in NNX: ``__call__(input_ids (b, s), attention_mask=None) -> (b, s, d_model)``."""

    def __init__(self, weights: dict[str, np.ndarray], config: dict, bias: fp.nnx.RelativePositionBias):
        p = lambda k: nnx.Param(jnp.asarray(weights[k], jnp.float32))  # noqa: E731
        self.heads, self.d_kv = config["num_heads"], config["d_kv"]
        self.eps = float(config.get("layer_norm_epsilon", 1e-6))
        self.gated = str(config.get("feed_forward_proj", "relu")).startswith("gated")
        self.act = (
            jax.nn.relu
            if str(config.get("feed_forward_proj", "relu")).endswith("relu")
            else (lambda x: jax.nn.gelu(x, approximate=True))
        )  # gelu_new
        self.embed = p("embed")
        self.bias = bias
        self.layers = nnx.List(
            [
                nnx.Dict({name: p(f"{i}.{name}") for name in weights["_layer_names"]})
                for i in range(config["num_layers"])
            ]
        )
        self.final_norm = p("final_layer_norm")

    def attention(self, layer, x, bias):
        b, s, _ = x.shape
        split = lambda t: t.reshape(b, s, self.heads, self.d_kv)  # noqa: E731
        q, k, v = (split(x @ layer[n][...].T) for n in ("q", "k", "v"))
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) + bias  # T5: no 1/sqrt(d_kv)
        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, self.heads * self.d_kv)
        return out @ layer["o"][...].T

    def feed_forward(self, layer, x):
        if self.gated:
            h = self.act(x @ layer["wi_0"][...].T) * (x @ layer["wi_1"][...].T)
        else:
            h = self.act(x @ layer["wi"][...].T)
        return h @ layer["wo"][...].T

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> jax.Array:
        words = Limit(
            self.embed.shape[0], name="t5 word embedding table (shared.weight)", unit="id", argument="input_ids"
        )
        x = lookup_rows(self.embed[...], input_ids, words)  # the library's guard: an id past the vocabulary is an error
        s = input_ids.shape[1]
        bias = self.bias(s, s)[None]  # (1, heads, s, s): computed once, shared by every layer
        if attention_mask is not None:
            bias = bias + jnp.where(attention_mask[:, None, None, :] > 0, 0.0, jnp.finfo(jnp.float32).min)
        for layer in self.layers:
            x = x + self.attention(layer, rms_norm(x, layer["attn_norm"][...], self.eps), bias)
            x = x + self.feed_forward(layer, rms_norm(x, layer["ff_norm"][...], self.eps))
        return rms_norm(x, self.final_norm[...], self.eps)


def from_pretrained(source) -> T5Encoder:
    """Load the encoder of a T5 / mT5 checkpoint (``T5EncoderModel``, ``T5ForConditionalGeneration``, ...).

    Raises :class:`~flax_posenc.CheckpointError` naming the file for a missing tensor or a family
    this example does not cover.
    """
    ckpt = open_checkpoint(source)
    cfg = ckpt.config
    if cfg.get("model_type") not in ("t5", "mt5"):
        raise fp.CheckpointError(
            f"{ckpt.config_path}: expected model_type 't5' or 'mt5' (this example's encoder), "
            f"found {cfg.get('model_type')!r}"
        )

    def read(key: str) -> np.ndarray:  # a missing tensor: one line naming the file and the key
        return np.asarray(ckpt.tensor(key), np.float32)

    gated = str(cfg.get("feed_forward_proj", "relu")).startswith("gated")
    ff = ("wi_0", "wi_1", "wo") if gated else ("wi", "wo")
    weights: dict = {
        "embed": read("shared.weight" if "shared.weight" in ckpt else "encoder.embed_tokens.weight"),
        "final_layer_norm": read("encoder.final_layer_norm.weight"),
        "_layer_names": ("q", "k", "v", "o", "attn_norm", "ff_norm", *ff),
    }
    for i in range(cfg["num_layers"]):
        base = f"encoder.block.{i}.layer"
        for n in ("q", "k", "v", "o"):
            weights[f"{i}.{n}"] = read(f"{base}.0.SelfAttention.{n}.weight")
        weights[f"{i}.attn_norm"] = read(f"{base}.0.layer_norm.weight")
        weights[f"{i}.ff_norm"] = read(f"{base}.1.layer_norm.weight")
        for n in ff:
            weights[f"{i}.{n}"] = read(f"{base}.1.DenseReluDense.{n}.weight")
    bias = fp.nnx.RelativePositionBias.from_pretrained(source, stack="encoder")
    return T5Encoder(weights, cfg, bias)


__all__ = ["T5Encoder", "from_pretrained", "rms_norm"]
