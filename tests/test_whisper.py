"""Whisper's two position tables against transformers' own WhisperModel (tiny, random, built here).

The encoder's table (1500 rows = 30 s of audio at 50 positions per second) holds transformers'
``sinusoids()`` as weights; the decoder's is a learned table of 448 tokens. References: the saved
checkpoint, ``modeling_whisper.sinusoids``, a float64 numpy formula, and the hidden states
transformers' encoder and decoder feed their first layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from helpers import TINY_WHISPER as TINY
from safetensors.numpy import load_file

import flax_posenc as fp
from flax_posenc.conversion import inspect_source
from flax_posenc.report.cli import main


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """(WhisperModel, its saved directory, inspect_source's record)."""
    from transformers import WhisperConfig, WhisperModel

    torch.manual_seed(0)
    model = WhisperModel(WhisperConfig(**TINY)).eval()
    path = tmp_path_factory.mktemp("whisper")
    model.save_pretrained(path)
    return model, path, inspect_source(path)


def _mechanism(record, unit):
    (m,) = [m for m in record.mechanisms if m.unit == unit]
    return m


def _float64_sinusoids(rows: int, dim: int) -> np.ndarray:
    """Whisper's sinusoids from the formula: [sin | cos], w_i = 10000 ** (-i / (dim/2 - 1))."""
    w = np.exp(-np.log(10000.0) / (dim // 2 - 1) * np.arange(dim // 2))
    angle = np.arange(rows)[:, None] * w[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1), np.concatenate([angle, angle], axis=1)


def test_two_mechanisms_with_limits_in_seconds_and_tokens(whisper):
    model, path, record = whisper
    decoder, encoder = _mechanism(record, "tokens"), _mechanism(record, "seconds")
    assert (decoder.kind, decoder.limit, decoder.table.key) == ("learned", 448, "decoder.embed_positions.weight")
    assert (encoder.kind, encoder.limit, encoder.table.key) == ("learned", 1500, "encoder.embed_positions.weight")
    assert model.config.max_target_positions == 448 and model.config.max_source_positions == 1500
    assert encoder.record.seconds_limit == 30.0 and record.limit == 448  # the token limit binds --length
    details = {m["unit"]: m for m in record.to_dict()["mechanisms"]}
    assert details["seconds"]["seconds"] == 30.0 and details["seconds"]["positions_per_second"] == 50.0
    assert details["tokens"]["limit"] == 448 and details["seconds"]["sinusoid_error"] < 1e-3
    assert "the sinusoid, stored as weights" in str(record)
    src = str(path)
    assert record.check_length(2000) == (
        False,
        f"whisper_decoder position table (decoder.embed_positions.weight) of {src} holds 448 positions (0..447); "
        "asked for 2000 positions (0..1999): 1552 past the limit",
    )
    assert record.check_seconds(30.02) == (
        False,
        f"whisper_encoder position table (encoder.embed_positions.weight) of {src} holds 30 s of audio "
        "(1500 positions at 50 per second); asked for 30.02 s (1501 positions): 0.02 s past the limit "
        "(split longer audio into 30 s windows)",
    )
    assert record.check_seconds(30)[0] and record.check_seconds(0.5)[0]


def test_encoder_table_is_transformers_sinusoids_within_float32_of_float64(whisper):
    from transformers.models.whisper.modeling_whisper import sinusoids

    _, path, record = whisper
    table = np.asarray(_mechanism(record, "seconds").table.weights)
    saved = load_file(path / "model.safetensors")["encoder.embed_positions.weight"]
    np.testing.assert_array_equal(table, saved)
    np.testing.assert_array_equal(table, sinusoids(1500, 64).numpy())
    ref, angle = _float64_sinusoids(1500, 64)
    err = np.abs(table - ref)
    assert np.all(err <= 2.0**-22 * (1 + angle))  # transformers' float32 angle, then sin/cos
    assert _mechanism(record, "seconds").record.sinusoid_error == pytest.approx(err.max(), rel=0, abs=0)
    ours = np.asarray(fp.sinusoidal_table(1500, 64, layout="concatenated", endpoint=True), np.float64)
    assert np.max(np.abs(ours - ref)) <= 2.0**-24  # ours: float64 rounded once (transformers: ~1e-4 at 1500)


def test_encoder_embedding_output_equals_whisper_encoder(whisper):
    """Conv stack output + our table (under jit) = what transformers' encoder feeds its first layer."""
    model, _, record = whisper
    encoder = model.encoder
    table = jnp.asarray(_mechanism(record, "seconds").table.weights)
    features = torch.randn(2, 8, 3000, generator=torch.Generator().manual_seed(1))
    seen = {}
    hook = encoder.layers[0].register_forward_pre_hook(
        lambda mod, args, kwargs: seen.update(h=(args[0] if args else kwargs["hidden_states"]).clone()),
        with_kwargs=True,
    )
    with torch.no_grad():
        encoder(features)
        conv = torch.nn.functional.gelu(encoder.conv2(torch.nn.functional.gelu(encoder.conv1(features))))
    hook.remove()
    conv = conv.permute(0, 2, 1).numpy()
    ours = jax.jit(lambda c: c + fp.lookup_positions(table, jnp.arange(c.shape[1]), name="whisper encoder"))(conv)
    np.testing.assert_array_equal(np.asarray(ours), seen["h"].numpy())
    with pytest.raises(fp.PositionLimitError, match=r"whisper encoder holds 1500 positions \(0\.\.1499\)"):
        fp.lookup_positions(table, np.arange(1501), name="whisper encoder")


def test_decoder_embedding_output_equals_whisper_decoder(whisper):
    """Token embedding + our decoder table = transformers' decoder input, from the start and mid-cache."""
    model, path, record = whisper
    decoder = model.decoder
    words = jnp.asarray(load_file(path / "model.safetensors")["decoder.embed_tokens.weight"])
    positions_table = jnp.asarray(_mechanism(record, "tokens").table.weights)
    ids = np.random.default_rng(2).integers(0, 128, (2, 10))

    @jax.jit
    def embed(ids, positions):
        return words[ids] + fp.lookup_positions(positions_table, positions, name="whisper decoder")

    for start in (0, 438):
        seen = {}
        hook = decoder.layers[0].register_forward_pre_hook(
            lambda mod, args, kwargs: seen.update(h=(args[0] if args else kwargs["hidden_states"]).clone()),
            with_kwargs=True,
        )
        positions = np.broadcast_to(np.arange(start, start + 10), ids.shape)
        with torch.no_grad():
            decoder(input_ids=torch.from_numpy(ids), position_ids=torch.from_numpy(positions.copy()))
        hook.remove()
        np.testing.assert_array_equal(np.asarray(embed(ids, positions)), seen["h"].numpy())
    with pytest.raises(fp.PositionLimitError, match=r"whisper decoder holds 448 .*asked for position 448, 1 past"):
        fp.position_errors(embed)(ids, np.broadcast_to(np.arange(439, 449), ids.shape))  # traced: at run time


def test_conditional_generation_checkpoint_is_read(tmp_path):
    """``WhisperForConditionalGeneration`` saves its tables under ``model.``: the same two mechanisms."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    WhisperForConditionalGeneration(WhisperConfig(**TINY)).save_pretrained(tmp_path)
    record = inspect_source(tmp_path)
    assert [(m.unit, m.limit, m.table.key) for m in record.mechanisms] == [
        ("tokens", 448, "model.decoder.embed_positions.weight"),
        ("seconds", 1500, "model.encoder.embed_positions.weight"),
    ]


# --- the command line: exit 0 fits, 1 past the limit, 2 bad input ---------------------------------


def test_check_seconds_and_length_exit_codes(whisper, capsys):
    _, path, _ = whisper
    assert main(["check", str(path), "--seconds", "30"]) == 0
    assert "30 s (1500 positions) fit, padded to the 30 s window" in capsys.readouterr().out
    assert main(["check", str(path), "--seconds", "45"]) == 1
    assert "asked for 45 s (2250 positions): 15 s past the limit" in capsys.readouterr().err
    assert main(["check", str(path), "--length", "448"]) == 0
    capsys.readouterr()
    assert main(["check", str(path), "--length", "449"]) == 1
    assert "holds 448 positions (0..447); asked for 449 positions" in capsys.readouterr().err
    assert main(["check", str(path), "--seconds", "31", "--json"]) == 1
    out = capsys.readouterr().out
    assert '"max_seconds": 30.0' in out and '"fits": false' in out and '"excess_seconds": 1.0' in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seconds", "0"], "argument --seconds: expected a positive number of seconds up to 3.1536e+07, got '0'"),
        (["--seconds", "nan"], "argument --seconds: expected a positive number of seconds up to 3.1536e+07, got 'nan'"),
        (["--seconds", "3", "--length", "4"], "argument --length/-n: not allowed with argument --seconds"),
    ],
)
def test_check_bad_seconds_exit_2(whisper, capsys, argv, message):
    _, path, _ = whisper
    assert main(["check", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_check_seconds_of_a_text_model_exit_2(capsys):
    assert main(["check", "sinusoidal:16:8", "--seconds", "3"]) == 2
    assert capsys.readouterr().err == (
        "flax-posenc check: error: sinusoidal:16:8: expected a model with an audio position table for --seconds "
        "(Whisper), found sinusoidal positions only (use --length for tokens)\n"
    )


def test_conformance_notices_a_wrong_audio_window(tmp_path, monkeypatch):
    """The whisper conformance case is not vacuous: an encoder read with one reserved row is caught by
    transformers' own encoder (it takes exactly 2 x 1500 mel frames)."""
    import dataclasses

    from conformance.reference import conformance_problems

    from flax_posenc.conversion import audio_tables, position_tables

    real = audio_tables.read_audio_table

    def one_short(source, family, config):
        rec = real(source, family, config)
        return dataclasses.replace(rec, table=dataclasses.replace(rec.table, offset=1))

    monkeypatch.setattr(audio_tables, "read_audio_table", one_short)
    from flax_posenc.conversion import mechanisms

    monkeypatch.setattr(mechanisms, "read_audio_table", one_short)
    problems = conformance_problems("whisper", tmp_path)
    assert any("an encoder pass of 2998 mel frames (1499 positions) fails" in p for p in problems), problems
    assert position_tables.TABLE_FAMILIES["whisper_decoder"].length_field == "max_target_positions"


def test_a_trained_encoder_table_is_reported_as_not_the_sinusoid(whisper, tmp_path):
    """A checkpoint whose encoder table was changed says so; its limit is still 30 s."""
    from safetensors.numpy import save_file

    _, path, _ = whisper
    state = load_file(path / "model.safetensors")
    state["encoder.embed_positions.weight"] = state["encoder.embed_positions.weight"] + 0.25
    save_file(state, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    encoder = _mechanism(inspect_source(tmp_path), "seconds").record
    assert encoder.sinusoid_error == pytest.approx(
        0.25, abs=2e-4
    )  # + the float32 angles of sinusoids() and encoder.seconds_limit == 30.0
    assert encoder.values_phrase().startswith("not the sinusoid (trained or modified)")


def test_encoder_only_checkpoint_has_the_audio_mechanism_only(tmp_path, capsys):
    """``WhisperForAudioClassification`` saves no decoder: one mechanism, in seconds; --length is bad input."""
    from transformers import WhisperConfig, WhisperForAudioClassification

    WhisperForAudioClassification(WhisperConfig(**TINY)).save_pretrained(tmp_path)
    record = inspect_source(tmp_path)
    assert [(m.unit, m.limit) for m in record.mechanisms] == [("seconds", 1500)]
    assert main(["check", str(tmp_path), "--seconds", "30"]) == 0
    capsys.readouterr()
    assert main(["check", str(tmp_path), "--length", "10"]) == 2
    assert capsys.readouterr().err == (
        f"flax-posenc check: error: {tmp_path}: expected a model with token positions for --length, "
        "found audio positions only (use --seconds)\n"
    )
