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
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conformance.tiny import quiet, tiny_config  # noqa: E402

import flax_posenc as fp  # noqa: E402
from flax_posenc.conversion.attention_scale import QUERY_SCALE_MODEL_TYPES, softmax_scale  # noqa: E402
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
    # Mistral 4's attention cannot run without its query scale's beta (read, and required, with it)
    config.rope_parameters = {
        **YARN,
        **({"llama_4_scaling_beta": 0.1} if model_type in QUERY_SCALE_MODEL_TYPES else {}),
    }
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


# ----------------------------------------------------------------------------- Ministral 3 / Mistral 4


def _float64_query_scale(p: np.ndarray, beta: float, original: int) -> np.ndarray:
    """transformers' ``get_llama_4_attn_scale`` formula in float64 (``floor(p / M)`` is exact in float64
    for int32 ``p`` and ``M``: ``p / M`` is at least ``1 / M`` from the next integer, far above its ulp)."""
    return 1 + beta * np.log(1 + np.floor(p.astype(np.float64) / original))


def test_query_scale_equals_float64_reference_under_jit_and_vmap():
    original, beta = 2**20 + 2, 0.1
    near = np.concatenate([k * original + np.arange(-3, 3) for k in (1, 2, 15, 16, 17, 2047)])
    positions = np.concatenate([np.arange(0, 56), near, [2**24 - 1, 2**24, 2**24 + 31, 2**31 - 1]]).astype(np.int32)
    want = _float64_query_scale(positions, beta, original)

    def f(p):
        return fp.attention_temperature(p, floor_scale=original, attn_scale=beta, position_offset=0)

    np.testing.assert_allclose(np.asarray(jax.jit(f)(jnp.asarray(positions))), want, rtol=2e-7, atol=0)
    batched = np.asarray(jax.vmap(jax.jit(f))(jnp.asarray(positions.reshape(-1, 4))))
    np.testing.assert_allclose(batched.reshape(-1), want, rtol=2e-7, atol=0)
    assert len(set(np.round(want, 9))) > 5  # the factor steps many times over these positions


def test_query_scale_is_exact_where_transformers_float32_division_rounds():
    """Past 2**24 transformers' float32 ``position_ids / M`` rounds the position: at
    ``16 * M - 1`` (odd, rounded up to ``16 * M``) it steps one position early; ours is the exact
    (float64) value there, as everywhere."""
    import torch
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    original, beta = 2**20 + 2, 0.1
    positions = np.array([16 * original - 2, 16 * original - 1, 16 * original], np.int64)
    assert positions[1] > 2**24
    theirs = get_llama_4_attn_scale(torch.from_numpy(positions)[None], beta, original).reshape(-1).numpy()
    exact = _float64_query_scale(positions, beta, original)
    ours = np.asarray(fp.attention_temperature(positions, floor_scale=original, attn_scale=beta, position_offset=0))
    np.testing.assert_allclose(ours, exact, rtol=2e-7, atol=0)
    assert abs(theirs[1] - exact[1]) > 1e-3  # transformers' step at 16 * M - 1 is float32 rounding
    np.testing.assert_allclose(theirs[[0, 2]], exact[[0, 2]], rtol=2e-7)


def test_default_convention_is_llama4s():
    p = np.array([0, 3, 4, 7, 8, 100], np.int32)
    llama4 = 1 + 0.25 * np.log1p(np.floor((p + 1) / 4))
    np.testing.assert_allclose(
        np.asarray(fp.attention_temperature(p, floor_scale=4, attn_scale=0.25)), llama4, rtol=1e-7
    )
    explicit = fp.attention_temperature(p, floor_scale=4, attn_scale=0.25, position_offset=1)
    np.testing.assert_array_equal(
        np.asarray(explicit), np.asarray(fp.attention_temperature(p, floor_scale=4, attn_scale=0.25))
    )
    with pytest.raises(ValueError, match=r"^position_offset: expected a non-negative int .*got -1$"):
        fp.attention_temperature(p, position_offset=-1)


@pytest.mark.parametrize("model_type", ["ministral3", "mistral4"])
def test_query_scale_equals_the_attention_modules_queries(model_type, monkeypatch):
    """The queries the model's own attention hands its eager attention, with ``llama_4_scaling_beta``
    0.5 over those with beta 0 (same weights: the rest of the attention is unchanged): the factor of
    each position, against ours from the record read from the config."""
    import importlib

    import torch

    config = tiny_config(model_type)
    config._attn_implementation = "eager"
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    attention_class = next(
        c
        for n, c in vars(module).items()
        if n.endswith("Attention") and inspect.isclass(c) and c.__module__ == module.__name__
    )
    rotary_class = next(c for n, c in vars(module).items() if n.endswith("RotaryEmbedding") and inspect.isclass(c))
    seen = []

    def capture(module_, query, key, value, mask, **kwargs):
        seen.append(query.detach().numpy())
        return torch.zeros(query.shape[0], query.shape[2], query.shape[1], value.shape[-1]), None

    monkeypatch.setattr(module, "eager_attention_forward", capture)
    n = 23
    with quiet():
        torch.manual_seed(0)
        attn = attention_class(config, layer_idx=0).eval()
        rotary = rotary_class(config)
    x = torch.randn(1, n, config.hidden_size, generator=torch.Generator().manual_seed(0))
    position_ids = torch.arange(n)[None]
    with torch.no_grad():
        cos_sin = rotary(x, position_ids)
        attn(x, position_embeddings=cos_sin, attention_mask=None, position_ids=position_ids)
        config.rope_parameters = {**config.rope_parameters, "llama_4_scaling_beta": 0.0}
        attn(x, position_embeddings=cos_sin, attention_mask=None, position_ids=position_ids)
        config.rope_parameters = {**config.rope_parameters, "llama_4_scaling_beta": 0.5}
    scaled, plain = seen
    ratio = scaled / plain  # (batch, heads, seq, head_dim): one factor per position
    (record,) = relative_configs_from_dict(config.to_dict())
    assert record.query_scale == (0.5, 4)
    beta, original = record.query_scale
    ours = np.asarray(fp.attention_temperature(jnp.arange(n), floor_scale=original, attn_scale=beta, position_offset=0))
    assert len(set(ours.tolist())) == 6  # floor(p / 4) takes 6 values over 23 positions
    np.testing.assert_allclose(ratio, np.broadcast_to(ours[None, None, :, None], ratio.shape), rtol=1e-5)


def test_query_scale_in_the_record_its_json_and_inspect(tmp_path, capsys):
    import json

    from flax_posenc.conversion import inspect_source
    from flax_posenc.report.cli import main

    config = tiny_config("ministral3").to_dict()
    (tmp_path / "config.json").write_text(json.dumps(config))
    record = inspect_source(tmp_path)
    (mech,) = record.mechanisms
    assert mech.query_scale == (0.5, 4)
    assert mech.to_dict()["query_scale"] == {"llama_4_scaling_beta": 0.5, "original_max_position_embeddings": 4}
    assert "queries:     scaled by 1 + 0.5 * log(1 + floor(p / 4)) at position p" in str(record)
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mechanisms"][0]["query_scale"]["llama_4_scaling_beta"] == 0.5
    other = {**config, "model_type": "mistral"}  # Mistral's attention ignores the field
    assert all(r.query_scale is None for r in relative_configs_from_dict(other))


@pytest.mark.parametrize(
    ("model_type", "change", "field", "found"),
    [
        ("ministral3", {"original_max_position_embeddings": 0}, "original_max_position_embeddings", "0"),
        ("ministral3", {"original_max_position_embeddings": -8}, "original_max_position_embeddings", "-8"),
        ("ministral3", {"llama_4_scaling_beta": "0.1"}, "llama_4_scaling_beta", "'0.1'"),
        ("ministral3", {"llama_4_scaling_beta": None}, "llama_4_scaling_beta", "None"),
        ("mistral4", {"llama_4_scaling_beta": [0.1]}, "llama_4_scaling_beta", r"\[0.1\]"),
        ("mistral4", {"llama_4_scaling_beta": True}, "llama_4_scaling_beta", "True"),
    ],
)
def test_bad_query_scale_fields_are_one_line(tmp_path, model_type, change, field, found):
    import json

    from flax_posenc.conversion import inspect_source
    from flax_posenc.errors import CheckpointError

    config = tiny_config(model_type).to_dict()
    config["rope_parameters"] = {**config["rope_parameters"], **change}
    if change.get("original_max_position_embeddings", 1) <= 0:  # a non-positive length is not YaRN's to refuse first
        config["rope_parameters"]["rope_type"] = "default"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        inspect_source(tmp_path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "config.json"))
    assert re.search(rf"expected (rope_parameters )?{field} .*found {found}$", message), message


def test_a_query_scale_model_without_rope_parameters_is_refused(tmp_path):
    """Without rope_parameters, Ministral3Config fills in YaRN (factor 16 over 16384) and beta 0.1 that a
    plain read would miss: one line, not a default RoPE."""
    from flax_posenc.errors import CheckpointError

    config = {k: v for k, v in tiny_config("ministral3").to_dict().items() if k != "rope_parameters"}
    with pytest.raises(
        CheckpointError, match=r"config.json: expected rope_parameters \(ministral3's config class .*found none$"
    ):
        relative_configs_from_dict(config, path=tmp_path / "config.json")


def test_mistral4_rope_head_share_must_fit_the_rope_head(tmp_path):
    config = tiny_config("mistral4").to_dict()
    config["rope_parameters"] = {**config["rope_parameters"], "partial_rotary_factor": 0.25}
    from flax_posenc.errors import CheckpointError

    with pytest.raises(
        CheckpointError, match=r"expected partial_rotary_factor \* head_dim = qk_rope_head_dim 8 .*found 0.25 \* 16$"
    ):
        relative_configs_from_dict(config, path=tmp_path / "config.json")


def test_conformance_notices_an_unread_or_wrong_query_scale(tmp_path, monkeypatch):
    """The query-scale check is not vacuous: a record without it, or with another beta, is caught."""
    from conformance.reference import record_problems
    from conformance.tiny import tiny_model

    from flax_posenc.conversion import inspect_source, relative_config

    model = tiny_model("ministral3")
    with quiet():
        model.save_pretrained(tmp_path)
    assert record_problems(model, inspect_source(tmp_path), tmp_path) == []
    monkeypatch.setattr(relative_config, "query_scale_of", lambda *a, **k: None)
    problems = record_problems(model, inspect_source(tmp_path), tmp_path)
    assert "modeling_ministral3 scales queries by get_llama_4_attn_scale; we report no query_scale" in problems
    monkeypatch.setattr(relative_config, "query_scale_of", lambda *a, **k: (0.25, 4))
    problems = record_problems(model, inspect_source(tmp_path), tmp_path)
    assert any(p.startswith("query_scale (0.25, 4): get_llama_4_attn_scale differs by") for p in problems), problems
