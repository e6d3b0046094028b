"""A RoPE config on its way from ``config.json`` to ``cos``/``sin``: read once, validated once, kept as it is.

Spies count what happens per call: ``config.json`` opened once per ``from_pretrained`` (NNX
and Linen), one :class:`~flax_posenc.RopeConfig` built (its checks run once), ``rope_type``
resolved once, ``RopeConfig.coerce`` once per module call; GPT-J's ``rotary_dim`` stays the
integer the file holds; and the reader's one-line errors come from ``RopeConfig``'s checks.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc import rope_config
from flax_posenc.conversion import relative_config, sources
from flax_posenc.conversion.relative_config import read_relative_config, relative_config_from_dict
from flax_posenc.errors import CheckpointError
from flax_posenc.rope_config import RopeConfig

LLAMA3 = {
    "model_type": "llama",
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 64,
    "rope_scaling": {
        "type": "llama3",
        "factor": 4.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
}


@pytest.fixture
def counts(monkeypatch):
    """Calls counted: ``config.json`` reads, ``RopeConfig`` checks, ``rope_type`` resolutions, coercions."""
    seen = {"config.json": 0, "RopeConfig": 0, "rope_type_of": 0, "coerce": 0}

    def counted(name, function):
        def spy(*args, **kwargs):
            seen[name] += 1
            return function(*args, **kwargs)

        return spy

    load_json = sources.load_json
    monkeypatch.setattr(
        sources,
        "load_json",
        lambda path, **kw: (
            (seen.__setitem__("config.json", seen["config.json"] + (str(path).endswith("config.json"))))
            or load_json(path, **kw)
        ),
    )
    monkeypatch.setattr(RopeConfig, "__post_init__", counted("RopeConfig", RopeConfig.__post_init__))
    monkeypatch.setattr(relative_config, "rope_type_of", counted("rope_type_of", rope_config.rope_type_of))
    coerce = RopeConfig.coerce.__func__
    monkeypatch.setattr(RopeConfig, "coerce", classmethod(counted("coerce", coerce)))
    return seen


@pytest.mark.parametrize("shell", ["nnx", "linen"])
def test_from_pretrained_reads_the_config_once_and_validates_once(tmp_path, counts, shell):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3))
    module = getattr(fp, shell).RotaryEmbedding.from_pretrained(tmp_path, layer=1)
    if shell == "linen":
        module = module[0]
    assert (counts["config.json"], counts["RopeConfig"], counts["rope_type_of"]) == (1, 1, 1)
    assert (module.config.rope_type, module.config.limit) == ("llama3", 64)  # the legacy "type" key resolved


def test_a_module_call_coerces_its_config_once(counts):
    x = jnp.ones((1, 3, 2, 8))
    rope = fp.nnx.RotaryEmbedding(RopeConfig(head_dim=8, max_position_embeddings=16))
    counts["coerce"] = 0
    rope(x)
    rope.rotate_qk(x, x)
    assert counts["coerce"] == 2  # one per call
    linen = fp.linen.RotaryEmbedding(8)  # a head_dim: coerced where the call runs, once
    linen.apply({}, x)
    assert counts["coerce"] == 3


def test_gptj_rotary_dim_stays_an_integer(tmp_path):
    config = {"model_type": "gptj", "n_head": 4, "n_embd": 192, "rotary_dim": 16, "n_positions": 64}
    (tmp_path / "config.json").write_text(json.dumps(config))
    rope = read_relative_config(tmp_path).rope
    assert (rope.head_dim, rope.rotary_dim, type(rope.rotary_dim)) == (48, 16, int)
    assert rope.partial_rotary_factor == 16 / 48 and rope.to_dict()["rotary_dim"] == 16
    # the same rotation as the fraction spelled by hand, against a float64 reference
    assert rope == RopeConfig(
        head_dim=48, partial_rotary_factor=16 / 48, layout="interleaved", max_position_embeddings=64
    )
    inv, _ = fp.rope_inverse_frequencies(rope)
    np.testing.assert_allclose(inv, 10000.0 ** (-np.arange(0, 16, 2) / 16), rtol=1e-15)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rotary_dim": 70}, "rotary_dim: expected at most head_dim 64, got 70"),
        ({"rotary_dim": "8"}, "rotary_dim: expected a positive integer, got '8'"),
        (
            {"rotary_dim": 10, "partial_rotary_factor": 0.25},
            "rotary_dim: expected int(head_dim * partial_rotary_factor) = 16, got 10",
        ),
        ({"rotary_dim": 7}, "rotary_dim: expected an even number of dims, got 7"),
        ({"truncate": "yes"}, "truncate: expected true or false, got 'yes'"),
        ({"rope_theta": 1e13}, "rope_theta: expected a finite number of magnitude at most 1e+12, got 10000000000000.0"),
    ],
)
def test_rope_config_refuses_in_one_line(kwargs, message):
    with pytest.raises(ValueError) as info:
        RopeConfig(head_dim=64, **kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "extra, line",
    [
        ({"rotary_dim": 96}, "expected rotary_dim at most the head width 64, found 96"),
        ({"rotary_dim": "8"}, "expected rotary_dim as a positive integer, found '8'"),
        ({"rope_scaling": {"type": 5}}, "expected type as a string, found 5"),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 2.0, "truncate": 1}},
            "expected truncate as true or false, found 1",
        ),
        (
            {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0]}},
            "expected long_factor in rope_parameters (rope_type 'longrope' needs short_factor, long_factor, "
            "original_max_position_embeddings), found none",
        ),
    ],
)
def test_the_reader_words_ropeconfig_checks_with_its_file(extra, line):
    config = {"model_type": "gptj", "n_head": 4, "n_embd": 256, **extra}
    with pytest.raises(CheckpointError) as info:
        relative_config_from_dict(config, source="cfg.json")
    assert str(info.value) == f"cfg.json: {line}"
