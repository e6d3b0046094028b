"""Position tables over audio frames, whose limit is a duration: Whisper's encoder (numpy only).

Whisper's encoder adds ``encoder.embed_positions.weight`` to the output of its two convolutions:
one row per 20 ms of audio. transformers (``modeling_whisper.py``) fills the table with
``sinusoids(max_source_positions, d_model)`` (``[sin | cos]`` halves, frequencies
``10000 ** (-i / (d/2 - 1))``) and stores it as a weight, frozen; the encoder requires exactly
``max_source_positions * 2`` mel frames (the convolutions' strides are 1 and 2), so every input is
padded to the full window. With the feature extractor's 16 kHz audio and 160-sample hop (100 mel
frames per second), the 1500 rows of every released Whisper are 50 positions per second: **30 s**.
The decoder's learned table (``decoder.embed_positions.weight``, ``max_target_positions`` = 448
tokens) is an ordinary token table
(:data:`~flax_posenc.conversion.position_tables.TABLE_FAMILIES` ``whisper_decoder``).

A row here is data (:data:`AUDIO_TABLE_FAMILIES`); :class:`AudioTableSource` is its
:class:`~flax_posenc.conversion.SourceRecord`, with ``unit = "seconds"``: a model record's token
checks (``check_length``) leave it out, and ``check_seconds(s)`` asks it.

>>> AUDIO_TABLE_FAMILIES["whisper_encoder"].positions_per_second
50.0
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.families import Family
from flax_posenc.conversion.position_tables import read_position_table
from flax_posenc.conversion.table import PositionTable, TableBacked
from flax_posenc.limits import describe_limit, describe_seconds, length_verdict
from flax_posenc.sinusoid_math import sinusoidal_values

__all__ = ["AUDIO_TABLE_FAMILIES", "AudioTableFamily", "AudioTableSource", "read_audio_table", "seconds_verdict"]

#: The largest duration ``check --seconds`` accepts (a year: past it, a bad argument).
MAX_SECONDS = 365 * 24 * 3600.0


@dataclasses.dataclass(frozen=True)
class AudioTableFamily:
    """One family's audio position table, as data.

    Attributes:
      name, model_types: our name and the ``config.json`` ``model_type`` values that mean it.
      key_suffix: the tensor's name without the checkpoint's prefix (``model.`` or none).
      length_field: the config field declaring the rows (checked against the table).
      positions_per_second: rows per second of audio: the feature extractor's frames per second
        (``sampling_rate / hop_length``) over the convolutions' total stride.
      fixed_window: the model pads every input to the whole table (Whisper): shorter audio fits.
      tower: the part of the model it serves (``"audio"``).
    """

    name: str
    model_types: tuple[str, ...]
    key_suffix: str
    length_field: str
    positions_per_second: float
    fixed_window: bool = True
    tower: str = "audio"


AUDIO_TABLE_FAMILIES: Mapping[str, AudioTableFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            # WhisperFeatureExtractor: 16000 Hz, hop_length 160 (100 frames/s); conv2 stride 2
            AudioTableFamily(
                "whisper_encoder",
                ("whisper",),
                key_suffix="encoder.embed_positions.weight",
                length_field="max_source_positions",
                positions_per_second=16000 / 160 / 2,
            ),
        )
    }
)


def _seconds(value: float) -> str:
    return f"{value:g} s"


@dataclasses.dataclass(frozen=True)
class AudioTableSource(TableBacked):
    """An audio position table as a :class:`~flax_posenc.conversion.SourceRecord`: limit in seconds.

    ``limit`` counts positions (rows, as the table's); ``seconds_limit`` is what they hold in
    seconds of audio. ``unit`` is ``"seconds"``.
    """

    table: PositionTable
    family_row: AudioTableFamily

    unit = "seconds"
    scheme = "learned"

    @property
    def limit(self) -> int:
        return self.table.num_positions

    @property
    def positions_per_second(self) -> float:
        return self.family_row.positions_per_second

    @property
    def seconds_limit(self) -> float:
        """Seconds of audio the table holds (Whisper: 1500 / 50 = 30)."""
        return self.limit / self.positions_per_second

    @property
    def name(self) -> str:
        return f"{self.table.family} position table ({self.table.key}) of {self.table.source}"

    @functools.cached_property
    def sinusoid_error(self) -> float:
        """Largest ``|row - sinusoid|`` against the float64 values of transformers' ``sinusoids()``
        (``[sin | cos]``, frequencies ``10000 ** (-i / (d/2 - 1))``): ~1e-7 for an untouched table
        (float32 rounding), large for a table that was trained. ``inf`` for an odd width."""
        t = self.table
        if t.dim % 2 or t.dim < 4:
            return math.inf
        ref = sinusoidal_values(np.arange(t.rows), t.dim, layout="concatenated", endpoint=True)
        return float(np.max(np.abs(np.asarray(t.weights, np.float64) - ref)))

    def describe_limit(self) -> str:
        """``"... holds 1500 positions (0..1499) = 30 s of audio at 50 positions per second"``."""
        return (
            f"{describe_limit(self.name, self.table.rows, self.table.offset)} = {_seconds(self.seconds_limit)} of "
            f"audio at {self.positions_per_second:g} positions per second"
        )

    def check_length(self, length: int) -> tuple[bool, str]:
        """Whether ``length`` encoder positions (audio frames after the convolutions) fit."""
        return length_verdict(length, rows=self.table.rows, offset=self.table.offset, name=self.name)

    def check_seconds(self, seconds: float) -> tuple[bool, str]:
        """Whether ``seconds`` of audio fit, and one line saying so (the CLI's ``check --seconds``).

        >>> import numpy as np
        >>> t = PositionTable(np.zeros((1500, 4)), family="whisper_encoder", key="encoder.embed_positions.weight",
        ...                   source="demo")
        >>> AudioTableSource(t, AUDIO_TABLE_FAMILIES["whisper_encoder"]).check_seconds(31)[1]
        'whisper_encoder position table (encoder.embed_positions.weight) of demo holds 30 s of audio (1500 positions at 50 per second); asked for 31 s (1550 positions): 1 s past the limit (split longer audio into 30 s windows)'
        """
        positions = math.ceil(seconds * self.positions_per_second - 1e-9)
        holds = describe_seconds(self.name, _seconds(self.seconds_limit), self.limit, self.positions_per_second)
        asked = f"{_seconds(seconds)} ({positions} positions)"
        if positions <= self.limit:
            pad = f", padded to the {_seconds(self.seconds_limit)} window" if self.family_row.fixed_window else ""
            return True, f"{holds}; {asked} fit{pad}"
        past = seconds - self.seconds_limit
        return False, (
            f"{holds}; asked for {asked}: {_seconds(past)} past the limit "
            f"(split longer audio into {_seconds(self.seconds_limit)} windows)"
        )

    def values_phrase(self) -> str:
        """What the rows hold: transformers' sinusoids (within 1e-3 of float64), or something else."""
        err = self.sinusoid_error
        what = "the sinusoid, stored as weights" if err <= 1e-3 else "not the sinusoid (trained or modified)"
        return f"{what}; largest difference from the float64 sinusoid {err:.3g}"

    def seconds_report(self) -> dict[str, Any]:
        """Its report in seconds of audio (of ``to_dict()`` and of its mechanism's details)."""
        return {
            "seconds": self.seconds_limit,
            "positions_per_second": self.positions_per_second,
            "sinusoid_error": self.sinusoid_error,
        }

    def to_dict(self) -> dict[str, Any]:
        t = self.table
        head = {"source": t.source, "family": t.family, "key": t.key, "scheme": self.scheme}
        shape = {"rows": t.rows, "dim": t.dim, "offset": t.offset}
        return {**head, **shape, "limit": self.limit, "unit": self.unit, **self.seconds_report()}

    def __str__(self) -> str:
        t = self.table
        return "\n".join(
            [
                f"source:      {t.source}",
                f"family:      {t.family}",
                f"key:         {t.key}",
                f"rows:        {t.rows} x {t.dim} ({t.dtype})",
                f"audio:       {_seconds(self.seconds_limit)} at {self.positions_per_second:g} positions per second",
                f"values:      {self.values_phrase()}",
                f"limit:       {self.describe_limit()}",
            ]
        )


def read_audio_table(source: str | os.PathLike, family: str, config: Mapping[str, Any]) -> AudioTableSource:
    """The :data:`AUDIO_TABLE_FAMILIES` ``family`` table of SOURCE (only that tensor is read).

    Raises:
      CheckpointError: as :func:`~flax_posenc.conversion.position_tables.read_position_table` (no
        such tensor, not a finite 2-D float table, rows that disagree with the length field).
    """
    row = AUDIO_TABLE_FAMILIES[family]
    as_table = Family(row.name, row.model_types, position_key=row.key_suffix, length_field=row.length_field)
    return AudioTableSource(read_position_table(source, row.name, config, row=as_table), row)


def seconds_verdict(record: Any, seconds: float) -> dict[str, Any]:
    """The ``check --seconds --json`` object of a model record for ``seconds`` of audio."""
    fits, line = record.check_seconds(seconds)
    audio = [m.record for m in record.mechanisms if m.unit == "seconds"]
    limits = [a.seconds_limit for a in audio if a.seconds_limit is not None]  # None: no limit (wav2vec2's convolution)
    limit = min(limits) if limits else None
    return {
        "source": record.source,
        "model_type": record.model_type,
        "seconds": seconds,
        "max_seconds": limit,
        "fits": fits,
        "excess_seconds": 0 if fits or limit is None else seconds - limit,
        "message": line,
    }


# ----------------------------------------------------------------------------- issue 36: Whisper-like encoders
# Whisper's encoder in other models, each its own standalone model type (and the audio_config tower of
# qwen2_audio, voxtral, audioflamingo3, musicflamingo, moss_transcribe_diarize): conv1 stride 1, conv2
# stride 2 over WhisperFeatureExtractor's mel frames (16000 Hz, hop 160: 100 frames/s), an
# nn.Embedding(max_source_positions, d_model) added whole (the input must be exactly
# max_source_positions * 2 mel frames: 30 s at 1500 rows). Read from transformers 5.24.0's
# Qwen2AudioEncoder, VoxtralEncoder, AudioFlamingo3Encoder and MossTranscribeDiarizeAudioEncoder.
_WHISPER_LIKE_ENCODERS = tuple(
    AudioTableFamily(
        name,
        (model_type,),
        key_suffix="embed_positions.weight",
        length_field="max_source_positions",
        positions_per_second=16000 / 160 / 2,
    )
    for name, model_type in (
        ("qwen2_audio_encoder", "qwen2_audio_encoder"),
        ("voxtral_encoder", "voxtral_encoder"),
        ("audioflamingo3_encoder", "audioflamingo3_encoder"),
        ("moss_transcribe_diarize_audio", "moss_transcribe_diarize_audio"),
    )
)
AUDIO_TABLE_FAMILIES = MappingProxyType({**AUDIO_TABLE_FAMILIES, **{r.name: r for r in _WHISPER_LIKE_ENCODERS}})
