"""The RoPE one layer of a checkpoint uses (numpy only, reads ``config.json``, never the weights).

A model can give its layers different RoPEs (Gemma 3 and ModernBERT: one ``rope_parameters``
dict per ``layer_types`` entry), none at all (SmolLM3 and Llama 4: ``no_rope_layers`` zeros) or
one for every layer. :func:`rope_for_layer` picks layer ``layer``'s out of the
:class:`~flax_posenc.conversion.models.ModelRecord` that
:func:`~flax_posenc.conversion.inspect_source` reads: its
:class:`~flax_posenc.RopeConfig`, or ``None`` for a layer without position encoding (NoPE, or a
non-attention layer such as a convolution). ``RotaryEmbedding.from_pretrained`` (NNX and Linen)
is built on it.

>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "config.json").write_text(json.dumps({"model_type": "smollm3", "hidden_size": 64,
...     "num_attention_heads": 4, "num_hidden_layers": 4, "max_position_embeddings": 64,
...     "no_rope_layers": [1, 1, 1, 0]}))
>>> rope_for_layer(d, 0).head_dim, rope_for_layer(d, 3) is None
(16, True)
"""

from __future__ import annotations

import functools
import os

import numpy as np

from flax_posenc.conversion.gguf_source import hf_config, is_gguf_source, open_gguf
from flax_posenc.conversion.models import mechanisms_of
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.relative_config import derived_layer_types, family_for, layer_count
from flax_posenc.conversion.source_record import config_record, gguf_record, inspect_source
from flax_posenc.conversion.sources import config_json_path, read_config
from flax_posenc.errors import CheckpointError
from flax_posenc.rope_config import RopeConfig

__all__ = ["rope_for_layer"]


def rope_for_layer(source: str | os.PathLike, layer: int) -> RopeConfig | None:
    """The :class:`~flax_posenc.RopeConfig` layer ``layer`` of SOURCE uses; ``None`` for a NoPE layer.

    SOURCE is anything :func:`~flax_posenc.conversion.inspect_source` reads (a checkpoint
    directory or its ``config.json``). Without per-layer information (one RoPE mechanism for
    every layer), every layer in range gets that RoPE. The range is ``0 .. num_hidden_layers - 1``
    from the config; a config without ``num_hidden_layers`` bounds it by the layers its
    mechanisms list, or not at all when they list none.

    A multimodal RoPE (``mrope``: Qwen-VL, GLM-4V) gives its text tower's ``RopeConfig``: what the
    model applies to text-only positions (the three components equal); image and video tokens
    need :func:`flax_posenc.apply_mrope` with :func:`flax_posenc.mrope_positions`.

    Raises:
      CheckpointError: ``layer`` not an integer (a bool is not one) or out of range (the message
        names the number of layers), SOURCE without a RoPE mechanism (the message names the
        mechanisms it has), or SOURCE unreadable -- each one line naming SOURCE.
    """
    text = os.fspath(source)
    if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, (int, np.integer)):
        raise fail(text, "an integer layer", f"{layer!r} ({type(layer).__name__})")
    layer = int(layer)
    # the config is read once: the record below is made from the same dict (no second read)
    path = None
    if is_gguf_source(source):  # its metadata as config fields (num_hidden_layers from block_count)
        g = open_gguf(source)
        config = hf_config(g)
        read = functools.partial(gguf_record, source, g, config=config)
    else:
        path = config_json_path(source)
        config = read_config(path) if path is not None else {}
        read = (
            functools.partial(config_record, source, path, config)
            if path
            else functools.partial(inspect_source, source)
        )
    family = family_for(config) if isinstance(config.get("model_type"), str) else None
    if family is not None:  # the layers as transformers counts them (Dory's saved list holds 2 per layer)
        config = dict(derived_layer_types(config, family))
    try:
        record = read()
    except CheckpointError:
        plan = mechanisms_of(config.get("model_type"))
        if plan is None or any(registry == "rope_alibi" for registry, _ in plan):
            raise
        # a RoPE-less model type whose other mechanisms cannot be read here (a config.json
        # without its weights): the registry alone says there is no RoPE
        have = ", ".join(f"{registry} ({name})" for registry, name in plan)
        raise fail(
            text, "a checkpoint with a RoPE mechanism", f"model_type {config['model_type']!r} with: {have}"
        ) from None
    mechanisms = record.mechanisms
    rope_kinds = ("rope", "mrope")
    if not any(m.kind in rope_kinds for m in mechanisms):
        have = ", ".join(dict.fromkeys(m.kind for m in mechanisms))
        raise fail(text, "a checkpoint with a RoPE mechanism", f"model_type {record.model_type!r} with: {have}")
    count, counted = layer_count(config, path or text), "num_hidden_layers"
    if count is None:
        indices = [i for m in mechanisms if m.layers for i in m.layers]
        count, counted = (max(indices) + 1 if indices else None), "as the config's per-layer lists hold"
    if layer < 0 or (count is not None and layer >= count):
        bound = f"0..{count - 1} ({count} layers, {counted})" if count is not None else "0 or more"
        raise fail(text, f"layer in {bound}", f"layer={layer}")
    listed = [m for m in mechanisms if m.kind in (*rope_kinds, "nope") and m.layers is not None and layer in m.layers]
    every = [m for m in mechanisms if m.kind in rope_kinds and m.layers is None]
    serving = listed or every
    if not serving:
        raise fail(text, f"a RoPE or NoPE mechanism serving layer {layer}", "none")
    return serving[0].rope if serving[0].kind in rope_kinds else None
