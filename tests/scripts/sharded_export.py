"""Export RoPE sharded on a mesh of 8 host devices with the guard kept; print a JSON verdict
(run in a subprocess by tests/test_export.py, or on its own).

Nothing runs on import (pytest's --doctest-modules imports this file): ``main()`` does the work
and needs ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` set before jax starts a backend.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import flax_posenc as fp


def main() -> dict:
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    rope = fp.RopeConfig(head_dim=16, max_position_embeddings=64)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((8, 32, 2, 16)), jnp.float32)
    positions = jnp.broadcast_to(jnp.arange(32, dtype=jnp.int32), (8, 32))
    rows = NamedSharding(mesh, P("data"))
    x, positions = jax.device_put(x, rows), jax.device_put(positions, rows)

    def f(x, p):
        return fp.apply_rope(x, rope, positions=p)

    exported = fp.export(f, platforms=("cpu", "cuda", "tpu"), in_shardings=(rows, rows))(x, positions)
    program = jax.export.deserialize(exported.serialize())
    out = fp.call_exported(program, x, positions)
    expected = jax.jit(f, in_shardings=(rows, rows))(x, positions)
    bad = jax.device_put(positions.at[5, 31].set(64), rows)
    try:
        fp.call_exported(program, x, bad)
        error = None
    except fp.PositionLimitError as e:
        error = str(e)
    try:
        # the reference message, unsharded (a host callback raising on one device of a sharded
        # program leaves the others waiting in the guard's all-reduce: not what is tested here)
        fp.position_errors(jax.jit(f))(np.asarray(x), np.asarray(bad))
        callback_error = None
    except fp.PositionLimitError as e:
        callback_error = str(e)
    return {
        "devices": len(jax.devices()),
        "out_devices": len(out.sharding.device_set),
        "max_abs_diff": float(np.abs(np.asarray(out) - np.asarray(expected)).max()),
        "error": error,
        "callback_error": callback_error,
    }


if __name__ == "__main__":
    print(json.dumps(main()))
