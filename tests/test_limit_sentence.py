"""One limit, one sentence: the command line's ``check`` line and the run-time PositionLimitError
say the same words for the same limit, for every row of the registries that have a limit.

The CLI names the model and the SOURCE (``llama llama3 RoPE (...) of SOURCE``), the run-time
error the function's own subject (``llama3 RoPE (...)``, ``position table``); from the reason in
parentheses on, both are built by :mod:`flax_posenc.limits` and must read alike: ``(the larger of
max_position_embeddings 8192 and scaled 8 x 8192 = 65536) holds 65536 positions (0..65535)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conformance.catalog import all_model_types
from conformance.tiny import tiny_config

import flax_posenc as fp
from flax_posenc.conversion.families import FAMILIES
from flax_posenc.conversion.learned_source import LearnedTableSource
from flax_posenc.conversion.position_tables import TABLE_FAMILIES
from flax_posenc.conversion.relative_config import RELATIVE_FAMILIES, relative_configs_from_dict
from flax_posenc.conversion.table import PositionTable
from flax_posenc.errors import PositionLimitError
from flax_posenc.lookup import lookup_positions

SOURCE = "path/to/model"
PAST = 3


def _holds(line: str) -> str:
    """The limit phrase of a verdict or error line: what comes before ``; asked for``."""
    assert "; asked for " in line, line
    return line.split("; asked for ")[0]


def _runtime_error(call) -> str:
    with pytest.raises(PositionLimitError) as e:
        call()
    return str(e.value)


def _relative_rows() -> list[tuple[str, str]]:
    known = set(all_model_types())
    out = []
    for row in RELATIVE_FAMILIES.values():
        model_type = next((t for t in row.model_types if t in known), None)
        if model_type is not None:
            out.append((row.name, model_type))
    return out


@pytest.mark.parametrize(("row", "model_type"), _relative_rows())
def test_rope_and_alibi_rows_say_the_same_words(row, model_type):
    config = tiny_config(model_type).to_dict()
    records = relative_configs_from_dict(config, source=SOURCE, path=Path("config.json"))
    limited = [r for r in records if r.limit is not None]
    if not limited:  # a row whose tiny config sets no limit says so, at both ends
        assert all("no " in r.describe_limit() for r in records), [r.describe_limit() for r in records]
        return
    for record in limited:
        n = record.limit + PAST
        fits, cli = record.check_length(n)
        assert not fits and cli.endswith(f": {PAST} past the limit"), cli
        if record.rope is not None:
            error = _runtime_error(lambda: fp.rotary_cos_sin(np.arange(n), record.rope))
            subject = f"{record.rope.rope_type} RoPE"
        else:
            error = _runtime_error(lambda: fp.alibi_bias(record.alibi, 1, n))
            subject = "ALiBi key positions"
        assert error.endswith(f"{PAST} past the end"), error
        run = _holds(error)
        assert run.startswith(subject), run
        # from the reason in parentheses on, the same words
        assert _holds(cli).replace(f" of {SOURCE}", "").endswith(run.removeprefix(subject)), (cli, error)
        assert run.removeprefix(subject).startswith(" ("), run  # the reason is named, not just the count


def _learned_rows():
    return [*FAMILIES.values(), *TABLE_FAMILIES.values()]


@pytest.mark.parametrize("row", _learned_rows(), ids=lambda r: r.name)
def test_learned_table_rows_say_the_same_words(row):
    offset = 2 if row.offset_from_pad else row.offset
    rows = offset + 8
    table = PositionTable(np.zeros((rows, 4), np.float32), family=row.name, key=row.position_key, offset=offset)
    fits, cli = LearnedTableSource(table).check_length(8 + PAST)
    assert not fits
    error = _runtime_error(
        lambda: lookup_positions(np.zeros((rows, 4), np.float32), np.arange(8 + PAST), offset=offset)
    )
    run = _holds(error)
    assert run.startswith("position table holds 8 positions (0..7)"), run
    assert _holds(cli).endswith(run.removeprefix("position table")), (cli, error)


def test_a_grid_says_the_same_words_at_both_ends():
    from flax_posenc.conversion.grid_tables import GridSource, GridTable

    table = GridTable(
        np.zeros((17, 4), np.float32),
        family="vit",
        key="pos",
        prefix_tokens=1,
        patch_size=(8, 8),
        image_size=(32, 32),
        model_type="vit",
    )
    cli = GridSource(table).check_image_size(64)[1]
    from flax_posenc.grids import add_grid_positions

    x = np.zeros((1, 65, 4), np.float32)
    error = _runtime_error(lambda: add_grid_positions(x, table.weights, prefix_tokens=1, trained_grid=(4, 4)))
    run = error.split("; asked for ")[0]
    assert run == "position grid holds a 4 x 4 grid of patches + 1 class token (17 positions)", run
    assert "holds a 4 x 4 grid of patches + 1 class token (17 positions; 32 px / 8)" in cli, cli


def test_a_record_names_the_field_its_file_holds():
    """A GGUF's limit lives in ``llama.context_length``: a record carries that name."""
    import dataclasses

    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 128}
    (record,) = relative_configs_from_dict(config, source=SOURCE, path=Path("config.json"))
    assert "(max_position_embeddings 128) of" in record.describe_limit()
    gguf = dataclasses.replace(record, length_field="llama.context_length")
    assert "(llama.context_length 128) of path/to/model holds 128 positions (0..127)" in gguf.describe_limit()


def test_a_llama3_scaled_limit_reads_alike_in_check_and_runtime_error():
    """The limit of a llama3-scaled config: one reason, one count, at both ends."""
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 8192,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "original_max_position_embeddings": 8192,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
        },
    }
    (record,) = relative_configs_from_dict(config, source=SOURCE, path=Path("config.json"))
    limit = "(the larger of max_position_embeddings 8192 and scaled 8 x 8192 = 65536) holds 65536 positions (0..65535)"
    cli = record.check_length(70000)[1]
    assert (
        cli
        == f"llama llama3 RoPE {limit.replace(') holds', f') of {SOURCE} holds')}; asked for 70000 positions (0..69999): 4464 past the limit"
    )
    error = _runtime_error(lambda: fp.rotary_cos_sin(np.arange(69999, 70000), record.rope))
    assert error == f"llama3 RoPE {limit}; asked for position 69999, 4464 past the end"
