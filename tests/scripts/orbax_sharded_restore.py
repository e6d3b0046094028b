"""Restore orbax checkpoints of the input block onto a mesh of 8 host devices; print a JSON verdict
(run in a subprocess by tests/test_orbax.py).

Usage: python orbax_sharded_restore.py NNX_SAVED_DIR LINEN_SAVED_DIR EXPECTED.npz HF_CHECKPOINT_DIR

Both checkpoints were saved on one device, by the test process; ``EXPECTED.npz`` holds the inputs
(``ids``, ``types``) and the saved blocks' outputs (``nnx``, ``linen``) computed there before
saving. Each checkpoint is restored with a mesh (``fp.load_orbax``, the NNX and Linen
``from_pretrained``); the tensor-parallel rules split the width ("embed") over the mesh's
"model" axis, the batch goes over "data". The Hugging Face checkpoint the blocks came from is
also loaded with a mesh (read on the host, then ``jax.device_put``).

Nothing runs on import (pytest's --doctest-modules imports this file): ``main()`` does the work and
needs ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` set before jax starts a backend.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import flax_posenc as fp

RULES = (("vocab", None), ("embed", "model"))


def main(nnx_dir: str, linen_dir: str, expected_npz: str, hf_dir: str) -> dict:
    from flax import linen as nn
    from flax import nnx

    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    results: dict = {"devices": len(jax.devices())}
    reference = np.load(expected_npz)
    ids, types = jnp.asarray(reference["ids"]), jnp.asarray(reference["types"])
    ids_sharded = jax.device_put(ids, NamedSharding(mesh, P("data", None)))
    types_sharded = jax.device_put(types, NamedSharding(mesh, P("data", None)))
    out_sharding = NamedSharding(mesh, P("data", None, "model"))

    def shards(array) -> dict:
        return {
            "shard_shape": list(array.addressable_shards[0].data.shape),
            "devices": len({s.device.id for s in array.addressable_shards}),
            "spec": str(array.sharding.spec),
        }

    spec, params = fp.load_orbax(nnx_dir, mesh=mesh, rules=RULES)
    results["load_orbax"] = {name: shards(params[name]) for name in ("word_embeddings", "position_embeddings")}

    # NNX: restored straight onto the mesh, against the saved block's output
    expected = reference["nnx"]
    block = fp.nnx.TransformerInput.from_pretrained(nnx_dir, mesh=mesh, rules=RULES)
    graphdef, state = nnx.split(block)
    fn = jax.jit(lambda s, i, t: nnx.merge(graphdef, s)(i, token_type_ids=t), out_shardings=out_sharding)
    out = fn(state, ids_sharded, types_sharded)
    results["nnx"] = {
        "word_embeddings": shards(block.word_embeddings[...]),
        "out": shards(out),
        "max_abs_diff": float(np.abs(np.asarray(out) - expected).max()),
        "scale": float(np.abs(expected).max()),
    }

    # the same from the Hugging Face checkpoint: not orbax, placed with device_put
    block = fp.nnx.TransformerInput.from_pretrained(hf_dir, mesh=mesh, rules=RULES)
    graphdef, state = nnx.split(block)
    fn = jax.jit(lambda s, i, t: nnx.merge(graphdef, s)(i, token_type_ids=t), out_shardings=out_sharding)
    out = fn(state, ids_sharded, types_sharded)
    results["nnx_from_hf"] = {
        "word_embeddings": shards(block.word_embeddings[...]),
        "max_abs_diff": float(np.abs(np.asarray(out) - expected).max()),
        "scale": float(np.abs(expected).max()),
    }

    # Linen: the same, variables boxed with their logical axes
    expected = reference["linen"]
    module, variables = fp.linen.TransformerInput.from_pretrained(linen_dir, mesh=mesh, rules=RULES)
    fn = jax.jit(lambda v, i, t: module.apply(v, i, token_type_ids=t), out_shardings=out_sharding)
    out = fn(variables, ids_sharded, types_sharded)
    results["linen"] = {
        "word_embeddings": shards(nn.unbox(variables)["params"]["word_embeddings"]),
        "partition_spec": str(nn.get_partition_spec(variables)["params"]["word_embeddings"]),
        "out": shards(out),
        "max_abs_diff": float(np.abs(np.asarray(out) - expected).max()),
        "scale": float(np.abs(expected).max()),
    }
    return results


if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    print(json.dumps(main(*sys.argv[1:5])))
