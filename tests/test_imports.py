"""Importing and using flax_posenc.conversion pulls in neither jax nor torch nor transformers."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_conversion_stays_free_of_jax_torch_transformers(minilm_dir):
    code = textwrap.dedent(
        f"""
        import sys
        import flax_posenc.conversion as c
        # ml_dtypes (bfloat16) takes ~0.7 s to import: only reading a file that needs it imports it
        assert "ml_dtypes" not in sys.modules, "import flax_posenc.conversion imported ml_dtypes"
        t = c.load_position_table({str(minilm_dir)!r})
        b = c.load_input_block({str(minilm_dir)!r})
        assert t.num_positions == 512 and b.word_embeddings.shape == (30522, 384)
        r = c.inspect_source({str(minilm_dir)!r})  # the source protocol, report included
        assert r.limit == 512 and r.to_dict()["num_positions"] == 512 and "512" in str(r)
        heavy = sorted(m for m in ("jax", "torch", "transformers", "flax") if m in sys.modules)
        print("HEAVY", heavy)
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout, run.stdout


def test_numpy_only_modules_and_sinusoidal_sources_import_no_jax():
    """The numpy-only core (configs, sinusoid math, limits, analysis) and a ``sinusoidal:`` source
    read through the conversion package leave jax unimported; the table is the float64 formula."""
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        import flax_posenc.conversion as c
        from flax_posenc import alibi_config, analysis, limits, rope_config, sinusoid_math
        rec = c.inspect_source("sinusoidal:1024:64")
        assert rec.limit == 1024, rec.limit
        t = c.load_position_table("sinusoidal:1024:64")
        p = np.arange(1024)[:, None]; w = 10000.0 ** (-2.0 * np.arange(32) / 64)
        ref = np.empty((1024, 64)); ref[:, 0::2], ref[:, 1::2] = np.sin(p * w), np.cos(p * w)
        assert t.weights.dtype == np.float32 and np.abs(t.weights - ref).max() <= 2.0**-25 + 1e-12
        rope_config.rope_inverse_frequencies(rope_config.RopeConfig(head_dim=8))
        alibi_config.alibi_slopes(12)
        analysis.sinusoidal_wavelengths(8)
        heavy = sorted(m for m in ("jax", "flax", "torch", "transformers") if m in sys.modules)
        print("HEAVY", heavy)
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout, run.stdout


def test_modules_use_each_others_public_names_only():
    """No ``from flax_posenc.x import _private`` and no ``module._private`` across flax_posenc/."""
    import ast
    from pathlib import Path

    allowed: set[str] = set()
    root = Path(__file__).resolve().parents[1] / "flax_posenc"
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flax_posenc"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") and alias.name not in allowed:
                        found.append(f"{path.name}:{node.lineno} imports {node.module}.{alias.name}")
                    modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("flax_posenc")}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in allowed
            ):
                found.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not found, found
