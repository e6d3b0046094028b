"""Which transformers model types flax-posenc reads: writes docs/coverage.md.

Walks every model type in the pinned transformers' ``CONFIG_MAPPING``: *read* (a row of the
model registry, :data:`flax_posenc.conversion.models.MODEL_MECHANISMS`, each verified against a
tiny checkpoint of its own transformers classes by ``tests/test_conformance.py``), *free of
positions* (read, kind ``none``), *refused* with the mechanism not read named
(``REFUSED_MODEL_TYPES``, ``unread_mechanisms.UNREAD_MECHANISMS``) or *unbuildable* here (with
transformers' error), counted by modality; a type that is none of these stops the page.

    python benchmarks/coverage.py                 # print the page
    python benchmarks/coverage.py --write-docs    # write docs/coverage.md and README.md's counts
    python benchmarks/coverage.py --verify        # run the conformance check of every read type and
                                                  # record the result (benchmarks/results/coverage-verify.json)
    python benchmarks/coverage.py --verify --write-docs   # both: the page's "read wrong" count from this run

``tests/test_coverage_page.py`` fails when docs/coverage.md or the counts in README.md (between
``<!-- generated: coverage-counts -->`` and ``<!-- /generated -->``) are stale.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conformance.catalog import all_model_types, composite_read, composite_towers, modality, text_kind  # noqa: E402

from flax_posenc.conversion.mechanisms import MECHANISMS  # noqa: E402
from flax_posenc.conversion.models import HEAD_TOWER_FIELDS, MODEL_MECHANISMS, REFUSED_MODEL_TYPES  # noqa: E402
from flax_posenc.conversion.unread_mechanisms import UNBUILDABLE_MODEL_TYPES, UNREAD_MECHANISMS  # noqa: E402

PAGE = ROOT / "docs" / "coverage.md"
#: What the last ``--verify`` found: the transformers version, every model type checked, and the
#: problems of each read wrong. The page's "read wrong" count is read from it.
VERIFIED = ROOT / "benchmarks" / "results" / "coverage-verify.json"
README = ROOT / "README.md"
_COUNTS = re.compile(r"(<!-- generated: coverage-counts -->)(.*?)(<!-- /generated -->)", re.DOTALL)


def readme_counts() -> str:
    """The counts README.md quotes: model types read, of transformers' and of its text model types."""
    import transformers

    types = all_model_types()
    text = [t for t in types if text_kind(t) is None]
    composite = [t for t in types if composite_read(t)]
    read = [t for t in types if t in MODEL_MECHANISMS] + composite
    read_text = [t for t in text if t in MODEL_MECHANISMS]
    return (
        f"{len(read)} of transformers {transformers.__version__}'s ({len(composite)} composite, read as their towers), "
        f"{len(read_text)} of its {len(text)} text model types"
    )


def with_counts(readme: str, counts: str) -> str:
    """``readme`` with the text between its coverage-counts markers replaced by ``counts``."""
    new, n = _COUNTS.subn(lambda m: m.group(1) + counts + m.group(3), readme)
    if n != 1:
        raise SystemExit(f"{README}: needs exactly one coverage-counts block, found {n}")
    return new


def _tower_fields() -> str:
    """The sub-config fields read as towers of a composite (not a head's ``backbone_config``)."""
    from flax_posenc.conversion.models import HEAD_TOWER_FIELDS, TOWER_FIELDS

    return ", ".join(f"`{field}`" for field in TOWER_FIELDS if field not in HEAD_TOWER_FIELDS)


def mechanism_kinds() -> list[str]:
    """The section listing every kind of :data:`~flax_posenc.conversion.mechanisms.MECHANISMS`."""
    lines = [
        "## Mechanism kinds",
        "",
        "| kind | what | limit counts | model types read | registries |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, kind in MECHANISMS.items():
        read = sum(1 for rows in MODEL_MECHANISMS.values() if any(k == name for k, _ in rows))
        registries = ", ".join(f"`{r.rsplit('.', 1)[-1]}`" for r, _ in kind.registries) or "(read with another kind)"
        lines.append(f"| `{name}` | {kind.summary} | {kind.limit_unit} | {read} | {registries} |")
    return [*lines, ""]


def _verified_line(read_text: list[str]) -> list[str]:
    """The "read wrong" line: from the last ``--verify`` run (:data:`VERIFIED`), never assumed."""
    import json

    if not VERIFIED.is_file():
        return ["- text model types read wrong: **not verified** (run `python benchmarks/coverage.py --verify`)"]
    result = json.loads(VERIFIED.read_text())
    checked, wrong = set(result["checked"]), result["read_wrong"]
    wrong_text = sorted(t for t in wrong if t in read_text)
    unchecked = sorted(set(read_text) - checked)
    names = f": {', '.join(f'`{t}`' for t in wrong_text)}" if wrong_text else ""
    lines = [
        f"- text model types read wrong: **{len(wrong_text)}**{names} (of the {len(set(read_text) & checked)} "
        f"checked by `python benchmarks/coverage.py --verify` against transformers {result['transformers']})"
    ]
    if unchecked:
        lines.append(f"- read but not checked since the last `--verify`: {', '.join(f'`{t}`' for t in unchecked)}")
    return lines


def position_free(model_type: str) -> bool:
    """Whether ``model_type`` is read as free of positions: its only mechanisms are of kind ``none``,
    and so are its default backbone's (``backbone_config``: Depth Anything's DINOv2 grid makes it read)."""
    rows = MODEL_MECHANISMS.get(model_type, ())
    if not rows or any(kind != "none" for kind, _ in rows):
        return False
    backbones = [tower for field, tower in composite_towers(model_type) or () if field in HEAD_TOWER_FIELDS]
    return all(position_free(b) for b in backbones)


#: The statuses every model type has exactly one of, in the order the page counts them.
STATUSES = ("read", "free of positions", "refused", "unbuildable")


def status(model_type: str) -> str:
    """``read`` (a row of the registry with a position mechanism, or a composite read as its towers),
    ``free of positions`` (read: kind ``none`` only), ``refused`` (the mechanism not read is named:
    ``REFUSED_MODEL_TYPES`` or ``UNREAD_MECHANISMS``) or ``unbuildable`` (transformers' error).

    Raises:
      SystemExit: ``model_type`` is none of these (the page cannot be written until it is).
    """
    if model_type in MODEL_MECHANISMS:
        return "free of positions" if position_free(model_type) else "read"
    if composite_read(model_type):
        return "read"
    if model_type in REFUSED_MODEL_TYPES or model_type in UNREAD_MECHANISMS:
        return "refused"
    if model_type in UNBUILDABLE_MODEL_TYPES:
        return "unbuildable"
    raise SystemExit(
        f"{model_type}: expected a model type read, free of positions, refused or unbuildable; found none "
        f"(add its row, or run `python tools/unread_mechanisms.py --scan {model_type} --write`)"
    )


def why_not(model_type: str) -> str:
    """The mechanism not read (refused) or transformers' error (unbuildable), one line."""
    if model_type in REFUSED_MODEL_TYPES:
        return REFUSED_MODEL_TYPES[model_type]
    if model_type in UNREAD_MECHANISMS:
        return UNREAD_MECHANISMS[model_type]
    return f"cannot be built here: {UNBUILDABLE_MODEL_TYPES[model_type]}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def modality_counts(types: list[str], statuses: dict[str, str], modalities: dict[str, str]) -> list[str]:
    """The table of statuses by modality (and the totals)."""
    order = ["text", "vision", "audio", "video", "multimodal", "time series", "other"]
    present = [m for m in order if m in modalities.values()] + sorted(set(modalities.values()) - set(order))
    lines = [
        "| modality | model types | " + " | ".join(STATUSES) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in STATUSES) + " |",
    ]
    for label in [*present, "all"]:
        of = [t for t in types if label == "all" or modalities[t] == label]
        counts = [sum(1 for t in of if statuses[t] == s) for s in STATUSES]
        name = "**all**" if label == "all" else label
        lines.append(f"| {name} | {len(of)} | " + " | ".join(str(c) for c in counts) + " |")
    return lines


def render() -> str:
    """The page, from the registry, the refusals, transformers' own catalog and the last ``--verify``
    result (:data:`VERIFIED`; no model is built)."""
    import transformers

    types = all_model_types()
    kinds = {t: text_kind(t) for t in types}
    modalities = {t: modality(t) for t in types}
    statuses = {t: status(t) for t in types}
    text = [t for t in types if kinds[t] is None]
    read_text = [t for t in text if t in MODEL_MECHANISMS]
    composite = {t for t in types if kinds[t] is not None and composite_read(t)}
    read_other = [t for t in types if kinds[t] is not None and (t in MODEL_MECHANISMS or t in composite)]
    free = [t for t in types if position_free(t)]
    free_text = [t for t in free if kinds[t] is None]
    counts = {s: sum(1 for t in types if statuses[t] == s) for s in STATUSES}
    lines = [
        "# Coverage: the model types flax-posenc reads",
        "",
        f"Generated by `python benchmarks/coverage.py --write-docs` against transformers {transformers.__version__};",
        "`tests/test_coverage_page.py` fails when this page is stale. A model type is *read* when it is a row of",
        "the model registry (`flax-posenc families`); every read type is checked by `tests/test_conformance.py`",
        "against a tiny random checkpoint built by its own transformers classes: the limit (enforced by a",
        "forward pass for learned tables, declared `max_position_embeddings` for RoPE) and the values (table rows",
        "bit-equal; RoPE `inv_freq` within 4 float32 ulps, attention scaling, cos/sin of the model's own rotary",
        "module within float32 rounding of its angle).",
        "",
        "How a RoPE type is checked, layer by layer: the tiny model's forward pass runs once (7 tokens) with every",
        "rotation function of its modeling files wrapped; for each decoder layer that ran, a layer that rotates",
        "where `rope_for_layer` gives NoPE, or does not where it gives RoPE, fails the case, and every `q`/`k` the",
        "attention rotated is compared with `apply_rope_qk` under that layer's `RopeConfig` (layout, head and",
        "rotary width; 1e-5 relative, or the same `q.k` products when the modeling file lists the pairs in",
        "another order). A rotary module with a trainable parameter, or any parameter named for positions",
        'that no reported mechanism reads, fails the case ("position parameters not read"). A type whose',
        "mechanism is not read is *refused* with that mechanism named.",
        "",
        "## Every model type accounted for",
        "",
        f"Each of the **{len(types)}** model types of transformers {transformers.__version__} has one status:",
        "",
        "- *read*: its position mechanisms are rows of the registry (or, a composite type, every tower is), each",
        "  checked by its conformance case;",
        "- *free of positions*: declared without any position encoding (kind `none`: recurrent, state-space or",
        "  convolutional), its conformance case checking that the tiny model built by its own class holds no",
        "  position table, buffer, rotary module or relative bias (for a convolutional model the claim is only",
        "  that: where a pixel or a frame is still enters through the convolutions' receptive field and padding);",
        "- *refused*: the mechanism it has that is not read is named (`REFUSED_MODEL_TYPES`, and",
        "  `flax_posenc/conversion/unread_mechanisms.py`, derived by `python tools/unread_mechanisms.py` from the",
        "  position modules and tensors of the model transformers builds; a composite type names its towers",
        "  that are not read); `flax-posenc inspect` and `check` give that line;",
        "- *unbuildable*: transformers cannot build it here (neither a tiny config nor its default one), with its error.",
        "",
        "The modality comes from transformers' Auto mappings (`MODEL_FOR_<TASK>_MAPPING_NAMES`: image-text-to-text",
        "and multimodal tasks are *multimodal*, then video, time series, audio and image tasks); a type no task",
        "mapping names (a tower or part of a composite model) by the words of its name",
        "(`tests/conformance/catalog.py: modality`).",
        "",
        *modality_counts(list(types), statuses, modalities),
        "",
        f"- read: **{counts['read'] + counts['free of positions']}** ({counts['read']} with a position mechanism,"
        f" {counts['free of positions']} free of positions); refused with the mechanism named:"
        f" **{counts['refused']}**; unbuildable here: **{counts['unbuildable']}**",
        f"- text model types read: **{len(read_text)}** of {len(text)}",
        *_verified_line(read_text),
        f"- other model types read: {len(read_other)}, of which {len(composite)} composite types read as their towers",
        f"- free of positions: {len(free)} ({len(free_text)} text, {len(free) - len(free_text)} other)",
        "",
        "A *text model type* is one whose AutoModel takes `input_ids` first, whose config has no sub-configs,",
        "and which is in none of transformers' image, audio, video or multimodal Auto mappings",
        "(`tests/conformance/catalog.py`).",
        "",
        "A *composite* model type (its config has sub-configs) that is not a row of the registry is read as its",
        f"towers when every sub-config is a tower ({_tower_fields()}) whose model type",
        "is read (the tower types come from the config class's defaults, `tests/conformance/catalog.py`);",
        "`tests/test_conformance.py` builds each such type with its own transformers class (tiny sub-configs) and",
        "checks every tower's mechanisms against that tower's own module, as for the tower's model type.",
        "A `backbone_config` (the ResNet, Swin or DINOv2 under a detection, segmentation or depth head) is the",
        "`backbone` tower: read beside the head's own rows (DETR, UperNet, Depth Anything), never instead of them,",
        "so a head whose own mechanism is not read (Mask2Former's sine embedding) stays refused over a read ResNet.",
        "A checkpoint whose towers are only partly read is reported with its unread towers named, never as read.",
        "",
        *mechanism_kinds(),
        "## Text model types",
        "",
        "Mechanisms are written `KIND:FAMILY`: the kind (above) and the row of its registry that reads it.",
        "",
        "| model type | status | mechanisms, or the mechanism not read |",
        "| --- | --- | --- |",
    ]
    for t in text:
        if t in MODEL_MECHANISMS:
            mech = " + ".join(f"{r}:{f}" for r, f in MODEL_MECHANISMS[t])
            lines.append(f"| `{t}` | {statuses[t]} | {mech} |")
        else:
            lines.append(f"| `{t}` | {statuses[t]} | {_cell(why_not(t))} |")
    lines += [
        "",
        "## Other model types",
        "",
        "| model type | modality | status | mechanisms, or the mechanism not read | why not a text model type |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in types:
        if kinds[t] is None:
            continue
        shown = statuses[t]
        if t in MODEL_MECHANISMS:
            mech = " + ".join(f"{r}:{f}" for r, f in MODEL_MECHANISMS[t])
        elif t in composite:
            mech = ""
            shown = "read (towers: " + ", ".join(f"{f.split('_')[0]} `{m}`" for f, m in composite_towers(t) or ()) + ")"
        else:
            mech = _cell(why_not(t))
        lines.append(f"| `{t}` | {modalities[t]} | {shown} | {mech} | {kinds[t]} |")
    return "\n".join(lines) + "\n"


def verify() -> dict[str, list[str]]:
    """``conformance_problems`` of every read model type that transformers registers (an exception
    is a problem too), recorded in :data:`VERIFIED`."""
    import json

    import transformers
    from conformance.reference import conformance_problems

    out = {}
    for t in sorted(set(MODEL_MECHANISMS) & set(all_model_types())):
        with tempfile.TemporaryDirectory() as d:
            try:
                out[t] = conformance_problems(t, pathlib.Path(d))
            except Exception as e:  # noqa: BLE001 - a case that cannot run is a case read wrong
                out[t] = [f"the conformance case raised {type(e).__name__}: {e}"[:300]]
    result = {
        "transformers": transformers.__version__,
        "checked": sorted(out),
        "read_wrong": {t: p for t, p in out.items() if p},
    }
    VERIFIED.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    parser.add_argument("--verify", action="store_true", help="run the conformance check of every read type")
    args = parser.parse_args()
    wrong: dict[str, list[str]] = {}
    if args.verify:
        wrong = {t: p for t, p in verify().items() if p}
        for t, problems in wrong.items():
            print(f"read wrong: {t}: {problems}")
        print(f"verified: {len(wrong)} read wrong (recorded in {VERIFIED.relative_to(ROOT)})")
    page = render()
    if args.write_docs:
        PAGE.write_text(page)
        README.write_text(with_counts(README.read_text(), readme_counts()))
        print(f"wrote {PAGE} and the counts in {README}")
    elif not args.verify:
        print(page)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
