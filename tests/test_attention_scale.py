"""The softmax scale in the record, and Llama 4's NoPE temperature, against transformers' own modules.

- DeepSeek-style multi-head latent attention with YaRN and ``mscale_all_dim``: the record's
  ``softmax_scale`` against the ``scaling`` of the model type's own attention module (instantiated
  alone from the config: no forward pass), for every such model type the library reads.
  (tests/conformance checks every RoPE model type read with its default tiny config.)
- Llama 4: :func:`flax_posenc.attention_temperature` against the query scaling of
  ``Llama4TextAttention`` on a NoPE layer (the queries its eager attention receives), and the
  record of those layers.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conformance.tiny import quiet, tiny_config  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc.conversion.attention_scale import softmax_scale  # noqa: E402
from flax_posenc.conversion.models import MODEL_MECHANISMS  # noqa: E402
from flax_posenc.conversion.relative_config import RelativeConfig, relative_configs_from_dict  # noqa: E402

#: transformers' model types whose attention multiplies its scale by yarn_apply_mscale (MLA)
MSCALE_TYPES = (
    "axk1", "axk2", "bailing_hybrid", "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe_lite",
    "glm_moe_dsa", "hy_v4", "hy_v4_vl", "longcat_flash", "minicpm3", "mistral4", "mistral_large4", "youtu",
)  # fmt: skip
READ = [t for t in MSCALE_TYPES if t in MODEL_MECHANISMS]
YARN = {
    "rope_type": "yarn",
    "factor": 40.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "beta_fast": 32,
    "beta_slow": 1,
    "original_max_position_embeddings": 16,
    "rope_theta": 10000.0,
}


def _attention_scaling(config) -> float:
    """``scaling`` of the model type's own decoder attention module, built alone from ``config``."""
    from transformers import AutoModel

    module = sys.modules.get(AutoModel._model_mapping[type(config)].__module__) or importlib.import_module(
        AutoModel._model_mapping[type(config)].__module__
    )
    for name, cls in vars(module).items():
        if (
            name.endswith(("Attention", "MLA"))
            and inspect.isclass(cls)
            and "layer_idx" in inspect.signature(cls).parameters
        ):
            with quiet():
                attn = cls(config, layer_idx=0)
            if isinstance(getattr(attn, "scaling", None), float):
                return attn.scaling
    raise AssertionError(f"no attention module with a scaling in {module.__name__}")


def test_the_mscale_model_types_are_read():
    assert len(MSCALE_TYPES) == 15
    assert len(READ) >= 11, READ


@pytest.mark.parametrize("model_type", READ)
def test_mla_softmax_scale_equals_the_attention_module(model_type):
    config = tiny_config(model_type)
    config.rope_parameters = {**YARN}
    records = [r for r in relative_configs_from_dict(config.to_dict()) if isinstance(r, RelativeConfig)]
    theirs = _attention_scaling(config)
    nope, rope = config.qk_nope_head_dim, config.qk_rope_head_dim
    assert not np.isclose(theirs, (nope + rope) ** -0.5)  # the mscale ** 2 is there to be read
    assert records and all(np.isclose(r.softmax_scale, theirs, rtol=1e-12) for r in records)


def test_softmax_scale_overrides_and_json():
    rope = fp.RopeConfig(head_dim=64)
    assert softmax_scale({"attention_multiplier": 0.015625}, rope) == 0.015625  # Granite
    assert softmax_scale({"query_pre_attn_scalar": 144}, rope) == 144**-0.5  # Gemma 2
    assert softmax_scale({"model_type": "gemma4_text"}, rope) == 1.0  # q/k normalised
    assert softmax_scale({}, rope) == 0.125
    unscaled = {**YARN, "rope_type": "default"}  # transformers applies mscale only to a scaled RoPE
    r = fp.RopeConfig.from_rope_parameters(unscaled, head_dim=8)
    assert softmax_scale({"qk_nope_head_dim": 8, "qk_rope_head_dim": 8}, r) == 16**-0.5
    config = tiny_config("deepseek_v3")
    config.rope_parameters = {**YARN}
    (rec,) = relative_configs_from_dict(config.to_dict())
    assert rec.to_dict()["softmax_scale"] == rec.softmax_scale


# ----------------------------------------------------------------------------- Llama 4


@pytest.fixture(scope="module")
def llama4_nope():
    """A tiny Llama 4 text attention on a NoPE layer, temperature every 4 positions."""
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    config = Llama4TextConfig(
        hidden_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=32,
        num_hidden_layers=2, no_rope_layers=[0, 1], floor_scale=4, attn_scale=0.25, attn_temperature_tuning=True,
        vocab_size=64, max_position_embeddings=64,
    )  # fmt: skip
    config._attn_implementation = "eager"
    with quiet():
        return config, Llama4TextAttention(config, layer_idx=0).eval()


def test_temperature_equals_llama4_query_scaling(llama4_nope, monkeypatch):
    import torch
    from transformers.models.llama4 import modeling_llama4

    config, attn = llama4_nope
    assert attn.use_rope == 0  # a NoPE layer: queries are scaled by position
    seen = {}

    def capture(module, query, key, value, mask, **kwargs):
        seen["q"] = query.detach().numpy()
        return torch.zeros_like(query).transpose(1, 2), None

    monkeypatch.setattr(modeling_llama4, "eager_attention_forward", capture)
    n = 23
    x = torch.randn(1, n, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        attn(x, position_embeddings=None, attention_mask=None)
        q = attn.q_proj(x).view(1, n, 2, 16).numpy()
    factor = np.asarray(jax.jit(lambda p: fp.attention_temperature(p, floor_scale=4, attn_scale=0.25))(jnp.arange(n)))
    assert not np.allclose(factor, 1.0)  # positions 3.. are scaled
    ours = q * factor[None, :, None, None]
    np.testing.assert_allclose(ours, seen["q"].transpose(0, 2, 1, 3), rtol=1e-6, atol=1e-7)


def test_llama4_nope_layers_report_their_temperature(llama4_nope):
    config, _ = llama4_nope
    records = relative_configs_from_dict({**config.to_dict(), "no_rope_layers": [1, 0]})
    nope = [r for r in records if r.scheme == "nope"]
    assert nope and nope[0].temperature == (4, 0.25)
    assert "queries scaled by log1p(floor((p + 1) / 4)) * 0.25 + 1" in nope[0].label
    assert nope[0].to_dict()["temperature_tuning"] == {"floor_scale": 4, "attn_scale": 0.25}
    off = relative_configs_from_dict({**config.to_dict(), "no_rope_layers": [1, 0], "attn_temperature_tuning": False})
    assert [r.temperature for r in off if r.scheme == "nope"] == [None]


def test_temperature_bad_input_one_line():
    with pytest.raises(ValueError, match=r"^floor_scale: expected a positive int .*got 0$"):
        fp.attention_temperature(np.arange(3), floor_scale=0)
    with pytest.raises(ValueError, match=r"^positions: expected positions >= 0, found -1$"):
        fp.attention_temperature(np.array([-1, 0]))
    with pytest.raises(TypeError, match=r"^positions: expected integer positions, got dtype float"):
        fp.attention_temperature(np.array([1.0]))


def test_conformance_notices_a_wrong_softmax_scale(tmp_path, monkeypatch):
    """The conformance check is not vacuous: Granite read with head_dim ** -0.5 is caught."""
    from conformance.reference import conformance_problems

    from flax_posenc.conversion import relative_config

    monkeypatch.setattr(relative_config, "softmax_scale", lambda config, rope: rope.head_dim**-0.5)
    problems = conformance_problems("granite", tmp_path)
    assert any(p.startswith("softmax_scale 0.25, the attention module of layer 0 scales by") for p in problems)
