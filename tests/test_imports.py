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
        t = c.load_position_table({str(minilm_dir)!r})
        b = c.load_input_block({str(minilm_dir)!r})
        assert t.max_length == 512 and b.word_embeddings.shape == (30522, 384)
        r = c.inspect_source({str(minilm_dir)!r})  # the source protocol, report included
        assert r.limit == 512 and r.to_dict()["max_length"] == 512 and "512" in str(r)
        heavy = sorted(m for m in ("jax", "torch", "transformers", "flax") if m in sys.modules)
        print("HEAVY", heavy)
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout, run.stdout
