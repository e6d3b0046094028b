"""Convolutional position embeddings (wav2vec2 and kin): the core against float64 numpy, the weight
norm against torch's, the reader and the shells against transformers' own ``pos_conv_embed`` on a
tiny checkpoint whose ``g`` and bias are not their initial values, and every bad input's one line.
(Each model type's conformance case is in ``tests/test_conformance.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cli_in_process, conv_positions_float64

import flax_posenc as fp
from flax_posenc.conv_position_config import ConvPositionSpec, fold_weight_norm
from flax_posenc.conversion import inspect_source, load_conv_positions
from flax_posenc.errors import CheckpointError

F32_TOL = 1e-5  # relative to the largest output: float32 convolutions of 8..64 products


def _random(spec: ConvPositionSpec, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 13, spec.dim)).astype(np.float32)
    torch_w = rng.standard_normal((spec.num_layers, spec.dim, spec.dim // spec.groups, spec.kernel_size)) * 0.3
    b = rng.standard_normal(spec.bias_shape) * 0.1
    return x, torch_w, b


@pytest.mark.parametrize(
    "spec",
    [
        ConvPositionSpec(8, 4, groups=2),  # even kernel: one frame cut
        ConvPositionSpec(8, 5, groups=4),  # odd: none
        ConvPositionSpec(8, 4, groups=2, stride=2),  # SEW's squeeze
        ConvPositionSpec(8, 3, groups=2, num_layers=3, layer_norm=True),  # Data2Vec-Audio's stack
    ],
    ids=["even", "odd", "stride", "stacked"],
)
def test_core_equals_float64_numpy(spec):
    x, torch_w, b = _random(spec)
    ref = conv_positions_float64(
        x, torch_w, b, groups=spec.groups, stride=spec.stride, trim=spec.trim, layer_norm=spec.layer_norm
    )
    kernel = torch_w.transpose(0, 3, 2, 1).astype(np.float32)
    ours = np.asarray(jax.jit(fp.conv_positions, static_argnums=3)(x, kernel, b.astype(np.float32), spec))
    assert ours.shape == ref.shape == (2, spec.output_frames(13), spec.dim)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=F32_TOL * np.abs(ref).max())
    one = np.asarray(fp.conv_positions(x[1], kernel, b.astype(np.float32), spec))  # (frames, dim)
    np.testing.assert_allclose(one, ours[1], rtol=0, atol=1e-6)


def test_fold_weight_norm_equals_torch():
    import torch

    torch.manual_seed(0)
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(8, 8, 4, groups=2), name="weight", dim=2)
    with torch.no_grad():
        conv.parametrizations.weight.original0.mul_(torch.rand(1, 1, 4) + 0.5)
        weight = conv.weight.double().numpy()
    g = conv.parametrizations.weight.original0.detach().numpy()
    v = conv.parametrizations.weight.original1.detach().numpy()
    np.testing.assert_allclose(fold_weight_norm(g, v), weight, rtol=1e-6)
    with pytest.raises(
        ValueError, match=r"^weight_g: expected shape \(1, 1, 4\) \(weight_v \(8, 4, 4\), dim=2\), found \(8, 1, 1\)$"
    ):
        fold_weight_norm(np.ones((8, 1, 1)), v)


@pytest.fixture(scope="module")
def wav2vec2(tmp_path_factory):
    """A tiny wav2vec2 whose g (weight norm) and bias are random, not their initial values."""
    import torch
    from conformance.tiny import quiet, tiny_model

    model = tiny_model("wav2vec2")
    conv = model.encoder.pos_conv_embed.conv
    with torch.no_grad():
        conv.parametrizations.weight.original0.mul_(
            torch.rand(1, 1, 4, generator=torch.Generator().manual_seed(1)) + 0.5
        )
        conv.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(2))
    directory = tmp_path_factory.mktemp("wav2vec2")
    with quiet():
        model.save_pretrained(directory)
    return model, directory


def test_reader_and_shells_equal_transformers(wav2vec2):
    import torch
    from flax import nnx

    model, directory = wav2vec2
    x = np.random.default_rng(0).standard_normal((2, 17, 16)).astype(np.float32)
    with torch.no_grad():
        theirs = model.encoder.pos_conv_embed(torch.from_numpy(x)).numpy()
    loaded = load_conv_positions(directory)
    ours = np.asarray(fp.conv_positions(x, loaded.kernel, loaded.bias, loaded.spec))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=F32_TOL * np.abs(theirs).max())
    block = fp.nnx.ConvPositionalEmbedding.from_pretrained(directory)
    np.testing.assert_array_equal(np.asarray(block(x)), ours)
    jitted = nnx.jit(lambda m, h: m(h, add=True))(block, x)  # XLA fuses differently under jit: float32 roundings
    np.testing.assert_allclose(np.asarray(jitted), x + ours, rtol=0, atol=1e-6 * np.abs(x + ours).max())
    module, variables = fp.linen.ConvPositionalEmbedding.from_pretrained(directory)
    np.testing.assert_array_equal(np.asarray(module.apply(variables, x)), ours)
    # the encoder's own sum: hidden + pos_conv_embed(hidden)
    with torch.no_grad():
        summed = torch.from_numpy(x) + model.encoder.pos_conv_embed(torch.from_numpy(x))
    np.testing.assert_allclose(np.asarray(block(x, add=True)), summed.numpy(), rtol=0, atol=F32_TOL * 4)


def test_record_reports_the_receptive_field_in_frames_and_seconds(wav2vec2):
    model, directory = wav2vec2
    record = inspect_source(directory)
    (mech,) = record.mechanisms
    assert (mech.kind, mech.tower, mech.limit, mech.unit) == ("conv_position", "audio", None, "seconds")
    rec = mech.record
    # tiny feature encoder: conv_stride (5, 2), a frame is 10 samples = 0.625 ms at 16 kHz; kernel 4 frames
    assert (rec.frame_samples, rec.receptive_field, rec.receptive_seconds) == (10, 4, 4 * 10 / 16000)
    for samples in (16000, 401, 12):  # transformers' own frame count of the feature encoder
        assert rec.frames(samples) == int(model._get_feat_extract_output_lengths(samples))
    assert mech.describe_limit() == (
        f"wav2vec2_conv convolutional position embedding (encoder.pos_conv_embed.conv) of {directory} has no "
        "position limit: each output frame sees 4 frames = 0.0025 s of audio (kernel 4, 2 groups; frames of "
        "0.625 ms: 10 samples at 16000 Hz)"
    )
    fits, line = record.check_seconds(0.5)
    assert fits and line.startswith("ok: 0.5 s = 800 frames of 0.625 ms (the feature encoder yields 799); ")
    d = mech.to_dict()
    assert (d["kernel_size"], d["groups"], d["receptive_field_frames"], d["limit"]) == (4, 2, 4, None)


def _edited(directory, tmp_path, **fields):
    import shutil

    out = tmp_path / "edited"
    shutil.copytree(directory, out)
    config = json.loads((out / "config.json").read_text())
    config.update(fields)
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_kernel_or_groups_that_disagree_with_the_config_are_one_line(wav2vec2, tmp_path):
    _, directory = wav2vec2
    bad = _edited(directory, tmp_path, num_conv_pos_embeddings=6)
    with pytest.raises(CheckpointError) as info:
        inspect_source(bad)
    assert str(info.value) == (
        f"{bad / 'model.safetensors'}: encoder.pos_conv_embed.conv.parametrizations.weight.original1: expected a "
        "kernel of 6 frames (num_conv_pos_embeddings in config.json), found 4 (shape (16, 8, 4))"
    )
    bad = _edited(directory, tmp_path / "g", num_conv_pos_embedding_groups=4)
    with pytest.raises(CheckpointError) as info:
        inspect_source(bad)
    assert str(info.value) == (
        f"{bad / 'model.safetensors'}: encoder.pos_conv_embed.conv.parametrizations.weight.original1: expected 4 "
        "groups (num_conv_pos_embedding_groups in config.json: 4 input channels each), found 2 (shape (16, 8, 4))"
    )
    bad = _edited(directory, tmp_path / "bn", conv_pos_batch_norm=True)
    with pytest.raises(CheckpointError, match=r"expected conv_pos_batch_norm false \(a batch-normed position"):
        inspect_source(bad)


def test_seconds_that_are_not_whole_frames_are_refused_naming_the_stride(wav2vec2):
    _, directory = wav2vec2
    record = inspect_source(directory)
    with pytest.raises(ValueError) as info:
        record.check_seconds(0.0001)  # 1.6 samples
    assert str(info.value) == (
        "--seconds: expected a whole number of frames (the feature encoder's stride, prod(conv_stride) = 10 samples "
        "= 0.625 ms at 16000 Hz), found 0.0001 s = 1.6 samples = 0.16 frames"
    )
    ok = cli_in_process("check", directory, "--seconds", "2")
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 2 s = 3200 frames"), ok.stderr
    as_json = cli_in_process("check", directory, "--seconds", "2", "--json")
    verdict = json.loads(as_json.stdout)
    assert (verdict["fits"], verdict["max_seconds"], verdict["excess_seconds"]) == (True, None, 0), as_json.stderr
    # the refusal through the old module path run as a program (`python -m flax_posenc.cli`)
    cli = [sys.executable, "-m", "flax_posenc.cli", "check", str(directory), "--seconds"]
    bad = subprocess.run([*cli, "0.0001"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "prod(conv_stride) = 10 samples" in bad.stderr


def test_shapes_are_checked_while_tracing():
    spec = ConvPositionSpec(8, 4, groups=2)
    kernel, bias = jnp.zeros(spec.kernel_shape), jnp.zeros(spec.bias_shape)
    jitted = jax.jit(fp.conv_positions, static_argnums=3)
    with pytest.raises(ValueError, match=r"^hidden: expected \(batch, frames, 8\) or \(frames, 8\) for the "):
        jitted(jnp.zeros((1, 5, 6)), kernel, bias, spec)
    with pytest.raises(ValueError, match=r"^kernel: expected shape \(1, 4, 4, 8\) "):
        jitted(jnp.zeros((1, 5, 8)), jnp.zeros((1, 4, 8, 8)), bias, spec)
    strided = ConvPositionSpec(8, 4, groups=2, stride=4)
    with pytest.raises(ValueError, match=r"^hidden: expected at least 4 frames for the convolutional position"):
        jax.jit(fp.conv_positions, static_argnums=3)(jnp.zeros((1, 1, 8)), kernel, bias, strided)
    with pytest.raises(ValueError, match=r"^groups: expected a divisor of dim 8, found 3$"):
        ConvPositionSpec(8, 4, groups=3)


def test_conformance_notices_a_weight_norm_read_without_g(wav2vec2, monkeypatch):
    """The conformance hook is not vacuous: g ignored (the weight read as v) is caught."""
    from conformance.reference import record_problems

    from flax_posenc.conversion import conv_positions

    model, directory = wav2vec2
    monkeypatch.setattr(conv_positions, "fold_weight_norm", lambda g, v: np.asarray(v, np.float64))
    problems = record_problems(model, inspect_source(directory), directory)
    assert any(p.startswith("position term differs by") for p in problems), problems


def test_conformance_notices_a_wrong_padding(wav2vec2, monkeypatch):
    """An even kernel read without the same-pad cut: one frame too many, caught."""
    import dataclasses

    from conformance.reference import record_problems

    from flax_posenc.conversion import conv_positions

    model, directory = wav2vec2
    rows = dict(conv_positions.CONV_POSITION_FAMILIES)
    rows["wav2vec2_conv"] = dataclasses.replace(rows["wav2vec2_conv"], trim=0)
    monkeypatch.setattr(conv_positions, "CONV_POSITION_FAMILIES", rows)
    record = conv_positions.read_conv_positions(
        rows["wav2vec2_conv"], json.loads((directory / "config.json").read_text()), directory, directory / "config.json"
    )
    from flax_posenc.conversion.models import Mechanism, ModelRecord

    sub = ModelRecord(str(directory), "wav2vec2", (Mechanism.of(record[0], "audio"),))
    problems = record_problems(model, sub, directory)
    assert any("position term" in p and "(2, 25, 16)" in p for p in problems), problems


def test_musicgen_decoder_sinusoids_are_cos_first(tmp_path, monkeypatch):
    """MusicGen's decoders compute [cos | sin] halves: read as [sin | cos], the conformance case fails."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import computed_sinusoids

    assert conformance_problems("musicgen_decoder", tmp_path / "ok") == []
    rows = dict(computed_sinusoids.COMPUTED_SINUSOID_FAMILIES)
    rows["musicgen_sinusoid"] = dataclasses.replace(rows["musicgen_sinusoid"], cos_first=False)
    monkeypatch.setattr(computed_sinusoids, "COMPUTED_SINUSOID_FAMILIES", rows)
    problems = conformance_problems("musicgen_decoder", tmp_path / "swapped")
    assert any(p.startswith("sinusoid rows differ by up to") for p in problems), problems


def test_moonshine_rotates_interleaved_pairs(tmp_path, monkeypatch):
    """Moonshine's apply_rotary_pos_emb repeat_interleaves cos/sin: read in halves, its case fails."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import relative_config

    rows = dict(relative_config.RELATIVE_FAMILIES)
    rows["moonshine"] = dataclasses.replace(rows["moonshine"], layout="half")
    monkeypatch.setattr(relative_config, "RELATIVE_FAMILIES", rows)
    problems = conformance_problems("moonshine", tmp_path)
    assert any("apply_rope_qk (layout half" in p for p in problems), problems
