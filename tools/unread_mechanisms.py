"""Derive ``flax_posenc/conversion/unread_mechanisms.py``: every model type not read, with the
position mechanism it has that the library does not read (or why it cannot be built here).

Two steps, so that the slow one runs once:

    python tools/unread_mechanisms.py --scan     # build every unread type on the meta device
                                                 # (its tiny config, else its default one) and record
                                                 # its position modules and tensors and any error in
                                                 # benchmarks/results/unread-scan.json (minutes)
    python tools/unread_mechanisms.py --write    # write the data module from that scan, the
                                                 # hand-checked lines in MANUAL and the registry

What the scan looks for, in the model transformers builds (not in the file's text, so that a
class defined but unused does not count): module classes named for positions (``CLASS_WORDS``:
RotaryEmbedding, PositionEmbeddingSine, RelPositionalEncoding, PositionalConvEmbedding, ...) and
parameters or buffers named for them (``NAME_WORDS``: relative_position_bias_table, rel_pos_h,
pos_conv_embed, position_embeddings, inv_freq, wpe, ...). :func:`mechanism_line` turns them into one
line naming the mechanism and the class or tensor it was found in; a type where nothing is found,
or where the finding needs reading, has its line in :data:`MANUAL` (each checked by reading its
modeling file). Composite types (``sub_configs``) are listed with the towers that are not read.

A type is *unbuildable* when neither its tiny config nor its default config builds here; its
line is transformers' own error (a missing optional dependency, a config that needs a field).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import signal
import sys
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

SCAN = ROOT / "benchmarks" / "results" / "unread-scan.json"
MODULE = ROOT / "flax_posenc" / "conversion" / "unread_mechanisms.py"

#: Module class names that suggest a position mechanism.
CLASS_WORDS = re.compile(
    r"Rotary|Rope|RoPE|Position|Positional|PosEmb|PosEnc|RelPos|Sinusoid|Relative|Axial|Fourier|Bucket|Sine",
)
#: Parameter and buffer names that suggest a position mechanism.
NAME_WORDS = re.compile(
    r"position|(^|[._])(pos|rel)_|pos_embed|rotary|relative|sinusoid|inv_freq|row_embed|col_embed|bbox|freqs"
    r"|(^|\.)wpe\.|embed_timestep|attention_biases|distance_embedding|time_embed|level_embed|query_pos",
    re.IGNORECASE,
)

#: Hand-checked lines (each from reading the model type's modeling file in transformers 5.24.0):
#: where the scan finds nothing (the position enters without a tensor named for it, or only in
#: a config the default does not build), or where its finding needs a better name.
MANUAL: dict[str, str] = {
    "apertus1p5_vision_tokenizer": "not verified: a vision tokenizer with no position tensor found, not declared without a conformance case",
    "beit": "BEiT relative position bias (BeitRelativePositionBias: use_relative_position_bias / use_shared_relative_position_bias) and absolute embeddings (use_absolute_position_embeddings)",
    "data2vec-vision": "BEiT relative position bias (Data2VecVisionRelativePositionBias: use_relative_position_bias / use_shared_relative_position_bias) and absolute embeddings (use_absolute_position_embeddings)",
    "blip_2_qformer": "the Q-Former's learned query tokens (query_tokens of its BLIP-2 model) beside a text position table (blip_2_qformer is read only within BLIP-2)",
    "decision_transformer": "Decision Transformer's learned timestep table (embed_timestep, max_ep_len rows) and its GPT-2 position table (wpe)",
    "flava_multimodal_model": "FLAVA's multimodal encoder takes its image and text towers' states: their position tables (flava_image_model, flava_text_model) are not read",
    "florence_vision": "Florence-2's DaViT vision tower: learned 2-D absolute positions (Florence2VisionLearnedAbsolutePositionEmbedding2D) and 1-D cosine positions (Florence2VisionPositionalEmbeddingCosine1D) of its projector",
    "idefics2_perceiver": "the perceiver resampler's learned latents (read only within Idefics 2)",
    "imagegpt": "ImageGPT's learned position table (wpe) over pixels",
    "levit": "LeViT attention biases indexed by relative offset (attention_biases, attention_bias_idxs)",
    "moshi_depth": "Moshi's depth decoder: per-codebook weights (MoshiFlexibleLinear: one weight per position in the codebook sequence)",
    "patchtsmixer": "PatchTSMixer's optional positional encoding (use_positional_encoding: PatchTSMixerPositionalEncoding, sincos or random) over patches",
    "perceiver": "Perceiver's position encodings of its preprocessors (PerceiverTrainablePositionEncoding, PerceiverFourierPositionEncoding)",
    "timesfm": "TimesFM's sinusoidal position embedding over patches (TimesFmPositionalEmbedding: computed per call, no buffer)",
    "videomae": "VideoMAE's fixed sinusoid table (get_sinusoid_encoding_table: a plain tensor, not a buffer)",
    "vjepa2": "V-JEPA 2's 3-D rotary attention (VJEPA2RopeAttention: depth, height and width frequencies computed per call)",
    "wav2vec2-bert": "wav2vec2-BERT's relative positions (position_embeddings_type: relative_key distance_embedding, relative, or rotary)",
    "timm_backbone": "a timm model: its positions depend on the timm architecture it wraps, which is not read",
    "timm_wrapper": "a timm model: its positions depend on the timm architecture it wraps, which is not read",
    "sam3_detr_encoder": "SAM 3's DETR encoder: 2-D sine positions passed in by the SAM 3 model (Sam3SinePositionEmbedding), not read",
    "sam3_lite_text_detr_encoder": "SAM 3's DETR encoder: 2-D sine positions passed in by the SAM 3 model (Sam3LiteTextSinePositionEmbedding), not read",
    "sam3_mask_decoder": "SAM 3's mask decoder: positions passed in by the SAM 3 model, not read",
    "sam3_lite_text_mask_decoder": "SAM 3's mask decoder: positions passed in by the SAM 3 model, not read",
    "uvdoc_backbone": "not verified: UVDoc's convolutional backbone, not declared without a conformance case",
    "wavtokenizer_encoder": "not verified: WavTokenizer's convolutional encoder, not declared without a conformance case",
}

# ---- issue 35 item 7: ViT-style grids the grid kind does not describe (each read in its modeling file, 5.24.0)
MANUAL.update(
    {
        "vitpose_backbone": "learned patch-position grid whose first row is added to every patch (no class token, "
        "embeddings.position_embeddings[:, :1]): not a prefix row of the grid kind",
        "yolos": "learned patch-position grid with detection-token rows after the grid (num_detection_tokens) and "
        "per-layer mid position embeddings (use_mid_position_embeddings), both resized by its forward",
        "radio": "cropped position embedding (CPE: the learned grid resized bilinearly to a square of the longer side, "
        "then cropped): not a per-axis grid convention",
        "sam2_hiera_det_model": "a learned (dim, h, w) background grid resized bicubically to the feature map plus a "
        "tiled window table (pos_embed, pos_embed_window)",
        "pvt": "one learned position table per stage (patch_embeddings.position_embeddings, four grids of different "
        "sizes), the last with a class row",
        "vivit": "learned 3-D tubelet-position table (class row + frames x height x width, "
        "embeddings.position_embeddings): the grid kind has no time axis",
        "timesformer": "learned patch-position grid (embeddings.position_embeddings) resized by nearest neighbour, "
        "plus a learned frame-position table (embeddings.time_embeddings) resized by nearest neighbour",
        "videoprism_vision_model": "factorized video positions: a learned spatial grid and a learned temporal table "
        "(spatial_embeddings / temporal_embeddings.position_embeddings), each resized by its forward",
        "hunyuan_vl_vision": "learned patch-position grid (max_image_size / patch) resized per packed image "
        "(grid_thw) by interpolate_mode, its class row never added (variable resolution)",
        "hy_v4_vl_vision": "learned patch-position grid (max_image_size / patch) resized per packed image "
        "(grid_thw) by interpolate_mode, its class row never added (variable resolution)",
        "glm_image_vision": "learned patch-position grid sampled per packed image at its patch coordinates "
        "(F.grid_sample bilinear, border): variable resolution",
        "cosmos3_edge_vision": "learned patch-position grid (num_patches) resized per packed image and frame "
        "(grid_thw, bilinear, antialiased) then reordered by spatial_merge_size: variable resolution (NaFlex-style)",
    }
)

# issue 36: the refused types of the learned-table and sinusoid lines that stay refused, named precisely
_CHUNKED = (
    "Whisper-style sinusoids (SinusoidsPositionEmbedding) restarted in every chunk of n_window * 2 mel frames "
    "(a position within the chunk, no limit on the audio): not read"
)
MANUAL.update(
    {
        "tapas": "TAPAS's learned table indexed within each table cell (reset_position_index_per_cell, its default: "
        "the index restarts per cell, a longer sequence runs): not read",
        "canary_decoder": "Canary's decoder: a fixed sinusoid buffer with NeMo's timescales (10000 ** ((d - 2) / d)) "
        "scaled by 1 / sqrt(d) (CanaryPositionalEmbedding, max_position_embeddings rows): not read",
        "fun_asr_nano_encoder": "FunASR-Nano's encoder: Whisper-style sinusoids counted from row 1 over its "
        "low-frame-rate features (FunAsrNanoPositionEmbedding): not read",
        "rag": "RAG: the learned tables of its DPR question encoder and BART generator (question_encoder / generator "
        "sub-configs, not read as towers)",
        "audio-spectrogram-transformer": "AST's learned table over its overlapping spectrogram patches plus 2 tokens "
        "(embeddings.position_embeddings, 2 + f * t rows for exactly max_length frames): not read",
        "qwen2_5_omni_audio_encoder": _CHUNKED,
        "qwen3_asr_encoder": _CHUNKED,
        "qwen3_omni_moe_audio_encoder": _CHUNKED,
    }
)


#: Vision towers with rotary positions read in part of their mechanism only (issue 35, item 2,
#: second round): what differs from the ``vision_rope`` rows, named (each from its modeling file).
MANUAL.update(
    {
        "minimax_m3_vl_vision": "partial 3-D rotary embedding of video patches over time, row and column (MiniMaxM3VLVisionRotaryEmbedding), not read",
        "eomt_dinov3": "DINOv3's rotary embedding of image patches (EomtDinov3RotaryEmbedding) with num_queries query tokens entering unrotated before the prefix in the last num_blocks layers (a prefix that changes by layer), not read",
    }
)


#: Vision towers with rotary positions, third round (issue 35 item 2): what differs from the
#: ``vision_rope`` rows, read from each modeling file (Llama 4's and Step 3.5's towers are now read).
MANUAL.update(
    {
        "gemma4_vision": "2-D rotary embedding of image patches at the processor's pixel_position_ids (x, y, -1 for padding) with the head split in two halves, the first turned by the column and the second by the row, each by rotate_half within its own half (apply_multidimensional_rope of Gemma4VisionRotaryEmbedding's [x, x, y, y]), and a factorized learned table, one row per x plus one per y, summed (patch_embedder.position_embedding_table, (2, position_embedding_size, hidden)), not read",
        "muse_glimmer_vision": "2-D rotary embedding of image patches (MuseGlimmerVisionRotaryEmbedding: 1-based, column first, in Qwen2.5-VL's window order) beside a learned grid (patch_embedder.position_embedding_table) resampled bilinearly at the patch centres with zero padding past the edges and read transposed (patch (h, w) at (w, h)), no grid convention here, not read",
        "muse_spark_vision": "2-D rotary embedding of image patches (MuseSparkVisionRotaryEmbedding: 1-based, column first, in Qwen2.5-VL's window order) beside a learned grid (patch_embedder.position_embedding_table) resampled bilinearly at the patch centres with zero padding past the edges and read transposed (patch (h, w) at (w, h)), no grid convention here, not read",
    }
)


class _Timeout(Exception):
    pass


# Heads with positions of their own (issue 35 item 4: read from their modeling files), one block of
# its own: what a head's part of its line says instead of "no position class found".
HEAD_POSITIONS: dict[str, str] = {
    "zoedepth": "a 1-D sinusoid its patch transformer computes per call "
    "(ZoeDepthPatchTransformerEncoder.positional_encoding_1d)",
    "tvp": "a learned text position table (embeddings.position_embeddings) and visual row/column tables "
    "(row_position_embeddings, col_position_embeddings)",
    "dpt": "its own ViT embeddings' learned patch-position grid (embeddings.position_embeddings, resized by "
    "_resize_pos_embed)",
}


def _one_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    if lines:
        text = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
        text = f"{type(e).__name__}: {text}"
        return text if len(text) <= 200 else text[:197] + "..."
    tb = traceback.extract_tb(e.__traceback__)[-1]
    return f"{type(e).__name__} at {tb.filename.split('site-packages/')[-1]}:{tb.lineno}"


def scan_one(model_type: str) -> dict:
    """``{"composite": True}`` for a config with sub-configs; else the position module classes and
    tensor names of ``model_type``'s model built on the meta device (``"built"``: ``"tiny"`` or
    ``"default"``), or ``{"error": ...}``: transformers' error building its default config."""
    import torch
    from conformance.tiny import model_class, quiet, tiny_config
    from transformers import CONFIG_MAPPING, AutoModel

    if getattr(CONFIG_MAPPING[model_type], "sub_configs", None):
        try:
            with quiet():
                CONFIG_MAPPING[model_type]()
        except Exception as e:  # noqa: BLE001 - transformers' own error is what we record
            return {"error": _one_line(e)}
        return {"composite": True}
    errors = []
    for label in ("tiny", "default"):
        try:
            with quiet():
                config = tiny_config(model_type) if label == "tiny" else CONFIG_MAPPING[model_type]()
            cls = model_class(model_type, config)
            with quiet(), torch.device("meta"):
                if cls is None:
                    model = AutoModel.from_config(config)
                else:
                    model = cls._from_config(config)
        except Exception as e:  # noqa: BLE001 - transformers' own error is what we record
            errors.append(_one_line(e))
            continue
        names = [n for n, _ in [*model.named_parameters(), *model.named_buffers()] if NAME_WORDS.search(n)]
        return {
            "built": label,
            "class": type(model).__name__,
            "modules": sorted({type(m).__name__ for m in model.modules() if CLASS_WORDS.search(type(m).__name__)}),
            "names": sorted({re.sub(r"\.\d+\.", ".N.", n) for n in names})[:24],
        }
    return {"error": errors[-1]}


def scan(model_types: list[str]) -> dict[str, dict]:
    """:func:`scan_one` of each model type, 120 s at most each."""

    def alarm(*_):
        raise _Timeout

    out = {}
    for t in model_types:
        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(120)
        try:
            out[t] = scan_one(t)
        except _Timeout:
            out[t] = {"error": "TimeoutError: building it on the meta device took over 120 s"}
        finally:
            signal.alarm(0)
        print(t, "error" if "error" in out[t] else "ok", flush=True)
    return out


def _names(found: list[str], *words: str) -> list[str]:
    return [n for n in found if any(w in n for w in words)]


def _short(name: str) -> str:
    """The last two parts of a tensor name, less ``weight``/``bias`` (``attention.self.relative_position_bias_table``
    -> ``self.relative_position_bias_table``)."""
    parts = [p for p in name.split(".") if p not in ("weight", "bias", "N")]
    return ".".join(parts[-2:])


def mechanism_line(model_type: str, rec: dict) -> str | None:
    """One line naming the position mechanism(s) a scan found, or ``None`` (nothing found)."""
    mods, names = rec.get("modules", []), rec.get("names", [])
    names = [n for n in names if not n.endswith("position_ids")]
    out: list[str] = []

    def first(words: tuple[str, ...], what: str) -> None:
        hit = _names(names, *words)
        if hit:
            out.append(f"{what} ({_short(hit[0])})")

    def cls(pattern: str, what: str) -> bool:
        hit = [m for m in mods if re.search(pattern, m)]
        if hit:
            out.append(f"{what} ({', '.join(hit[:2])})")
        return bool(hit)

    first(("relative_position_bias_table",), "Swin-style window relative position bias table")
    first(("continuous_position_bias_mlp",), "SwinV2 continuous log-spaced position bias")
    first(("rel_pos_h",), "SAM/ViTDet decomposed relative positions rel_pos_h / rel_pos_w")
    if not cls(r"PositionalConv", "wav2vec2-style convolutional positional embedding"):
        first(("pos_conv_embed", "encode_positions.conv"), "wav2vec2-style convolutional positional embedding")
    cls(
        r"RelPositional|RelativePositionEmbedding|RelativePositionalEncoding",
        "Conformer/XL relative positional encoding",
    )
    first(("pos_bias_u",), "Transformer-XL content and position biases")
    first(("gru_rel_pos",), "WavLM gated relative position bias")
    first(("rel_pos_emb", "emb_rel_k", "relative_k_proj"), "relative position embeddings")
    cls(r"Sine", "DETR-style 2-D sine embedding")
    first(("h_position_embeddings", "x_position_embeddings"), "LayoutLM 2-D bounding-box tables")
    first(("relative_attention_bias", "RelativePositionBias"), "T5-style bucketed relative attention bias")
    cls(r"RelativePositionBias|RelativeAttentionBias", "relative attention bias")
    vision = re.search(r"vision|vit|pixtral|sam|image|dinov3|eomt|mlcd|loftr", model_type) and "text" not in model_type
    if not cls(r"Rotary|Rope", "rotary embedding of image patches" if vision else "rotary embedding"):
        first(("inv_freq", "freqs_ci"), "rotary frequencies")
    if not cls(r"Sinusoid|Sinus", "sinusoidal position table"):
        first(
            ("embed_positions.weights", "positional_embedding.positional_embedding"),
            "sinusoidal position table",
        )
    first(("pe_k",), "learned relative position table")
    grid = vision or re.search(
        r"patch|mae|msn|hiera|ijepa|radio|pixio|yolos|mgp|pvt|seggpt|vivit|timesformer|dinov2", model_type
    )
    names = [n for n in names if not re.search(r"inv_freq|inv_timescales|freqs|pos_proj", n)]  # not a table
    if not out or not any("table" in o or "grid" in o for o in out):
        first(
            (
                "position_embedding",
                "pos_embed",
                "embed_positions",
                "positional_embedding",
                "wpe.",
            ),
            "learned patch-position grid" if grid else "learned position table",
        )
    first(("row_embedder",), "learned row and column tables of image patches")
    first(("time_embeddings",), "learned frame-position table")
    first(("time_embed.",), "a time-step embedding")
    first(("distance_embedding",), "relative key distance embedding")
    first(("attention_biases",), "attention biases by relative offset")
    if not out and (mods or names):  # named for positions, but no rule above names the mechanism
        out.append(f"position encoding ({', '.join([*mods[:2], *map(_short, names[:2])])})")
    return "; ".join(dict.fromkeys(out)) or None


def _why(tower: str, lines: dict[str, str]) -> str:
    """A tower type's own line (its refusal), whole: its clauses (``"; "``: one per mechanism not read,
    Cohere Compass's vision tower has two) stay inside the parentheses the composite's line puts
    around it, so no mechanism of the tower is dropped from the composite's line."""
    from flax_posenc.conversion.models import REFUSED_MODEL_TYPES

    line = lines.get(tower) or REFUSED_MODEL_TYPES.get(tower) or "not read"
    return line.removeprefix("not read: ")


def _tower_line(model_type: str, read: set[str], lines: dict[str, str]) -> str:
    """A composite's line: its sub-configs that are not read (each with its own line when it has one)."""
    from conformance.catalog import composite_towers

    from flax_posenc.conversion.models import HEAD_TOWER_FIELDS

    towers = composite_towers(model_type) or ()
    if not towers:
        return "a composite config that cannot be built with its defaults here (its towers are not known)"
    parts = []
    head = False
    for field, tower in towers:
        if field in HEAD_TOWER_FIELDS:
            head = True
        if tower in read:
            continue
        if not tower:
            parts.append(f"{field} (a sub-config without a model type)")
        else:
            parts.append(f"{field} {tower} ({_why(tower, lines)})")
    if head:
        own = _own_position_classes(model_type)
        what = HEAD_POSITIONS.get(model_type) or (", ".join(own) if own else "no position class found")
        parts.insert(0, f"its own head's positions ({what})")
    if not parts:
        return "every tower is read, but the composite is not: its own glue is not verified"
    return "; ".join(parts)


def _own_position_classes(model_type: str) -> list[str]:
    """Position classes defined in ``model_type``'s own modeling files (a DETR head's sine embedding)."""
    import importlib

    from transformers import CONFIG_MAPPING

    package = importlib.import_module(CONFIG_MAPPING[model_type].__module__.rsplit(".", 1)[0])
    path = pathlib.Path(package.__file__).parent
    found = []
    for file in sorted(path.glob("modeling_*.py")):
        found += re.findall(
            r"^class (\w*(?:Sine|Sinusoid|PositionEmbedding|PositionalEncoding|Rotary|RelPos)\w*)\(",
            file.read_text(),
            re.M,
        )
    return list(dict.fromkeys(found))[:3]


def _config_error(model_type: str) -> str:
    """Transformers' error building ``model_type``'s default config (one line)."""
    from conformance.tiny import quiet
    from transformers import CONFIG_MAPPING

    try:
        with quiet():
            CONFIG_MAPPING[model_type]()
    except Exception as e:  # noqa: BLE001 - its error is the line
        return _one_line(e)
    return "its default config builds, but not its sub-configs' models"


def derive(scanned: dict[str, dict], *, composites: bool = True) -> tuple[dict[str, str], dict[str, str]]:
    """``(unread, unbuildable)``: model type -> the mechanism not read; model type -> transformers' error
    (``composites=False``: without the composite types' rows, which build every composite config)."""
    from conformance.catalog import all_model_types, composite_read, composite_towers

    from flax_posenc.conversion.models import MODEL_MECHANISMS, REFUSED_MODEL_TYPES

    read = set(MODEL_MECHANISMS)
    unread: dict[str, str] = {}
    unbuildable: dict[str, str] = {}
    for t, rec in scanned.items():
        if t in read or t in REFUSED_MODEL_TYPES or t not in all_model_types():
            continue
        if t in MANUAL:
            unread[t] = MANUAL[t]
        elif "error" in rec:
            unbuildable[t] = re.sub(r"/\S*site-packages/", "", rec["error"])  # no path of this machine
        elif not rec.get("composite"):
            line = mechanism_line(t, rec)
            unread[t] = (
                line or "not verified: no position tensor or module found, not declared without a conformance case"
            )
    # a composite whose tower is a composite (Qwen2.5-Omni's thinker) takes that tower's line, so the
    # composites are derived until no line changes (towers nest two deep at most; a pass more to see it)
    for _ in range(4 if composites else 0):
        before = dict(unread)
        for t, rec in scanned.items():
            if rec.get("composite") and t not in read and t not in REFUSED_MODEL_TYPES and t not in MANUAL:
                if composite_read(t):
                    continue
                if composite_towers(t) is None:  # its default config does not build here: transformers' error
                    unbuildable[t] = _config_error(t)
                    continue
                unread[t] = _tower_line(
                    t, read, {**unread, **{k: f"cannot be built here: {v}" for k, v in unbuildable.items()}}
                )
        if unread == before:
            break
    return dict(sorted(unread.items())), dict(sorted(unbuildable.items()))


def render(unread: dict[str, str], unbuildable: dict[str, str]) -> str:
    import transformers

    def block(name: str, rows: dict[str, str]) -> list[str]:
        return [
            f"{name}: Mapping[str, str] = MappingProxyType(",
            "    {",
            *(f"        {k!r}: {v!r}," for k, v in rows.items()),
            "    }",
            ")",
        ]

    head = f'''"""Every model type of the pinned transformers that is not read, and why: data, numpy only.

Written by ``python tools/unread_mechanisms.py --write`` (transformers {transformers.__version__}):
one row per model type, sorted, ``model_type: the mechanism not read`` (named with the class or
tensor of transformers' model where it was found). A row is dropped when a registry row reads the
type: a type both here and in the registry fails at import (:mod:`flax_posenc.conversion.models`).

- :data:`UNREAD_MECHANISMS`: the type has a position mechanism the library does not read (or, for
  a composite type, the towers that are not read).
- :data:`UNBUILDABLE_MODEL_TYPES`: transformers cannot build the type here (neither a tiny nor its
  default config): its error, one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["TRANSFORMERS_VERSION", "UNBUILDABLE_MODEL_TYPES", "UNREAD_MECHANISMS"]

#: The transformers release these rows were derived from.
TRANSFORMERS_VERSION = "{transformers.__version__}"

# fmt: off
'''
    body = [
        "#: ``model_type -> the position mechanism not read`` (one line each, sorted).",
        *block("UNREAD_MECHANISMS", unread),
        "",
        "#: ``model_type -> transformers' error`` building it here (one line each, sorted).",
        *block("UNBUILDABLE_MODEL_TYPES", unbuildable),
        "# fmt: on",
    ]
    return head + "\n".join(body) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", action="store_true", help=f"build every unread type; write {SCAN.relative_to(ROOT)}")
    parser.add_argument("--write", action="store_true", help=f"write {MODULE.relative_to(ROOT)} from the scan")
    parser.add_argument("types", nargs="*", help="scan only these model types (merged into the scan file)")
    args = parser.parse_args()
    if args.scan:
        from conformance.catalog import all_model_types

        from flax_posenc.conversion.models import MODEL_MECHANISMS

        todo = args.types or [t for t in all_model_types() if t not in MODEL_MECHANISMS]
        old = json.loads(SCAN.read_text()) if SCAN.is_file() and args.types else {}
        old.update(scan(todo))
        SCAN.write_text(json.dumps(dict(sorted(old.items())), indent=1) + "\n")
    if args.write:
        # The module is derived whole: emptied first, so that a type a registry row now reads (which
        # fails the import while it is still listed) does not stop its rewrite; restored on failure.
        old = MODULE.read_text()
        MODULE.write_text(render({}, {}))
        try:
            unread, unbuildable = derive(json.loads(SCAN.read_text()))
        except BaseException:
            MODULE.write_text(old)
            raise
        MODULE.write_text(render(unread, unbuildable))
        print(f"wrote {MODULE.relative_to(ROOT)}: {len(unread)} unread, {len(unbuildable)} unbuildable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
