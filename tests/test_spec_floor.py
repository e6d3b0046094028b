"""flax_posenc.spec: the specs on the numpy floor, their dtype stored as a name."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from flax_posenc import block, spec
from flax_posenc.spec import InputSpec, PositionSpec

POSITION = PositionSpec(dim=4, num_positions=8)


def test_the_spec_module_imports_no_jax():
    code = textwrap.dedent(
        """
        import sys
        from flax_posenc.spec import InputSpec, PositionSpec
        s = InputSpec(10, PositionSpec(dim=4, num_positions=8), dtype="bfloat16")
        assert InputSpec.from_dict(s.to_dict()) == s
        print("HEAVY", sorted(m for m in ("jax", "flax", "torch", "transformers") if m in sys.modules))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout, run.stdout


def test_block_re_exports_the_same_objects():
    for name in spec.__all__:
        if hasattr(block, name):
            assert getattr(block, name) is getattr(spec, name), name
    assert {"InputSpec", "PositionSpec", "AXES", "POSITION_ARGUMENTS", "SPEC_ARGUMENTS", "policy_of"} <= set(
        block.__all__
    )
    assert block.POSITION_KINDS is spec.POSITION_KINDS and block.renamed_position_name is spec.renamed_position_name
    import flax_posenc as fp

    # at the top level too, beside the other modules' specs
    assert fp.PositionSpec is spec.PositionSpec and fp.InputSpec is spec.InputSpec
    assert (
        fp.RelativeBiasSpec.__module__ == "flax_posenc.relative_bias_config"
        and fp.GridSpec.__module__ == "flax_posenc.grid_config"
    )


@pytest.mark.parametrize(
    "spellings, name",
    [
        ((jnp.float32, np.float32, "float32", np.dtype("float32"), jnp.dtype("float32")), "float32"),
        ((jnp.bfloat16, ml_dtypes.bfloat16, "bfloat16", np.dtype(ml_dtypes.bfloat16)), "bfloat16"),
        ((jnp.float16, np.float16, "float16"), "float16"),
        ((np.float64, "float64"), "float64"),
    ],
)
def test_dtype_is_stored_as_its_name(spellings, name):
    specs = [InputSpec(10, POSITION, dtype=d) for d in spellings]
    assert {s.dtype for s in specs} == {name}
    assert len(set(specs)) == 1 and len({hash(s) for s in specs}) == 1
    assert InputSpec.from_dict(specs[0].to_dict()) == specs[0] and specs[0].to_dict()["dtype"] == name
    assert jnp.dtype(specs[0].dtype) == jnp.dtype(spellings[0])  # jax reads the name back


def test_a_bfloat16_spec_computes_in_bfloat16_under_jit():
    s = InputSpec(3, POSITION, dtype=jnp.bfloat16)
    rng = np.random.default_rng(0)
    params = {
        "word_embeddings": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
        "position_embeddings": jnp.asarray(rng.normal(size=(8, 4)), jnp.float32),
    }
    out = jax.jit(lambda p, ids: block.transformer_input(s, p, ids))(params, jnp.array([[2, 0, 1]]))
    assert out.dtype == jnp.bfloat16
    expected = params["word_embeddings"][np.array([2, 0, 1])] + params["position_embeddings"][:3]
    np.testing.assert_allclose(np.asarray(out, np.float32)[0], np.asarray(expected), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("bad", ["int32", jnp.int8, "int4", "V8", "complex128", "not-a-dtype"])
def test_non_float_dtypes_are_refused(bad):
    with pytest.raises(
        ValueError, match=r"^dtype: expected a floating dtype \(float32, bfloat16, \.\.\.\) or None, got "
    ):
        InputSpec(10, POSITION, dtype=bad)
