"""RoPE / ALiBi configs from Hugging Face ``config.json`` files, and ``flax-posenc inspect/check/plot``.

Configs are written by transformers 5.x itself (``save_pretrained``: ``rope_parameters``) and,
for the 4.x layout still on the Hub (top-level ``rope_theta`` + ``rope_scaling``), by hand. The
frequencies built from each are compared with the model's own rotary embedding.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from transformers import (
    BloomConfig,
    FalconConfig,
    GPTJConfig,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    MptConfig,
    Qwen2Config,
)
from transformers.models.falcon.modeling_falcon import FalconRotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

import flax_posenc as fp
from flax_posenc.conversion.relative_config import RELATIVE_FAMILIES, read_relative_config, relative_source
from flax_posenc.errors import CheckpointError
from flax_posenc.report.cli import main

SMALL = dict(hidden_size=128, num_attention_heads=4)


def saved(tmp_path, config, name="ckpt"):
    d = tmp_path / name
    config.save_pretrained(d)
    return d


def write(tmp_path, config: dict, name="cfg"):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return d


def rope_matches(rc, emb, positions=None):
    positions = np.arange(48) if positions is None else positions
    pos = torch.from_numpy(positions[None])
    with torch.no_grad():
        cos_hf, sin_hf = emb(torch.zeros(1), pos)
    cos, sin = fp.rotary_cos_sin(positions, rc.rope)
    half = rc.rope.rotary_dim // 2
    return max(
        np.abs(np.asarray(cos) - cos_hf[0, :, :half].numpy()).max(),
        np.abs(np.asarray(sin) - sin_hf[0, :, :half].numpy()).max(),
    )


@pytest.mark.parametrize(
    "make, module",
    [
        (
            lambda: LlamaConfig(
                **SMALL,
                max_position_embeddings=64,
                rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
            ),
            LlamaRotaryEmbedding,
        ),
        (lambda: MistralConfig(**SMALL, max_position_embeddings=64, head_dim=16), LlamaRotaryEmbedding),
        (
            lambda: Qwen2Config(
                **SMALL,
                max_position_embeddings=64,
                rope_parameters={
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 16,
                    "rope_theta": 1e6,
                },
            ),
            Qwen2RotaryEmbedding,
        ),
        (lambda: GPTNeoXConfig(**SMALL, max_position_embeddings=64), GPTNeoXRotaryEmbedding),
        (lambda: FalconConfig(**SMALL, max_position_embeddings=64), FalconRotaryEmbedding),
    ],
    ids=["llama-linear", "mistral", "qwen2-yarn", "gpt_neox", "falcon"],
)
def test_saved_configs_give_the_models_own_frequencies(tmp_path, make, module):
    config = make()
    rc = read_relative_config(saved(tmp_path, config))
    assert rc.scheme == "rope" and rc.num_heads == 4
    assert rope_matches(rc, module(config)) <= 1e-5
    assert rc.limit >= 64


def test_llama31_hub_layout_and_limits(tmp_path):
    d = write(
        tmp_path,
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
    )
    rc = read_relative_config(d / "config.json")
    r = rc.rope
    assert (r.head_dim, r.rope_type, r.rope_theta, r.max_position_embeddings, r.scaled_limit, r.limit) == (
        128,
        "llama3",
        500000.0,
        131072,
        65536,
        131072,
    )
    hf = LlamaConfig(
        hidden_size=4096,
        num_attention_heads=32,
        max_position_embeddings=131072,
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
    )
    assert rope_matches(rc, LlamaRotaryEmbedding(hf)) <= 1e-5


def test_legacy_v4_scaling_dict_with_type_key(tmp_path):
    rc = read_relative_config(
        write(
            tmp_path,
            {
                "model_type": "llama",
                **SMALL,
                "max_position_embeddings": 4096,
                "rope_scaling": {"type": "linear", "factor": 4.0},
            },
        )
    )
    assert (rc.rope.rope_type, rc.rope.factor, rc.rope.scaled_limit, rc.limit) == ("linear", 4.0, 16384, 16384)


def test_gpt_neox_legacy_fields_and_gptj(tmp_path):
    neox = read_relative_config(
        write(
            tmp_path,
            {
                "model_type": "gpt_neox",
                "hidden_size": 512,
                "num_attention_heads": 8,
                "rotary_pct": 0.5,
                "rotary_emb_base": 20000,
                "max_position_embeddings": 2048,
            },
            "neox",
        )
    )
    assert (neox.rope.rotary_dim, neox.rope.rope_theta, neox.limit) == (32, 20000, 2048)
    gptj = read_relative_config(
        saved(tmp_path, GPTJConfig(n_head=4, n_embd=256, rotary_dim=16, n_positions=1024), "gptj")
    )
    assert (gptj.rope.layout, gptj.rope.rotary_dim, gptj.rope.head_dim, gptj.limit) == ("interleaved", 16, 64, 1024)


def test_alibi_families(tmp_path):
    bloom = read_relative_config(saved(tmp_path, BloomConfig(n_head=6, hidden_size=48), "bloom"))
    assert (bloom.scheme, bloom.alibi.num_heads, bloom.limit) == ("alibi", 6, None)
    mpt = read_relative_config(
        saved(tmp_path, MptConfig(n_heads=12, d_model=96, max_seq_len=4096, attn_config={"alibi_bias_max": 16}), "mpt")
    )
    # MptModel builds ALiBi with alibi_bias_max=8 whatever the config says (tests/test_hostile_silent.py)
    assert (mpt.scheme, mpt.alibi.num_heads, mpt.alibi.max_bias, mpt.limit) == ("alibi", 12, 8.0, 4096)
    falcon = read_relative_config(saved(tmp_path, FalconConfig(alibi=True, **SMALL), "falcon"))
    assert (falcon.scheme, falcon.limit) == ("alibi", 2048)
    legacy = read_relative_config(
        write(tmp_path, {"model_type": "RefinedWebModel", "n_head": 71, "hidden_size": 4544}, "rw")
    )
    assert (legacy.family, legacy.scheme, legacy.rope.head_dim) == ("falcon", "rope", 64)
    assert set(RELATIVE_FAMILIES) >= {"llama", "mistral", "qwen2", "gpt_neox", "falcon", "bloom", "mpt"}


@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"model_type": "llama", **SMALL, "rope_scaling": {"rope_type": "ntk", "factor": 2.0}},
            "rope_type: unknown scaling type 'ntk'; known types: default, linear, dynamic, yarn, llama3, longrope, proportional",
        ),
        (
            {"model_type": "llama", **SMALL, "rope_scaling": {"rope_type": "linear", "factor": -1.0}},
            "factor: expected a scaling factor > 0",
        ),
        (
            {"model_type": "llama", "hidden_size": 124, "num_attention_heads": 4},
            "head_dim: expected a positive even integer",
        ),
        ({"model_type": "gpt_neox", **SMALL, "rotary_pct": 0.3}, "rotates int(9.6) = 9 dims"),
        ({"model_type": "bert", **SMALL}, "expected a RoPE/ALiBi model_type"),
        (
            {"model_type": "llama", "hidden_size": 128},
            "expected a positive head count in num_attention_heads, found None",
        ),
    ],
)
def test_bad_configs_are_one_line_checkpoint_errors(tmp_path, config, message):
    with pytest.raises(CheckpointError) as info:
        read_relative_config(write(tmp_path, config))
    text = str(info.value)
    assert message in text and "config.json" in text and "\n" not in text


# --------------------------------------------------------------------------- command line


def test_cli_inspect_and_check(tmp_path, capsys):
    d = saved(
        tmp_path,
        LlamaConfig(
            **SMALL,
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
        ),
    )
    assert main(["inspect", str(d)]) == 0
    out = capsys.readouterr().out
    assert "linear RoPE" in out and "8192" in out
    assert main(["inspect", str(d / "config.json"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["scheme"], report["limit"], report["rope"]["rotary_dim"]) == ("rope", 8192, 32)
    assert main(["check", str(d), "--length", "8192"]) == 0
    assert "ok: 8192 positions fit" in capsys.readouterr().out
    assert main(["check", str(d), "--length", "8193"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds 8192 positions" in err and "1 past the limit" in err
    assert main(["check", str(d), "--length", "9000", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["fits"], verdict["num_positions"], verdict["excess"]) == (False, 8192, 808)


def test_cli_alibi_without_limit_and_bad_config(tmp_path, capsys):
    d = saved(tmp_path, BloomConfig(n_head=8, hidden_size=64))
    assert main(["check", str(d), "--length", "100000"]) == 0
    assert "no configured limit" in capsys.readouterr().out
    bad = write(tmp_path, {"model_type": "llama", **SMALL, "rope_scaling": {"rope_type": "ntk"}}, "bad")
    assert main(["inspect", str(bad)]) == 2
    assert "known types" in capsys.readouterr().err


def test_cli_plot_relative(tmp_path, capsys):
    rope_dir = saved(tmp_path, LlamaConfig(**SMALL, max_position_embeddings=256), "llama")
    alibi_dir = saved(tmp_path, MptConfig(n_heads=6, d_model=48), "mpt")
    assert main(["plot", str(rope_dir), "--out", str(tmp_path / "figs")]) == 0
    assert main(["plot", str(alibi_dir), "--out", str(tmp_path / "figs"), "--prefix", "mpt_"]) == 0
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert names == ["mpt_alibi_bias.png", "rope_decay.png", "rope_offset_invariance.png"]


def test_learned_tables_unaffected(tiny_checkpoint, capsys):
    ckpt = tiny_checkpoint("gpt2")
    assert relative_source(ckpt.path) is None
    assert main(["check", str(ckpt.path), "--length", "10000"]) == 1
    assert "position table" in capsys.readouterr().err


def test_rope_config_reader_stays_numpy_only(tmp_path):
    d = write(tmp_path, {"model_type": "mistral", **SMALL})
    code = textwrap.dedent(f"""
        import sys
        from flax_posenc.conversion.relative_config import read_relative_config
        rc = read_relative_config({str(d)!r})
        assert rc.limit == 131072, rc.limit
        print("HEAVY", sorted(m for m in ("jax", "torch", "transformers", "flax") if m in sys.modules))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout


# --------------------------------------------------------------------------- Phi-3 / Phi-3.5 LongRoPE


def _phi3_dict(kind_key, kind, rng):
    """A tiny Phi-3 config.json as the Hub holds them (4.x ``rope_scaling``), head_dim 16: 8 factors."""
    return {
        "model_type": "phi3",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 1,
        "intermediate_size": 32,
        "vocab_size": 32,
        "max_position_embeddings": 256,
        "original_max_position_embeddings": 64,
        "rope_theta": 10000.0,
        "rope_scaling": {
            kind_key: kind,
            "short_factor": (1 + rng.random(8)).round(4).tolist(),
            "long_factor": (1 + 8 * rng.random(8)).round(4).tolist(),
        },
    }


@pytest.mark.parametrize("kind_key, kind", [("rope_type", "longrope"), ("type", "su"), ("type", "yarn")])
def test_phi3_longrope_matches_transformers(tmp_path, kind_key, kind):
    """Short factors up to original_max_position_embeddings, long ones past it, as Phi3RotaryEmbedding."""
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    raw = _phi3_dict(kind_key, kind, np.random.default_rng(0))
    rc = read_relative_config(write(tmp_path, raw))
    assert (rc.family, rc.rope.rope_type, rc.rope.original_max_position_embeddings, rc.limit) == (
        "phi3",
        "longrope",
        64,
        256,
    )
    hf = {k: v for k, v in raw.items() if k != "model_type"}
    # transformers 5.x copies the top-level original_max_position_embeddings into the rope dict only
    # for the type "longrope", before renaming "su"/"yarn": a legacy config fails its own validation
    # (KeyError) unless the dict repeats it. We read the config as the Hub holds it.
    hf["rope_scaling"] = {**raw["rope_scaling"], "original_max_position_embeddings": 64}
    config = Phi3Config(**hf)
    assert config.rope_parameters["rope_type"] == "longrope"
    for positions in (np.arange(48), np.arange(200)):  # short, then long (seq_len 200 > 64)
        emb = Phi3RotaryEmbedding(config)  # fresh: its long/short switch is stateful
        pos = torch.from_numpy(positions[None])
        with torch.no_grad():
            cos_hf, sin_hf = emb(torch.zeros(1), pos)
        cos, sin = fp.rotary_cos_sin(positions, rc.rope)
        scale = float(np.abs(cos_hf.numpy()).max())  # the attention factor, ~1.2 when long
        ulp = np.spacing(np.float32(scale))
        # transformers forms p * w in float32: at p < 200 its angle is off by up to ~200 * 2**-24
        err = max(
            np.abs(np.asarray(cos) - cos_hf[0, :, :8].numpy()).max(),
            np.abs(np.asarray(sin) - sin_hf[0, :, :8].numpy()).max(),
        )
        assert err <= 128 * ulp, (positions.size, err / ulp)
    # a saved Phi3Config (5.x rope_parameters) reads the same
    rc2 = read_relative_config(saved(tmp_path, config, "saved"))
    assert rc2.rope.short_factor == rc.rope.short_factor and rc2.rope.long_factor == rc.rope.long_factor


def test_phi3_wrong_factor_length_is_one_line(tmp_path):
    raw = _phi3_dict("type", "su", np.random.default_rng(1))
    raw["rope_scaling"]["long_factor"] = [1.0, 2.0]
    with pytest.raises(CheckpointError) as e:
        read_relative_config(write(tmp_path, raw))
    assert "config.json" in str(e.value) and "long_factor" in str(e.value) and "\n" not in str(e.value)


def test_rope_audit_lists_what_is_read():
    import runpy
    from pathlib import Path

    audit = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "rope_audit.py"))["audit"]
    _, read, unread = audit()
    assert set(read) <= {t for f in RELATIVE_FAMILIES.values() for t in f.model_types}
    assert {"phi3", "llama", "bloom", "mpt", "gemma", "gemma2", "qwen3"} <= set(read) and not set(read) & set(unread)


# original_max_position_embeddings given twice, with different values: the value the reader keeps
# decides the scaled limit and the frequencies. transformers' own rotary embedding is the reference.
TWICE = {
    "phi3 longrope": (
        "phi3",
        {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8},
    ),
    "llama yarn": ("llama", {"rope_type": "yarn", "factor": 4.0}),
}


@pytest.mark.parametrize(
    "name",
    [
        "phi3 longrope",
        "llama yarn",
    ],
)
def test_original_max_position_embeddings_at_top_level_and_in_rope_scaling(tmp_path, name):
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    model_type, scaling = TWICE[name]
    raw = {
        "model_type": model_type,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 256,
        "original_max_position_embeddings": 64,
        "rope_theta": 10000.0,
        "rope_scaling": {**scaling, "original_max_position_embeddings": 32},
    }
    rc = read_relative_config(write(tmp_path, raw))
    config_cls, emb_cls = (
        (Phi3Config, Phi3RotaryEmbedding) if model_type == "phi3" else (LlamaConfig, LlamaRotaryEmbedding)
    )
    config = config_cls(**{k: v for k, v in raw.items() if k != "model_type"})
    embedding = emb_cls(config)  # its rope init re-standardizes the config: the top-level value wins
    used = config.rope_parameters["original_max_position_embeddings"]
    assert used == 64
    assert rc.rope.original_max_position_embeddings == used
    for positions in (np.arange(30), np.arange(200)):  # below both originals, past both
        assert rope_matches(rc, embedding, positions) <= 1e-4
