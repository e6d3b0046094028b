"""The family, scheme and convention tables of the docs, written from the registries.

Each table lives in its page between two markers, ``<!-- generated: NAME -->`` and
``<!-- /generated -->``; what is between them is :func:`render` of ``NAME`` (one line naming
this script and the registry, then the table). The registries are the rows the code reads, so a
row added to one of them shows on its page once the script is run:

    python tools/docs_tables.py            # exit 1 and name every stale table
    python tools/docs_tables.py --write    # rewrite the tables in place

``tests/test_docs_tables.py`` and ``make docs`` fail while a table is stale. The RoPE scaling formulas are the one
column not read off a registry row (:data:`ROPE_FORMULAS`); a scaling type without one fails.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from collections.abc import Callable, Iterable

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMAND = "python tools/docs_tables.py --write"
START = "<!-- generated: {name} -->"
END = "<!-- /generated -->"
_BLOCK = re.compile(r"<!-- generated: ([\w-]+) -->\n(.*?)<!-- /generated -->", re.DOTALL)


def _code(text: str) -> str:
    return f"`{text}`"


def _types(model_types: Iterable[str]) -> str:
    return ", ".join(_code(t) for t in model_types)


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return lines


def learned_families() -> tuple[str, list[str]]:
    from flax_posenc.conversion.families import FAMILIES

    positions = {"index": "index", "non_padding_ids": "skip padding ids", "attention_mask": "from `attention_mask`"}

    def reserved(f) -> str:
        if f.offset_from_pad:
            return f"`pad_token_id + 1` ({f.offset} when it is {f.default_pad_token_id})"
        return str(f.offset)

    def limit(f) -> str:
        text = " or ".join(_code(n) for n in (f.length_field, *f.extra_length_fields))
        if f.offset:
            text += " (counts the reserved rows)" if f.length_counts_offset else " (rows - reserved rows)"
        return text

    def extras(f) -> str:
        out = []
        if f.token_type_key:
            out.append("token types")
        if f.layer_norm_key:
            out.append(f"LayerNorm `{f.layer_norm_key}` (eps {f.layer_norm_eps:g})")
        if f.embed_scale_flag:
            out.append(f"`sqrt(d_model)` scale when `{f.embed_scale_flag}`")
        out += [f"`{k.removesuffix('.weight')}` refused" for k in f.refuse_keys]
        out += [f"`{a}` != `{b}` refused" for a, b in f.refuse_unequal]
        return ", ".join(out)

    rows = [
        (
            f.name,
            _types(f.model_types),
            _code(f.position_key.removesuffix(".weight")),
            limit(f),
            reserved(f),
            positions.get(f.positions_from, f.positions_from),
            extras(f),
        )
        for f in FAMILIES.values()
    ]
    header = ("family", "model types", "position table", "limit field (config)", "reserved rows", "positions", "extras")
    return "`flax_posenc.conversion.families.FAMILIES`", _table(header, rows)


def position_tables() -> tuple[str, list[str]]:
    from flax_posenc.conversion.position_tables import TABLE_FAMILIES

    def field(t) -> str:
        text = _code(t.length_label)
        if t.offset_from_pad or t.offset:
            text += " (counts the reserved rows)" if t.length_counts_offset else " (rows - reserved rows)"
        return text

    def reserved(t) -> str:
        return f"`pad_token_id + 1` ({t.default_pad_token_id + 1} by default)" if t.offset_from_pad else str(t.offset)

    def note(t) -> str:
        out = []
        if t.present_flag:
            out.append(f"only when `{t.present_flag}`" + (" (default true)" if t.present_default else ""))
        if t.optional:
            out.append("read when present")
        return ", ".join(out)

    rows = [
        (t.name, _types(t.model_types), _code(t.key_suffix.removesuffix(".weight")), field(t), reserved(t), note(t))
        for t in TABLE_FAMILIES.values()
    ]
    header = ("row", "model types", "position table", "limit field (config)", "reserved rows", "note")
    return "`flax_posenc.conversion.position_tables.TABLE_FAMILIES`", _table(header, rows)


def mechanism_kinds() -> tuple[str, list[str]]:
    from flax_posenc.conversion.mechanisms import MECHANISMS

    def registries(k) -> str:
        return ", ".join(_code(r.removeprefix("flax_posenc.conversion.")) for r, _ in k.registries) or "read with RoPE"

    rows = [
        (
            name,
            k.summary,
            k.limit_unit,
            k.tower,
            ", ".join(_code(t.__name__) for t in k.record_types),
            registries(k),
            k.figures or "none",
        )
        for name, k in MECHANISMS.items()
    ]
    header = ("kind", "what", "limit counts", "tower", "records", "registries", "figures")
    return "`flax_posenc.conversion.mechanisms.MECHANISMS`", _table(header, rows)


def rope_alibi_families() -> tuple[str, list[str]]:
    from flax_posenc.conversion.relative_config import RELATIVE_FAMILIES

    def limit(r) -> str:
        fields = " or ".join(_code(n) for n in r.limit_fields) or "none"
        return fields + (f" (default {r.limit_default})" if r.limit_default is not None and r.limit_fields else "")

    def note(r) -> str:
        out = []
        if r.alibi_flag:
            out.append(f"ALiBi when `{r.alibi_flag}`")
        if r.per_layer_type:
            out.append("per-layer-type `rope_parameters`")
        if r.layer_theta_field:
            what = "RoPE on or off" if r.layer_theta_is_flag else "theta"
            out.append(f"per-layer {what} (`{r.layer_theta_field}`, 0: NoPE)")
        if r.rope_head_dim_field:
            out.append(f"rotary head `{r.rope_head_dim_field}` (MLA)")
        if r.text_config_field:
            out.append(f"read from `{r.text_config_field}`")
        if r.rotary_dim_field:
            out.append(f"`{r.rotary_dim_field}` rotated dims")
        if r.head_dim_default is not None:
            out.append(f"head width `{r.head_dim_field}` (default {r.head_dim_default})")
        if r.rope_head_share:
            out.append(f"rotary head `{r.head_dim_field}` (MLA), `partial_rotary_factor` its share of `head_dim`")
        if r.layout_flag:
            out.append(f"interleaved when `{r.layout_flag}`")
        if r.layer_types_rule:
            out.append(f"layer list as transformers derives it (`{r.layer_types_rule}`)")
        if r.rope_layer_rule:
            out.append(f"RoPE layers by the model's rule (`{r.rope_layer_rule}`), NoPE elsewhere")
        return ", ".join(out)

    rows = [
        (r.name, r.scheme, r.layout if r.scheme != "alibi" else "", _types(r.model_types), limit(r), note(r))
        for r in RELATIVE_FAMILIES.values()
    ]
    header = ("row", "scheme", "layout", "model types", "limit field (config)", "note")
    return "`flax_posenc.conversion.relative_config.RELATIVE_FAMILIES`", _table(header, rows)


#: what each scaling type does to the frequencies and the attention factor (``w_i = theta ** (-2i / r)``,
#: ``L`` the sequence length): prose, not a registry field; every ``ROPE_SCALINGS`` row needs one.
ROPE_FORMULAS = {
    "default": ("`w`", "1"),
    "linear": ("`w / factor` (position interpolation)", "1"),
    "dynamic": ("base `theta * (factor * L / max - (factor - 1)) ** (r / (r - 2))` once `L > max`", "1"),
    "yarn": (
        "per-frequency ramp between `w` and `w / factor` (`beta_fast` 32, `beta_slow` 1, `truncate`)",
        "`0.1 ln(factor) + 1` (or the `mscale`/`mscale_all_dim` ratio, or `attention_factor`)",
    ),
    "llama3": ("long wavelengths `/ factor`, short kept, smooth band between", "1"),
    "longrope": (
        "`w / short_factor` or `w / long_factor` once `L > original`",
        "`sqrt(1 + ln(factor) / ln(original))`",
    ),
    "proportional": ("`int(partial_rotary_factor * r / 2)` frequencies `w`, the rest zero (no rotation)", "1"),
}


def rope_scalings() -> tuple[str, list[str]]:
    from flax_posenc.rope_config import ROPE_SCALINGS

    missing = sorted(set(ROPE_SCALINGS) - set(ROPE_FORMULAS))
    if missing:
        raise SystemExit(f"tools/docs_tables.py: ROPE_FORMULAS has no line for the scaling type(s) {missing}")

    def limit(s) -> str:
        if s.no_limit is not None:
            return "none (rescales for any `L`)"
        if s.trained_length_field is None:
            return "`max_position_embeddings`"
        return f"`factor * {s.trained_length_field}`" if s.uses_factor else _code(s.trained_length_field)

    rows = [
        (
            _code(name),
            ", ".join(_code(k) for k in s.required) or "none",
            *ROPE_FORMULAS[name],
            limit(s),
            "yes" if s.needs_length else "",
        )
        for name, s in ROPE_SCALINGS.items()
    ]
    header = ("`rope_type`", "required parameters", "frequencies", "attention factor", "limit", "needs `seq_len`")
    return "`flax_posenc.rope_config.ROPE_SCALINGS`", _table(header, rows)


def relative_bias_families() -> tuple[str, list[str]]:
    from flax_posenc.conversion.relative_bias import RELATIVE_BIAS_FAMILIES

    def buckets(b) -> str:
        if b.num_buckets is None:
            return "`relative_attention_num_buckets`, `relative_attention_max_distance`"
        return f"always {b.num_buckets} buckets, max_distance {b.max_distance}"

    rows = [
        (
            b.name,
            _types(b.model_types),
            ", ".join(b.keys),
            "per layer" if b.per_layer else "layer 0, shared",
            buckets(b),
        )
        for b in RELATIVE_BIAS_FAMILIES.values()
    ]
    header = ("row", "model types", "stacks", "bias table", "buckets (config)")
    return "`flax_posenc.conversion.relative_bias.RELATIVE_BIAS_FAMILIES`", _table(header, rows)


def _resampling(c) -> str:
    if c.kernel == "bucket":
        return "nearest below (bucketed fractions, float32)"
    kernel = "bicubic" if c.kernel == "cubic" else "bilinear"
    parts = [kernel] + ([f"`a = {c.a:g}`"] if c.kernel == "cubic" else [])
    parts.append(f"`align_corners={c.align_corners}`")
    if c.antialias:
        parts.append("`antialias=True`")
    if c.scale_offset is not None:
        parts.append(f"`scale_factor=(new + {c.scale_offset:g}) / old`")
    return ", ".join(parts)


def grid_families() -> tuple[str, list[str]]:
    from flax_posenc.conversion.grid_tables import GRID_FAMILIES
    from flax_posenc.grid_config import GRID_CONVENTIONS

    rows = [
        (
            _types(g.model_types),
            _code(f"{g.key_suffix}") + (f" (in `{g.config_section}`)" if g.config_section else ""),
            f"`{g.prefix_field}`" if g.prefix_field else str(g.prefix_tokens),
            f"`{g.convention}`: {_resampling(GRID_CONVENTIONS[g.convention])}",
            "by default" if g.resizes_itself else "when asked" if g.interpolation else "never",
        )
        for g in GRID_FAMILIES.values()
    ]
    header = ("model type", "tensor", "prefix rows", "resized as (`interpolate_pos_encoding`)", "model resizes")
    return "`flax_posenc.conversion.grid_tables.GRID_FAMILIES`", _table(header, rows)


def grid_conventions() -> tuple[str, list[str]]:
    from flax_posenc.grid_config import GRID_CONVENTIONS, MODEL_TYPE_CONVENTIONS

    def aliases(name: str) -> str:
        return ", ".join(_code(a) for a, target in MODEL_TYPE_CONVENTIONS.items() if target == name)

    rows = [(_code(c.name), aliases(c.name), _resampling(c), c.reference) for c in GRID_CONVENTIONS.values()]
    header = ("convention", "also named (`convention=`)", "resampling", "reproduces")
    return "`flax_posenc.grid_config.GRID_CONVENTIONS`", _table(header, rows)


def rope_audit() -> tuple[str, list[str]]:
    import runpy

    audit = runpy.run_path(str(ROOT / "benchmarks" / "rope_audit.py"))["audit"]
    version, read, unread = audit()
    lines = [
        f"- transformers {version}: {len(read) + len(unread)} model directories with RoPE or ALiBi",
        f"- read ({len(read)}): {', '.join(read)}",
        f"- not read ({len(unread)}): {', '.join(unread)}",
    ]
    return "`RELATIVE_FAMILIES` and the installed transformers (`benchmarks/rope_audit.py`)", lines


#: table name -> (page, renderer returning (registry, table lines))
TABLES: dict[str, tuple[str, Callable[[], tuple[str, list[str]]]]] = {
    "mechanism-kinds": ("docs/conversion.md", mechanism_kinds),
    "learned-families": ("docs/conversion.md", learned_families),
    "position-tables": ("docs/conversion.md", position_tables),
    "rope-alibi-families": ("docs/rope-alibi.md", rope_alibi_families),
    "rope-scalings": ("docs/rope-alibi.md", rope_scalings),
    "rope-audit": ("docs/rope-alibi.md", rope_audit),
    "relative-bias-families": ("docs/relative-bias.md", relative_bias_families),
    "grid-families": ("docs/vision-audio.md", grid_families),
    "grid-conventions": ("docs/vision-audio.md", grid_conventions),
}


def render(name: str) -> str:
    """What stands between ``name``'s markers: the source line, a blank line, the table."""
    registry, lines = TABLES[name][1]()
    return "\n".join([f"<!-- from {registry} by `{COMMAND}` -->", "", *lines, "", ""])


def rewrite(text: str, page: str) -> str:
    """``text`` (a page) with every generated block rendered anew; an unknown name is an error."""

    def block(m: re.Match) -> str:
        name = m.group(1)
        if name not in TABLES or TABLES[name][0] != page:
            raise SystemExit(f"{page}: generated block {name!r} is not one of {page}'s tables in tools/docs_tables.py")
        return START.format(name=name) + "\n" + render(name) + END

    return _BLOCK.sub(block, text)


def stale(root: pathlib.Path = ROOT) -> list[str]:
    """One line per table that is missing from its page or differs from its registry."""
    problems = []
    for page in sorted({p for p, _ in TABLES.values()}):
        text = (root / page).read_text(encoding="utf-8")
        found = _BLOCK.findall(text)
        names = [n for n, _ in found]
        for name, (where, _) in TABLES.items():
            if where == page and names.count(name) != 1:
                problems.append(f"{page}: needs exactly one `{START.format(name=name)}` ... `{END}` block")
        for name, body in found:
            if name in TABLES and TABLES[name][0] == page and body != render(name):
                problems.append(f"{page}: table {name!r} is stale: run `{COMMAND}`")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables in their pages")
    args = parser.parse_args(argv)
    if args.write:
        for page in sorted({p for p, _ in TABLES.values()}):
            path = ROOT / page
            text = path.read_text(encoding="utf-8")
            new = rewrite(text, page)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(f"wrote {page}")
    problems = stale()
    print("\n".join(problems) or f"every generated table is current ({len(TABLES)} tables)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
