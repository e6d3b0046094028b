"""GPT-2 in Flax Linen around flax-posenc's Linen input block: examples/models/gpt2.py's twin.

Same architecture, same checkpoint, same numbers as the NNX version; the Linen way: modules
are descriptions, parameters live in a ``variables`` dict, and ``from_pretrained`` returns
``(module, variables)`` like :meth:`flax_posenc.linen.TransformerInput.from_pretrained`.
The KV cache is passed in and returned (no mutable collection), so the decoding loop is the
same pure :func:`common.greedy_decode` (and host-side :class:`common.Request`) the NNX models use.

    module, variables = from_pretrained("path/to/gpt2")
    logits = module.apply(variables, ids)                          # (batch, seq, vocab)
    out = generate(module, variables, ids, 20, attention_mask=mask, eos_token_id=50256)  # bucketed
    # training: module.apply(variables, ids, deterministic=False, rngs={"dropout": key})

    python examples/models/gpt2_linen.py PATH --prompt "Hello, world" --max-new-tokens 20
    python examples/models/gpt2_linen.py PATH --prompt-ids 15496,11,995 --max-new-tokens 20
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from common import Weights  # noqa: E402

import flax_posenc as fp  # noqa: E402


def dense(features: int, axes: tuple, name: str) -> nn.Dense:
    """``nn.Dense`` whose kernel and bias carry logical axis names."""
    return nn.Dense(
        features,
        name=name,
        kernel_init=nn.with_logical_partitioning(nn.initializers.normal(0.02), axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
    )


class LayerNorm(nn.Module):
    eps: float

    @nn.compact
    def __call__(self, x):
        init = lambda value: nn.with_logical_partitioning(lambda key, shape: jnp.full(shape, value), ("embed",))  # noqa: E731
        scale, bias = self.param("scale", init(1.0), x.shape[-1:]), self.param("bias", init(0.0), x.shape[-1:])
        return fp.block.layer_norm(x, scale, bias, self.eps)


class Block(nn.Module):
    """``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))`` (as ``gpt2.Block``): one step of ``nn.scan``
    over the layers, ``carry`` ``(x, cache)`` with the stacked cache (or ``None``), ``index`` the
    layer whose cache slot it writes; with ``index=None`` (``scan_layers=False``) ``cache`` is the
    layer's own ``{"k", "v"}``."""

    dim: int
    heads: int
    inner: int
    eps: float
    dropout: float
    attn_dropout: float
    deterministic: bool = True

    @nn.compact
    def __call__(self, carry, index, mask, start):
        x, cache = carry
        layer_cache = cache if cache is None or index is None else {**cache, "layer": index}
        b, s, _ = x.shape
        drop = nn.Dropout(self.dropout, deterministic=self.deterministic)
        qkv = dense(3 * self.dim, ("embed", "heads"), "c_attn")(LayerNorm(self.eps, name="ln_1")(x))
        q, k, v = jnp.split(qkv.reshape(b, s, 3 * self.heads, self.dim // self.heads), 3, axis=2)
        layer_cache, k, v = common.cache_update(layer_cache, k, v, start)
        y = common.attention(
            q, k, v, mask=mask, dropout=nn.Dropout(self.attn_dropout, deterministic=self.deterministic)
        ).reshape(b, s, -1)
        x = x + drop(dense(self.dim, ("heads", "embed"), "attn_c_proj")(y))
        h = common.gelu_tanh(dense(self.inner, ("embed", "mlp"), "c_fc")(LayerNorm(self.eps, name="ln_2")(x)))
        return (x + drop(dense(self.dim, ("mlp", "embed"), "c_proj")(h)), layer_cache), None


class GPT2(nn.Module):
    """GPT-2: ``fp.linen.TransformerInput`` (wte + wpe) -> blocks -> ln_f -> tied head."""

    embed: fp.linen.TransformerInput
    layers: int
    heads: int
    inner: int
    eps: float = 1e-5
    dropout: float = 0.1
    attn_dropout: float = 0.1
    dtype: Any = jnp.float32  # of the KV cache (from_pretrained casts the parameters to it)
    #: one ``nn.scan`` over stacked layers (parameters ``h``, the default), or separate layers
    #: ``h_0``, ``h_1``, ... in a Python loop (see ``llama.Llama`` and ``common.make_layers``)
    scan_layers: bool = True

    @property
    def position_limit(self) -> int:
        return self.embed.num_positions

    def init_cache(self, batch: int, max_len: int) -> dict | list[dict]:
        """``{"k", "v"}`` of zeros ``(layers, batch, max_len, heads, head_dim)`` (as ``gpt2.GPT2``'s;
        ``scan_layers=False``: one such dict per layer, without the layer axis)."""
        head_dim = self.embed.dim // self.heads
        make = common.init_stacked_cache if self.scan_layers else common.init_cache
        return make(self.layers, batch, max_len, self.heads, head_dim, self.dtype)

    @nn.compact
    def __call__(self, input_ids, attention_mask=None, *, cache=None, start=0, positions=None, deterministic=True):
        """Logits, or ``(logits, new_cache)`` with ``cache``: see ``gpt2.GPT2.__call__``."""
        input_ids = jnp.asarray(input_ids)
        embedded = (
            self.embed(input_ids, start=start) if positions is None else self.embed(input_ids, position_ids=positions)
        )
        x = nn.Dropout(self.dropout, deterministic=deterministic)(embedded)
        k_len = input_ids.shape[1] if cache is None else jax.tree.leaves(cache)[0].shape[-3]
        mask = common.causal_mask(input_ids.shape[1], k_len, start=start, key_mask=attention_mask)
        args = (self.embed.dim, self.heads, self.inner, self.eps, self.dropout, self.attn_dropout, deterministic)
        if self.scan_layers:
            # the layers as one nn.scan (MaxText's scan_layers): parameters stacked (layers, ...) under
            # "h", the layer axis without a logical name; the whole cache rides in the carry
            layers = nn.scan(
                Block,
                variable_axes={"params": 0},
                split_rngs={"params": True, "dropout": True},
                in_axes=(0, nn.broadcast, nn.broadcast),
                length=self.layers,
                metadata_params={nn.PARTITION_NAME: None},
            )
            (x, new_cache), _ = layers(*args, name="h")((x, cache), jnp.arange(self.layers), mask, start)
        else:  # separate layers h_0, h_1, ..., each with its own cache
            new_cache = None if cache is None else []
            for i in range(self.layers):
                (x, layer_cache), _ = Block(*args, name=f"h_{i}")(
                    (x, None if cache is None else cache[i]), None, mask, start
                )
                if new_cache is not None:
                    new_cache.append(layer_cache)
        x = LayerNorm(self.eps, name="ln_f")(x)
        logits = self.embed.attend(x)  # the tied head
        return logits if cache is None else (logits, new_cache)


def from_pretrained(path, *, dtype=jnp.float32, scan_layers: bool = True) -> tuple[GPT2, dict]:
    """``(module, variables)`` holding every weight of a Hugging Face GPT-2 checkpoint; ``dtype``:
    of the parameters, the computation and the KV cache (e.g. ``jnp.bfloat16``); ``scan_layers``:
    see :class:`GPT2`."""
    w = Weights(path, prefixes=("transformer.", ""), probe="wte.weight")
    embed, embed_variables = fp.linen.TransformerInput.from_pretrained(path)
    c = w.config
    module = GPT2(
        embed,
        c["n_layer"],
        c["n_head"],
        c.get("n_inner") or 4 * c["n_embd"],
        c.get("layer_norm_epsilon", 1e-5),
        c.get("resid_pdrop", 0.1),
        c.get("attn_pdrop", 0.1),
        common.float_dtype(dtype),
        scan_layers,
    )

    def linear(source, key):  # Conv1D weights are already (in, out)
        return {"kernel": jnp.asarray(source(key + ".weight")), "bias": jnp.asarray(source(key + ".bias"))}

    def norm(source, key):
        return {"scale": jnp.asarray(source(key + ".weight")), "bias": jnp.asarray(source(key + ".bias"))}

    def block(layers):
        return {
            "ln_1": norm(layers, "ln_1"),
            "ln_2": norm(layers, "ln_2"),
            "c_attn": linear(layers, "attn.c_attn"),
            "attn_c_proj": linear(layers, "attn.c_proj"),
            "c_fc": linear(layers, "mlp.c_fc"),
            "c_proj": linear(layers, "mlp.c_proj"),
        }

    params = {"embed": nn.unbox(embed_variables["params"]), "ln_f": norm(w, "ln_f")}
    if scan_layers:  # every layer's tensor stacked (layers, ...)
        params["h"] = block(common.LayerWeights(w, "h.{}.", module.layers))
    else:
        for i in range(module.layers):
            params[f"h_{i}"] = block(common.LayerWeights(w, "h.{}.", module.layers, index=i))
    # box every array as module.init does (logical axis names for nn.get_partition_spec)
    boxes = jax.eval_shape(module.init, jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
    is_box = lambda x: isinstance(x, nn.LogicallyPartitioned)  # noqa: E731
    params = jax.tree.map(lambda box, value: box.replace_boxed(value), boxes, params, is_leaf=is_box)
    return module, common.cast_floats({"params": params}, dtype)


def generate(
    module: GPT2,
    variables: dict,
    prompt_ids,
    max_new_tokens: int,
    *,
    attention_mask=None,
    eos_token_id=None,
    pad_token_id=None,
) -> jax.Array:
    """Greedy ids ``(batch, prompt_len + steps)``, as ``gpt2.generate`` (same arguments, same
    buckets: :class:`common.Request` on the host, :func:`common.greedy_decode` on device).

    Raises ``PositionLimitError`` when the longest prompt + new tokens exceed ``n_positions``.
    """
    request = common.Request(
        prompt_ids,
        max_new_tokens,
        attention_mask=attention_mask,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        vocab_size=module.embed.spec.vocab_size,
        limit=module.position_limit,
        what=module.embed.spec.position.name,
    )
    new, steps = _generate(
        module, request.new_bucket, variables, request.padded_prompt, request.padded_mask, *request.scalars
    )
    return request.result(new, steps)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _generate(module, new_bucket, variables, prompt, mask, max_new_tokens, eos, pad):
    def forward(ids, key_mask, cache, start, positions):
        return module.apply(variables, ids, key_mask, cache=cache, start=start, positions=positions)

    return common.greedy_decode(forward, module.init_cache, prompt, mask, max_new_tokens, eos, pad, new_bucket)


def main(argv=None) -> None:
    common.cli(
        __doc__,
        from_pretrained,
        argv,
        run=lambda loaded, ids, n, **kwargs: generate(*loaded, ids, n, **kwargs),
    )


if __name__ == "__main__":
    main()
