"""The ``flax-posenc`` command: make a position table's limit visible.

Subcommands (see ``flax-posenc SUBCOMMAND --help``; the reference is ``docs/cli.md``):

- ``inspect SOURCE [--json]``: family, key, rows, dim, offset, num_positions, dtype, properties.
- ``check SOURCE --length N [--json]``: exit 0 when N positions fit, else exit 1 and one line;
  ``--image-size PX`` (or ``HxW``) for a vision grid: exit 0 when the image gives the trained grid,
  else exit 1 saying the grid must be resized (``fp.resize_grid``).
  ``--seconds S`` asks the same of an audio table (Whisper: 30 s).
- ``plot SOURCE --out DIR [--dims D ...]``: PNG figures.
- ``extend SOURCE --length N --method M --out DIR``: an HF-loadable checkpoint with a longer table.
- ``convert SOURCE --out PATH [--format orbax]``: the input block's Flax parameters, as ``.safetensors``
  or an orbax checkpoint directory.
- ``tour [--out DIR]``: the real BERT (all-MiniLM-L6-v2), a GPT-2-shaped checkpoint and a
  sinusoidal table, their limits shown and checked, figures written (:mod:`flax_posenc.report.tour`).

``inspect``, ``check`` and ``plot`` have one code path each, whatever the SOURCE holds (learned
table, RoPE/ALiBi config, T5/MPNet relative bias): they read
:func:`flax_posenc.conversion.inspect_source` and print what its record says.

Exit codes: 0 ok; 1 limit exceeded (``check``); 2 bad input or usage (an unreadable SOURCE,
a length that is not a positive integer, an output directory that cannot be written); 3 internal
error (a bug: one line asking to report it). Every error is one line on stderr, never a
traceback unless ``--debug`` is given (anywhere on the line); with ``--json`` the error is a
JSON object on stdout (``{"error": ..., "kind": ..., "exit_code": ...}``) with the same exit code.

Subcommands are data: :data:`COMMANDS` maps a name to a :class:`Command` (help, example,
argument setup, handler); adding one is adding an entry.

main(["check", "sinusoidal:16:8", "--length", "16"])
0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flax_posenc._version import __version__
from flax_posenc.conversion import LearnedTableSource, export_position_table, inspect_source, load_position_table
from flax_posenc.conversion.audio_tables import MAX_SECONDS, seconds_verdict
from flax_posenc.conversion.families import FAMILIES
from flax_posenc.conversion.mechanisms import MECHANISMS
from flax_posenc.conversion.models import MECHANISM_KINDS, MODEL_MECHANISMS, REFUSED_MODEL_TYPES, TOWER_FIELDS
from flax_posenc.conversion.outputs import check_apart, protected_paths
from flax_posenc.conversion.source_record import verdict
from flax_posenc.conversion.unread_mechanisms import UNBUILDABLE_MODEL_TYPES, UNREAD_MECHANISMS
from flax_posenc.errors import CheckpointError, PositionLimitError
from flax_posenc.extend import METHODS, extend_table
from flax_posenc.grid_config import MAX_PATCHES
from flax_posenc.progress import Progress, progress_enabled
from flax_posenc.report import tour
from flax_posenc.report.output import PROG, UsageError, make_figures
from flax_posenc.report.output import one_line as _one_line

__all__ = [
    "CACHE_ENV",
    "COMMANDS",
    "EXIT_INTERNAL",
    "EXIT_LIMIT",
    "EXIT_OK",
    "EXIT_USAGE",
    "Command",
    "build_parser",
    "dumps_json",
    "in_cli_words",
    "load_source",
    "load_table",
    "main",
    "writable_dir",
]

EXIT_OK = 0
EXIT_LIMIT = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
#: the reader of stdout went away (``flax-posenc families | head``): quiet, as a shell reports a
#: command ended by SIGPIPE (128 + 13)
EXIT_PIPE = 141
REPORT = "please report it to the flax-posenc maintainers with the command line and its --debug output"

CACHE_ENV = "FLAX_POSENC_CACHE"  # also read by flax_posenc.report.tour

SOURCE_HELP = (
    "a checkpoint directory, a .safetensors or .bin file, a Hugging Face model id "
    "(local cache first), sinusoidal:LENGTH:DIM, or a file or orbax directory written by convert; for RoPE/ALiBi "
    "models (Llama, Mistral, Qwen2, GPT-NeoX, GPT-J, Falcon, BLOOM, MPT) and T5/MPNet relative "
    "bias a checkpoint directory or its config.json; a .gguf file (llama.cpp; pip install 'flax-posenc[gguf]')"
)
#: what extend and convert accept: a learned absolute table with its Hugging Face layout
LEARNED_SOURCE_HELP = (
    "a checkpoint with a learned position table (GPT-2, BERT, RoBERTa, OPT, BART and the other "
    "families of `flax-posenc inspect`): a directory with config.json, or a Hugging Face model id "
    "(local cache first)"
)

#: what ``flax-posenc --help`` says of each built-in mechanism kind, with examples; a kind without a
#: phrase here (one registered later) is described by its table row's summary
KIND_PHRASES: dict[str, str] = {
    "learned": "learned tables (GPT-2, BERT, RoBERTa, OPT, ...; PatchTST's over time steps: check --steps)",
    "sinusoidal": (
        "sinusoids (sinusoidal:LENGTH:DIM, M2M-100, Whisper's audio table: check --seconds; "
        "Informer, Autoformer: check --steps)"
    ),
    "rope": "RoPE and its scalings (linear, dynamic, YaRN, LongRoPE, Llama 3; Llama, Qwen, Mistral, ...)",
    "nope": "layers without positions (NoPE: SmolLM3, Llama 4)",
    "alibi": "ALiBi (BLOOM, MPT, Falcon)",
    "mrope": "multimodal RoPE (Qwen2-VL, GLM-4V)",
    "relative_bias": "T5/MPNet relative position biases",
    "deberta_relative": "DeBERTa's relative positions",
    "grid": "vision position grids (ViT, CLIP, SigLIP: check --image-size)",
    "bbox_2d": "2-D bounding-box tables (LayoutLM, LayoutLMv3, LiLT: check --bbox-max)",
    "none": "models without position encoding (state-space, recurrent)",
    "vision_rope": "vision-tower RoPE (Pixtral, Qwen2-VL, Qwen2.5-VL, DINOv3: check --image-size)",
}
KIND_PHRASES["window_bias"] = "window relative position biases (Swin, SwinV2, BEiT with its class token)"  # issue 35
KIND_PHRASES["conv_position"] = "convolutional positions over audio frames (wav2vec2, HuBERT, SEW, Data2Vec-Audio)"
KIND_PHRASES["detr_positions"] = "DETR-family 2-D feature-map positions (DETR, Deformable DETR, RT-DETR, D-FINE)"
KIND_PHRASES["naflex_grid"] = (
    "NaFlex grids resized per image under a patch budget (SigLIP 2, LFM2 VL: check --image-size)"
)
# issue 36: the last text mechanisms
KIND_PHRASES["axial"] = "axial position embeddings (Reformer)"
KIND_PHRASES["resampled"] = "a table resampled to every length (SAM3-Lite's text encoder)"
KIND_PHRASES["relative_sinusoid"] = "sinusoids of query-key distances (XLNet)"
KIND_PHRASES["segment_bias"] = "segment relative position biases (CPM-Ant)"
KIND_PHRASES["decomposed_rel_pos"] = "SAM/ViTDet decomposed relative positions (rel_pos_h, rel_pos_w)"
KIND_PHRASES["xl_relative"] = "Transformer-XL relative sinusoids (Parakeet, FastSpeech2-Conformer)"
KIND_PHRASES["clipped_relative"] = "relative keys clamped to a window (wav2vec2-bert, Granite Speech, VITS)"
KIND_PHRASES["bbox_sinusoid"] = "sinusoids of bounding-box differences (BROS)"
KIND_PHRASES["layout_relative_bias"] = "1-D and 2-D relative attention biases (LayoutLMv3)"


def _description() -> str:
    kinds = "; ".join(KIND_PHRASES.get(k, MECHANISMS[k].summary) for k in MECHANISM_KINDS)
    return textwrap.fill(
        "Make a transformer's position limit visible: inspect, check, plot, extend and convert the positional "
        "encodings of a Hugging Face checkpoint directory or file, a Hub model id, a .gguf file (llama.cpp), a "
        f"converted file or an orbax directory. Read: {kinds}. '{PROG} families' lists the "
        f"{len(MODEL_MECHANISMS)} model types read and those refused.",
        width=100,
    )


TOP_EPILOG = f"""\
examples:
  {PROG} tour                                   # the limits of BERT and GPT-2, checked and plotted
  {PROG} inspect sinusoidal:1024:768
  {PROG} check path/to/bert-checkpoint --length 600 || echo "does not fit"
  {PROG} plot path/to/model.safetensors --out figures/

exit codes:
  0  ok
  1  limit exceeded (check: the length does not fit in the table)
  2  bad input or usage (unreadable SOURCE, length not a positive integer,
     output directory that cannot be written, unknown option)
  3  internal error (a bug: please report it; --debug prints the traceback)

  --debug (anywhere) prints the traceback of any error; with --json, errors are JSON on stdout.
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (raised, turned into exit 2 by :func:`main`)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see '{self.prog} --help')", prog=self.prog)


# --------------------------------------------------------------------------- helpers


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _image_size(text: str) -> tuple[int, int]:
    """``"448"`` -> ``(448, 448)``; ``"448x336"`` -> ``(448, 336)`` (height x width)."""
    parts = text.lower().split("x")
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(f"expected PX or HxW in pixels, got {text!r}")
    sides = tuple(_positive_int(part) for part in parts)
    return (sides[0], sides[0]) if len(sides) == 1 else sides  # type: ignore[return-value]


def _patch_budget(text: str) -> int:
    """``--max-num-patches``: a patch budget, 1 .. MAX_PATCHES."""
    try:
        value = int(text, 10)
    except ValueError:
        value = None
    if value is None or not 0 < value <= MAX_PATCHES:
        raise argparse.ArgumentTypeError(
            f"expected a patch budget (a positive integer up to {MAX_PATCHES}), got {text!r}"
        )
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not 0 < value <= MAX_SECONDS:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds up to {MAX_SECONDS:g}, got {text!r}")
    return value


def _coordinate(text: str) -> int:
    """``--bbox-max``: a coordinate, ``0`` or more."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a coordinate (an integer, 0 or more), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a coordinate (an integer, 0 or more), got {text!r}")
    return value


def _time_steps(text: str) -> int:
    """``--steps``: a number of time steps, 1 or more (a negative one is bad input)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of time steps (1 or more), got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of time steps (1 or more), got {text!r}")
    return value


def _unit_checks(record: Any, unit: str, option: str, asked: int, ask: str) -> list[tuple[bool, str, dict]]:
    """``(fits, line, json)`` of every mechanism whose limit counts ``unit`` (bounding-box
    coordinates, time steps), asked with its ``ask`` method; a SOURCE without one is bad input."""
    found = [m for m in getattr(record, "mechanisms", ()) if m.unit == unit]
    if not found:
        kinds = ", ".join(dict.fromkeys(m.kind for m in getattr(record, "mechanisms", ()))) or record.scheme
        raise UsageError(f"{option}: expected a SOURCE whose positions count {unit}, found {kinds}")
    out = []
    for m in found:
        fits, line = getattr(m.record, ask)(asked)
        out.append(
            (fits, line, {**m.to_dict(), option.lstrip("-").replace("-", "_"): asked, "fits": fits, "message": line})
        )
    return out


def _finite_json(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, +-Inf) replaced by ``None``: strict JSON."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def dumps_json(value: Any, **kwargs: Any) -> str:
    """Strict JSON (``allow_nan=False``): non-finite floats become ``null``.

    >>> dumps_json({"a": float("inf"), "b": [1.5, float("nan")]})
    '{"a": null, "b": [1.5, null]}'
    """
    return json.dumps(_finite_json(value), allow_nan=False, **kwargs)


def _progress_enabled(args: argparse.Namespace) -> bool:
    """A bar for a person at a terminal, never with --json (:func:`flax_posenc.progress.progress_enabled`)."""
    return progress_enabled(json=getattr(args, "json", False))


def _nonempty(source: str) -> str:
    if not source.strip():
        raise UsageError(f"SOURCE is empty; expected {SOURCE_HELP}")
    return source


def load_table(source: str):
    """Load SOURCE as a :class:`~flax_posenc.conversion.table.PositionTable` (``extend`` needs the table).

    Raises :class:`UsageError` for an empty SOURCE; the loader raises
    :class:`~flax_posenc.errors.CheckpointError` for anything it cannot read.
    """
    return load_position_table(_nonempty(source))


def load_source(source: str, family: str | None = None):
    """SOURCE as a :class:`~flax_posenc.conversion.SourceRecord` (any kind): what inspect/check/plot read."""
    return inspect_source(_nonempty(source), family=family)


def writable_dir(path: str | Path) -> Path:
    """Create ``path`` if needed and prove it can be written; else :class:`UsageError`."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".flax-posenc-write-test-"):
            pass
    except OSError as exc:
        reason = exc.strerror or _one_line(exc)
        raise UsageError(f"cannot write to output directory {str(out)!r}: {reason}") from None
    return out


# --------------------------------------------------------------------------- subcommands


def cmd_inspect(args: argparse.Namespace) -> int:
    bar = Progress(2, _progress_enabled(args))
    record = bar.run("loading", lambda: load_source(args.source, args.family))
    report = bar.run("analysing", record.to_dict if args.json else lambda: str(record))
    bar.close()
    print(dumps_json(report, indent=2) if args.json else report)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    asked = (args.length, args.image_size, args.seconds, args.bbox_max, args.steps)
    if all(a is None for a in asked):
        raise UsageError(
            "expected --length N (tokens), --seconds S (audio), --image-size PX (a vision grid), "
            "--bbox-max N (document boxes) or --steps N (time series)"
        )
    record = load_source(args.source, args.family)
    mechanisms = getattr(record, "mechanisms", ())
    grids = [m.record for m in mechanisms if m.kind == "grid"]
    windows = [m.record for m in mechanisms if m.kind == "window_bias"]  # issue 35: a window limits the image too
    vision_ropes = [m.record for m in mechanisms if m.kind == "vision_rope"]  # Pixtral's trained side, Qwen-VL's none
    naflex = [m.record for m in mechanisms if m.kind == "naflex_grid"]  # issue 35: SigLIP 2's patch budget
    if args.max_num_patches is not None and (args.image_size is None or not naflex):
        raise UsageError(
            "--max-num-patches: expected --image-size PX and a SOURCE with a NaFlex grid (SigLIP 2, LFM2-VL), "
            f"found {'no --image-size' if args.image_size is None else record.scheme}"
        )
    checks = []  # (fits, line, json)
    if args.image_size is not None:
        for rope in vision_ropes:
            fits, line = rope.check_image_size(args.image_size)
            limit = {"patches_per_side": rope.patches_per_side, "patch_size": rope.patch_size}
            checks.append(
                (
                    fits,
                    line,
                    {**rope.to_dict(), **limit, "image_size": list(args.image_size), "fits": fits, "message": line},
                )
            )
        for naf in naflex:  # the patch budget: an image of more patches is refused
            fits, line = naf.check_image_size(args.image_size, max_num_patches=args.max_num_patches)
            budget = naf.patch_budget if args.max_num_patches is None else args.max_num_patches
            patch = naf.table.patch_size
            patches = [args.image_size[0] // patch[0], args.image_size[1] // patch[1]]
            naflex_json: dict[str, Any] = {
                "source": naf.source,
                "family": naf.family,
                "scheme": "naflex_grid",
                "key": naf.key,
            }
            naflex_json.update(
                image_size=list(args.image_size), grid=patches, max_num_patches=budget, fits=fits, message=line
            )
            checks.append((fits, line, naflex_json))
        if not grids and not windows and not vision_ropes and not naflex:
            unread = [u for u in getattr(record, "unread", ()) if u.tower in ("vision", "backbone")]
            found = f"its {unread[0]}" if unread else record.scheme
            raise UsageError(f"--image-size: expected a SOURCE with a position grid, found {found}")
        for grid in grids:
            fits, line = grid.check_image_size(args.image_size)
            h, w = args.image_size
            patch = grid.table.patch_size
            checks.append(
                (
                    fits,
                    line,
                    {
                        "source": grid.source,
                        "family": grid.family,
                        "scheme": "grid",
                        "key": grid.key,
                        "image_size": [h, w],
                        "grid": [h // patch[0], w // patch[1]],
                        "trained_grid": list(grid.table.grid),
                        "trained_image_size": list(grid.table.image_size),
                        "patch_size": list(patch),
                        "prefix_tokens": grid.table.prefix_tokens,
                        "fits": fits,
                        "message": line,
                    },
                )
            )
        for window in windows:
            fits, line = window.check_image_size(args.image_size)
            found = {"source": window.source, "family": window.family, "scheme": "window_bias", "key": window.key}
            found.update(image_size=list(args.image_size), window=list(window.window), fits=fits, message=line)
            checks.append((fits, line, found))
    if args.length is not None:
        images = grids + vision_ropes + naflex
        if images and all(m.kind in ("grid", "vision_rope", "naflex_grid") for m in mechanisms):
            raise UsageError(
                f"--length: {images[0].describe_limit()}: it limits the image size; ask with --image-size PX"
            )
        result = verdict(record, args.length)
        checks.append((result["fits"], result["message"], result))
    if args.seconds is not None:  # audio (Whisper's encoder): the limit in seconds
        result = seconds_verdict(record, args.seconds)
        checks.append((result["fits"], result["message"], result))
    if args.bbox_max is not None:  # document models: the largest box coordinate
        checks += _unit_checks(record, "coordinates", "--bbox-max", args.bbox_max, "check_bbox_max")
    if args.steps is not None:  # time series: context plus prediction steps
        checks += _unit_checks(record, "time steps", "--steps", args.steps, "check_steps")
    fits = all(c[0] for c in checks)
    if args.json:
        print(dumps_json(checks[0][2] if len(checks) == 1 else {"fits": fits, "checks": [c[2] for c in checks]}))
    else:
        for ok, line, _ in checks:
            if ok:
                print(line)
            else:
                print(f"{PROG} check: limit exceeded: {line}", file=sys.stderr)
    return EXIT_OK if fits else EXIT_LIMIT


def cmd_plot(args: argparse.Namespace) -> int:
    check_apart(args.out, protected_paths(args.source), containing_ok=True)  # never into the checkpoint
    out = writable_dir(args.out)
    record = load_source(args.source, args.family)
    for path in make_figures(record, out, dims=args.dims, prefix=args.prefix, progress=_progress_enabled(args)):
        print(path)
    return EXIT_OK


def cmd_extend(args: argparse.Namespace) -> int:
    with Progress(3, _progress_enabled(args)) as bar:
        table = bar.run("reading", lambda: load_table(args.source))
        if table.family == "sinusoidal":
            raise UsageError(
                "extend writes a checkpoint with a longer learned table; a sinusoidal SOURCE has no table to extend"
            )
        grown = bar.run(
            f"extending ({args.method})",
            lambda: extend_table(table.weights, args.length, method=args.method, offset=table.offset),
        )
        out = bar.run("writing", lambda: export_position_table(args.source, grown, args.out, overwrite=args.overwrite))
    print(
        f"wrote {out}: {LearnedTableSource(table).name} extended from {table.num_positions} to {args.length} positions "
        f"({args.method}; {grown.shape[0]} rows)"
    )
    return EXIT_OK


def cmd_convert(args: argparse.Namespace) -> int:
    from flax_posenc.pretrained import save_converted

    with Progress(2, _progress_enabled(args)) as bar:
        out = save_converted(
            args.source, args.out, family=args.family, overwrite=args.overwrite, format=args.format, progress=bar
        )
    what = "an orbax checkpoint of the" if args.format == "orbax" else "Flax parameters and arguments of the"
    print(f"wrote {out}: {what} input block of {args.source}")
    return EXIT_OK


# --------------------------------------------------------------------------- tour


def cmd_families(args: argparse.Namespace) -> int:
    kinds = {name: {"summary": k.summary, "limit_unit": k.limit_unit} for name, k in MECHANISMS.items()}
    if args.json:
        read = {
            t: [{"kind": k, "family": f, "tower": MECHANISMS[k].tower_of(MECHANISMS[k].rows[f])} for k, f in rows]
            for t, rows in MODEL_MECHANISMS.items()
        }
        refused = {**dict(REFUSED_MODEL_TYPES), **dict(UNREAD_MECHANISMS)}
        print(
            dumps_json(
                {"kinds": kinds, "read": read, "refused": refused, "unbuildable": dict(UNBUILDABLE_MODEL_TYPES)},
                indent=2,
            )
        )
        return EXIT_OK
    width = max(map(len, [*MODEL_MECHANISMS, *MECHANISMS]))
    print("# mechanism kinds (KIND:FAMILY below; `inspect --json` says mechanisms[i].kind):")
    for name, k in MECHANISMS.items():
        print(f"#   {name:<{width}}  {k.summary} (limit: {k.limit_unit})")
    print(f"# {len(MODEL_MECHANISMS)} model types read, each as KIND:FAMILY rows:")
    for model_type, rows in MODEL_MECHANISMS.items():
        print(f"{model_type:<{width}}  " + " + ".join(f"{r}:{f}" for r, f in rows))
    print("# refused with a reason:")
    for model_type, why in REFUSED_MODEL_TYPES.items():
        print(f"{model_type:<{width}}  refused: {why}")
    print(
        f"# and {len(UNREAD_MECHANISMS)} more refused with the mechanism not read named, {len(UNBUILDABLE_MODEL_TYPES)} "
        "that transformers cannot build here (`families --json`, docs/coverage.md; `inspect` gives the line)"
    )
    fields = ", ".join(TOWER_FIELDS)
    print(f"# a composite model type not listed ({fields}) is read as its towers, each as its model type above")
    return EXIT_OK


def _configure_families(p: argparse.ArgumentParser) -> None:
    _add_json(p, "the registry")


def cmd_tour(args: argparse.Namespace) -> int:
    """``flax-posenc tour``: the demo lives in :mod:`flax_posenc.report.tour`."""
    tour.run(
        writable_dir(args.out), cache=Path(args.cache_dir) if args.cache_dir else None, progress=_progress_enabled(args)
    )
    return EXIT_OK


# --------------------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: what ``--help`` says, its arguments and its handler (returns the exit code)."""

    help: str
    example: str
    configure: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


def _add_source(p: argparse.ArgumentParser, help: str = SOURCE_HELP) -> None:
    p.add_argument("source", metavar="SOURCE", help=help)


def _add_family(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--family",
        metavar="NAME",
        help="read SOURCE as this learned-table family when its config's model_type is not recognised "
        f"({', '.join(FAMILIES)})",
    )


def _add_json(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout (no progress bar)")


def _configure_inspect(p: argparse.ArgumentParser) -> None:
    _add_source(p)
    _add_family(p)
    _add_json(p, "the report")


def _configure_check(p: argparse.ArgumentParser) -> None:
    _add_source(p)
    _add_family(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--length", "-n", type=_positive_int, metavar="N", help="number of positions (0..N-1) to fit (tokens)"
    )
    what.add_argument(
        "--seconds", type=_positive_seconds, metavar="S", help="seconds of audio to fit (Whisper's encoder table)"
    )
    p.add_argument(
        "--image-size",
        type=_image_size,
        metavar="PX",
        help="image side in pixels (or HxW) for a vision position grid: exit 0 when it gives the trained grid",
    )
    p.add_argument(
        "--max-num-patches",
        type=_patch_budget,
        metavar="N",
        help="with --image-size: the patch budget of a NaFlex grid (SigLIP 2's max_num_patches; default: the checkpoint's)",
    )
    p.add_argument(
        "--bbox-max",
        type=_coordinate,
        metavar="N",
        help="the largest bounding-box coordinate you will pass (LayoutLM, LayoutLMv3, LiLT: 0..1023)",
    )
    p.add_argument(
        "--steps",
        type=_time_steps,
        metavar="N",
        help="time steps to fit (time series models: context plus prediction length, or patches' steps)",
    )
    _add_json(p, "the verdict")


def _configure_plot(p: argparse.ArgumentParser) -> None:
    _add_source(p)
    _add_family(p)
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="directory for the PNG files (created if needed)")
    p.add_argument(
        "--dims", type=int, nargs="+", metavar="D", help="dimensions drawn as waves (default: 0 1 50 100 last)"
    )
    p.add_argument("--prefix", default="", help="file-name prefix (default: none)")


def _configure_extend(p: argparse.ArgumentParser) -> None:
    _add_source(p, LEARNED_SOURCE_HELP)
    p.add_argument(
        "--length",
        "-n",
        type=_positive_int,
        required=True,
        metavar="N",
        help="usable positions of the new table (reserved rows come on top)",
    )
    p.add_argument(
        "--method",
        "-m",
        choices=METHODS,
        default="tile",
        help="tile (Longformer's copy, trained rows unchanged), linear or cubic interpolation; "
        "interpolate = linear (default: tile)",
    )
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="new checkpoint directory (must not exist)")
    p.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")


def _configure_convert(p: argparse.ArgumentParser) -> None:
    _add_source(p, LEARNED_SOURCE_HELP)
    _add_family(p)
    p.add_argument(
        "--out",
        "-o",
        required=True,
        metavar="PATH",
        help="output: a file ending in .safetensors (version 3) or .msgpack (version 2), or with --format orbax "
        "a directory (must not exist)",
    )
    p.add_argument(
        "--format",
        choices=("safetensors", "msgpack", "orbax"),
        default=None,
        help="safetensors (one file, the spec as JSON metadata; read without flax), msgpack (one file, "
        "flax.serialization's encoding) or orbax (an orbax.checkpoint directory, the spec as JSON metadata; "
        "restore it sharded onto a mesh); default: the --out file's suffix",
    )
    p.add_argument("--overwrite", action="store_true", help="replace PATH if it exists")


def _configure_tour(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", "-o", default="figures", metavar="DIR", help="directory for the PNG files (default: figures)"
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help=f"where the GPT-2-shaped checkpoint is built once (default: ${CACHE_ENV} or ~/.cache/flax-posenc)",
    )


COMMANDS: dict[str, Command] = {
    "inspect": Command(
        "report every position mechanism of SOURCE (table, RoPE, ALiBi, bias, grid, ...) and its limit",
        f"{PROG} inspect sinusoidal:1024:768\n  {PROG} inspect path/to/bert --json | jq .num_positions",
        _configure_inspect,
        cmd_inspect,
    ),
    "check": Command(
        "exit 0 if N positions (--length), an image (--image-size), audio (--seconds), boxes (--bbox-max) "
        "or time steps (--steps) fit, else exit 1 "
        "with one line naming the limit",
        f"{PROG} check path/to/gpt2 --length 1024     # exit 0\n  {PROG} check path/to/gpt2 --length 1025     # exit 1: 1 past the limit"
        f"\n  {PROG} check path/to/vit --image-size 448   # exit 1: the 14 x 14 grid must be resized (fp.resize_grid)",
        _configure_check,
        cmd_check,
    ),
    "plot": Command(
        "write PNG figures of SOURCE's mechanisms: heatmaps, waves, similarity vs offset, RoPE decay, ...",
        f"{PROG} plot sinusoidal:1024:768 --out figures --dims 0 1 50 100",
        _configure_plot,
        cmd_plot,
    ),
    "extend": Command(
        "write a checkpoint whose position table is extended to N positions (config updated)",
        f"{PROG} extend path/to/roberta --length 1024 --method tile --out roberta-1024   # 1026 rows",
        _configure_extend,
        cmd_extend,
    ),
    "convert": Command(
        "write the input block's Flax parameters and arguments to a .safetensors file or an orbax checkpoint",
        f"{PROG} convert path/to/bert --out bert-input.safetensors\n  {PROG} convert path/to/bert --out bert-orbax --format orbax",
        _configure_convert,
        cmd_convert,
    ),
    "families": Command(
        "list every model type read and its position mechanisms (and the known refusals)",
        f"{PROG} families\n  {PROG} families --json | jq 'keys | length'",
        _configure_families,
        cmd_families,
    ),
    "tour": Command(
        "inspect, check and plot the real BERT (512) and a GPT-2-shaped (1024) table",
        f"{PROG} tour --out figures",
        _configure_tour,
        cmd_tour,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, one subparser per entry of :data:`COMMANDS`."""
    parser = _Parser(
        prog=PROG,
        description=_description(),
        epilog=TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, command in COMMANDS.items():
        p = sub.add_parser(
            name,
            help=command.help,
            description=command.help[0].upper() + command.help[1:] + ".",
            epilog=f"example:\n  {command.example}\n\nexit codes: 0 ok, 1 limit exceeded, 2 bad input or usage, "
            "3 internal error",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(p)
        p.set_defaults(handler=command.handler)
    return parser


# The library's messages name Python arguments; on the command line, name the options instead.
_CLI_WORDS = (
    ("new_length: ", "--length: "),
    ("(pass overwrite=True / --overwrite)", "(pass --overwrite)"),
    ("(or overwrite=True)", "(or --overwrite)"),
    ("pass family=", "pass --family"),
    ("found family=", "found --family "),
)


def in_cli_words(message: str) -> str:
    """A library message with Python argument names replaced by the command line's options.

    >>> in_cli_words("new_length: expected an integer larger than the current 512 positions, got 100")
    '--length: expected an integer larger than the current 512 positions, got 100'
    """
    for python_words, cli_words in _CLI_WORDS:
        message = message.replace(python_words, cli_words)
    return message


def _report_error(where: str, kind: str, message: str, code: int, *, as_json: bool, debug: bool) -> int:
    """One line on stderr (or a JSON object on stdout with ``--json``); the traceback with ``--debug``."""
    message = in_cli_words(message)
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)
    if as_json:
        print(dumps_json({"error": message, "kind": kind, "exit_code": code, "command": where}))
    else:
        label = {"limit": "limit exceeded", "internal": "internal error"}.get(kind, "error")
        print(f"{where}: {label}: {message}", file=sys.stderr)
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again on the
    closed pipe ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is no file descriptor (a test's capture)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 ok, 1 limit exceeded, 2 bad input, 3 internal).

    ``--debug`` (anywhere) adds the traceback to any error; ``--json`` turns errors into JSON
    objects on stdout. No other exception escapes (Ctrl-C: exit 130).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    as_json = "--json" in argv
    command = "?"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = args.command
        if command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return args.handler(args)
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except BrokenPipeError:  # stdout's reader stopped reading: nothing to say, and no one to say it to
        _silence_stdout()
        return EXIT_PIPE
    except UsageError as exc:
        where = exc.prog or (f"{PROG} {command}" if command != "?" else PROG)
        return _report_error(where, "usage", _one_line(exc), EXIT_USAGE, as_json=as_json, debug=debug)
    except PositionLimitError as exc:
        return _report_error(f"{PROG} {command}", "limit", _one_line(exc), EXIT_LIMIT, as_json=as_json, debug=debug)
    except (CheckpointError, ValueError, OSError) as exc:
        return _report_error(f"{PROG} {command}", "bad_input", _one_line(exc), EXIT_USAGE, as_json=as_json, debug=debug)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        return _report_error(
            f"{PROG} {command}",
            "internal",
            f"out of memory (a size check missed this input; {REPORT})",
            EXIT_INTERNAL,
            as_json=as_json,
            debug=debug,
        )
    except Exception as exc:  # a bug: say so in one line, never a traceback unless --debug
        hint = "" if debug else "; rerun with --debug for the traceback"
        return _report_error(
            f"{PROG} {command}",
            "internal",
            f"{type(exc).__name__}: {_one_line(exc)[:300]} (a bug in flax-posenc; {REPORT}{hint})",
            EXIT_INTERNAL,
            as_json=as_json,
            debug=debug,
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
