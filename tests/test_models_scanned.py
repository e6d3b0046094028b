"""The decoders of examples/models scan over stacked layers (MaxText's ``scan_layers``): a new
decoding bucket lowers to one program holding one layer inside a ``while`` loop, whatever the
number of layers, never one copy of the layer per layer.

Structural checks on the StableHLO text of the whole bucketed ``generate`` program (prefill + the
decode loop) of models built abstractly (``nnx.eval_shape`` / ``jax.eval_shape``: nothing is
allocated or compiled); no timing (``benchmarks/compile_decode.py`` measures compile time)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from model_checkpoints import TINY, load_example

import flax_posenc as fp

common = load_example("common")
BUCKET = (8, 8)  # prompt bucket, new-token bucket


def lowered_text(kind: str, layers: int) -> str:
    """The StableHLO of ``kind``'s ``generate`` program for :data:`BUCKET`, with ``layers`` layers."""
    config = dict(TINY[{"gpt2_linen": "gpt2"}.get(kind, kind)][1])
    config.update(n_layer=layers, num_hidden_layers=layers, hidden_size=64, n_embd=64, n_head=4)
    example = load_example(kind)
    prompt = jax.ShapeDtypeStruct((1, BUCKET[0]), jnp.int32)
    mask = jax.ShapeDtypeStruct((1, BUCKET[0]), jnp.bool_)
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    if kind == "gpt2_linen":
        embed = fp.linen.TransformerInput.from_arguments(1000, 64, num_positions=64)
        module = example.GPT2(embed, layers, 4, 256)
        variables = jax.eval_shape(module.init, jax.random.key(0), jnp.zeros((1, 1), jnp.int32))
        return example._generate.lower(module, BUCKET[1], variables, prompt, mask, scalar, scalar, scalar).as_text()
    make = {
        "gpt2": lambda: example.GPT2(config, rngs=nnx.Rngs(0)),
        "bloom": lambda: example.Bloom(config, fp.AlibiConfig(num_heads=4), rngs=nnx.Rngs(0)),
        "llama": lambda: example.Llama(
            config, fp.RopeConfig(head_dim=16, max_position_embeddings=64), rngs=nnx.Rngs(0)
        ),
    }[kind]
    model = nnx.eval_shape(make)
    model.eval()  # dropout off, as from_pretrained leaves it
    graphdef, state = nnx.split(model)
    return common._generate_nnx.lower(graphdef, BUCKET[1], state, prompt, mask, scalar, scalar, scalar).as_text()


def ops(text: str, name: str) -> int:
    return len(re.findall(rf"\bstablehlo\.{name}\b", text))


@pytest.mark.parametrize("kind", ["gpt2", "bloom", "llama", "gpt2_linen"])
def test_one_layer_in_a_loop_whatever_the_layer_count(kind):
    one, four = lowered_text(kind, 1), lowered_text(kind, 4)
    assert "tensor<4x64x" in four and "tensor<4x64x" not in one  # the weights are stacked (layers, ...)
    # three loops: the decode loop, and the scan over the layers in the prefill and in the step
    assert ops(one, "while") == ops(four, "while") == 3
    # the layer's matmuls (4 projections, 2 attention einsums, in the prefill and in the step, plus
    # the head) appear once in the text for 1 and for 4 layers: an unrolled stack would hold 4 copies
    assert ops(one, "dot_general") == ops(four, "dot_general") >= 2 * 6
    assert abs(len(four) - len(one)) < 0.02 * len(one)  # the program does not grow with the layers
