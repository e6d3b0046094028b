"""Which transformers model types are text models (the coverage denominator).

A *text model type* is one whose ``AutoModel`` class takes ``input_ids`` as its first forward
argument, whose config has no sub-configs (no vision/audio tower), and which appears in none of
transformers' image, audio, video or multimodal Auto mappings.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_NON_TEXT_WORDS = (
    "IMAGE", "VISION", "AUDIO", "SPEECH", "VIDEO", "CTC", "DEPTH", "OBJECT", "SEMANTIC", "INSTANCE",
    "UNIVERSAL", "KEYPOINT", "MULTIMODAL", "TEXT_TO_SPECTROGRAM", "TEXT_TO_WAVEFORM", "MASK_GENERATION",
    "TIME_SERIES", "BACKBONE", "DOCUMENT", "TABLE",
)  # fmt: skip


@functools.cache
def all_model_types() -> tuple[str, ...]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return tuple(CONFIG_MAPPING_NAMES)


@functools.cache
def _non_text() -> frozenset[str]:
    from transformers.models.auto import modeling_auto

    out: set[str] = set()
    for name in dir(modeling_auto):
        if name.endswith("_MAPPING_NAMES") and any(w in name for w in _NON_TEXT_WORDS):
            out |= set(getattr(modeling_auto, name))
    return frozenset(out)


def text_kind(model_type: str) -> str | None:
    """``None`` when ``model_type`` is a text model type, else why it is not."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto

    if model_type in _non_text():
        return "in an image/audio/video/multimodal Auto mapping"
    class_name = modeling_auto.MODEL_MAPPING_NAMES.get(model_type)
    if class_name is None:
        return "no AutoModel class"
    try:
        config_class = CONFIG_MAPPING[model_type]
        if getattr(config_class, "sub_configs", None):
            return "has sub-configs (a multimodal or composite model)"
        import transformers

        model_class = getattr(transformers, class_name if isinstance(class_name, str) else class_name[0])
    except Exception as e:  # noqa: BLE001 - a model type that cannot be imported here
        return f"cannot be imported: {type(e).__name__}"
    params = [p for p in inspect.signature(model_class.forward).parameters if p != "self"]
    if not params or params[0] != "input_ids":
        return f"its model's first input is {params[0] if params else 'nothing'}, not input_ids"
    return None


@functools.cache
def text_model_types() -> tuple[str, ...]:
    return tuple(t for t in all_model_types() if text_kind(t) is None)


@functools.cache
def composite_towers(model_type: str) -> tuple[tuple[str, str], ...] | None:
    """``((field, tower model type), ...)`` of a composite model type of the pinned transformers
    (its config class's ``sub_configs``, each tower's model type from the class's default
    sub-config, else the sub-config class's own ``model_type``); ``None`` when the config class has
    no sub-configs or cannot be built here. A field that names no model type is ``""``."""
    from conformance.tiny import quiet
    from transformers import CONFIG_MAPPING

    try:
        cls = CONFIG_MAPPING[model_type]
        subs = dict(getattr(cls, "sub_configs", None) or {})
        if not subs:
            return None
        with quiet():
            default = cls()
    except Exception:  # noqa: BLE001 - a model type that cannot be built here
        return None
    out = []
    for field, sub_cls in subs.items():
        sub = getattr(default, field, None)
        tower = getattr(sub, "model_type", None) or getattr(sub_cls, "model_type", None) or ""
        out.append((field, str(tower)))
    return tuple(out)


def composite_read(model_type: str, facts: Mapping[str, Any] | None = None) -> bool:
    """Whether flax-posenc reads ``model_type`` as its towers: it is not a row of the registry
    itself, every one of its sub-configs is a tower (``tower_of_field``) whose model type is, and none
    is a backbone under a head of its own (``HEAD_TOWER_FIELDS``: DETR, UperNet are read only as
    rows of the registry, their backbone beside them).

    What transformers says of each config class comes from transformers itself, or from ``facts``
    (:func:`composite_facts`, as :data:`CATALOG` stores them) when given."""
    from flax_posenc.conversion.models import HEAD_TOWER_FIELDS, MODEL_MECHANISMS, REFUSED_MODEL_TYPES

    if model_type in MODEL_MECHANISMS or model_type in REFUSED_MODEL_TYPES:
        return False
    fact = facts.get(model_type) if facts is not None else None
    if facts is not None:
        subs = {} if fact is None else {field: (sub_type, nested) for field, sub_type, nested in fact["sub_configs"]}
    else:
        try:
            subs = {
                field: (getattr(c, "model_type", None), bool(getattr(c, "sub_configs", None)))
                for field, c in _sub_configs(model_type).items()
            }
        except Exception:  # noqa: BLE001 - a model type that cannot be imported here
            return False
    if not subs:
        return False
    if set(subs) & HEAD_TOWER_FIELDS:  # a head around a backbone (DETR): read only by rows of its own
        return False
    if any(sub_type and sub_type not in MODEL_MECHANISMS and not nested for sub_type, nested in subs.values()):
        return False  # a tower of a fixed config class that is not read (cheap: no config is built)
    towers = (
        composite_towers(model_type)
        if fact is None
        else (tuple(map(tuple, fact["towers"])) if fact["towers"] is not None else None)
    )
    if not towers:
        return False
    return all(tower in MODEL_MECHANISMS or composite_read(tower, facts) for _, tower in towers)  # PaliGemma in ColPali


def _sub_configs(model_type: str) -> dict[str, Any]:
    from transformers import CONFIG_MAPPING

    return dict(getattr(CONFIG_MAPPING[model_type], "sub_configs", None) or {})


@functools.cache
def composite_model_types() -> tuple[str, ...]:
    """Every model type of the pinned transformers read as its towers (:func:`composite_read`).

    Read from :data:`CATALOG` when it was written for the installed transformers (building every
    composite's default config costs seconds, in each process that collects the tests), else from
    transformers itself; ``tests/test_conformance.py`` fails while the catalog is stale."""
    facts = catalog_facts()
    return tuple(t for t in all_model_types() if composite_read(t, facts))


#: What :func:`composite_read` asks of transformers, for every model type of the pinned transformers,
#: written by ``python tests/conformance/catalog.py --write`` (:func:`composite_facts`).
CATALOG = Path(__file__).with_name("composite_catalog.json")
WRITE_COMMAND = "python tests/conformance/catalog.py --write"


def _transformers_version() -> str:
    from importlib.metadata import version

    return version("transformers")


def composite_facts() -> dict[str, dict[str, Any]]:
    """For each model type whose config class has sub-configs: ``sub_configs``, ``[[field, the
    sub-config class's model_type or None, whether it has sub-configs of its own], ...]``, and
    ``towers``, :func:`composite_towers` (``None`` when its default config does not build here).
    A model type whose config class cannot be imported here is left out (it has no towers to read)."""
    return {t: fact for t in all_model_types() if (fact := composite_facts_of(t)) is not None}


def composite_facts_of(model_type: str) -> dict[str, Any] | None:
    """:func:`composite_facts` of one model type (``None`` when it has no sub-configs)."""
    try:
        subs = _sub_configs(model_type)
    except Exception:  # noqa: BLE001 - a model type that cannot be imported here
        return None
    if not subs:
        return None
    rows = [[f, getattr(c, "model_type", None) or None, bool(getattr(c, "sub_configs", None))] for f, c in subs.items()]
    towers = composite_towers(model_type)
    return {"sub_configs": rows, "towers": None if towers is None else [list(x) for x in towers]}


def catalog_facts() -> dict[str, dict[str, Any]] | None:
    """The facts stored in :data:`CATALOG` when they were written for the installed transformers, else ``None``."""
    try:
        data = json.loads(CATALOG.read_text())
    except (OSError, ValueError):
        return None
    return data["facts"] if data.get("transformers") == _transformers_version() else None


def catalog_text() -> str:
    """What :data:`CATALOG` holds for the installed transformers (computed: seconds)."""
    head = json.dumps({"written_by": WRITE_COMMAND, "transformers": _transformers_version()})[:-1]
    rows = [f"  {json.dumps(t)}: {json.dumps(fact)}" for t, fact in sorted(composite_facts().items())]
    return head + ', "facts": {\n' + ",\n".join(rows) + "\n}}\n"  # one line per model type


#: Transformers' Auto mapping names (``MODEL_FOR_<TASK>_MAPPING_NAMES``) by modality, in the order a
#: model type is given the first that names it: a model type in an image-text-to-text mapping is
#: multimodal even when it is also in an image one.
MODALITY_TASKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("multimodal", ("IMAGE_TEXT_TO_TEXT", "MULTIMODAL", "VISUAL_QUESTION", "DOCUMENT_QUESTION", "ZERO_SHOT", "RETRIEVAL")),
    ("video", ("VIDEO",)),
    ("time series", ("TIME_SERIES",)),
    ("audio", ("AUDIO", "CTC", "SPEECH", "SPECTROGRAM", "WAVEFORM", "RNNT", "TDT")),
    ("vision", (
        "IMAGE", "BACKBONE", "DEPTH", "OBJECT", "SEGMENTATION", "KEYPOINT", "MASK_GENERATION", "ESTIMATION",
        "MATTING", "TABLE_RECOGNITION", "TEXT_RECOGNITION",
    )),
)  # fmt: skip

#: A model type that no task mapping names (a tower or part of a composite model: ``siglip_vision_model``,
#: ``speecht5_hifigan``): its modality from the words of its name, in this order; else ``text``
#: when a text mapping or ``AutoModel`` names it, else ``other``.
MODALITY_WORDS: tuple[tuple[str, str], ...] = (
    ("text", r"_text(_model)?$"),  # a tower's text model (owlvit_text_model, videoprism_text_model)
    ("multimodal", r"multimodal"),
    ("video", r"video"),
    (
        "audio",
        r"audio|vibevoice|speech|wav|hifigan|bigvgan|codec|asr|mimi|tts|token2wav|talker|dit$|acoustic|clvp|dia_|canary|moshi|musicgen|diariz|transcribe|csm",
    ),
    (
        "vision",
        r"vision|visual|vit|image|vq|sam|dinov|swin|hiera|detr|codebook|perceiver|perciever|mask_decoder|prompt_encoder|geometry|sapiens|ocr|florence|molmo2_adapter|nougat",
    ),
    ("text", r"text|decoder|encoder|qformer|blt|language|t5|gemma|step|rag|layoutxlm|evolla|esm"),
)


@functools.cache
def modality(model_type: str) -> str:
    """The modality of ``model_type``, derived from transformers' Auto mappings (:data:`MODALITY_TASKS`):
    ``text`` for a text model type (:func:`text_kind`), else the first modality whose task mapping
    names it, else by the words of its name (:data:`MODALITY_WORDS`), else ``other``."""
    import re

    from transformers.models.auto import modeling_auto

    if text_kind(model_type) is None:
        return "text"
    names = [
        n
        for n in dir(modeling_auto)
        if n.endswith("_MAPPING_NAMES") and n != "CONFIG_MAPPING_NAMES" and model_type in getattr(modeling_auto, n)
    ]
    for label, words in MODALITY_TASKS:
        if any(w in n for n in names for w in words):
            return label
    for label, pattern in MODALITY_WORDS:
        if re.search(pattern, model_type, re.IGNORECASE):
            return label
    return "text" if names else "other"


if __name__ == "__main__":
    import argparse
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the conformance package
    parser = argparse.ArgumentParser(description=f"write {CATALOG.name} for the installed transformers")
    parser.add_argument("--write", action="store_true", help="rewrite the catalog (else: exit 1 when it is stale)")
    args = parser.parse_args()
    text = catalog_text()
    if args.write:
        CATALOG.write_text(text)
        print(f"wrote {CATALOG}")
    elif CATALOG.exists() and CATALOG.read_text() == text:
        print(f"{CATALOG} is current")
    else:
        sys.exit(f"{CATALOG}: stale for transformers {_transformers_version()}: run `{WRITE_COMMAND}`")
