"""PatchPositionalEmbedding (NNX and Linen) on a mesh of 8 host devices; print a JSON verdict.

Run in a subprocess by tests/test_grid_modules.py with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``. Nothing runs on import.
"""

import json

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
    rules = (("embed", "model"),)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((8, 1 + 36, 64)), jnp.float32)
    x_sharding = NamedSharding(mesh, P("data", None, "model"))
    out = {"devices": len(jax.devices())}

    pos = fp.nnx.PatchPositionalEmbedding.from_arguments((4, 4), 64, interpolate=True, rngs=nnx.Rngs(0))
    expected = np.asarray(pos(x, grid=(6, 6)))
    graphdef, state = nnx.split(pos)
    shardings = nn.logical_to_mesh_sharding(nnx.get_partition_spec(state), mesh, rules)
    state = jax.device_put(state, shardings)
    run = jax.jit(lambda s, v: nnx.merge(graphdef, s)(v, grid=(6, 6)), out_shardings=x_sharding)
    got = run(state, jax.device_put(x, x_sharding))
    out["nnx"] = {
        "param_spec": str(state["embedding"].value.sharding.spec),
        "out_spec": str(got.sharding.spec),
        "max_abs_diff": float(np.abs(np.asarray(got) - expected).max()),
    }

    lin = fp.linen.PatchPositionalEmbedding.from_arguments((4, 4), 64, interpolate=True)
    variables = lin.init(jax.random.key(0), x[:, :17])
    expected = np.asarray(lin.apply(variables, x, grid=(6, 6)))
    shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(variables), mesh, rules)
    variables = jax.device_put(variables, shardings)
    run = jax.jit(lambda v, t: lin.apply(v, t, grid=(6, 6)), out_shardings=x_sharding)
    got = run(variables, jax.device_put(x, x_sharding))
    out["linen"] = {
        "param_spec": str(nn.unbox(variables)["params"]["embedding"].sharding.spec),
        "out_spec": str(got.sharding.spec),
        "max_abs_diff": float(np.abs(np.asarray(got) - expected).max()),
    }
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
