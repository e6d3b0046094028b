"""Which transformers model types are text models (the coverage denominator).

A *text model type* is one whose ``AutoModel`` class takes ``input_ids`` as its first forward
argument, whose config has no sub-configs (no vision/audio tower), and which appears in none of
transformers' image, audio, video or multimodal Auto mappings.
"""

from __future__ import annotations

import functools
import inspect

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
