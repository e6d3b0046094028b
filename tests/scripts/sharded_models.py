"""Run each reference model of examples/models on 8 host devices, data parallel and tensor
parallel; print a JSON verdict (run in a subprocess by tests/test_models_sharding.py).

Usage: python sharded_models.py '{"gpt2": DIR, "llama": DIR, "bloom": DIR, "bert": DIR}' [--block]

``--block``: also run sharded_block.py's checks of the input block in the same process (one jax
start-up for both), under the key ``"block"``.
"""

import json
import os
import sys
from pathlib import Path

import jax
import numpy as np
from flax import linen as nn
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model_checkpoints import load_example  # noqa: E402

#: logical axis -> mesh axis. Data parallel: every parameter replicated, the batch split.
#: Tensor parallel: attention heads and MLP width split over "model" (Megatron-style).
#: XLA's cheapest CPU code generation (tests/helpers.FAST_XLA as per-program options) for the models'
#: programs, sharded and unsharded alike: the same HLO passes (partitioning, fusion, collectives), about
#: a quarter of the compile time; the checks are within float32 rounding. The input block
#: (sharded_block.py, whose checks are bit for bit) compiles with XLA's defaults.
FAST_XLA = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
    "xla_cpu_use_fusion_emitters": False,
}

RULES = {
    "data_parallel": (
        ("data", (8, 1)),
        (("vocab", None), ("embed", None), ("heads", None), ("kv", None), ("mlp", None)),
    ),
    "tensor_parallel": (
        ("data", (2, 4)),
        (("vocab", None), ("embed", None), ("heads", "model"), ("kv", "model"), ("mlp", "model")),
    ),
}


def main(paths: dict) -> dict:
    ids = np.random.default_rng(0).integers(0, 1000, (8, 16)).astype(np.int32)
    results = {"devices": len(jax.devices())}
    for name, path in paths.items():
        model = load_example(name).from_pretrained(path)
        graphdef, state = nnx.split(model)
        forward = lambda s, i: nnx.merge(graphdef, s)(i)  # noqa: E731
        expected = np.asarray(jax.jit(forward, compiler_options=FAST_XLA)(state, ids))
        for kind, ((_, shape), rules) in RULES.items():
            mesh = jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
            sharded = jax.device_put(state, nn.logical_to_mesh_sharding(nnx.get_partition_spec(state), mesh, rules))
            sharded_ids = jax.device_put(ids, NamedSharding(mesh, P("data", None)))
            out = jax.jit(forward, out_shardings=NamedSharding(mesh, P("data", None, None)), compiler_options=FAST_XLA)(
                sharded, sharded_ids
            )
            mlp = next(
                v
                for p, v in nnx.to_flat_state(sharded)
                if "mlp" in (v.get_metadata().get("out_sharding") or ()) and v.ndim in (2, 3)  # 3: a layer stack
            )
            results[f"{name}/{kind}"] = {
                "max_abs_diff": float(np.abs(np.asarray(out) - expected).max()),
                "scale": float(np.abs(expected).max()),
                "out_batch_shard": list(out.addressable_shards[0].data.shape),
                "mlp_kernel": list(mlp[...].shape),
                "mlp_kernel_shard": list(mlp[...].addressable_shards[0].data.shape),
            }
    return results


if __name__ == "__main__":  # (pytest's --doctest-modules imports this file: nothing runs then)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    results = main(json.loads(sys.argv[1]))
    if sys.argv[2:] == ["--block"]:
        import sharded_block

        results["block"] = sharded_block.main()
    print(json.dumps(results))
