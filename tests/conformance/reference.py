"""Does our reading of a model type agree with transformers' own classes? Limit and values.

:func:`conformance_problems` builds a tiny random checkpoint of a model type with transformers
(:mod:`conformance.tiny`), saves it, reads it back with
:func:`flax_posenc.conversion.inspect_source`, and compares every mechanism with what the model's
own modules hold and do:

- RoPE: ``inv_freq`` (within 4 float32 ulps of transformers' float32 value) and the attention
  scaling of the model's own rotary module for every layer type; ``cos``/``sin`` from that
  module's forward at positions ``0 .. limit - 1`` (float32 rounding of transformers' own angle:
  ``|d| <= 2**-22 * (1 + angle)``); the rotation itself: the modeling file's own
  ``apply_rotary_pos_emb`` against :func:`flax_posenc.apply_rope_qk` on random ``q``/``k``
  (layout and partial rotary, ``1e-5`` absolute); NoPE layers against the attention modules'
  ``use_rope``. The limit: ``max_position_embeddings`` (transformers declares it, does not
  enforce it).
- RoPE through the forward pass (:func:`_forward_problems`): the tiny model's forward runs once on
  7 tokens with every ``apply*rotary*``/``apply*rope*`` function of its modeling files wrapped;
  per decoder layer that ran, a rotation where :func:`~flax_posenc.conversion.rope_for_layer` gives
  NoPE, none where it gives RoPE, and every rotated ``q``/``k`` against
  :func:`flax_posenc.apply_rope_qk` under that layer's ``RopeConfig`` (its cos/sin, layout, head
  and rotary width at once: ``1e-5`` relative, or equal ``q . k`` products when the modeling file
  lists the pairs in another order). The rotary module check above then calls the function the
  attention called, not one found by name.
- Position parameters (:func:`_position_parameter_problems`): a trainable parameter of a rotary
  module, or a parameter named for positions, that no reported mechanism reads fails the case
  ("position parameters not read").
- M-RoPE (Qwen2-VL, Qwen2.5-VL): the same for the text rotary module at distinct temporal/height/
  width positions, and the model's ``get_rope_index`` against :func:`flax_posenc.mrope_positions`.
- Learned tables: the rows (bit-equal) and the limit transformers enforces: a forward pass of
  ``limit`` tokens works and one of ``limit + 1`` fails.
- Vision grids: the rows (bit-equal), the tokens the embeddings module yields at the trained
  size, and ``fp.resize_grid`` at twice the size against the model's own float32
  ``interpolate_pos_encoding`` (8 float32 ulps at the table's largest magnitude).
- The softmax scale (RoPE, M-RoPE): the record's ``softmax_scale`` against the ``scaling`` of the
  model's decoder attention modules (every ``layer_idx`` the mechanism serves).
- Queries scaled by position (:func:`_query_scale_problems`: Ministral 3, Mistral 4): the record's
  ``query_scale`` through :func:`flax_posenc.attention_temperature` against every output of the
  modeling file's own ``get_llama_4_attn_scale`` in a forward pass (float32, ``1e-6`` relative), and
  a model whose modeling files hold that function while we report no query scale fails the case.
- Issue 36's kinds: Reformer's ``axial`` rows bit-equal to its position module, and its limit by
  the forward (padding to the chunk multiple); SAM3-Lite's ``resampled`` table at five lengths
  (within torch's float32 source-index rounding); XLNet's ``relative_sinusoid`` against its
  ``relative_positional_encoding``; CPM-Ant's ``segment_bias`` bit-equal to its ``position_bias``.
  M-RoPE modules with one section per layer type (Cohere Compass) and either cos expansion.
- A mechanism in the model that we did not report (a rotary module, a position table) is a problem.

An empty list means the model type conforms.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
from conformance.forward_inputs import run_forward
from conformance.tiny import quiet, tiny_model

#: Positions compared for cos/sin (past the tiny limit nothing is compared).
MAX_POSITIONS = 64


def _rotary_modules(model):
    return [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]


def _inv_freq(module, layer_type):
    for name in ([f"{layer_type}_inv_freq"] if layer_type else []) + ["inv_freq"]:
        if hasattr(module, name):
            scaling_name = name.replace("inv_freq", "attention_scaling")
            return getattr(module, name), float(getattr(module, scaling_name, 1.0))
    return None, None


def _call_rotary(module, x, positions, layer_type):
    params = inspect.signature(module.forward).parameters
    if "layer_type" in params and layer_type is not None:
        return module(x, positions, layer_type=layer_type)
    return module(x, positions)


def _apply_fn(model, called: str | None = None):
    module = sys.modules[type(model).__module__]
    if called is not None and callable(getattr(module, called, None)):
        return getattr(module, called)  # the rotation the model's attention called in its forward
    if getattr(model.config, "rope_interleave", False) and hasattr(module, "apply_rotary_pos_emb_interleave"):
        return module.apply_rotary_pos_emb_interleave  # what MLA attention calls when the flag is set
    return getattr(module, "apply_rotary_pos_emb", None)


def _rope_problems(model, mech, module, label, called: str | None = None) -> list[str]:
    import torch

    import flax_posenc as fp
    from flax_posenc.rope_config import rope_inverse_frequencies

    problems = []
    rope = mech.rope
    ref_inv, ref_scale = _inv_freq(module, mech.layer_type)
    if ref_inv is None:
        return [f"{label}: the rotary module {type(module).__name__} holds no inv_freq"]
    ref_inv = ref_inv.detach().double().numpy()
    ours, scale = rope_inverse_frequencies(rope)
    if ref_inv.shape != ours.shape:
        return [f"{label}: inv_freq shape {ours.shape}, transformers {ref_inv.shape}"]
    if not np.allclose(ours, ref_inv, rtol=2**-21, atol=0):
        return [f"{label}: inv_freq differs by up to {np.max(np.abs(ours / ref_inv - 1)):.3g} (relative)"]
    if not np.isclose(scale, ref_scale, rtol=1e-6):
        problems.append(f"{label}: attention scaling {scale} vs transformers {ref_scale}")
    n = min(MAX_POSITIONS, rope.limit or MAX_POSITIONS)
    positions = torch.arange(n)[None]
    x = torch.zeros(1, n, model.config.hidden_size if hasattr(model.config, "hidden_size") else 8)
    with torch.no_grad():
        out = _call_rotary(module, x, positions, mech.layer_type)
    complex_form = torch.is_tensor(out) and out.is_complex()  # Llama 4, DeepSeek-V2: freqs_cis
    cos, sin = (out.real, out.imag) if complex_form else out
    cos, sin = cos.double().numpy()[0], sin.double().numpy()[0]
    angles = np.arange(n)[:, None] * ours[None, :]
    half = np.concatenate([angles, angles], -1)
    inter = np.repeat(angles, 2, -1)
    # The module's expansion of the angles (concatenated, interleaved, or none) is its own business:
    # which pairs rotate together is checked below, through the modeling file's apply_rotary_pos_emb.
    forms = [f for f in (half, inter, angles) if f.shape == cos.shape]
    if not forms:
        return problems + [f"{label}: cos is {cos.shape[-1]} wide, {angles.shape[-1]} angles"]

    def err(form):
        tol = scale * 2.0**-22 * (1 + np.abs(form))
        return max(
            float(np.max(np.abs(cos - scale * np.cos(form)) - tol)),
            float(np.max(np.abs(sin - scale * np.sin(form)) - tol)),
        )

    worst = min(err(f) for f in forms)
    if worst > 0:
        problems.append(f"{label}: cos/sin differ from float32 rounding of the angle by up to {worst:.3g}")
    if complex_form:
        return problems + _complex_apply_problems(model, rope, out, label)
    apply = _apply_fn(model, called)
    if apply is None or problems:
        return problems
    if list(inspect.signature(apply).parameters)[1] == "cos":  # Gemma 4: apply(x, cos, sin), once per tensor
        one = apply
        apply = lambda q, k, cos, sin: (one(q, cos, sin), one(k, cos, sin))  # noqa: E731
    heads = 2
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, heads, n, rope.head_dim)).astype(np.float32)
    k = rng.standard_normal((1, heads, n, rope.head_dim)).astype(np.float32)
    tq, tk = torch.from_numpy(q), torch.from_numpy(k)
    ref = None
    try:
        with torch.no_grad():
            out = apply(
                tq, tk, torch.from_numpy(cos.astype(np.float32))[None], torch.from_numpy(sin.astype(np.float32))[None]
            )
        if out[0].shape == tq.shape:
            ref = (out[0].numpy(), out[1].numpy())
    except Exception:  # noqa: BLE001 - some modeling files rotate only the rotary slice
        ref = None
    if ref is None:
        r = rope.rotary_dim
        try:
            with torch.no_grad():
                out = apply(
                    tq[..., :r].contiguous(),
                    tk[..., :r].contiguous(),
                    torch.from_numpy(cos.astype(np.float32))[None],
                    torch.from_numpy(sin.astype(np.float32))[None],
                )
            ref = (np.concatenate([out[0].numpy(), q[..., r:]], -1), np.concatenate([out[1].numpy(), k[..., r:]], -1))
        except Exception as e:  # noqa: BLE001
            return [f"{label}: apply_rotary_pos_emb could not be called: {type(e).__name__}: {e}"[:200]]
    oq, ok = fp.apply_rope_qk(q, k, rope, seq_axis=-2)  # eager: primitives compiled once per shape
    if getattr(apply, "__name__", "").endswith("_interleave"):
        # DeepSeek's MLA de-interleaves q and k before rotating, so its output lists the pairs' first
        # members, then their second ones (a permutation that leaves every q . k unchanged).
        r = rope.rotary_dim
        order = np.r_[np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, rope.head_dim)]
        oq, ok = np.asarray(oq)[..., order], np.asarray(ok)[..., order]
    for name, a, b in (("q", oq, ref[0]), ("k", ok, ref[1])):
        err = float(np.max(np.abs(np.asarray(a) - b)))
        if not err <= 1e-5:
            problems.append(f"{label}: apply_rotary_pos_emb({name}) differs by {err:.3g} (layout {rope.layout})")
    return problems


def _complex_apply_problems(model, rope, freqs_cis, label) -> list[str]:
    """The modeling file's ``apply_rotary_emb(xq, xk, freqs_cis)`` (complex pairs) against ours."""
    import torch

    import flax_posenc as fp

    apply = getattr(sys.modules[type(model).__module__], "apply_rotary_emb", None)
    if apply is None:
        return [f"{label}: complex freqs_cis but no apply_rotary_emb in the modeling file"]
    n = freqs_cis.shape[1]
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, n, rope.head_dim)).astype(np.float32)  # (batch, heads, seq, dim)
    k = rng.standard_normal((1, 2, n, rope.head_dim)).astype(np.float32)
    oq, ok = fp.apply_rope_qk(q, k, rope, seq_axis=-2)
    for seq_axis in (2, 1):  # DeepSeek-V2 takes (batch, heads, seq, dim), Llama 4 (batch, seq, heads, dim)
        tq, tk = (torch.from_numpy(a).transpose(1, 2) if seq_axis == 1 else torch.from_numpy(a) for a in (q, k))
        try:
            with torch.no_grad():
                rq, rk = apply(tq, tk, freqs_cis)
        except RuntimeError:
            continue
        if seq_axis == 1:
            rq, rk = rq.transpose(1, 2), rk.transpose(1, 2)
        err = max(
            float(np.max(np.abs(np.asarray(oq) - rq.numpy()))), float(np.max(np.abs(np.asarray(ok) - rk.numpy())))
        )
        return [] if err <= 1e-5 else [f"{label}: apply_rotary_emb differs by {err:.3g} (layout {rope.layout})"]
    return [f"{label}: apply_rotary_emb could not be called"]


def _mrope_problems(model, mech, rotary) -> list[str]:
    """Qwen-VL's multimodal RoPE: the text rotary module's ``inv_freq`` and ``mrope_section``, its
    ``cos``/``sin`` at distinct temporal/height/width positions, the modeling file's
    ``apply_rotary_pos_emb`` against :func:`flax_posenc.apply_mrope`, the model's own
    ``get_rope_index`` (when it has one) against :func:`flax_posenc.mrope_positions` on a prompt
    with an image and a video, and the limit (``max_position_embeddings`` of the text tower)."""
    import torch

    import flax_posenc as fp
    from flax_posenc.rope_config import rope_inverse_frequencies

    cfg = mech.record.mrope
    modules = [m for m in rotary if hasattr(m, "mrope_section")]
    if not modules:
        return ["we report M-RoPE; no rotary module of the model holds an mrope_section"]
    module = modules[0]
    problems = []
    section = module.mrope_section
    if isinstance(section, dict):  # Cohere Compass: one section (and inv_freq) per layer type
        section = section.get(mech.layer_type, ())
    if tuple(section) != cfg.mrope_section:
        problems.append(f"mrope_section {cfg.mrope_section}, transformers {tuple(section)}")
    theirs = _inv_freq(module, mech.layer_type)[0].detach().double().numpy()
    ours, scale = rope_inverse_frequencies(cfg.rope)
    if theirs.shape != ours.shape or not np.allclose(ours, theirs, rtol=2**-21, atol=0):
        return problems + [f"M-RoPE inv_freq differs from the rotary module's ({theirs.shape} vs {ours.shape})"]
    n = min(MAX_POSITIONS, cfg.limit or MAX_POSITIONS)
    rng = np.random.default_rng(0)
    positions = rng.integers(0, n, (3, 1, n))
    with torch.no_grad():
        cos, sin = _call_rotary(module, torch.zeros(1, n, 8), torch.from_numpy(positions), mech.layer_type)
    half = cos.shape[-1] // 2
    # the module's expansion of the angles is its own business (the pairs are checked through the
    # modeling file's apply_rotary_pos_emb below): Qwen2-VL, HY-V4-VL cat((freq, freq)) (HY-V4-VL's
    # apply interleaves them), GLM-4V repeat_interleave(2)
    if torch.equal(cos[..., :half], cos[..., half:]) and torch.equal(sin[..., :half], sin[..., half:]):
        their_cos, their_sin = cos[..., :half].double().numpy(), sin[..., :half].double().numpy()
    else:
        their_cos, their_sin = cos[..., ::2].double().numpy(), sin[..., ::2].double().numpy()
    our_cos, our_sin = (np.asarray(a, np.float64) for a in fp.mrope_cos_sin(positions, cfg))
    if cfg.interleaved_sections:  # Qwen3-VL: H at 1, 4, ... < 3 * s[1]; W at 2, 5, ... < 3 * s[2]; T the rest
        component = np.zeros(ours.size, np.int64)
        component[1 : 3 * cfg.mrope_section[1] : 3] = 1
        component[2 : 3 * cfg.mrope_section[2] : 3] = 2
    else:
        component = np.repeat(np.arange(len(cfg.mrope_section)) % 3, cfg.mrope_section)
    angle = positions[component].transpose(1, 2, 0) * ours
    tol = scale * 2.0**-22 * (1 + angle)
    if not (np.all(np.abs(our_cos - their_cos) <= tol) and np.all(np.abs(our_sin - their_sin) <= tol)):
        problems.append("M-RoPE cos/sin differ from the rotary module's beyond float32 rounding of the angle")
    apply = getattr(sys.modules[type(model).__module__], "apply_rotary_pos_emb", None)
    if apply is not None:
        q = rng.standard_normal((1, 2, n, cfg.rope.head_dim)).astype(np.float32)
        with torch.no_grad():
            ref, _ = apply(torch.from_numpy(q), torch.from_numpy(q), cos, sin)
        err = float(np.max(np.abs(np.asarray(fp.apply_mrope(q, cfg, positions, seq_axis=-2)) - ref.numpy())))
        if not err <= 1e-5:
            problems.append(f"apply_rotary_pos_emb with M-RoPE cos/sin differs by {err:.3g}")
    if hasattr(model, "get_rope_index") and cfg.image_token_id is not None:
        merge = model.config.vision_config.spatial_merge_size
        image, video = cfg.image_token_id, cfg.video_token_id
        grids_i, grids_v = [[1, 2 * merge, 3 * merge]], [[2, 2 * merge, 2 * merge]]
        frames = [video] * 4 + [7] + [video] * 4 if cfg.split_video_frames else [video] * 8  # GLM-4V: per frame
        row = [5, 6] + [image] * 6 + [7] + frames + [8, 9]
        ids = torch.tensor([[0, 0] + row, [5] * 4 + row[2:]])  # left padding in the first row
        mask = (torch.arange(ids.shape[1]) >= torch.tensor([[2], [0]])).long()
        types = (ids == image).int() + 2 * (ids == video).int()
        video_grids = torch.tensor([grids_v[0], grids_v[0]])
        kwargs = {"second_per_grid_ts": torch.tensor([0.5, 1.5])} if cfg.tokens_per_second is not None else {}
        with torch.no_grad():
            ref_pos, _ = model.get_rope_index(
                ids,
                mm_token_type_ids=types,
                image_grid_thw=torch.tensor(grids_i * 2),
                video_grid_thw=video_grids,
                attention_mask=mask,
                **kwargs,
            )
        ours_pos = fp.mrope_positions(
            ids.numpy(),
            image_grid_thw=grids_i * 2,
            video_grid_thw=video_grids.numpy(),
            attention_mask=mask.numpy(),
            second_per_grid_ts=[0.5, 1.5],
            config=cfg,
        )
        if not np.array_equal(ours_pos, ref_pos.numpy()):
            problems.append("mrope_positions differ from the model's get_rope_index")
    text = getattr(model.config, "text_config", model.config)
    if mech.limit != text.max_position_embeddings:
        problems.append(f"M-RoPE limit {mech.limit}, max_position_embeddings {text.max_position_embeddings}")
    return problems


def _sincos_problems(model, mech) -> list[str]:
    """GPT-J-style attention holding ``embed_positions`` = ``[sin | cos]`` of the angles (RoFormer:
    an embedding module of them, and the modeling file's own ``apply_rotary_position_embeddings``
    against :func:`flax_posenc.apply_rope_qk`, 1e-5 absolute)."""
    from flax_posenc.rope_config import rope_inverse_frequencies

    buffers = [m.embed_positions for m in model.modules() if hasattr(m, "embed_positions")]
    if not buffers:
        return ["we report RoPE; the model has no rotary module"]
    table = buffers[0]
    table = (table.weight if hasattr(table, "weight") else table).detach().double().numpy()
    ours, _ = rope_inverse_frequencies(mech.rope)
    angles = np.arange(table.shape[0])[:, None] * ours[None, :]
    expected = np.concatenate([np.sin(angles), np.cos(angles)], -1)
    if table.shape != expected.shape:
        return [f"embed_positions {table.shape}, ours {expected.shape}"]
    worst = float(np.max(np.abs(table - expected) - 2.0**-22 * (1 + np.abs(np.concatenate([angles, angles], -1)))))
    problems = [] if worst <= 0 else [f"embed_positions differ by up to {worst:.3g}"]
    if mech.limit != table.shape[0]:
        problems.append(f"limit {mech.limit}, embed_positions rows {table.shape[0]}")
    appliers = [m for m in model.modules() if hasattr(m, "apply_rotary_position_embeddings")]
    if appliers:
        problems += _roformer_apply_problems(appliers[0].apply_rotary_position_embeddings, table, mech.rope)
    return problems


def _roformer_apply_problems(apply, table, rope) -> list[str]:
    """RoFormer's own rotation of q and k (sinusoidal_pos = its table's rows) against ours."""
    import torch

    import flax_posenc as fp

    n = min(MAX_POSITIONS, table.shape[0])
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((1, 2, n, rope.head_dim)).astype(np.float32) for _ in range(2))
    pos = torch.from_numpy(table[:n].astype(np.float32))[None, None]
    with torch.no_grad():
        rq, rk = apply(pos, torch.from_numpy(q), torch.from_numpy(k))
    oq, ok = fp.apply_rope_qk(q, k, rope, seq_axis=-2)
    err = max(float(np.max(np.abs(np.asarray(oq) - rq.numpy()))), float(np.max(np.abs(np.asarray(ok) - rk.numpy()))))
    return [] if err <= 1e-5 else [f"apply_rotary_position_embeddings differs by {err:.3g} (layout {rope.layout})"]


def _nope_problems(model, record) -> list[str]:
    flags = {}
    for m in model.modules():
        if hasattr(m, "use_rope") and isinstance(m.use_rope, (bool, int)):
            idx = getattr(m, "layer_idx", None)
            if idx is not None:
                flags[int(idx)] = bool(m.use_rope)
    if not flags:
        return []
    ours_nope = set()
    for mech in record.mechanisms:
        if mech.kind == "nope":
            ours_nope |= set(mech.layers or ())
    theirs = {i for i, v in flags.items() if not v}
    return [] if theirs == ours_nope else [f"NoPE layers {sorted(ours_nope)}, transformers {sorted(theirs)}"]


def _extra_inputs(model) -> dict[str, Any]:
    """What a text model's forward needs besides ``input_ids`` (issue 36): X-MOD's language of each
    sequence (``lang_ids``: its adapters; no default language in the tiny config), LXMERT's visual
    features and their boxes (two objects, zeros: its visual stream, which holds no position table)."""
    import torch

    config = model.config
    kind = getattr(config, "model_type", None)
    if kind == "xmod":
        return {"lang_ids": torch.zeros(1, dtype=torch.long)}
    if kind == "lxmert":
        return {
            "visual_feats": torch.zeros(1, 2, config.visual_feat_dim),
            "visual_pos": torch.zeros(1, 2, config.visual_pos_dim),
        }
    return {}


def _learned_problems(model, mech, directory: Path) -> list[str]:
    import torch
    from safetensors.numpy import load_file

    table = mech.table
    files = sorted(directory.glob("*.safetensors"))
    state = {}
    for f in files:
        state.update(load_file(f))
    keys = [k for k in state if k.endswith(table.key)]
    problems = []
    if not keys:
        return [f"table {table.key} not in the saved checkpoint"]
    if not np.array_equal(state[keys[0]], np.asarray(table.weights)):
        problems.append(f"table {table.key} rows differ from the checkpoint's")
    limit = mech.limit
    if table.key.startswith("text_model.") and hasattr(model, "text_model"):  # a CLIP/SigLIP text tower
        model = model.text_model
    vocab = int(getattr(model.config, "vocab_size", 100) or 100)
    ids = lambda n: torch.full((1, n), min(5, vocab - 1), dtype=torch.long)  # noqa: E731

    def runs(n: int) -> bool:
        try:
            with torch.no_grad():
                if "input_features" in inspect.signature(model.forward).parameters:  # Whisper: its decoder
                    model.get_decoder()(input_ids=ids(n))
                    return True
                kwargs = _extra_inputs(model)
                if "decoder_input_ids" in inspect.signature(model.forward).parameters:
                    kwargs["decoder_input_ids"] = ids(n)
                if getattr(model.config, "model_type", None) == "bros":  # BROS's forward needs its boxes (float)
                    kwargs["bbox"] = torch.zeros(1, n, 4)
                model(input_ids=ids(n), **kwargs)
            return True
        except (IndexError, RuntimeError, ValueError):
            return False

    with quiet():
        ok_at, ok_past = runs(limit), runs(limit + 1)
    if not ok_at:
        problems.append(f"a forward pass of {limit} tokens (our limit) fails in transformers")
    if ok_past:
        problems.append(f"a forward pass of {limit + 1} tokens works in transformers (our limit is {limit})")
    return problems


def _grid_owner(model, key: str):
    """``(embeddings module, grid parameter)`` of the parameter named ``key`` in ``model`` (or, in a
    composite's tower, ``key`` less the composite's prefix): the module that holds the grid (an
    ``nn.Embedding``'s parent) and holds ``interpolate_pos_encoding``; ``None`` when none is named so."""
    import torch

    names = [n for n, _ in model.named_parameters() if key == n or key.endswith("." + n)]
    if not names:
        return None
    name = max(names, key=len)
    path = name.rsplit(".", 1)[0] if "." in name else ""  # Molmo 2: a parameter of the model itself
    owner = model.get_submodule(path)
    param = model.get_parameter(name)
    if isinstance(owner, torch.nn.Embedding) and "." in path:  # an nn.Embedding: its parent
        owner = model.get_submodule(path.rsplit(".", 1)[0])
    return owner, param


def _grid_problems(model, mech) -> list[str]:
    """A vision grid: rows bit-equal to the model's; the embeddings module yields prefix + gh * gw
    tokens (besides DINOv2's registers) at the trained size; fp.resize_grid at twice the size
    within 8 float32 ulps of the model's own float32 interpolate_pos_encoding."""
    import torch

    import flax_posenc as fp

    table = mech.record.table
    if table.family.startswith("sam_vision_grid"):  # SAM's (1, gh, gw, dim) pos_embed: its own check
        return _sam_grid_problems(model, mech)
    found = _grid_owner(model, table.key)
    if found is None:  # saved under the original checkpoint's name (TIPSv2's pos_embed): the row's module name
        from flax_posenc.conversion import grid_tables

        found = _grid_owner(model, grid_tables.GRID_FAMILIES[table.family].key_suffix)
    if found is None:
        return [f"grid {table.key}: no parameter of the model has that name (less a composite's prefix)"]
    emb, stored = found
    stored = stored.detach().numpy().reshape(-1, stored.shape[-1])
    problems = []
    if not np.array_equal(stored, table.weights):
        problems.append(f"grid {table.key} rows differ from the model's")
    config = getattr(model.config, "vision_config", model.config)
    h, w = table.image_size
    with torch.no_grad():
        tokens = _grid_tokens(emb, config, h, w) - _untabled_tokens(model, config)
        if tokens != table.rows:
            problems.append(f"the model yields {tokens} position tokens at {h} x {w} px; we read {table.rows}")
    # the forward's own use of interpolate_pos_encoding (Phi-4's vision embeddings define one they never call)
    interpolates = "interpolate_pos_encoding" in inspect.getsource(type(emb).forward)
    if interpolates != table.interpolation:
        problems.append(f"we say interpolation={table.interpolation}; {type(emb).__name__} differs")
    if table.interpolation and hasattr(emb, "interpolate_pos_encoding"):
        n = table.prefix_tokens + 4 * table.grid[0] * table.grid[1]
        grid = (
            (emb.position_embeddings,)
            if "pos_embeds" in inspect.signature(emb.interpolate_pos_encoding).parameters
            else ()
        )
        with torch.no_grad():  # Hiera's takes the table as an argument
            ref = emb.interpolate_pos_encoding(torch.zeros(1, n, table.dim), *grid, 2 * h, 2 * w)
        ref = ref.reshape(-1, table.dim).numpy()
        ours = np.asarray(fp.resize_grid(table, (2 * h, 2 * w)))
        err = np.abs(ours.astype(np.float64) - ref).max() / np.spacing(np.float32(np.abs(table.weights).max()))
        if ours.shape != ref.shape or err > 8:
            problems.append(f"resize_grid at {2 * h} px differs from interpolate_pos_encoding by {err:.3g} ulps")
    param = found[1]
    if table.resizes_itself and not table.interpolation:
        problems += _self_resize_problems(emb, param, table, config)
    if not table.resizes_itself and not table.interpolation and not hasattr(emb, "layers"):  # Molmo 2: a whole tower
        problems += _fixed_grid_problems(emb, param, table, config, _untabled_tokens(model, config))
    return problems + _past_grid_problems(emb, table, config, _untabled_tokens(model, config))


def _grid_tokens(emb, config, h: int, w: int) -> int:
    """The tokens the embeddings module yields for an ``h x w`` px image, called as the model calls it
    (its first output when it returns a tuple: ViT-MAE's ``(embeddings, mask, ids_restore)``)."""
    import torch

    return _tokens(_call_embeddings(emb, torch.zeros(1, getattr(config, "num_channels", 3), h, w))).shape[1]


def _tokens(out):
    """An embeddings module's output as ``(batch, tokens, dim)``: its first output when it returns a
    tuple (ViT-MAE), a ``(batch, dim, h, w)`` map (ViTDet) flattened row-major."""
    out = getattr(out, "last_hidden_state", out)  # Molmo 2: the tower's own output
    out = out[0] if isinstance(out, tuple) else out
    return out.flatten(2).transpose(1, 2) if out.ndim == 4 else out


def _call_embeddings(emb, pixels):
    """``emb(pixels)``, with every patch kept where the forward takes a ``patch_attention_mask`` (Idefics);
    Unlimited-OCR's encoder takes SAM's feature map instead of pixels: zeros of its grid."""
    import torch

    if "target_sizes" in inspect.signature(emb.forward).parameters:  # MiniCPM: one image of gh x gw patches
        ph, pw = _pair(emb.patch_size)
        return emb(pixels, target_sizes=torch.tensor([[pixels.shape[2] // ph, pixels.shape[3] // pw]]))
    if isinstance(getattr(emb, "patch_embedding", None), torch.nn.Linear) and not hasattr(emb, "embeddings"):
        ph, pw = _pair(emb.config.patch_size)  # Molmo 2's tower takes its image as rows of flattened patches
        patches = (pixels.shape[2] // ph) * (pixels.shape[3] // pw)
        return emb(torch.zeros(pixels.shape[0], patches, pixels.shape[1] * ph * pw))
    if "patch_embeds" in inspect.signature(emb.forward).parameters:
        ph, pw = _pair(emb.patch_size)
        return emb(torch.zeros(pixels.shape[0], emb.embed_dim, pixels.shape[2] // ph, pixels.shape[3] // pw))
    if "patch_attention_mask" in inspect.signature(emb.forward).parameters:
        ph, pw = _pair(emb.patch_size)
        mask = torch.ones(pixels.shape[0], pixels.shape[2] // ph, pixels.shape[3] // pw, dtype=torch.bool)
        return emb(pixels, patch_attention_mask=mask)
    return emb(pixels)


def _pair(value) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, (tuple, list)) else (int(value), int(value))


def _added_rows(emb, param, pixels):
    """``(rows, scale)``: what the embeddings module adds for its position parameter ``param`` to
    ``pixels`` (its output less its output with ``param`` zeroed), float64 ``(tokens, dim)``, and the
    output's largest magnitude (the ulp scale of the difference)."""
    import torch

    with torch.no_grad():
        out = _tokens(_call_embeddings(emb, pixels))
        saved = param.detach().clone()
        param.zero_()
        try:
            base = _tokens(_call_embeddings(emb, pixels))
        finally:
            param.copy_(saved)
    return (out - base)[0].double().numpy(), float(max(out.abs().max(), base.abs().max()))


def _self_resize_problems(emb, param, table, config) -> list[str]:
    """A model that resizes its grid in its forward, with no ``interpolate_pos_encoding`` (Idefics'
    bucketed position ids, ViTDet): the rows its forward adds (:func:`_added_rows`) at twice the
    size and at (gh + 2) x (gw + 1) patches, against ``fp.resize_grid``."""
    import torch

    import flax_posenc as fp

    problems = []
    (ph, pw), (gh, gw) = table.patch_size, table.grid
    for nh, nw in ((2 * gh, 2 * gw), (gh + 2, gw + 1)):
        pixels = torch.zeros(1, getattr(config, "num_channels", 3), nh * ph, nw * pw)
        ref, scale = _added_rows(emb, param, pixels)
        ours = np.asarray(fp.resize_grid(table, (nh * ph, nw * pw))).reshape(-1, table.dim)
        if ref.shape[0] == ours.shape[0] - table.prefix_tokens:  # ViTDet: the class row is not added
            ours = ours[table.prefix_tokens :]
        err = np.abs(ours.astype(np.float64) - ref).max() / np.spacing(np.float32(scale))
        if ours.shape != ref.shape or err > 8:
            problems.append(
                f"resize_grid to {nh} x {nw} patches differs from the model's own forward by {err:.3g} ulps"
            )
    return problems


def _fixed_grid_problems(emb, param, table, config, untabled: int) -> list[str]:
    """A grid added as stored (no interpolation, no resize: AIMv2, Ovis 2, EoMT, MGP-STR): the rows its
    forward adds at the trained size, token by token (less the leading tokens that take none:
    EoMT's class token and registers), equal to the table's rows in order."""
    import torch

    h, w = table.image_size
    ref, scale = _added_rows(emb, param, torch.zeros(1, getattr(config, "num_channels", 3), h, w))
    ref = ref[untabled:] if untabled > 0 else ref
    if ref.shape != table.weights.shape:
        return [f"the forward adds {ref.shape[0]} position rows at {h} x {w} px; we read {table.rows}"]
    err = np.abs(table.weights.astype(np.float64) - ref).max() / np.spacing(np.float32(scale))
    return [] if err <= 2 else [f"the rows the forward adds differ from the table's by {err:.3g} ulps (order?)"]


def _untabled_tokens(model, config) -> int:
    """Tokens the embeddings module yields that take no row of the grid: DINOv2's and TIPSv2's
    registers, and EoMT's class token and registers (its grid has no prefix row)."""
    registers = getattr(config, "num_register_tokens", 0) or 0
    if type(model).__name__.startswith(("Eomt", "Videomt")):
        return 1 + registers
    if type(model).__name__.startswith(("VitDet", "LwDetr")):  # a class row, no class token
        return -1
    return registers


def _past_grid_problems(emb, table, config, untabled: int = 0) -> list[str]:
    """An image one patch larger on each side, given to the embeddings module as it is called by
    default: refused (a ValueError or RuntimeError) when we say the model does not resize its grid,
    else ``prefix + (gh + 1) * (gw + 1)`` tokens (besides registers)."""
    import torch

    (ph, pw), (gh, gw) = table.patch_size, table.grid
    pixels = torch.zeros(1, getattr(config, "num_channels", 3), (gh + 1) * ph, (gw + 1) * pw)
    try:
        with torch.no_grad(), quiet():
            out = _call_embeddings(emb, pixels)
    except (ValueError, RuntimeError):
        out = None
    if out is None:
        return ["we say the model resizes its grid itself; its embeddings refuse a larger image"] * table.resizes_itself
    if not table.resizes_itself:
        return ["we say the model refuses another image size; its embeddings take one patch more a side"]
    tokens = _tokens(out).shape[1] - untabled
    want = table.prefix_tokens + (gh + 1) * (gw + 1)
    return [] if tokens == want else [f"one patch more a side: the model yields {tokens} tokens, {want} expected"]


def _audio_table_problems(model, mech, directory: Path) -> list[str]:
    """Whisper's encoder table: rows equal to the checkpoint's and to transformers' own
    ``sinusoids()``; the limit it enforces: a forward pass of ``limit`` encoder positions
    (``2 * limit`` mel frames) works and one of ``limit + 1`` fails; the seconds at 50 positions/s."""
    import torch
    from safetensors.numpy import load_file

    table = mech.table
    state = {}
    for f in sorted(directory.glob("*.safetensors")):
        state.update(load_file(f))
    keys = [k for k in state if k.endswith(table.key)]
    if not keys:
        return [f"table {table.key} not in the saved checkpoint"]
    problems = []
    if not np.array_equal(state[keys[0]], np.asarray(table.weights)):
        problems.append(f"table {table.key} rows differ from the checkpoint's")
    sinusoids = getattr(
        sys.modules[type(model).__module__], "sinusoids", None
    )  # Whisper's init (issue 36: others learn it)
    if sinusoids is not None and not np.array_equal(
        sinusoids(table.rows, table.dim).numpy(), np.asarray(table.weights)
    ):
        problems.append(f"table {table.key} differs from transformers' sinusoids({table.rows}, {table.dim})")
    # Whisper: its encoder; a Whisper-like encoder model type (Qwen2-Audio's, Voxtral's, ...): the model itself
    encoder = model if type(model).__name__.endswith("Encoder") else model.get_encoder()
    bins = model.config.num_mel_bins
    masked = "input_features_mask" in inspect.signature(encoder.forward).parameters  # AudioFlamingo 3 needs it

    def runs(frames: int) -> bool:
        kwargs = {"input_features_mask": torch.ones(1, frames, dtype=torch.long)} if masked else {}
        try:
            with torch.no_grad():
                encoder(torch.zeros(1, bins, frames), **kwargs)
            return True
        except (IndexError, RuntimeError, ValueError):
            return False

    with quiet():
        if not runs(2 * mech.limit):
            problems.append(f"an encoder pass of {2 * mech.limit} mel frames ({mech.limit} positions) fails")
        if runs(2 * mech.limit + 2):
            problems.append(f"an encoder pass of {2 * mech.limit + 2} mel frames works (our limit is {mech.limit})")
    if mech.record.seconds_limit != mech.limit / 50:
        problems.append(f"{mech.record.seconds_limit} s for {mech.limit} positions (Whisper: 50 per second)")
    return problems


def _computed_sinusoid_problems(model, mech) -> list[str]:
    """The model's own sinusoid buffers (every ``embed_positions.weights``, CTRL's ``pos_encoding``,
    PEGASUS-X's module output at positions ``0 .. 63``)
    against ours, row by row (float32 rounding of transformers' own angle, whose frequencies are
    written here from the formula), and the limit: none (a forward pass twice the declared length
    works), or CTRL's rows (a forward pass of ``limit`` tokens works and one of ``limit + 1`` fails)."""
    import torch

    rec = mech.record
    modules = [m for m in model.modules() if type(m).__name__.endswith("SinusoidalPositionalEmbedding")]
    stored = [m for m in modules if hasattr(m, "weights") or hasattr(m, "weight")]
    buffers = [m.weights if hasattr(m, "weights") else m.weight for m in stored]
    with torch.no_grad():  # PEGASUS-X: computed at every call, from position 0
        buffers += [m(torch.zeros(1, MAX_POSITIONS, rec.dim))[0] for m in modules if m not in stored]
    buffers += [b for name, b in model.named_buffers() if name.split(".")[-1] == "pos_encoding"]
    if not buffers:
        return ["we report computed sinusoids; the model has no sinusoidal module"]
    problems = []
    half = rec.dim // 2
    if rec.endpoint:  # fairseq: exp(-i ln(10000) / (half - 1))
        freqs = np.exp(-np.arange(half) * np.log(10000.0) / (half - 1))
    else:  # CTRL's angle_defn: 1 / 10000 ** (2 (i // 2) / d_model) at the even i
        freqs = 1.0 / 10000.0 ** (2 * np.arange(half) / rec.dim)
    for weights in buffers:
        theirs = weights.detach().double().numpy()
        rows = np.arange(theirs.shape[0])
        ours = rec.values(rows)
        if rec.offset:
            ours[rec.offset - 1] = 0.0  # the padding row
        angle = np.concatenate([rows[:, None] * freqs[None, :]] * 2, -1)
        reference = np.concatenate([np.sin(angle[:, :half]), np.cos(angle[:, half:])], -1)
        if rec.cos_first:  # MusicGen: [cos | sin]
            reference = np.concatenate([np.cos(angle[:, :half]), np.sin(angle[:, half:])], -1)
        if rec.offset:
            reference[rec.offset - 1] = 0.0
        tol = 2.0**-22 * (1 + angle)
        worst = max(float(np.max(np.abs(theirs - ours) - tol)), float(np.max(np.abs(reference - ours) - tol)))
        if worst > 0:
            problems.append(f"sinusoid rows differ by up to {worst:.3g}")
        if rec.rows is not None and theirs.shape[0] != rec.rows:
            problems.append(f"the model computes {theirs.shape[0]} rows; we read {rec.rows}")
    if "past_values" in inspect.signature(model.forward).parameters:  # time series: rows of time steps
        return problems + _time_series_limit_problems(model, rec, stored)
    takes_decoder = "decoder_input_ids" in inspect.signature(model.forward).parameters

    features = "input_features" in inspect.signature(model.forward).parameters

    def runs(n: int) -> bool:
        ids = torch.full((1, n), 5, dtype=torch.long)
        kwargs = {"decoder_input_ids": ids} if takes_decoder else {}
        if features:  # Speech2Text: n encoder positions after its subsampling (stride 2 per conv layer)
            cfg = model.config
            frames = n * 2**cfg.num_conv_layers
            kwargs["input_features"] = torch.zeros(1, frames, cfg.input_feat_per_channel * cfg.input_channels)
        else:
            kwargs["input_ids"] = ids
        try:
            with torch.no_grad(), quiet():
                model(**kwargs)
            return True
        except (IndexError, RuntimeError, ValueError):
            return False

    if rec.limit is None:
        n = 2 * int(getattr(model.config, "max_position_embeddings", 64))
        if not runs(n):
            problems.append(f"a forward pass of {n} tokens fails; we report no limit")
    else:
        if not runs(rec.limit):
            problems.append(f"a forward pass of {rec.limit} tokens (our limit) fails in transformers")
        if runs(rec.limit + 1):
            problems.append(
                f"a forward pass of {rec.limit + 1} tokens works in transformers (our limit is {rec.limit})"
            )
    return problems


def _time_series_limit_problems(model, rec, modules) -> list[str]:
    """A time series model's sinusoid tables: each of its modules (encoder's, decoder's) answers
    positions ``0 .. limit - 1`` and refuses ``limit``; the whole model runs at its configured
    context and prediction lengths (the decoder's last step reads row ``limit - 1``)."""
    import torch

    problems = []
    if rec.limit is None:
        return ["we report no limit; a time series table has context_length + prediction_length rows"]
    for module in modules:
        try:
            with torch.no_grad():
                module(torch.Size([1, rec.limit]), position_ids=torch.arange(rec.limit))
        except IndexError:
            problems.append(f"{type(module).__name__} refuses time step {rec.limit - 1} (our last)")
        try:
            with torch.no_grad():
                module(torch.Size([1, rec.limit + 1]), position_ids=torch.arange(rec.limit + 1))
            problems.append(f"{type(module).__name__} answers time step {rec.limit} (our limit is {rec.limit})")
        except IndexError:
            pass
    cfg = model.config
    past = cfg.context_length + max(cfg.lags_sequence)
    future = cfg.prediction_length
    features = cfg.num_time_features
    try:
        with torch.no_grad(), quiet():
            model(
                past_values=torch.randn(1, past),
                past_time_features=torch.randn(1, past, features),
                past_observed_mask=torch.ones(1, past),
                future_values=torch.randn(1, future),
                future_time_features=torch.randn(1, future, features),
            )
    except (IndexError, RuntimeError, ValueError) as e:
        problems.append(f"a forward pass of {cfg.context_length} + {future} time steps fails: {e}"[:200])
    if rec.limit != cfg.context_length + future:
        problems.append(f"limit {rec.limit}, context_length + prediction_length {cfg.context_length + future}")
    return problems


def _deberta_problems(model, mech) -> list[str]:
    """Relative positions equal the modeling file's own ``build_relative_position``; rows equal
    ``rel_embeddings``."""
    import torch

    module = sys.modules[type(model).__module__]
    cfg = mech.record.config
    n = 48
    hidden = torch.zeros(1, n, 4)
    params = inspect.signature(module.build_relative_position).parameters
    kwargs = {"bucket_size": cfg.position_buckets, "max_position": cfg.max_position} if "bucket_size" in params else {}
    sizes = list(params)[0] == "query_size"  # SEW-D: the older signature, (query_size, key_size, ...)
    theirs = module.build_relative_position(*((n, n) if sizes else (hidden, hidden)), **kwargs).numpy().reshape(n, n)
    problems = []
    if not np.array_equal(cfg.relative_positions_np(n, n), theirs):
        problems.append("DeBERTa relative positions differ from build_relative_position")
    tables = [
        m.rel_embeddings for m in model.modules() if isinstance(getattr(m, "rel_embeddings", None), torch.nn.Embedding)
    ]
    rows = tables[0].weight.shape[0]  # DeBERTa: encoder.rel_embeddings; SEW-D: encoder.encoder.rel_embeddings
    if rows != cfg.rows:
        problems.append(f"DeBERTa rel_embeddings rows {rows}, ours {cfg.rows}")
    return problems


def _bias_modules(model, stack: str, layer: int):
    """The attention modules of ``stack`` holding a relative-attention bias, in layer order."""
    found = []
    for name, m in model.named_modules():
        if hasattr(m, "relative_attention_bias") and hasattr(m, "compute_bias"):
            if getattr(m, "has_relative_attention_bias", True) and (
                f"{stack}." in f".{name}" or stack == "encoder" and not name.startswith("decoder")
            ):
                found.append(m)
    if (
        not found
        and stack == "decoder"
        and not any(n.startswith(("encoder", "decoder")) for n, _ in model.named_modules())
    ):
        # a decoder alone (Pix2Struct's text model): its modules are not named for a stack
        found = [m for _, m in model.named_modules() if getattr(m, "has_relative_attention_bias", False)]
    return found


def _bucket_problems(module, table, n: int) -> list[str]:
    """The module's own ``_relative_position_bucket`` and weights against ours (LongT5's local attention)."""
    import torch

    rp = torch.arange(-4 * n, 4 * n + 1)
    b = table.buckets
    theirs = module._relative_position_bucket(
        rp, bidirectional=b.bidirectional, num_buckets=b.num_buckets, max_distance=b.max_distance
    )
    problems = []
    if not np.array_equal(theirs.numpy(), table.buckets.buckets(rp.numpy())):
        problems.append(f"{table.stack} buckets differ from the model's _relative_position_bucket")
    if not np.array_equal(module.relative_attention_bias.weight.detach().numpy(), np.asarray(table.weights)):
        problems.append(f"{table.stack} bias table differs from the model's")
    return problems


def _relative_bias_problems(model, mech) -> list[str]:
    """Every bias table's values: ours ``weights[bucket(k - q)]`` equals the model's own computed bias."""
    import torch

    n = 40
    problems = []
    for table in mech.record.tables:
        q = np.arange(n)[:, None]
        ours = np.asarray(table.weights, np.float64)[table.buckets.buckets(np.arange(n)[None, :] - q)]  # (q, k, heads)
        ours = np.moveaxis(ours, -1, 0)
        with torch.no_grad():
            if hasattr(model, "encoder") and hasattr(model.encoder, "compute_position_bias"):  # MPNet
                theirs = model.encoder.compute_position_bias(torch.zeros(1, n, 4))[0]
            else:
                modules = _bias_modules(model, table.stack, table.layer)
                if not modules:
                    problems.append(f"{table.stack} bias: no attention module with a relative bias")
                    continue
                module = modules[table.layer if len(modules) > 1 else 0]
                if len(inspect.signature(module.compute_bias).parameters) == 1:  # LongT5's local blocks
                    problems += _bucket_problems(module, table, n)
                    continue
                theirs = module.compute_bias(n, n)[0]
        if theirs.shape != ours.shape or not np.array_equal(theirs.double().numpy(), ours):
            problems.append(f"{table.stack} relative bias differs from the model's compute_bias")
    return problems


#: Model types whose attention module's ``scaling`` is not the softmax scale itself:
#: ``openai_privacy_filter`` multiplies queries and keys each by ``scaling`` (``head_dim ** -0.25``).
SCALING_APPLIED_TWICE = {"openai_privacy_filter"}


def _softmax_scale_problems(model, mech) -> list[str]:
    """The record's ``softmax_scale`` against the ``scaling`` of every decoder attention module of
    the layers it serves (instantiated with the model: no forward pass)."""
    found = []
    for m in model.modules():
        scaling, layer = getattr(m, "scaling", None), getattr(m, "layer_idx", None)
        if isinstance(scaling, (int, float)) and not isinstance(scaling, bool) and isinstance(layer, int):
            if mech.layers is None or layer in mech.layers:
                found.append((layer, float(scaling)))
    if model.config.model_type in SCALING_APPLIED_TWICE:
        found = [(layer, s * s) for layer, s in found]
    ours = mech.softmax_scale
    bad = [(layer, s) for layer, s in found if ours is None or not np.isclose(ours, s, rtol=1e-6, atol=0)]
    if bad:
        return [f"softmax_scale {ours}, the attention module of layer {bad[0][0]} scales by {bad[0][1]}"]
    return []


#: transformers' function of the position that scales the queries of a ``llama_4_scaling_beta`` model.
QUERY_SCALE_FUNCTION = "get_llama_4_attn_scale"
#: Tokens of the forward pass the query scale is watched in (past several steps of a tiny original length).
QUERY_SCALE_TOKENS = 23


def _query_scale_problems(model, ropes) -> list[str]:
    """The records' ``query_scale`` against transformers' own ``get_llama_4_attn_scale``: wrapped in
    every modeling module of the model that holds it (Mistral 4 imports Ministral 3's), each call of a
    forward pass of :data:`QUERY_SCALE_TOKENS` tokens is compared with
    :func:`flax_posenc.attention_temperature` (``position_offset=0``) at the same positions. A
    modeling file with the function and no query scale reported, or a query scale reported and no
    call, is a problem."""
    import flax_posenc as fp

    ours = {m.record.query_scale for m in ropes}
    modules = {sys.modules.get(type(m).__module__) for m in model.modules()}
    holders = sorted(
        (m for m in modules if m is not None and hasattr(m, QUERY_SCALE_FUNCTION)), key=lambda m: m.__name__
    )
    if not holders:
        return [] if ours == {None} else [f"query_scale {sorted(ours, key=str)}: the model never scales its queries"]
    if None in ours:
        return [
            f"{holders[0].__name__.rsplit('.', 1)[-1]} scales queries by {QUERY_SCALE_FUNCTION}; we report no query_scale"
        ]
    if len(ours) != 1:
        return [f"query_scale differs between the RoPE records: {sorted(ours)}"]
    ((beta, original),) = ours
    import torch

    calls = []
    real = {m: getattr(m, QUERY_SCALE_FUNCTION) for m in holders}

    def watched(fn):
        def call(position_ids, *args, **kwargs):
            out = fn(position_ids, *args, **kwargs)
            calls.append((position_ids.detach().numpy().copy(), out.detach().numpy().copy()))
            return out

        return call

    ids = torch.full((1, QUERY_SCALE_TOKENS), 5, dtype=torch.long)
    ids[0, ::2] = 3
    try:
        for m, fn in real.items():
            setattr(m, QUERY_SCALE_FUNCTION, watched(fn))
        with torch.no_grad(), quiet():
            model(input_ids=ids, use_cache=False)
    except Exception as e:  # noqa: BLE001 - reported as a problem, not raised
        return [f"query scale check: transformers' forward fails: {type(e).__name__}: {e}"[:200]]
    finally:
        for m, fn in real.items():
            setattr(m, QUERY_SCALE_FUNCTION, fn)
    if not calls:
        return [f"query_scale {(beta, original)}: transformers' forward never called {QUERY_SCALE_FUNCTION}"]
    problems = []
    for positions, theirs in calls:
        mine = np.asarray(fp.attention_temperature(positions, floor_scale=original, attn_scale=beta, position_offset=0))
        mine = mine.reshape(theirs.shape)  # theirs: (batch, 1, seq, 1)
        if not np.allclose(mine, theirs, rtol=1e-6, atol=0):
            err = float(np.max(np.abs(mine - theirs)))
            problems.append(f"query_scale {(beta, original)}: {QUERY_SCALE_FUNCTION} differs by {err:.3g}")
            break
    if all(np.all(theirs == 1.0) for _, theirs in calls):
        problems.append(f"query scale check: the factor never steps in {QUERY_SCALE_TOKENS} tokens (tiny config)")
    return problems


#: Tokens of the forward pass the rotation is watched in (distinct from every tiny head count and width).
FORWARD_TOKENS = 7

#: Parameter/buffer name parts that hold positions (a learned table, a bias, a rotary module's state).
_POSITION_NAME = re.compile(
    r"^(position\w*|pos_\w*|\w*_pos|\w*pos_emb\w*|\w*rotary\w*|\w*rope\w*|rel_\w*|relative\w*|\w*alibi\w*)$", re.I
)


#: Top-level submodules of a composite model that are not its language model: their position
#: tensors (a vision tower's grid) are not what the model type's text record reads.
_OTHER_TOWERS = ("visual", "vision_tower", "vision_model", "audio_tower", "audio_model")


def _is_rotation_function(name: str, value) -> bool:
    """A modeling file's function that rotates queries or keys (``apply_rotary_pos_emb``,
    ``apply_rotary_pos_emb_interleave``, ``apply_rotary_emb``, ...)."""
    low = name.lower()
    return inspect.isfunction(value) and low.startswith("apply") and ("rotary" in low or "rope" in low)


class _RotationWatch:
    """Wraps every rotation function of the modeling modules the model's submodules come from, and
    records each call with the decoder layer it ran in: ``calls[layer] = [(name, inputs, outputs)]``.

    The layer is the index of the outermost ``ModuleList`` entry (``layers.3``) whose forward is
    running when the rotation is called; a call outside any layer is recorded under ``None``."""

    def __init__(self, model):
        self.model = model
        self.calls: dict[int | None, list[tuple[str, list, list]]] = {}
        self.ran: set[int] = set()  # the layers whose forward ran
        self.indexer_calls = 0  # rotations inside a DSA indexer (not the attention's; see _forward_problems)
        self.stack: list[int] = []
        self._patches: list[tuple[Any, str, Any]] = []
        self._hooks: list[Any] = []

    def __enter__(self):
        import torch

        modules = {type(m).__module__ for m in self.model.modules()}
        for module_name in sorted(modules):
            module = sys.modules.get(module_name)
            if module is None or not module_name.startswith("transformers.models."):
                continue
            for name, value in list(vars(module).items()):
                if _is_rotation_function(name, value):
                    self._patches.append((module, name, value))
                    setattr(module, name, self._wrap(name, value))
                elif inspect.isclass(value) and value.__module__ == module_name:
                    # a rotation written as a static method of the attention (RoFormer's
                    # apply_rotary_position_embeddings)
                    for attr, raw in list(vars(value).items()):
                        if isinstance(raw, staticmethod) and _is_rotation_function(attr, raw.__func__):
                            self._patches.append((value, attr, raw))
                            setattr(value, attr, staticmethod(self._wrap(attr, raw.__func__)))
        lists = [m for m in self.model.modules() if isinstance(m, torch.nn.ModuleList)]
        for modules_list in lists:
            for i, layer in enumerate(modules_list):
                self._hooks.append(layer.register_forward_pre_hook(lambda *_, i=i: self._enter(i)))
                self._hooks.append(layer.register_forward_hook(lambda *_: self._leave()))
        return self

    def _enter(self, i: int) -> None:
        if not self.stack:
            self.ran.add(i)
        self.stack.append(i)

    def _leave(self) -> None:  # a forward hook returning a value would replace the layer's output
        self.stack.pop()

    def __exit__(self, *exc):
        for module, name, value in self._patches:
            setattr(module, name, value)
        for hook in self._hooks:
            hook.remove()
        return False

    def _wrap(self, name, fn):
        import torch

        def watched(*args, **kwargs):
            out = fn(*args, **kwargs)
            if _inside_indexer():
                self.indexer_calls += 1
                return out
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            ins = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
            layer = self.stack[0] if self.stack else None
            self.calls.setdefault(layer, []).append(
                (name, [t.detach().clone() for t in ins], [t.detach().clone() for t in outs if torch.is_tensor(t)])
            )
            return out

        return watched


def _inside_indexer() -> bool:
    """Whether the rotation is called from a DSA lightning indexer (``*Indexer.forward``): it
    rotates the indexer's own keys to choose which keys the attention reads, not the attention's."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            return False
        owner = frame.f_locals.get("self")
        if owner is not None and "Indexer" in type(owner).__name__:
            return True
        frame = frame.f_back
    return False


def _rotated_pairs(inputs, outputs):
    """``(x, rotated x)`` for each output of a rotation call: the first unused input of its shape
    and dtype (``q`` with ``q_embed``, ``k`` with ``k_embed``; Gemma 4's one ``x`` per call)."""
    pairs, used = [], set()
    for out in outputs:
        for j, x in enumerate(inputs):
            if j not in used and x.shape == out.shape and x.dtype == out.dtype and not x.is_complex():
                used.add(j)
                pairs.append((x, out))
                break
    return pairs


def _gram(x: np.ndarray, seq_axis: int) -> np.ndarray:
    """Dot products of every position's vector with every other's, per head: what attention sees
    of a rotation (a fixed permutation of the features, applied to q and k alike, leaves it)."""
    x = np.moveaxis(x, seq_axis, -2)
    return np.einsum("...sd,...td->...st", x, x)


#: One ``apply_rope_qk`` call per distinct RoPE of a model rotates every recorded tensor at once,
#: its rows padded to a multiple of this (few compiled shapes across the suite).
_ROWS = 64


def _rotation_call(label: str, rope, name: str, x, out):
    """A recorded rotation as ``(label, rope, name, x, out, seq_axis)`` (float64), or the problem
    when it cannot be ours: no axis of the positions, or a width neither our head nor rotary width."""
    x, out = x.double().numpy(), out.double().numpy()
    n = FORWARD_TOKENS
    if x.ndim < 3 or n not in x.shape[-3:-1]:
        return f"{label}: {name} rotated a tensor of shape {tuple(x.shape)}, no axis of the {n} positions"
    if x.shape[-1] not in (rope.head_dim, rope.rotary_dim):  # the rotary slice only: Phi, GLM, MLA
        return (
            f"{label}: {name} rotates {x.shape[-1]} dims per head; we report head_dim {rope.head_dim} "
            f"(rotary_dim {rope.rotary_dim})"
        )
    return (label, rope, name, x, out, -2 if x.shape[-2] == n else -3)


def _ours(calls: list) -> list[np.ndarray]:
    """:func:`flax_posenc.apply_rope_qk` of every recorded input, one call per distinct RoPE; a
    rotary slice is padded to the head width and cut back."""
    import flax_posenc as fp

    n = FORWARD_TOKENS
    out: list[Any] = [None] * len(calls)
    by_rope: dict[Any, list[int]] = {}
    for i, call in enumerate(calls):
        by_rope.setdefault(call[1], []).append(i)
    for rope, members in by_rope.items():
        rows = []
        for i in members:
            x = np.moveaxis(calls[i][3], calls[i][5], -2).reshape(-1, n, calls[i][3].shape[-1])
            rows.append(np.concatenate([x, np.zeros((*x.shape[:-1], rope.head_dim - x.shape[-1]))], -1))
        stacked = np.concatenate(rows)
        total = -(-len(stacked) // _ROWS) * _ROWS
        stacked = np.concatenate([stacked, np.zeros((total - len(stacked), n, rope.head_dim))])[None]
        q = stacked.astype(np.float32)
        rotated = np.asarray(fp.apply_rope_qk(q, q[:, :1], rope, seq_axis=-2)[0], np.float64)[0]
        start = 0
        for i in members:
            x, seq_axis = calls[i][3], calls[i][5]
            moved = np.moveaxis(x, seq_axis, -2)
            count = int(np.prod(moved.shape[:-2]))
            block = rotated[start : start + count, :, : x.shape[-1]].reshape(moved.shape)
            out[i] = np.moveaxis(block, -2, seq_axis)
            start += count
    return out


def _rotation_problems(call, ours: np.ndarray) -> list[str]:
    """One rotation of transformers' forward against ``apply_rope_qk`` with our layer RoPE: equal
    within ``1e-5`` relative, or the same ``q . k`` products (a fixed reordering of the pairs)."""
    label, rope, name, x, out, seq_axis = call
    err = float(np.max(np.abs(ours - out)))
    if err <= 1e-5 * (1 + float(np.max(np.abs(out)))):
        return []
    gram_ours, gram_theirs = _gram(ours, seq_axis), _gram(out, seq_axis)
    gram_err = float(np.max(np.abs(gram_ours - gram_theirs)))
    if gram_err <= 1e-5 * (1 + float(np.max(np.abs(gram_theirs)))):
        return []  # DeepSeek's de-interleaving: the same rotation, its pairs listed first-members-first
    return [
        f"{label}: transformers' forward rotates with {name}; apply_rope_qk (layout {rope.layout}, head_dim "
        f"{rope.head_dim}, rotary_dim {rope.rotary_dim}) differs by {err:.3g} (q.k by {gram_err:.3g})"
    ]


def _forward_problems(model, directory: Path, record) -> tuple[list[str], str | None]:
    """Run the tiny model's forward once and compare, layer by layer, what its attention does with
    what :func:`~flax_posenc.conversion.rope_for_layer` says: a layer that rotates where we give
    NoPE, a layer that does not where we give RoPE, and every rotated ``q``/``k`` (inputs recorded
    from the modeling file's own rotation function, wrapped while the forward runs) against
    :func:`flax_posenc.apply_rope_qk` with our layer's RoPE at positions ``0 .. n - 1``.

    Returns the problems and the name of the rotation function the attention called (the first
    layer's; ``None`` when none was), for the rotary module check to use the same one.

    Calls from a DSA lightning indexer (DeepSeek-V3.2, AXK2, GLM-MoE-DSA: ``*Indexer.forward``)
    are counted, not compared: the indexer scores which keys the attention may read (its own
    rotation, half layout in DeepSeek-V3.2); the attention's own rotation is what is compared."""
    import torch

    from flax_posenc.conversion import rope_for_layer

    config = getattr(model.config, "text_config", None) or model.config
    count = getattr(config, "num_hidden_layers", None)
    if not isinstance(count, int):
        return ["forward check: the config has no num_hidden_layers"], None
    ids = torch.full((1, FORWARD_TOKENS), 5, dtype=torch.long)
    ids[0, ::2] = 3
    with _RotationWatch(model) as watch, torch.no_grad(), quiet():
        try:
            if run_forward(model, FORWARD_TOKENS):  # audio encoders, codecs, towers: conformance.forward_inputs
                pass
            elif "input_values" in inspect.signature(model.forward).parameters:  # Moonshine: audio in, and
                # 3199 samples make 7 encoder frames (its convolutions: kernel/stride 127/64, 7/3, 3/2)
                model(input_values=torch.zeros(1, 3199), decoder_input_ids=ids, use_cache=False)
            else:
                model(input_ids=ids, use_cache=False)
        except Exception as e:  # noqa: BLE001 - reported as a problem, not raised
            problem = f"forward check: transformers' forward of {FORWARD_TOKENS} tokens fails: {type(e).__name__}: {e}"
            return [problem[:200]], None
    problems = []
    if None in watch.calls:
        problems.append(f"forward check: {watch.calls[None][0][0]} called outside the decoder layers")
    if not watch.ran:
        return problems + ["forward check: no decoder layer (a ModuleList entry) ran"], None
    # the layers transformers built and ran (HRM's num_hidden_layers counts the cycles of 4 modules)
    rotations: list[Any] = []
    for layer in sorted(watch.ran & set(range(count))):
        rope = _tower_rope(record, layer) if _other_tower(record) else rope_for_layer(directory, layer)
        calls = watch.calls.get(layer, [])
        label = f"layer {layer}"
        if rope is None and calls:
            problems.append(f"{label}: we give NoPE; transformers' forward rotates with {calls[0][0]}")
        elif rope is not None and not calls:
            problems.append(f"{label}: we give RoPE; transformers' forward applies no rotation there")
        for name, inputs, outputs in calls if rope is not None else ():
            pairs = _rotated_pairs(inputs, outputs)
            if not pairs:
                problems.append(f"{label}: {name} returned no rotated tensor")
            for x, out in pairs:
                call = _rotation_call(label, rope, name, x, out)
                if isinstance(call, str):
                    problems.append(call)
                else:
                    rotations.append(call)
    for call, ours in zip(rotations, _ours(rotations), strict=True):
        problems += _rotation_problems(call, ours)
    for mech in record.mechanisms:  # every per-layer mechanism is seen by the forward: else the tiny model is too small
        if mech.kind in ("rope", "nope") and mech.layers is not None and not set(mech.layers) & watch.ran:
            problems.append(f"forward check: no layer of {mech.record.label} ran in the tiny model")
    called = next(
        (calls[0][0] for _, calls in sorted(watch.calls.items(), key=lambda item: str(item[0])) if calls), None
    )
    return list(dict.fromkeys(problems)), called


def _other_tower(record) -> bool:
    """Whether ``record`` holds a composite's non-text tower (GLM-ASR's audio encoder): its layers'
    RoPE is the tower's own record's, not what ``rope_for_layer`` gives for the composite's
    checkpoint (its text tower's)."""
    return any(m.kind in ("rope", "nope") and m.tower != "text" for m in record.mechanisms)


def _tower_rope(record, layer: int):
    """The RoPE (``None``: NoPE) the tower's own mechanisms give layer ``layer``."""
    for mech in record.mechanisms:
        if mech.kind in ("rope", "nope") and (mech.layers is None or layer in mech.layers):
            return mech.record.rope if mech.kind == "rope" else None
    return None


def _position_parameter_problems(model, record) -> list[str]:
    """Trainable parameters of a rotary module (Mistral Large 4's ``alpha``), and any parameter
    whose name says it holds positions, that no mechanism we report reads: "position parameters
    not read"."""
    covered = []
    for mech in record.mechanisms:
        table = getattr(mech.record, "table", None)
        if getattr(table, "key", None):
            covered.append(table.key)
        if mech.kind == "deberta_relative":  # the rows, and the attention's projections of them (its own weights)
            covered += ["rel_embeddings", "attention.self.pos_"]
        if mech.kind == "relative_bias":  # T5/MPNet buckets: every stack's relative_attention_bias
            covered.append("relative_attention_bias")
        if mech.kind == "window_bias":  # every layer's table or cpb_mlp (its hook counts them against the model's)
            covered += ["relative_position_bias_table", "continuous_position_bias_mlp"]
        if mech.kind == "detr_positions" and mech.record.key:  # DETR's learned row and column tables
            covered += [mech.record.key, mech.record.column_key]
        if mech.kind == "detr_positions":  # a head's modules named like positions that take none (its row says)
            from flax_posenc.conversion.detr_positions import DETR_POSITION_FAMILIES

            covered += list(getattr(DETR_POSITION_FAMILIES.get(mech.record.family), "not_positions", ()))
        if mech.kind == "conv_position":  # wav2vec2's position convolution (a composite's tower: no prefix)
            covered += ["pos_conv_embed.", "encode_positions."]
        if mech.kind == "bbox_2d":  # the four box tables
            covered += list(mech.record.keys)
        if mech.kind == "grid":  # saved under the original checkpoint's name (TIPSv2's pos_embed): its module's
            from flax_posenc.conversion import grid_tables

            covered.append(grid_tables.GRID_FAMILIES[mech.record.table.family].key_suffix)
        if mech.kind == "xl_relative":  # every layer's u, v and W_R (issue 36)
            covered += [k for keys in mech.record.bias_keys for k in keys]
        if mech.kind == "layout_relative_bias":  # LayoutLMv3's 1-D, x and y tables (issue 36)
            covered += list(mech.record.keys)
        if mech.kind == "clipped_relative":  # every layer's relative key (and value) table (issue 36)
            covered += list(mech.record.keys) + list(mech.record.value_keys)
        if mech.kind == "segment_bias":  # CPM-Ant's one table
            covered.append(mech.record.key)
        if mech.kind == "relative_sinusoid":  # XLNet's rel_attn: the projections of content and of the sinusoids
            covered.append("rel_attn.")
        if mech.kind == "resampled":  # the table itself (its key less the tensor's own name)
            covered.append(mech.record.table.key)
        if mech.kind == "axial" and mech.record.axial_shape:  # Reformer: both axial factors
            covered.append(mech.record.table.key.rsplit(".", 1)[0] + ".")
        if mech.kind == "decomposed_rel_pos":  # every layer's rel_pos_h / rel_pos_w (its hook counts them)
            covered += [".rel_pos_h", ".rel_pos_w"]  # a checkpoint may rename the layers (Unlimited-OCR: blocks.i)
        if mech.kind == "vision_rope" and mech.record.grid_key:  # Qwen3-VL's learned grid beside its RoPE
            covered.append(mech.record.grid_key)
            covered.append(VISION_GRID_MODULE_NAMES.get(mech.record.family, mech.record.grid_key))
        if mech.kind == "vision_rope" and mech.record.prefix_angle_key:  # MLCD's class-token angles
            covered.append(mech.record.prefix_angle_key)
    # a key may carry a composite's prefix (``vision_tower.``) that a tower's own parameter names lack
    found = []
    rotary_names = {n for n, m in model.named_modules() if "rotary" in type(m).__name__.lower()}
    for name, _ in model.named_parameters():
        parent = name.rsplit(".", 1)[0]
        in_rotary = parent in rotary_names
        parts = name.split(".")
        if parts[0] in _OTHER_TOWERS:
            continue  # a vision/audio tower's positions: not this text model type's (see _OTHER_TOWERS)
        positional = any(_POSITION_NAME.match(part) and "norm" not in part for part in parts)
        if (in_rotary or positional) and not any(c in name or c.endswith("." + name) for c in covered):
            found.append(name)
    if not found:
        return []
    return [f"position parameters not read: {', '.join(found[:4])}{' ...' if len(found) > 4 else ''}"]


def conformance_problems(model_type: str, directory: Path) -> list[str]:
    """What disagrees between transformers' tiny ``model_type`` and our reading ([] = conforms)."""
    from flax_posenc.conversion import inspect_source

    model = tiny_model(model_type)
    with quiet():
        model.save_pretrained(directory)
    return record_problems(model, inspect_source(directory), directory)


def record_problems(model, record, directory: Path) -> list[str]:
    """What disagrees between ``model`` (transformers' module) and ``record`` (our reading of its
    saved checkpoint in ``directory``): every mechanism against the model's own modules. The
    mechanisms of a ``backbone`` tower (``backbone_config``: UperNet's ResNet) are checked against
    the backbone's own module, and the others against the model without it (unless a forward pass
    is needed: RoPE kinds), so that a head declared free of positions is not blamed for its
    backbone's grid and a backbone's positions are not taken for the head's."""
    from flax_posenc.conversion.models import ModelRecord

    backbone = [m for m in record.mechanisms if m.tower == "backbone"]
    if not backbone:
        return _record_problems(model, record, directory)
    name, module = _backbone_module(model)
    if module is None:
        return ["backbone tower: no module of the model is built from its backbone_config"]
    own = ModelRecord(record.source, record.model_type, tuple(m for m in record.mechanisms if m.tower != "backbone"))
    sub = ModelRecord(record.source, getattr(module.config, "model_type", None), tuple(backbone))
    problems = [f"backbone tower: {p}" for p in _record_problems(module, sub, directory)]
    if any(m.kind in ("rope", "mrope") for m in own.mechanisms):
        return problems + _record_problems(model, own, directory)
    parent, _, leaf = name.rpartition(".")
    holder = model.get_submodule(parent) if parent else model
    import torch

    setattr(holder, leaf, torch.nn.Module())  # the model less its backbone, for the head's own checks
    try:
        return problems + _record_problems(model, own, directory)
    finally:
        setattr(holder, leaf, module)


def _backbone_module(model):
    """``(name, module)`` of the backbone of ``model`` (the shallowest module built from
    ``model.config.backbone_config``, or whose config is that config's class), else ``("", None)``."""
    target = getattr(model.config, "backbone_config", None)
    if target is None:
        return "", None
    for name, module in sorted(model.named_modules(), key=lambda nm: nm[0].count(".")):
        config = getattr(module, "config", None)
        if module is not model and (config is target or (config is not None and config.to_dict() == target.to_dict())):
            return name, module
    return "", None


def _record_problems(model, record, directory: Path) -> list[str]:
    """:func:`record_problems` of one model and the mechanisms that are its own."""
    problems: list[str] = []
    rotary = _rotary_modules(model)
    ropes = [m for m in record.mechanisms if m.kind == "rope"]
    mropes = [m for m in record.mechanisms if m.kind == "mrope"]
    called = None
    if ropes or mropes:
        forward, called = _forward_problems(model, directory, record)
        problems += forward
    problems += _position_parameter_problems(model, record)
    if any(m.kind == "vision_rope" for m in record.mechanisms):  # a vision tower's rotary: its own hook
        rotary = [m for m in rotary if "Vision" not in type(m).__name__]
        if all(m.kind == "vision_rope" for m in record.mechanisms):  # a tower alone (MLCD's MLCDRotaryEmbedding)
            rotary = []
    if rotary and not ropes and not mropes:
        problems.append(f"the model has {type(rotary[0]).__name__}; we report no RoPE")
    for mech in mropes:
        problems += _mrope_problems(model, mech, rotary)
    if ropes and not rotary:
        return problems + [p for mech in ropes for p in _sincos_problems(model, mech)]
    for mech in ropes + mropes:
        problems += _softmax_scale_problems(model, mech)
    if ropes:
        problems += _query_scale_problems(model, ropes)
    for mech in ropes:
        label = f"RoPE {mech.layer_type or ''}".strip()
        modules = [m for m in rotary if _inv_freq(m, mech.layer_type)[0] is not None]
        if not modules:
            problems += _sincos_problems(model, mech)
            continue
        for module in modules:  # every rotary module of the model (Granite-SWA, Molmo 2 have two)
            problems += _rope_problems(model, mech, module, label, called)
        mpe = getattr(model.config, "max_position_embeddings", None)
        if mech.limit != mpe and mech.rope.rope_type == "default":
            problems.append(f"{label}: limit {mech.limit}, max_position_embeddings {mpe}")
    problems += _nope_problems(model, record)
    if any(m.kind == "none" for m in record.mechanisms):
        import torch

        tables = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Embedding) and "pos" in n.lower()]
        if tables or rotary:
            problems.append(f"we report no position encoding; the model has {(tables or rotary)[0]}")
    for mech in record.mechanisms:
        check = KIND_CHECKS[mech.kind]
        if check is not None:
            problems += check(model, mech, directory)
    return problems


#: A parameter or buffer name that suggests a position mechanism.
POSITION_NAME = re.compile(r"position|(^|[._])(pos|rel)_|rotary|relative|sinusoid", re.IGNORECASE)


def _no_position_problems(model, mech, directory: Path) -> list[str]:
    """A model declared free of positions: no parameter or buffer (persistent or not) whose name
    suggests positions, and no rotary module (:func:`conformance_problems` checks the latter)."""
    named = [*model.named_parameters(), *model.named_buffers()]
    found = [name for name, _ in named if POSITION_NAME.search(name)]
    if not named:
        return ["the model has no parameter or buffer at all (nothing was checked)"]
    return [f"we report no position encoding; the model holds {found[0]}"] if found else []


def _patch_table_problems(model, mech) -> list[str]:
    """PatchTST: the table equals the model's ``position_enc`` (bit-equal), its patches the
    patchifier's ``num_patches``; a series of ``context_length`` steps runs and one a stride
    longer is refused (the table is added whole)."""
    import torch

    rec = mech.record
    problems = []
    theirs = model.encoder.positional_encoder.position_enc.detach().numpy()
    if not np.array_equal(theirs, rec.table.weights):
        problems.append(f"patch table {rec.key} differs from the model's position_enc")
    if rec.num_patches != model.patchifier.num_patches:
        problems.append(f"{rec.num_patches} patches, the model's patchifier {model.patchifier.num_patches}")
    channels = model.config.num_input_channels

    def runs(steps: int) -> bool:
        try:
            with torch.no_grad(), quiet():
                model(past_values=torch.randn(1, steps, channels))
            return True
        except (IndexError, RuntimeError, ValueError):
            return False

    if not runs(rec.limit):
        problems.append(f"a series of {rec.limit} time steps (our limit) fails in transformers")
    if runs(rec.limit + rec.patch_stride):
        problems.append(f"a series of {rec.limit + rec.patch_stride} time steps works in transformers")
    return problems


def _learned_or_audio(model, mech, directory: Path) -> list[str]:
    if mech.unit == "time steps":
        return _patch_table_problems(model, mech)
    if mech.unit == "seconds":
        return _audio_table_problems(model, mech, directory)
    return _learned_problems(model, mech, directory)


#: DETR positions: transformers' float32 angle (``c / (c_last + eps) * scale / T ** (2k/F)``, three
#: float32 roundings) against ours (within 0.5 ulp of float64): |difference| <= this many float32
#: ulps of 1.0 (2**-23) times (1 + |angle|).
DETR_ULPS = 8


def _detr_mask(batch_sides, height: int, width: int):
    """A ``(batch, height, width)`` feature-map mask: each example's valid ``h x w`` rectangle at
    the top left (padding right and below, as a DETR image processor pads), one of them unpadded."""
    mask = np.zeros((len(batch_sides), height, width), bool)
    for b, (h, w) in enumerate(batch_sides):
        mask[b, :h, :w] = True
    return mask


def _detr_module_output(module, mask: np.ndarray, channels: int):
    """The model's own position module on ``mask``: DETR's ``(shape, device, dtype, mask)`` or
    DAB-DETR's/Grounding DINO's ``(pixel_values, pixel_mask)``."""
    import torch

    m = torch.from_numpy(mask)
    b, h, w = mask.shape
    params = list(inspect.signature(module.forward).parameters)
    with torch.no_grad():
        if params[0] == "width":  # RT-DETR: no mask; (1, H * W, D) of raw positions
            out = module(width=w, height=h, device=torch.device("cpu"), dtype=torch.float32).numpy()
            return np.broadcast_to(out.reshape(1, h, w, -1).transpose(0, 3, 1, 2), (b, out.shape[-1], h, w))
        if params[0] == "shape":
            return module(shape=torch.Size((b, channels, h, w)), device="cpu", dtype=torch.float32, mask=m).numpy()
        return module(torch.zeros(b, channels, h, w), m.long()).numpy()


def _detr_problems(model, mech, directory: Path) -> list[str]:
    """A DETR-family position embedding against the model's own position module: the sine
    variant's values on a mask with padding (``fp.detr_sine_embedding``; within
    :data:`DETR_ULPS` float32 ulps of 1 times ``1 + |angle|`` wherever the row/column has a valid
    cell: a fully padded column under deformable DETR's -0.5 offset has the angle -0.5/eps*2pi =
    -3e6 rad, where float32 keeps no digit of it, and only finiteness is compared there), the
    channel count, and ``fp.detr_feature_mask`` against the model's ``interpolate`` of a pixel
    mask; the learned variant's tables (bit-equal), its output (bit-equal) and its limit (50 x 50
    cells run in transformers and here; 51 rows fail in both)."""
    import torch

    import flax_posenc as fp
    from flax_posenc.errors import PositionLimitError

    rec = mech.record
    found = [
        (n, m) for n, m in model.named_modules() if re.search(r"(Sine|Learned)PositionEmbedding$", type(m).__name__)
    ]
    from flax_posenc.conversion.detr_positions import DETR_POSITION_FAMILIES

    place = getattr(DETR_POSITION_FAMILIES.get(rec.family), "module", "")  # a head's row: its own module
    if place:
        found = [(n, m) for n, m in found if n == place or n.endswith("." + place)]
    if len(found) != 1:
        return [f"expected one DETR position module{' at ' + place if place else ''}, found {[n for n, _ in found]}"]
    name, module = found[0]
    problems = []
    variant = "learned" if "Learned" in type(module).__name__ else "sine"
    if variant != rec.variant:
        return [f"we read the {rec.variant} variant; the model's {name} is {type(module).__name__}"]
    c = model.config
    width = getattr(c, "encoder_hidden_dim", None) or getattr(c, "d_model", None) or c.hidden_size
    if place:  # the head module's own width (its num_position_features per axis, or RT-DETR's embed_dim)
        width = 2 * getattr(module, "num_position_features", 0) or module.embed_dim
    if 2 * rec.num_pos_feats != width:
        problems.append(f"{2 * rec.num_pos_feats} channels; the model's width is {width}")
    channels = 2 * rec.num_pos_feats
    takes_mask = list(inspect.signature(module.forward).parameters)[0] != "width"
    mask = _detr_mask([(7, 9), (4, 6), (1, 2)] if takes_mask else [(7, 9)], 7, 9)
    theirs = _detr_module_output(module, mask, channels)
    pixel = np.zeros((2, 37, 45), np.int64)
    pixel[0], pixel[1, :20, :31] = 1, 1
    ref_mask = torch.nn.functional.interpolate(torch.from_numpy(pixel)[None].float(), size=(5, 6)).bool()[0].numpy()
    if not np.array_equal(np.asarray(fp.detr_feature_mask(pixel, (5, 6))), ref_mask):
        problems.append("detr_feature_mask differs from the model's nearest interpolate of the pixel mask")
    if variant == "learned":
        rows = module.row_embeddings.weight.detach().numpy()
        cols = module.column_embeddings.weight.detach().numpy()
        if not (np.array_equal(rows, rec.row_embeddings) and np.array_equal(cols, rec.column_embeddings)):
            problems.append(f"learned tables {rec.key}, {rec.column_key} differ from the model's")
        ours = np.asarray(fp.detr_learned_embedding(mask, rec.row_embeddings, rec.column_embeddings))
        if ours.shape != theirs.shape or not np.array_equal(ours, theirs):
            problems.append("detr_learned_embedding differs from the model's learned position module")
        limit = rec.feature_limit
        if limit != (rows.shape[0], cols.shape[0]):
            problems.append(f"feature limit {limit}; the model's tables hold {rows.shape[0]} x {cols.shape[0]}")
        for side, fits in ((limit[0], True), (limit[0] + 1, False)):
            big = np.ones((1, side, side), bool)
            try:
                _detr_module_output(module, big, channels)
                ran = True
            except (IndexError, RuntimeError):
                ran = False
            try:
                fp.detr_learned_embedding(big, rec.row_embeddings, rec.column_embeddings)
                ours_ran = True
            except PositionLimitError:
                ours_ran = False
            if ran != fits or ours_ran != fits:
                problems.append(f"a {side} x {side} map: transformers runs {ran}, ours {ours_ran}, limit {limit}")
        return problems
    ours = np.asarray(fp.detr_sine_embedding(mask, rec.sine), np.float64)
    if ours.shape != theirs.shape:
        return problems + [f"detr_sine_embedding shape {ours.shape}, the model's {theirs.shape}"]
    from flax_posenc.detr_config import detr_sine_frequencies

    cfg = rec.sine
    counts_y, counts_x = np.cumsum(mask, 1), np.cumsum(mask, 2)
    valid_y = np.broadcast_to(counts_y[:, -1:, :] > 0, mask.shape)
    valid_x = np.broadcast_to(counts_x[:, :, -1:] > 0, mask.shape)
    half = rec.num_pos_feats
    for axis, counts, valid, chans in (
        ("y", counts_y, valid_y, slice(0, half)),
        ("x", counts_x, valid_x, slice(half, 2 * half)),
    ):
        last = counts[:, -1:, :] if axis == "y" else counts[:, :, -1:]
        p = (counts + cfg.offset) / (last + cfg.eps) if cfg.normalize else counts + cfg.offset
        angle = np.repeat(np.abs(p)[:, None] * detr_sine_frequencies(cfg, axis)[None, :, None, None], 2, axis=1)
        d = np.abs(ours[:, chans] - theirs[:, chans])
        tol = DETR_ULPS * 2.0**-23 * (1 + angle)
        ok = (d <= tol) | ~valid[:, None]
        if not ok.all():
            problems.append(f"{axis}: detr_sine_embedding differs from the model's by {float(d[~ok].max()):.3g}")
        if not np.isfinite(ours[:, chans]).all():
            problems.append(f"{axis}: detr_sine_embedding is not finite on padding")
    return problems


#: Frames of the random hidden states a convolutional position embedding is compared on.
CONV_FRAMES = 24


def conv_position_outputs(model, mech, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(theirs, ours)``: the model's own position convolution (``*PositionalConvEmbedding``) and
    :func:`flax_posenc.conv_position.conv_positions` (the checkpoint's weights, as
    :func:`~flax_posenc.conversion.load_conv_positions` reads them) on hidden states ``x``
    ``(batch, frames, dim)``, float32; SEW's module takes ``(batch, dim, frames)``, OmniASR's
    returns ``hidden + positions`` (both undone here)."""
    import torch

    from flax_posenc.conv_position import conv_positions
    from flax_posenc.conversion import load_conv_positions

    module = _conv_module(model)
    rec = mech.record
    channels_first = rec.family in ("sew_conv", "sew_d_conv")
    t = torch.from_numpy(x)
    with torch.no_grad():
        out = module(t.transpose(1, 2) if channels_first else t)
        out = out.transpose(1, 2) if channels_first else out
        if rec.family == "omniasr_conv":
            out = out - t
    loaded = load_conv_positions(rec.source)
    ours = np.asarray(conv_positions(x, loaded.kernel, loaded.bias, loaded.spec))
    return out.numpy(), ours


def _conv_module(model):
    found = [m for m in model.modules() if type(m).__name__.endswith("PositionalConvEmbedding")]
    return found[0] if len(found) == 1 else None


def _conv_position_problems(model, mech, directory: Path) -> list[str]:
    """A convolutional position embedding (wav2vec2 and kin): the model's own ``pos_conv_embed`` on
    random hidden states ``(2, 24, dim)`` against ours (float32: ``1e-5`` of the largest output),
    the output frames, the kernel and groups of its convolution, and the receptive field: the input
    frames whose gradient reaches one output frame in the middle (autograd through the model's
    module) are exactly the ``receptive_field`` frames from ``j * stride - left_context`` on."""
    import torch

    module = _conv_module(model)
    if module is None:
        return ["we report a convolutional position embedding; the model has not exactly one *PositionalConvEmbedding"]
    rec, spec = mech.record, mech.record.spec
    problems = []
    convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv1d)]
    if len(convs) != spec.num_layers:
        problems.append(f"{len(convs)} convolutions in {type(module).__name__}, we read {spec.num_layers}")
    for conv in convs:
        if (conv.kernel_size[0], conv.groups, conv.stride[0]) != (spec.kernel_size, spec.groups, spec.stride):
            problems.append(
                f"convolution kernel/groups/stride {conv.kernel_size[0]}/{conv.groups}/{conv.stride[0]}, "
                f"ours {spec.kernel_size}/{spec.groups}/{spec.stride}"
            )
    x = np.random.default_rng(0).standard_normal((2, CONV_FRAMES, spec.dim)).astype(np.float32)
    theirs, ours = conv_position_outputs(model, mech, x)
    if theirs.shape != ours.shape:
        return problems + [f"position term {ours.shape}, the model's {theirs.shape}"]
    err = float(np.max(np.abs(ours - theirs)))
    if not err <= 1e-5 * float(np.max(np.abs(theirs))):
        problems.append(f"position term differs by {err:.3g} (largest value {float(np.max(np.abs(theirs))):.3g})")
    # the receptive field, from the gradient of one output frame in the middle
    t = torch.from_numpy(x[:1]).requires_grad_(True)
    channels_first = rec.family in ("sew_conv", "sew_d_conv")
    out = module(t.transpose(1, 2)).transpose(1, 2) if channels_first else module(t)
    j = out.shape[1] // 2
    out[0, j].sum().backward()
    if rec.family == "omniasr_conv":  # its module adds the hidden states: frame j's own gradient includes 1
        t.grad[0, j] -= 1
    seen = sorted(int(i) for i in np.flatnonzero(np.abs(t.grad[0].numpy()).sum(-1)))
    start = j * spec.stride - spec.left_context
    expected = [i for i in range(start, start + spec.receptive_field) if 0 <= i < CONV_FRAMES]
    if seen != expected:
        problems.append(
            f"output frame {j} sees input frames {seen[:3]}..{seen[-3:]}; ours {expected[:3]}..{expected[-3:]}"
        )
    if rec.limit is not None:
        problems.append(f"limit {rec.limit}; a convolution has none")
    return problems


def random_boxes(rows: int, n: int, seed: int = 0) -> np.ndarray:
    """``(1, n, 4)`` int64 boxes ``x0 <= x1``, ``y0 <= y1`` in ``0 .. rows - 1``, the extremes first
    (the empty box at 0, the whole page, a box touching the last row)."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, rows, (2, n, 2))
    boxes = np.concatenate([np.minimum(a, b), np.maximum(a, b)], -1)[:, [0, 1, 2, 3]]
    boxes[:3] = [[0, 0, 0, 0], [0, 0, rows - 1, rows - 1], [rows - 1, 0, rows - 1, rows - 1]]
    return boxes[None]


def _bbox_theirs(model, bbox, np_ids):
    """The model's own box embedding of ``bbox`` (float64), and what ours must be turned into to
    compare with it: ``(theirs, transform)``. LayoutLMv2/v3: its ``*spatial_position_embeddings``
    method; LiLT: its layout stream's output (our concat through its own linear layer, 1-D box
    table and LayerNorm); LayoutLM: the sum entering its LayerNorm, less that of all-zero boxes."""
    import torch

    emb = model.embeddings
    tb = torch.from_numpy(bbox)
    for name in ("calculate_spatial_position_embeddings", "_calc_spatial_position_embeddings"):
        if hasattr(emb, name):
            with torch.no_grad():
                return getattr(emb, name)(tb)[0].double().numpy(), lambda ours: ours
    if hasattr(model, "layout_embeddings"):  # LiLT
        lay = model.layout_embeddings
        pos = torch.arange(bbox.shape[1])[None] + model.config.pad_token_id + 1

        def through(ours):
            with torch.no_grad():
                x = lay.box_linear_embeddings(torch.from_numpy(np.array(ours, np.float32))[None])
                return lay.LayerNorm(x + lay.box_position_embeddings(pos))[0].double().numpy()

        with torch.no_grad():
            return lay(bbox=tb, position_ids=pos)[0].double().numpy(), through
    seen = []
    hook = emb.LayerNorm.register_forward_pre_hook(lambda module, args: seen.append(args[0][0].double().numpy()))
    try:
        ids = torch.from_numpy(np_ids)
        with torch.no_grad():
            emb(input_ids=ids, bbox=tb)
            emb(input_ids=ids, bbox=torch.zeros_like(tb))
    finally:
        hook.remove()
    return seen[0] - seen[1], None


def _bbox_problems(model, mech, directory: Path) -> list[str]:
    """Bounding-box tables: the limit is ``max_2d_position_embeddings`` and the rows the model's
    own; :func:`flax_posenc.bbox_embedding` of 48 random boxes (extremes included) equals the
    model's own embedding of them (bit-equal where the model only gathers and concatenates, or
    feeds them through its own layers; a summed box within 8 float32 ulps of the sum's magnitude,
    as the model adds its other tables first); a box at the last coordinate works in transformers
    and one a coordinate past it fails."""
    import jax.numpy as jnp
    import torch

    import flax_posenc as fp

    rec = mech.record
    rows = int(model.config.max_2d_position_embeddings)
    problems = []
    if rec.limit != rows:
        problems.append(f"bbox limit {rec.limit}, max_2d_position_embeddings {rows}")
    state = dict(model.state_dict())
    for key, ours in zip(rec.keys, rec.weights, strict=True):
        if key not in state or not np.array_equal(state[key].numpy(), ours):
            problems.append(f"bbox table {key} differs from the model's")
    if problems:
        return problems
    bbox = random_boxes(rows, 48)
    ids = np.full((1, bbox.shape[1]), 5, np.int64)
    theirs, transform = _bbox_theirs(model, bbox, ids)
    ours = np.asarray(fp.bbox_embedding(bbox, *(jnp.asarray(w) for w in rec.weights), rec.spec))[0]
    if transform is None:  # LayoutLM: the sum, less that of the all-zero boxes
        zero = np.asarray(fp.bbox_embedding(np.zeros_like(bbox), *(jnp.asarray(w) for w in rec.weights), rec.spec))[0]
        diff = ours.astype(np.float64) - zero
        tol = 8 * np.spacing(np.float32(np.max(np.abs(theirs)) + np.max(np.abs(zero))))
        worst = float(np.max(np.abs(diff - theirs)))
        if worst > tol:
            problems.append(f"summed bbox embedding differs from the model's by {worst:.3g} (tolerance {tol:.3g})")
    else:
        mine = transform(ours)
        if mine.shape != theirs.shape or not np.array_equal(mine, theirs):
            worst = float(np.max(np.abs(mine - theirs))) if mine.shape == theirs.shape else float("inf")
            problems.append(f"bbox embedding differs from the model's by {worst:.3g} (shape {mine.shape})")

    def runs(largest: int) -> bool:
        box = np.array([[[0, 0, largest, largest]]], np.int64)
        try:
            with torch.no_grad(), quiet():
                model(input_ids=torch.full((1, 1), 5, dtype=torch.long), bbox=torch.from_numpy(box))
            return True
        except (IndexError, RuntimeError):
            return False

    if not runs(rec.limit - 1):
        problems.append(f"a box at coordinate {rec.limit - 1} (our last) fails in transformers")
    if runs(rec.limit):
        problems.append(f"a box at coordinate {rec.limit} works in transformers (our limit is {rec.limit})")
    return problems


#: The conformance hook of every kind of :data:`flax_posenc.conversion.mechanisms.MECHANISMS`:
#: ``(model, mechanism, directory) -> problems``, run on each mechanism of that kind. ``None``:
#: no per-mechanism hook, because the kind is checked across mechanisms in
#: :func:`conformance_problems` (``rope``, ``mrope`` and ``nope`` against the model's
#: rotary modules and attention layers) or, for ``alibi``, only its limit is read here (its
#: values are checked against transformers by ``tests/test_alibi.py``). A kind missing here
#: fails ``tests/test_conformance.py``: adding a mechanism means adding its hook.
def _axial_problems(model, mech, directory: Path) -> list[str]:
    """Reformer's axial positions: our rows equal the model's own position module's output at
    positions ``0 .. limit - 1`` (bit-equal: a copy of the factors), and a forward pass of
    ``limit`` tokens works while one of ``limit + 1`` fails (padding to the chunk multiple included)."""
    import torch

    table = mech.record.table
    module = model.embeddings.position_embeddings
    with torch.no_grad():
        theirs = module(torch.arange(mech.limit)[None])[0].numpy()
    problems = []
    if theirs.shape != table.weights.shape or not np.array_equal(theirs, table.weights):
        problems.append(f"axial rows differ from the model's position_embeddings at 0..{mech.limit - 1}")

    def runs(n: int) -> bool:
        try:
            with torch.no_grad(), quiet():
                model(input_ids=torch.full((1, n), 5, dtype=torch.long))
            return True
        except (IndexError, RuntimeError, ValueError):
            return False

    if not runs(mech.limit):
        problems.append(f"a forward pass of {mech.limit} tokens (our limit) fails in transformers")
    if runs(mech.limit + 1):
        problems.append(f"a forward pass of {mech.limit + 1} tokens works in transformers (our limit is {mech.limit})")
    return problems


def _relative_sinusoid_problems(model, mech, directory: Path) -> list[str]:
    """XLNet's relative sinusoids: our float64 table against the model's own
    ``relative_positional_encoding`` for several (qlen, klen), within float32 rounding of the angle
    (``2**-22 * (1 + |angle|)``); and a forward pass of 3 x 64 tokens that works (no limit)."""
    import torch

    record = mech.record
    problems = []
    for qlen, klen in ((1, 1), (7, 7), (5, 12), (64, 64)):
        with torch.no_grad():
            theirs = model.relative_positional_encoding(qlen, klen)[:, 0].double().numpy()
        ours = record.table(qlen, klen)
        w = 1.0 / 10000.0 ** (np.arange(0, record.d_model, 2) / record.d_model)
        angle = np.abs(record.distances(qlen, klen))[:, None] * w
        tol = 2.0**-22 * (1 + np.concatenate([angle, angle], -1))
        if ours.shape != theirs.shape or not np.all(np.abs(ours - theirs) <= tol):
            problems.append(
                f"relative sinusoids ({qlen} queries, {klen} keys) differ from relative_positional_encoding"
            )
    try:
        with torch.no_grad(), quiet():
            model(input_ids=torch.full((1, 192), 5, dtype=torch.long))
    except (IndexError, RuntimeError, ValueError) as e:
        problems.append(f"a forward pass of 192 tokens fails (we report no limit): {e}"[:200])
    return problems


def _segment_bias_problems(model, mech, directory: Path) -> list[str]:
    """CPM-Ant's segment bias: our ``bias(segments)`` bit-equal to the model's own
    ``position_bias(positions, positions, segments, segments)`` on random segments of 9 and of 300
    tokens (past the tiny ``position_bias_max_distance``), and the model's forward of 300 tokens works."""
    import torch

    record = mech.record
    rng = np.random.default_rng(0)
    problems = []
    for n in (9, 300):
        seg = rng.integers(0, min(3, record.segment_types), n)
        pos = torch.arange(n)[None]
        with torch.no_grad():
            theirs = model.position_bias(pos, pos, torch.from_numpy(seg)[None], torch.from_numpy(seg)[None])[0]
        if not np.array_equal(record.bias(seg), theirs.numpy()):
            problems.append(f"segment bias of {n} tokens differs from the model's position_bias")
    try:
        with torch.no_grad(), quiet():
            model(input_ids=torch.full((1, 300), 5, dtype=torch.long))
    except (IndexError, RuntimeError, ValueError) as e:
        problems.append(f"a forward pass of 300 tokens fails (we report no limit): {e}"[:200])
    return problems


#: Lengths the resampled table is compared at: shorter, equal, longer, and far longer than its rows.
RESAMPLED_LENGTHS = (1, 7, 64, 100, 257)


def _resampled_problems(model, mech, directory: Path) -> list[str]:
    """SAM3-Lite's text positions: the stored table bit-equal to the model's, our float64 resampling
    against the model's own position module at several lengths, and a forward pass far past the
    table's rows that works (no limit). Tolerance per output row: torch computes the source index
    ``s = L / n * (i + 0.5) - 0.5`` and its fraction in float32, so the weight may be off by
    ``2**-23 * (1 + s)`` (a few times over), times the two rows' spread; plus 4 float32 ulps of the
    table's largest value for the blend itself."""
    import torch

    record = mech.record
    module = model.embeddings.position_embedding
    stored = module.position_embedding.detach().numpy().reshape(-1, record.table.dim)
    problems = []
    if not np.array_equal(stored, record.table.weights):
        problems.append(f"resampled table {record.table.key} differs from the model's")
    big = float(np.abs(stored).max())
    ulp = float(np.spacing(np.float32(big)))
    rows = stored.shape[0]
    for n in RESAMPLED_LENGTHS:
        with torch.no_grad():
            theirs = module(n)[0].numpy().astype(np.float64)
        ours = record.rows_for(n).astype(np.float32).astype(np.float64)
        src = np.maximum(rows / n * (np.arange(n) + 0.5) - 0.5, 0.0)
        tol = 4 * 2.0**-23 * (1 + src)[:, None] * 2 * big + 4 * ulp
        if ours.shape != theirs.shape or not np.all(np.abs(ours - theirs) <= tol):
            worst = float(np.max(np.abs(ours - theirs))) / ulp if ours.shape == theirs.shape else np.inf
            problems.append(f"rows at length {n} differ from the model's by up to {worst:.3g} float32 ulps")
    try:
        with torch.no_grad(), quiet():
            model(input_ids=torch.full((1, 3 * record.table.rows), 5, dtype=torch.long))
    except (IndexError, RuntimeError, ValueError) as e:
        problems.append(f"a forward pass of {3 * record.table.rows} tokens fails (we report no limit): {e}"[:200])
    return problems


KIND_CHECKS = {
    "learned": _learned_or_audio,
    "sinusoidal": lambda model, mech, directory: (
        [] if mech.table is not None else _computed_sinusoid_problems(model, mech)
    ),
    "rope": None,
    "nope": None,
    "alibi": None,
    "mrope": None,
    "relative_bias": lambda model, mech, directory: _relative_bias_problems(model, mech),
    "deberta_relative": lambda model, mech, directory: _deberta_problems(model, mech),
    "grid": lambda model, mech, directory: _grid_problems(model, mech),
    "conv_position": _conv_position_problems,
    "none": _no_position_problems,
    "detr_positions": _detr_problems,
    "bbox_2d": _bbox_problems,
    "axial": _axial_problems,
    "resampled": _resampled_problems,
    "relative_sinusoid": _relative_sinusoid_problems,
    "segment_bias": _segment_bias_problems,
}


def _tower_module(model, sub_config):
    """The submodule of a composite ``model`` built from ``sub_config`` (LLaVA's ``language_model``,
    ``vision_tower``): the shallowest module whose ``config`` is that object."""
    for _, module in sorted(model.named_modules(), key=lambda nm: nm[0].count(".")):
        if module is not model and getattr(module, "config", None) is sub_config:
            return module
    return None


def _model_class(model_type: str, auto):
    """``auto`` (AutoModel) when it knows ``model_type``; else the class of the first of transformers'
    Auto mappings that names it (ShieldGemma 2: image classification; Jev: causal LM)."""
    import transformers
    from transformers.models.auto import modeling_auto

    if model_type in modeling_auto.MODEL_MAPPING_NAMES:
        return auto
    for name in sorted(dir(modeling_auto)):
        mapping = getattr(modeling_auto, name)
        if (
            name.endswith("_MAPPING_NAMES")
            and "CONFIG" not in name
            and isinstance(mapping, dict)
            and model_type in mapping
        ):
            found = mapping[model_type]
            return getattr(transformers, found if isinstance(found, str) else found[0])
    return auto


def composite_problems(model_type: str, directory: Path) -> list[str]:
    """A composite model type read as its towers, against transformers' own composite model: every
    tower reported (none unread), each tower's mechanisms checked by :func:`record_problems`
    against that tower's own module (its rotary module and ``apply_rotary_pos_emb``, its grid's
    rows and ``interpolate_pos_encoding``, its table's forward pass), and the record's limit that
    of its text tower."""
    import torch
    from conformance.catalog import composite_towers
    from conformance.tiny import tiny_composite_config
    from transformers import AutoModel

    from flax_posenc.conversion import inspect_source
    from flax_posenc.conversion.models import ModelRecord, tower_of_field

    config = tiny_composite_config(model_type)
    torch.manual_seed(0)
    with quiet():
        cls = _model_class(model_type, AutoModel)
        model = (cls.from_config(config, torch_dtype=torch.float32) if cls is AutoModel else cls(config)).float().eval()
        model.save_pretrained(directory)
    record = inspect_source(directory)
    problems = [f"tower not read: {u}" for u in record.unread]
    towers = []
    from flax_posenc.conversion.models import MODEL_MECHANISMS

    parts = []  # (field, tower model type, sub-config); a nested composite (ColPali's PaliGemma): its towers
    for field, tower_type in composite_towers(model_type) or ():
        sub_config = getattr(config, field)
        if tower_type not in MODEL_MECHANISMS and composite_towers(tower_type):
            parts += [(f, t, getattr(sub_config, f)) for f, t in composite_towers(tower_type)]
        else:
            parts.append((field, tower_type, sub_config))
    for field, tower_type, sub_config in parts:
        tower = tower_of_field(field, tower_type)
        mechs = tuple(m for m in record.mechanisms if m.tower == tower)
        module = _tower_module(model, sub_config)
        if module is None:
            problems.append(f"{field}: no module of the model is built from it")
            continue
        towers.append(module)
        if not mechs:
            problems.append(f"{tower} tower ({tower_type}): we report no mechanism")
            continue
        sub = ModelRecord(record.source, tower_type, mechs)
        problems += [f"{tower} tower: {p}" for p in record_problems(module, sub, directory)]
    # the prompt's towers: the text tower, and InstructBLIP's Q-Former, which reads the instruction too
    text = [
        m.limit
        for m in record.mechanisms
        if m.tower in ("text", "qformer") and m.unit == "tokens" and m.limit is not None
    ]
    if text and record.limit != min(text):
        problems.append(f"limit {record.limit}, the text tower's (or Q-Former's) is {min(text)}")
    return problems + _untowered_position_problems(model, towers)


def _untowered_position_problems(model, towers) -> list[str]:
    """A parameter, buffer or submodule named for positions outside every tower module (GIT's text
    positions live in the composite itself, beside its vision tower; Chameleon's own text model keeps
    its rotary module beside its VQ tower): not read by any tower, so the type is not read."""
    inside = {id(t) for module in towers for t in (*module.parameters(), *module.buffers(), *module.modules())}

    def outside(named):
        return [
            name
            for name, thing in named
            if name and id(thing) not in inside and any(_POSITION_NAME.match(part) for part in name.split("."))
        ]

    # parameters and buffers (a position_ids index buffer is not a mechanism), then a module holding neither
    found = [n for n in outside((*model.named_parameters(), *model.named_buffers())) if not n.endswith("position_ids")]
    found += [n for n in outside(model.named_modules()) if not any(f.startswith(n + ".") for f in found)]
    if not found:
        return []
    return [f"position parameters outside every tower, not read: {', '.join(found[:4])}"]


# ----------------------------------------------------------------------------- window bias (issue 35)


def timm_resize_rel_pos_bias_table(rel_pos_bias, new_window_size, new_bias_shape):
    """timm's ``resize_rel_pos_bias_table`` (``timm/layers/pos_embed_rel.py``, pytorch-image-models
    at aa4b585, the flat ``(num_pos, heads)`` path without scipy), transcribed line by line with its
    ``RegularGridInterpolator`` (``timm/layers/interpolate.py``): the independent torch reference of
    our ``"timm"`` convention (timm is not a dependency)."""
    from itertools import product

    import torch

    def interpolate(points, values, points_to_interp):
        idxs, dists, overalls = [], [], []
        for p, x in zip(points, points_to_interp):
            idx_right = torch.bucketize(x.contiguous(), p)  # timm: x
            idx_right[idx_right >= p.shape[0]] = p.shape[0] - 1
            idx_left = (idx_right - 1).clamp(0, p.shape[0] - 1)
            dist_left = x - p[idx_left]
            dist_right = p[idx_right] - x
            dist_left[dist_left < 0] = 0.0
            dist_right[dist_right < 0] = 0.0
            both_zero = (dist_left == 0) & (dist_right == 0)
            dist_left[both_zero] = dist_right[both_zero] = 1.0
            idxs.append((idx_left, idx_right))
            dists.append((dist_left, dist_right))
            overalls.append(dist_left + dist_right)
        numerator = 0.0
        for indexer in product([0, 1], repeat=len(points)):
            as_s = [idx[onoff] for onoff, idx in zip(indexer, idxs)]
            bs_s = [dist[1 - onoff] for onoff, dist in zip(indexer, dists)]
            numerator += values[tuple(as_s)] * torch.prod(torch.stack(bs_s), dim=0)  # timm: values[as_s]
        return numerator / torch.prod(torch.stack(overalls), dim=0)

    dst_size = (new_window_size[0] * 2 - 1, new_window_size[1] * 2 - 1)
    dst_num_pos, _ = new_bias_shape
    src_num_pos, num_attn_heads = rel_pos_bias.shape
    num_extra_tokens = dst_num_pos - (dst_size[0] * dst_size[1])
    src_size = int((src_num_pos - num_extra_tokens) ** 0.5)
    src_size = (src_size, src_size)
    if src_size[0] == dst_size[0] and src_size[1] == dst_size[1]:
        return rel_pos_bias
    extra_tokens = rel_pos_bias[-num_extra_tokens:, :] if num_extra_tokens else None
    if num_extra_tokens:
        rel_pos_bias = rel_pos_bias[:-num_extra_tokens, :]

    def geometric_progression(a, r, n):
        return a * (1.0 - r**n) / (1.0 - r)

    def _calc(src, dst):
        left, right = 1.01, 1.5
        while right - left > 1e-6:
            q = (left + right) / 2.0
            gp = geometric_progression(1, q, src // 2)
            if gp > dst // 2:
                right = q
            else:
                left = q
        dis = []
        cur = 1
        for i in range(src // 2):
            dis.append(cur)
            cur += q ** (i + 1)
        r_ids = [-_ for _ in reversed(dis)]
        return r_ids + [0] + dis

    y = _calc(src_size[0], dst_size[0])
    x = _calc(src_size[1], dst_size[1])
    yx = [torch.tensor(y), torch.tensor(x)]
    ty = dst_size[0] // 2.0
    tx = dst_size[1] // 2.0
    dy = torch.arange(-ty, ty + 0.1, 1.0)
    dx = torch.arange(-tx, tx + 0.1, 1.0)
    dyx = torch.meshgrid(dy, dx, indexing="ij")
    all_rel_pos_bias = []
    for i in range(num_attn_heads):
        z = rel_pos_bias[:, i].view(src_size[0], src_size[1]).float()
        r = interpolate(yx, z, dyx).contiguous()
        all_rel_pos_bias.append(r.view(-1, 1))
    rel_pos_bias = torch.cat(all_rel_pos_bias, dim=-1)
    if extra_tokens is not None:
        rel_pos_bias = torch.cat((rel_pos_bias, extra_tokens), dim=0)
    return rel_pos_bias


def _ulps(ours, ref, scale: float) -> float:
    """The largest difference in float32 ulps of ``scale`` (the table's largest magnitude)."""
    return float(
        np.abs(np.asarray(ours, np.float64) - np.asarray(ref, np.float64)).max() / np.spacing(np.float32(scale))
    )


def _randomize_window_bias(model) -> int:
    """transformers initialises Swin and BEiT tables to zeros: a comparison of zeros cannot fail.
    Fill every ``relative_position_bias_table`` with seeded normal values; return how many."""
    import torch

    gen = torch.Generator().manual_seed(35)
    n = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                p.copy_(torch.randn(p.shape, generator=gen))
                n += 1
    return n


def _torch_window_bias(module, layer, window=None):
    """What the model's own module adds to one window's attention logits, ``(heads, N, N)`` float32."""
    import torch

    with torch.no_grad():
        if hasattr(module, "generate_relative_position_index"):  # BEiT / Data2Vec-Vision
            return module(tuple(window or layer.window), interpolate_pos_encoding=False)[0].numpy()
        if hasattr(module, "continuous_position_bias_mlp"):  # SwinV2 / Swin2SR self-attention
            heads = module.num_attention_heads
            table = module.continuous_position_bias_mlp(module.relative_coords_table).view(-1, heads)
            n = module.window_size[0] * module.window_size[1]
            bias = table[module.relative_position_index.view(-1)].view(n, n, -1).permute(2, 0, 1)
            return (16 * torch.sigmoid(bias)).numpy()
        if callable(getattr(module, "forward", None)) and not hasattr(module, "query"):  # SwinRelativePositionBias
            return module()[0].numpy()
        n = module.window_size[0] * module.window_size[1]  # DonutSwin / MaskFormerSwin self-attention
        bias = module.relative_position_bias_table[module.relative_position_index.view(-1)].view(n, n, -1)
        return bias.permute(2, 0, 1).numpy()


def _window_bias_problems(model, mech, directory: Path) -> list[str]:
    """Swin/SwinV2/Swin2SR/BEiT/Data2Vec-Vision: per layer, the bias the model's own module adds
    (its table indexed by its ``relative_position_index``, SwinV2's MLP over its coordinates with
    ``16 * sigmoid``, ``BeitRelativePositionBias.forward``) against ``fp.window_bias`` /
    ``fp.continuous_window_bias`` of our reading (tables bit-equal; the MLP within 8 float32 ulps
    of 16), and the float64 ``layer.bias()``; every bias module of the model read, with its window
    and heads; resized: BEiT's own forward at a grid twice as large against ``"transformers"``, a
    Swin table to a window one larger against timm's ``resize_rel_pos_bias_table`` (both within 8
    ulps). transformers' zero-initialised tables are filled with seeded values first (saved again
    and re-read), so no comparison is of zeros."""
    import jax.numpy as jnp
    import torch

    import flax_posenc as fp
    from flax_posenc.conversion import inspect_source

    problems: list[str] = []
    if _randomize_window_bias(model):
        again = directory / "window_bias_random"
        with quiet():
            model.save_pretrained(again)
        found = [m for m in inspect_source(again).mechanisms if m.kind == "window_bias"]
        if len(found) != 1:
            return [f"the checkpoint with random tables reads as {len(found)} window_bias mechanisms"]
        mech = found[0]
    record = mech.record
    # the modules owning a table or an MLP, in layer order (the checkpoint may spell their names
    # the legacy way, ``attention.self.``: matched by their layer numbers, shared first)
    owners = sorted(
        (
            (tuple(int(x) for x in re.findall(r"(?:^|\.)(\d+)(?=\.|$)", n)), m)
            for n, m in model.named_modules()
            if isinstance(getattr(m, "relative_position_bias_table", None), torch.nn.Parameter)
            or isinstance(getattr(m, "continuous_position_bias_mlp", None), torch.nn.Module)
        ),
        key=lambda nm: (bool(nm[0]), nm[0]),
    )
    if len(owners) != len(record.layers):
        problems.append(f"the model has {len(owners)} window bias modules; we read {len(record.layers)}")
    for layer, (_, module) in zip(record.layers, owners):
        own_window = tuple(getattr(module, "window_size", layer.window))
        if own_window != layer.window:
            problems.append(f"{layer.label}: window {layer.window}, the model's {own_window}")
        pretrained = tuple(getattr(module, "pretrained_window_size", (0, 0)))
        if layer.mlp is not None and pretrained != tuple(layer.pretrained_window):
            problems.append(f"{layer.label}: pretrained window {layer.pretrained_window}, the model's {pretrained}")
        ref = _torch_window_bias(module, layer)
        if layer.mlp is not None:
            w1, b1, w2 = layer.mlp
            ours = np.asarray(
                fp.continuous_window_bias(w1, b1, w2, layer.window, pretrained_window=layer.pretrained_window)
            )
            tol, scale = 8.0, 16.0
        else:
            ours = np.asarray(fp.window_bias(jnp.asarray(layer.table), layer.window, class_token=layer.class_token))
            tol, scale = 0.0, float(np.abs(layer.table).max())
        if ours.shape != ref.shape:
            problems.append(f"{layer.label}: bias shape {ours.shape}, the model's {ref.shape}")
            continue
        if _ulps(ours, ref, scale) > tol:
            problems.append(f"{layer.label}: bias differs from the model's by {_ulps(ours, ref, scale):.3g} ulps")
        if _ulps(layer.bias(), ref, scale) > max(tol, 1.0):
            problems.append(
                f"{layer.label}: float64 bias differs from the model's by {_ulps(layer.bias(), ref, scale):.3g} ulps"
            )
        if layer.table is None:
            continue
        h, w = layer.window
        if layer.class_token:  # BEiT's own forward resizes its table to any grid (bilinear)
            big = (2 * h, 2 * w)
            ref = _torch_window_bias(module, layer, big)
            table = fp.resize_window_table(
                jnp.asarray(layer.table), layer.window, big, class_token=True, convention="transformers"
            )
            ours = np.asarray(fp.window_bias(table, big, class_token=True))
            what = "BEiT's own forward"
        else:  # transformers cannot resize a Swin table: timm's resize_rel_pos_bias_table
            big = (h + 1, w + 1)
            rows = (2 * h + 1) * (2 * w + 1)
            ref = timm_resize_rel_pos_bias_table(
                torch.from_numpy(np.asarray(layer.table)), big, (rows, layer.num_heads)
            ).numpy()
            ours = np.asarray(fp.resize_window_table(jnp.asarray(layer.table), layer.window, big, convention="timm"))
            what = "timm's resize_rel_pos_bias_table"
        if ours.shape != ref.shape or _ulps(ours, ref, scale) > 8:
            err = _ulps(ours, ref, scale) if ours.shape == ref.shape else float("inf")
            problems.append(f"{layer.label}: resized to {big} differs from {what} by {err:.3g} ulps")
    return problems


KIND_CHECKS["window_bias"] = _window_bias_problems
# ----------------------------------------------------------------------------- vision-tower RoPE (issue 35, item 2)

#: The patch grids a vision RoPE case runs, ``(t, h, w)`` per image (multiples of the tiny towers'
#: merge size 2; Qwen2.5-VL's tiny window of 2 x 2 blocks cuts the first into 2 windows).
VISION_GRIDS = {"pixtral": [[1, 4, 6]], "dinov3": [[1, 4, 6]], "qwen2_vl": [[1, 4, 6], [2, 4, 4]]}
VISION_GRIDS["lfm3_vl"] = VISION_GRIDS["qwen2_vl"]
VISION_GRIDS["qwen2_5_vl"] = [[1, 4, 8], [2, 4, 4]]  # 2 x 4 blocks: windows order them 0 1 4 5 2 3 6 7
# second round: Qwen2-VL's rotation copied, Qwen3-VL's with its learned grid (a 4 x 4 tiny table
# resampled up to 4 x 6 and 6 x 2 and kept at 4 x 4)
VISION_GRIDS.update(
    qwen3_vl=[[1, 4, 6], [2, 4, 4], [1, 6, 2]],
    qwen2_5_omni=VISION_GRIDS["qwen2_5_vl"],
    glm_ocr=VISION_GRIDS["qwen2_vl"],
    ernie4_5_vl=VISION_GRIDS["qwen2_vl"],
    dots3_note=VISION_GRIDS["qwen2_vl"],
    # one frame per row: Glm4vModel flattens a video's frames
    glm4v=[[1, 4, 6], [1, 4, 4], [1, 6, 2]],
    video_llama_3=VISION_GRIDS["qwen2_vl"],
    # a 3-frame clip: frames 0..2 of Kimi K2.5's sinusoid (rows 1..3 of its table)
    kimi_k25=[[1, 4, 6], [3, 4, 4], [1, 6, 2]],
    paddleocr_vl=[[1, 4, 6], [2, 4, 4], [1, 6, 2]],
    mlcd=[[1, 4, 6]],
)

#: Their modeling files' apply function (the one each vision attention calls by name).
VISION_APPLY = {
    "pixtral": "apply_rotary_pos_emb",
    "dinov3": "apply_rotary_pos_emb",
    "qwen2_vl": "apply_rotary_pos_emb_vision",
    "qwen2_5_vl": "apply_rotary_pos_emb_vision",
    "lfm3_vl": "apply_rotary_pos_emb_vision",
    "qwen3_vl": "apply_rotary_pos_emb_vision",
    "qwen2_5_omni": "apply_rotary_pos_emb_vision",
    "glm_ocr": "apply_rotary_pos_emb_vision",
    "glm4v": "apply_rotary_pos_emb_vision",
    "ernie4_5_vl": "apply_rotary_pos_emb_vision",
    "dots3_note": "apply_rotary_pos_emb_vision",
    "video_llama_3": "apply_rotary_pos_emb_vision",
    "kimi_k25": "apply_rotary_pos_emb_vision",
    "paddleocr_vl": "apply_rotary_pos_emb_vision",
    "mlcd": "apply_rotary_pos_emb_vision",
}

#: Where a tower's patch embedding ends and its first block starts, when not ``patch_embed`` and
#: ``blocks.0`` (Kimi K2.5 adds its grid inside its patch embedding, after ``proj``).
VISION_ZERO = {
    "kimi_k25": ("patch_embed.proj", "layers.0"),
    "paddleocr_vl": ("embeddings.patch_embedding", "encoder.layers.0"),
}

#: Merge sizes a tower takes per image as a forward argument (VideoLLaMA 3's ``merge_sizes``: its
#: processors give images 1 and videos 2), not from its config: the case runs one of each.
VISION_MERGES = {"video_llama_3": [1, 2]}


def vision_case_positions(cfg, family: str, grid, *, normalized: bool = False):
    """``(raw, order)``: the patches' ``(h, w)`` as the rotary module takes them, and in the tower's
    token order (Qwen2.5-VL's windows, DINOv3's centres), with a per-image merge size where the
    tower takes one (:data:`VISION_MERGES`)."""
    from flax_posenc.vision_rope_config import vision_patch_positions

    merges = VISION_MERGES.get(family)
    if merges is None:
        raw = vision_patch_positions(grid, spatial_merge_size=cfg.spatial_merge_size, normalized=normalized)
        return raw, cfg.positions(grid)
    raw = np.concatenate([vision_patch_positions([g], spatial_merge_size=m) for g, m in zip(grid, merges)])
    return raw, raw


def vision_tower(model):
    """The vision tower of ``model`` (Qwen-VL's ``visual``, LLaVA-style ``vision_tower``), else ``model``."""
    for name in ("visual", "vision_tower", "vision_model"):
        tower = getattr(model, name, None)
        if tower is not None and hasattr(tower, "config"):
            return tower
    return model


def _vision_rotary(tower):
    return [
        m
        for m in tower.modules()
        if hasattr(m, "inv_freq")
        and (type(m).__name__.endswith("RotaryEmbedding") or type(m).__name__.endswith("RopePositionEmbedding"))
    ]


def run_vision_tower(tower, family: str, grid, *, zero_patches: bool = False):
    """Run ``tower``'s forward on random patches of ``grid`` and record its rotary module's input
    and output and the first call of its apply function: ``(position_ids, (cos, sin), (q, k, out_q,
    out_k), added)`` (``position_ids`` ``None`` for DINOv3, whose module takes the pixels). With
    ``zero_patches`` the patch embedding's output is replaced by zeros, so that ``added`` (the first
    block's input) is exactly the positions the tower adds to it (its resampled learned grid)."""
    import torch

    cfg = tower.config
    seen: dict[str, Any] = {}
    rotary = _vision_rotary(tower)[0]

    def hook(module, args, output):
        seen.setdefault("args", args)
        seen.setdefault("out", output)

    module = sys.modules[type(tower).__module__]
    name = VISION_APPLY[family]
    real = getattr(module, name)

    def watched(q, k, cos, sin, *args, **kwargs):
        out = real(q, k, cos, sin, *args, **kwargs)
        seen.setdefault("apply", (q.detach().clone(), k.detach().clone(), out[0].detach(), out[1].detach()))
        return out

    def first_block(module, args, kwargs):
        seen.setdefault("added", (args[0] if args else kwargs["hidden_states"]).clone())

    handles = [rotary.register_forward_hook(hook)]
    if zero_patches:
        patches, block = VISION_ZERO.get(family, ("patch_embed", "blocks.0"))
        zero = tower.get_submodule(patches).register_forward_hook(lambda m, a, out: torch.zeros_like(out))
        handles.append(zero)
        handles.append(tower.get_submodule(block).register_forward_pre_hook(first_block, with_kwargs=True))
    setattr(module, name, watched)
    torch.manual_seed(1)
    try:
        with torch.no_grad(), quiet():
            if family in ("pixtral", "dinov3", "mlcd", "step3p5"):
                (_, h, w), p = grid[0], cfg.patch_size
                pixels = torch.randn(1, cfg.num_channels, h * p, w * p)
                kwargs = {"image_sizes": [(h * p, w * p)]} if family == "pixtral" else {}
                tower(pixels, **kwargs)
            else:
                grid_thw = torch.tensor(grid)
                n = int(sum(t * h * w for t, h, w in grid))
                channels = getattr(cfg, "in_channels", None) or getattr(cfg, "num_channels", 3)  # Kimi K2.5: 3
                width = channels * getattr(cfg, "temporal_patch_size", 1) * cfg.patch_size**2
                kwargs = {"merge_sizes": torch.tensor(VISION_MERGES[family])} if family in VISION_MERGES else {}
                pixels = torch.randn(n, width)
                if family == "kimi_k25":  # its patch embedding takes (patches, 3, p, p)
                    pixels = pixels.view(n, -1, cfg.patch_size, cfg.patch_size)
                if family == "paddleocr_vl":  # (1, patches, channels, p, p)
                    pixels = pixels.view(1, n, -1, cfg.patch_size, cfg.patch_size)
                tower(pixels, grid_thw=grid_thw, **kwargs)
    finally:
        setattr(module, name, real)
        for handle in handles:
            handle.remove()
    args = seen.get("args") or (None,)
    positions = args[1] if len(args) > 1 and torch.is_tensor(args[1]) else None
    return positions, seen.get("out"), seen.get("apply"), seen.get("added")


def _keys_cubic(x: float, a: float = -0.75) -> float:
    """Keys' cubic convolution kernel at distance ``x`` (torch's bicubic, ``a = -0.75``)."""
    x = abs(x)
    if x <= 1:
        return (a + 2) * x**3 - (a + 3) * x**2 + 1
    return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a if x < 2 else 0.0


def _axis_taps(i: int, n: int, side: int, convention: str) -> list[tuple[int, float]]:
    """``(tap, weight)`` of sample ``i`` of ``n`` on an axis of ``side``: bilinear with the corners
    aligned (``i (side - 1) / (n - 1)``, ``"big_vision"``), bilinear at the patch centre
    (``(i + 0.5) side / n - 0.5`` clamped at 0, ``"torch_bilinear"``), or bicubic at the patch centre
    (``grid_sample``'s ``align_corners=False``) with the edge taps replicated (``"torch_bicubic"``)."""
    if convention == "torch_bilinear":
        y = max((i + 0.5) * side / n - 0.5, 0.0)
        y0 = min(int(np.floor(y)), side - 1)
        return [(y0, 1 - (y - y0)), (min(y0 + 1, side - 1), y - y0)]
    if convention != "torch_bicubic":
        y = i * (side - 1) / max(n - 1, 1)
        y0 = min(int(np.floor(y)), side - 1)
        return [(y0, 1 - (y - y0)), (min(y0 + 1, side - 1), y - y0)]
    y = (i + 0.5) * side / n - 0.5
    y0 = int(np.floor(y))
    return [(min(max(y0 + k, 0), side - 1), _keys_cubic(y - (y0 + k))) for k in (-1, 0, 1, 2)]


def _resampled_grid_float64(table: np.ndarray, grid, merge: int, convention: str) -> np.ndarray:
    """A square ``(side * side, dim)`` grid resampled to each image of ``grid`` in float64, written
    out from the definition of the tower's sampling (``"big_vision"``: bilinear, corners aligned;
    ``"torch_bicubic"``: GLM-4V's ``grid_sample`` bicubic), in ``merge x merge`` block order per frame."""
    side = int(round(np.sqrt(table.shape[0])))
    g = np.asarray(table, np.float64).reshape(side, side, -1)
    out = []
    for t, h, w in grid:
        image = np.zeros((h, w, g.shape[-1]))
        for r in range(h):
            for c in range(w):
                for y, wy in _axis_taps(r, h, side, convention):
                    for x, wx in _axis_taps(c, w, side, convention):
                        image[r, c] += wy * wx * g[y, x]
        blocks = image.reshape(h // merge, merge, w // merge, merge, -1).transpose(0, 2, 1, 3, 4)
        out.extend([blocks.reshape(h * w, -1)] * t)
    return np.concatenate(out)


def _vision_grid_problems(record, grid, added, directory: Path) -> list[str]:
    """The learned grid a vision RoPE record names (Qwen3-VL's ``pos_embed``), read from the saved
    checkpoint and resampled by :func:`flax_posenc.vision_grid_positions` in float32, against the
    float64 definition (within 4 float32 ulps of the table's largest value, or of 1 beside Kimi
    K2.5's frame sinusoid) and against the positions the tower's own forward added (float32; within
    ``max(8, side / 2)`` ulps: its float32 sample coordinates and 16-tap sums)."""
    import jax

    import flax_posenc as fp
    from flax_posenc.conversion.vision_rope import load_vision_grid

    if added is None:
        return ["the vision forward pass added no learned grid before its first block"]
    table = load_vision_grid(directory, record)
    merge = record.config.spatial_merge_size
    ours = np.asarray(
        jax.jit(
            lambda t: fp.vision_grid_positions(t, grid, spatial_merge_size=merge, convention=record.grid_convention)
        )(table.astype(np.float32))
    )
    theirs = added.double().numpy().reshape(ours.shape[0], -1) if added.numel() == ours.size else None
    if theirs is None:
        return [f"vision learned grid: the tower added {tuple(added.shape)}, ours {ours.shape}"]
    exact = _resampled_grid_float64(table, grid, merge, record.grid_convention)
    scale = float(np.abs(table).max())
    if record.frames is not None:  # Kimi K2.5: plus [sin | cos] of frame f of a clip (none for an image)
        dim = table.shape[1]
        ours = ours + np.asarray(fp.vision_frame_sinusoid(grid, dim, record.frames))
        inv = 10000.0 ** (-np.arange(0, dim, 2) / dim)
        for start, (t, h, w) in zip(np.cumsum([0] + [t * h * w for t, h, w in grid]), grid):
            for f in range(t if t > 1 else 0):
                rows = slice(int(start) + f * h * w, int(start) + (f + 1) * h * w)
                exact[rows] += np.concatenate([np.sin(f * inv), np.cos(f * inv)])
        scale = max(scale, 1.0)  # the sinusoid's entries reach 1
    if not np.abs(table).max() > 0:
        return ["vision learned grid: the tiny checkpoint's table is all zeros (a comparison that cannot fail)"]
    # transformers' float32: its weights from float32 sample coordinates (GLM-4V's grid_sample
    # normalizes them to [-1, 1] and back: ~side * 2**-24 px, up to ~side / 4 ulps, 25 at side 168)
    # and a float32 sum of up to 16 taps (Kimi K2.5's bicubic gather: 7.5 ulps); ours are the
    # float64 weights rounded once
    loose = max(8.0, record.grid_side / 2)
    problems = []
    for label, a, b, tol in (
        ("the tower's own", ours, theirs, loose),
        ("float64", ours, exact, 4.0),
        ("float64 (theirs)", theirs, exact, loose),
    ):
        if _ulps(a, b, scale) > tol:
            problems.append(
                f"vision learned grid differs from {label} resampled positions by {_ulps(a, b, scale):.3g} ulps"
            )
    return problems


def _vision_rope_problems(model, mech, directory: Path) -> list[str]:
    """A vision tower's 2-D RoPE against its own modules, in a forward pass on a small grid: the
    rotary module's ``inv_freq`` (within ``2**-21`` relative) and its input position ids (equal),
    its ``cos``/``sin`` (float32 rounding of our float64 angle: ``|d| <= 2**-22 (1 + angle)``), the
    rotated ``q``/``k`` of the apply function the attention calls against
    :func:`flax_posenc.apply_vision_rope_qk` in the model's token order (Qwen2.5-VL's windows,
    DINOv3's prefix tokens: ``1e-5`` relative), and the limit: Pixtral's trained grid
    (``image_size // patch_size``), none for the others."""
    import jax

    import flax_posenc as fp

    record = mech.record
    cfg = record.config
    tower = vision_tower(model)
    rotary = _vision_rotary(tower)
    if not rotary:
        return [f"we report a {record.family} vision RoPE; the vision tower has no rotary module"]
    problems = []
    axis, column = cfg.columns()
    axis_, ours_freq = cfg.frequencies()
    theirs = rotary[0].inv_freq.detach().double().numpy()
    from flax_posenc.rope_config import rope_inverse_frequencies

    base = np.asarray(rope_inverse_frequencies(cfg.base_rope())[0], np.float64)  # each frequency once
    expect = ours_freq if theirs.size == ours_freq.size else base
    if theirs.shape != expect.shape or not np.allclose(theirs, expect, rtol=2**-21, atol=0):
        return [f"vision inv_freq {theirs.shape} differs from ours {expect.shape}"]
    grid = VISION_GRIDS[record.family]
    positions, out, applied, added = run_vision_tower(
        tower, record.family, grid, zero_patches=record.grid_side is not None
    )
    if record.grid_side is not None:
        problems += _vision_grid_problems(record, grid, added, directory)
    if out is None or applied is None:
        return ["the vision forward pass called no rotary module or apply function"]
    normalized = cfg.coordinates == "normalized"
    raw, order = vision_case_positions(cfg, record.family, grid, normalized=normalized)
    if positions is not None and not np.array_equal(positions.numpy(), raw):
        problems.append("vision position ids differ from the rotary module's input")
    angle = raw[:, axis].astype(np.float64) * ours_freq * (2 * np.pi if normalized else 1.0)
    cos_t, sin_t = (np.asarray(x.detach().double().numpy()) for x in out)
    half = cfg.head_dim // 2
    if cos_t.shape != (raw.shape[0], cfg.head_dim) or not np.array_equal(cos_t[:, :half], cos_t[:, half:]):
        problems.append(f"the rotary module's cos is {cos_t.shape}, not [cos | cos] of ({raw.shape[0]}, {half})")
    else:
        ours_cos, ours_sin = (np.asarray(x, np.float64) for x in jax.jit(lambda: fp.vision_rope_cos_sin(raw, cfg))())
        tol = 2.0**-22 * (1 + np.abs(angle))
        for label, a, b, exact in (
            ("cos", ours_cos, cos_t[:, :half], np.cos(angle)),
            ("sin", ours_sin, sin_t[:, :half], np.sin(angle)),
        ):
            if not np.all(np.abs(a - b) <= 2 * tol):
                problems.append(f"vision RoPE {label} differs from the rotary module's by {np.max(np.abs(a - b)):.3g}")
            if not np.all(np.abs(a - exact) <= tol):
                problems.append(f"vision RoPE {label} differs from float64 by {np.max(np.abs(a - exact)):.3g}")
    q, k, out_q, out_k = (x.numpy() for x in applied)
    tokens = order.shape[0] + cfg.prefix_tokens
    seq_axis = -3 if q.ndim >= 3 and q.shape[-3] == tokens else -2
    try:
        # one jitted call (one compilation per case, not one per eager primitive); the positions are
        # known while tracing (a closure constant), so their limit is checked then
        angles = None
        if record.prefix_angle_key:  # MLCD's learned class-token angles, read from the checkpoint
            from flax_posenc.conversion.vision_rope import load_vision_prefix_angles

            angles = load_vision_prefix_angles(directory, record)
        rq, rk = jax.jit(
            lambda q, k: fp.apply_vision_rope_qk(q, k, cfg, order, seq_axis=seq_axis, prefix_angles=angles)
        )(q, k)
    except ValueError as e:
        return problems + [f"apply_vision_rope_qk cannot take the model's q {q.shape}: {e}"[:200]]
    for label, a, b in (("q", rq, out_q), ("k", rk, out_k)):
        err = float(np.max(np.abs(np.asarray(a) - b)))
        if not err <= 1e-5 * (1 + float(np.max(np.abs(b)))):
            problems.append(f"{VISION_APPLY[record.family]}({label}) differs from apply_vision_rope_qk by {err:.3g}")
    if record.family == "pixtral":
        side = tower.config.image_size // tower.config.patch_size
        if record.patches_per_side != side:
            problems.append(f"patches per side {record.patches_per_side}, the config's image_size / patch_size {side}")
    elif record.patches_per_side is not None:
        problems.append(f"we report a limit of {record.patches_per_side} patches per side; transformers has none")
    return problems


KIND_CHECKS["vision_rope"] = _vision_rope_problems


# ---- Llama 4's vision tower (issue 35 item 2, third round): its rotary module holds a complex
# ``freqs_ci`` for one image size (no ``inv_freq``), its apply function takes it, its learned grid is
# added as it is: a hook of its own, called for the ``llama4`` row.
def _llama4_vision_problems(model, mech, directory: Path) -> list[str]:
    """Llama 4's tower against its own modules: ``Llama4VisionRotaryEmbedding.freqs_ci`` (cos = real,
    sin = imaginary part, the class token's row last) against :func:`flax_posenc.vision_rope_cos_sin`
    with the identity appended (float32 rounding of our float64 angle: ``|d| <= 2**-22 (1 + angle)``,
    twice that from theirs), the ``q``/``k`` ``vision_apply_rotary_emb`` rotates in a forward pass
    against :func:`flax_posenc.apply_vision_rope_qk` (``1e-5`` relative), the learned grid
    ``positional_embedding_vlm`` read from the checkpoint against the parameter and against what the
    forward adds before ``layernorm_pre`` (the patch embedding zeroed, the class embedding taken
    off its row), and the limit: exactly ``image_size // patch_size`` patches per side, transformers'
    forward refusing an image one patch smaller."""
    import jax
    import torch

    import flax_posenc as fp
    from flax_posenc.conversion.vision_rope import load_vision_grid

    record = mech.record
    cfg = record.config
    tower = vision_tower(model)
    rotary = [m for m in tower.modules() if type(m).__name__ == "Llama4VisionRotaryEmbedding"]
    if not rotary:
        return ["we report a llama4 vision RoPE; the vision tower has no Llama4VisionRotaryEmbedding"]
    side = tower.config.image_size // tower.config.patch_size
    problems = []
    if record.patches_per_side != side or record.grid_side != side:
        problems.append(f"patches per side {record.patches_per_side}, the config's image_size / patch_size {side}")
    freqs = rotary[0].freqs_ci.detach()
    raw = cfg.positions([[1, side, side]])
    axis, inv_freq = cfg.frequencies()
    angle = np.concatenate([(raw[:, axis] + 1).astype(np.float64) * inv_freq, np.zeros((1, axis.size))])
    ours_cos, ours_sin = (np.asarray(x, np.float64) for x in jax.jit(lambda: fp.vision_rope_cos_sin(raw, cfg))())
    ours_cos = np.concatenate([ours_cos, np.ones((1, axis.size))])  # the class token: not rotated
    ours_sin = np.concatenate([ours_sin, np.zeros((1, axis.size))])
    theirs = freqs.reshape(freqs.shape[0], -1).to(torch.complex128).numpy()
    if theirs.shape != ours_cos.shape:
        return problems + [f"freqs_ci is {tuple(freqs.shape)}, ours ({side * side + 1}, {axis.size})"]
    tol = 2.0**-22 * (1 + np.abs(angle))
    for label, a, b, exact in (
        ("cos", ours_cos, theirs.real, np.cos(angle)),
        ("sin", ours_sin, theirs.imag, np.sin(angle)),
    ):
        if not np.all(np.abs(a - b) <= 2 * tol):
            problems.append(f"vision RoPE {label} differs from freqs_ci by {np.max(np.abs(a - b)):.3g}")
        if not np.all(np.abs(a - exact) <= tol):
            problems.append(f"vision RoPE {label} differs from float64 by {np.max(np.abs(a - exact)):.3g}")
    # a forward pass: the apply function's q/k, and the grid added before layernorm_pre
    module = sys.modules[type(tower).__module__]
    real = module.vision_apply_rotary_emb
    seen: dict[str, Any] = {}

    def watched(query, key, freqs_ci):
        out = real(query, key, freqs_ci)
        seen.setdefault("apply", (query.clone(), key.clone(), out[0], out[1]))
        return out

    def before_norm(module, args):
        seen.setdefault("added", args[0].clone())

    handles = [
        tower.patch_embedding.register_forward_hook(lambda m, a, out: torch.zeros_like(out)),
        tower.layernorm_pre.register_forward_pre_hook(before_norm),
    ]
    module.vision_apply_rotary_emb = watched
    torch.manual_seed(1)
    p = tower.config.patch_size
    try:
        with torch.no_grad(), quiet():
            tower(torch.randn(1, tower.config.num_channels, side * p, side * p))
            for handle in handles:
                handle.remove()
            handles = []
            try:  # one patch smaller: its tables hold one size, so transformers cannot run it
                tower(torch.randn(1, tower.config.num_channels, (side - 1) * p, (side - 1) * p))
                problems.append(f"we report exactly {side} x {side} patches; transformers ran {side - 1} x {side - 1}")
            except RuntimeError:
                pass
    finally:
        module.vision_apply_rotary_emb = real
        for handle in handles:
            handle.remove()
    if "apply" not in seen or "added" not in seen:
        return problems + ["the vision forward pass called no vision_apply_rotary_emb or layernorm_pre"]
    q, k, out_q, out_k = (x.numpy() for x in seen["apply"])
    try:
        rq, rk = jax.jit(lambda q, k: fp.apply_vision_rope_qk(q, k, cfg, raw, seq_axis=-3))(q, k)
    except ValueError as e:
        return problems + [f"apply_vision_rope_qk cannot take the model's q {q.shape}: {e}"[:200]]
    for label, a, b in (("q", rq, out_q), ("k", rk, out_k)):
        err = float(np.max(np.abs(np.asarray(a) - b)))
        if not err <= 1e-5 * (1 + float(np.max(np.abs(b)))):
            problems.append(f"vision_apply_rotary_emb({label}) differs from apply_vision_rope_qk by {err:.3g}")
    table = load_vision_grid(directory, record)
    param = tower.positional_embedding_vlm.detach().double().numpy()
    if not np.abs(table).max() > 0:
        return problems + [
            "vision learned grid: the tiny checkpoint's table is all zeros (a comparison that cannot fail)"
        ]
    if table.shape != param.shape or not np.array_equal(table, param):
        problems.append(f"vision learned grid {table.shape} differs from positional_embedding_vlm {param.shape}")
    added = seen["added"].double().numpy().reshape(-1, table.shape[1])
    added[-1] -= tower.class_embedding.detach().double().numpy()  # the class token's own embedding
    if added.shape != table.shape or _ulps(added, table, float(np.abs(table).max())) > 1:
        problems.append("vision learned grid differs from the positions the forward adds (rows in token order)")
    return problems


# Step 3.5/3.7's tower: one image of 6 x 4 patches (its 4 x 4 grid resampled), the grid added before
# pre_layernorm (the patch convolution's output zeroed)
VISION_GRIDS["step3p5"] = [[1, 6, 4]]
VISION_APPLY["step3p5"] = "apply_rotary_pos_emb_vision"
VISION_ZERO["step3p5"] = ("embeddings.patch_embedding", "pre_layernorm")
#: The module's name of a grid the checkpoint saves under another (Step 3.5's ``positional_embedding``).
VISION_GRID_MODULE_NAMES = {"step3p5": "embeddings.position_embedding"}


def _vision_rope_or_llama4(model, mech, directory: Path) -> list[str]:
    if mech.record.family == "llama4":
        return _llama4_vision_problems(model, mech, directory)
    return _vision_rope_problems(model, mech, directory)


KIND_CHECKS["vision_rope"] = _vision_rope_or_llama4


# ----------------------------------------------------------------------------- NaFlex grids (issue 35 item 3)


def processor_default_budget(processor: str) -> int:
    """The default patch budget of transformers' ``processor`` (the independent reference of our
    :data:`~flax_posenc.conversion.naflex_grids.PROCESSOR_BUDGETS`): SigLIP 2's from an instance of
    its PIL image processor; LFM2-VL's (whose module needs torchvision) from its class defaults,
    read from transformers' source, through its ``__init__``'s arithmetic."""
    import ast

    if processor == "Siglip2ImageProcessor":
        from transformers.models.siglip2.image_processing_pil_siglip2 import Siglip2ImageProcessorPil

        return int(Siglip2ImageProcessorPil().max_num_patches)
    if processor == "Lfm2VlImageProcessor":
        import transformers.models.lfm2_vl as pkg

        path = Path(inspect.getfile(pkg)).parent / "image_processing_lfm2_vl.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Lfm2VlImageProcessor")
        d = {
            t.id: ast.literal_eval(s.value)
            for s in cls.body
            if isinstance(s, ast.Assign)
            for t in s.targets
            if isinstance(t, ast.Name) and isinstance(s.value, ast.Constant)
        }
        tiles = (d["tile_size"] // d["encoder_patch_size"]) ** 2 if d["do_image_splitting"] else 0
        return max(d["max_image_tokens"] * d["downsample_factor"] ** 2, tiles)
    raise AssertionError(f"no reference for {processor}")


#: image patch grids a NaFlex case asks for, per budget ``b``: the learned grid's own shape, wide,
#: tall, odd aspect ratios, a single row and column, and the whole budget in one row.
def naflex_shapes(grid: tuple[int, int], budget: int) -> list[tuple[int, int]]:
    side = math.isqrt(budget)
    return [
        grid,
        (side, side),
        (max(1, side // 2), 2 * side),
        (2 * side, max(1, side // 2)),
        (3, 7),
        (1, 1),
        (1, budget),
    ]


def _naflex_problems(model, mech, directory: Path) -> list[str]:
    """A NaFlex grid: rows bit-equal to the model's; our budget the image processor's default; the
    positions ``Siglip2VisionEmbeddings`` adds (its forward on zero pixels, less the patch bias) for
    every shape of :func:`naflex_shapes`, padding included, within 8 float32 ulps of
    ``fp.naflex_positions``; an image of ``budget`` patches taken, of ``budget + 1`` refused."""
    import torch

    import flax_posenc as fp

    table = mech.record.table
    found = _grid_owner(model, table.key)
    if found is None:
        return [f"naflex grid {table.key}: no parameter of the model has that name (less a composite's prefix)"]
    emb, stored = found
    problems = []
    if not np.array_equal(stored.detach().numpy(), table.weights):
        problems.append(f"naflex grid {table.key} rows differ from the model's")
    processor = table.budget_source.removeprefix("the ").removesuffix(" default")
    budget = table.max_num_patches
    want = processor_default_budget(processor)
    if budget != want:
        problems.append(f"patch budget {budget}; {processor}'s default is {want}")
    config = emb.config
    width = config.num_channels * config.patch_size * config.patch_size
    shapes = naflex_shapes(table.grid, budget)
    bias = emb.patch_embedding.bias.detach().numpy()
    with torch.no_grad():
        out = emb(torch.zeros(len(shapes), budget, width), torch.tensor(shapes)).numpy() - bias
    ours = np.asarray(fp.naflex_positions(table, shapes))
    err = np.abs(ours.astype(np.float64) - out).max() / np.spacing(np.float32(np.abs(table.weights).max()))
    if ours.shape != out.shape or not err <= 8:
        problems.append(f"naflex_positions differs from the model's embeddings by {err:.3g} ulps over {shapes}")

    def runs(patches: int) -> bool:
        try:
            with torch.no_grad(), quiet():
                emb(torch.zeros(1, budget, width), torch.tensor([[1, patches]]))
        except (ValueError, RuntimeError):
            return False
        return True

    if not runs(budget):
        problems.append(f"an image of {budget} patches (our budget) is refused by the model")
    if runs(budget + 1):
        problems.append(f"an image of {budget + 1} patches is taken by the model (our budget is {budget})")
    return problems


KIND_CHECKS["naflex_grid"] = _naflex_problems


# ----------------------------------------------------------------------------- Transformer-XL relative (issue 36)


def _xl_module_rows(module, length: int, dim: int):
    """The model's own position module on ``length`` frames: its ``(2 length - 1, dim)`` rows (float64)."""
    import torch

    with torch.no_grad():
        out = module(torch.randn(1, length, dim))
    if isinstance(out, tuple):  # FastSpeech2: (scaled hidden states, rows)
        out = out[-1]
    return out[0].double().numpy()


def _xl_shift_problems(model, rec) -> list[str]:
    """The attention's own relative shift picks row ``L - 1 - (i - j)`` for query ``i``, key ``j``."""
    import torch

    attn = next((m for n, m in model.named_modules() if hasattr(m, "_rel_shift")), None)
    shift = None if attn is None else lambda x, n: attn._rel_shift(x)[..., :n]
    if attn is None:
        attn = next((m for n, m in model.named_modules() if hasattr(m, "shift_relative_position_tensor")), None)
        shift = None if attn is None else lambda x, n: attn.shift_relative_position_tensor(x)
    if shift is None:
        return []  # wav2vec2-conformer shifts inline in its attention (the rows are checked above)
    n = 7
    x = torch.randn(1, 2, n, 2 * n - 1, dtype=torch.float64)
    theirs = shift(x, n).numpy()
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    ours = x.numpy()[:, :, i, n - 1 - (i - j)]
    return [] if np.array_equal(theirs, ours) else ["relative shift: the attention does not pick row L-1-(i-j)"]


def _xl_relative_problems(model, mech, directory: Path) -> list[str]:
    """Transformer-XL relative sinusoids (Parakeet, Nemotron ASR, FastSpeech2-Conformer,
    wav2vec2-conformer): every position module of the model gives our float64 rows for 37 frames
    and past its initial buffer or field (within float32 rounding of its angles), refuses past our
    limit where we report one, its attention's shift picks our rows, and the u, v and W_R tensors we
    name are the model's parameters (bit-equal), one per attention layer."""
    from flax_posenc.conversion.checkpoint import open_checkpoint
    from flax_posenc.conversion.xl_relative import XL_RELATIVE_FAMILIES

    rec = mech.record
    row = XL_RELATIVE_FAMILIES[rec.family]
    problems = []
    modules = [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith(row.module_class)]
    if not modules:
        return [f"xl_relative: no module of class *{row.module_class} in the model"]
    cfg = model.config
    far = (
        rec.limit
        or max(getattr(cfg, "max_position_embeddings", 0) or 0, getattr(cfg, "max_source_positions", 0) or 0, 64)
    ) + 1
    for name, module in modules:
        for length in (37, far) if rec.limit is None else (37, rec.limit):
            theirs = _xl_module_rows(module, length, rec.dim)
            ours = rec.table(length)
            tol = 4 * 2.0**-24 * length + 1e-6  # float32 angles d * w rounded: |error| <= ~|d| ulp
            if theirs.shape != ours.shape:
                problems.append(f"{name}: {length} frames give {theirs.shape}, ours {ours.shape}")
            elif np.abs(theirs - ours).max() > tol:
                problems.append(
                    f"{name}: rows for {length} frames differ by {np.abs(theirs - ours).max():.3g} > {tol:.3g}"
                )
        if rec.limit is not None:
            try:
                _xl_module_rows(module, rec.limit + 1, rec.dim)
                problems.append(f"{name}: {rec.limit + 1} frames accepted past our limit {rec.limit}")
            except ValueError:
                pass
    problems += _xl_shift_problems(model, rec)
    params = dict(model.named_parameters())
    u_suffix = row.bias_keys[0]
    theirs_layers = [n for n in params if n.endswith("." + u_suffix)]
    if len(theirs_layers) != rec.layers:
        problems.append(f"xl_relative: {len(theirs_layers)} attention layers hold {u_suffix}, we read {rec.layers}")
    with open_checkpoint(directory) as ckpt:
        for keys in rec.bias_keys:
            for stored in keys:
                # a composite's tower module names its parameters without the composite's prefix (``encoder.``)
                key = next((p for p in params if stored == p or stored.endswith("." + p)), stored)
                if key not in params:
                    problems.append(f"xl_relative: {key} is not a parameter of the model")
                elif not np.array_equal(np.asarray(ckpt.tensor(stored)), params[key].detach().numpy()):
                    problems.append(f"xl_relative: {stored} differs from the model's {key}")
    return problems


KIND_CHECKS["xl_relative"] = _xl_relative_problems


# ----------------------------------------------------------------------------- clipped relative keys (issue 36)


def _clipped_relative_problems(model, mech, directory: Path) -> list[str]:
    """Shaw-style relative key tables (wav2vec2-bert's relative_key, Granite Speech): every layer's
    table is the model's parameter (bit-equal), one per attention layer; the rows the model picks
    are ours: Granite's ``attention_dists`` buffer equals our index over a block (and its attention
    modules' ``context_size`` our block); wav2vec2-bert's own ``_apply_relative_key_position_encoding``
    gives our ``q . E[index] * scaling`` for a query 5 frames longer than the clamp window."""
    import sys

    import torch

    from flax_posenc.conversion.checkpoint import open_checkpoint
    from flax_posenc.conversion.clipped_relative import CLIPPED_RELATIVE_FAMILIES

    rec = mech.record
    row = CLIPPED_RELATIVE_FAMILIES[rec.family]
    problems = []
    params = dict(model.named_parameters())
    theirs = [n for n in params if n == row.table_key or n.endswith("." + row.table_key)]
    if len(theirs) != len(rec.keys):
        problems.append(f"clipped_relative: {len(theirs)} layers hold {row.table_key}, we read {len(rec.keys)}")
    with open_checkpoint(directory) as ckpt:
        for stored in rec.keys:
            key = next((p for p in params if stored == p or stored.endswith("." + p)), None)
            if key is None:
                problems.append(f"clipped_relative: {stored} is not a parameter of the model")
            elif not np.array_equal(np.asarray(ckpt.tensor(stored)), params[key].detach().numpy()):
                problems.append(f"clipped_relative: {stored} differs from the model's {key}")
    buffers = {n: b for n, b in model.named_buffers() if n.endswith("attention_dists")}
    if rec.block is not None:
        c = rec.block
        ours = rec.index(np.arange(c)[:, None], np.arange(c)[None, :])
        if not buffers:
            problems.append("clipped_relative: the model holds no attention_dists buffer")
        for name, buf in buffers.items():
            if not np.array_equal(buf.numpy(), ours):
                problems.append(f"clipped_relative: {name} differs from our index over a block of {c}")
        sizes = {m.context_size for m in model.modules() if hasattr(m, "rel_pos_emb") and hasattr(m, "context_size")}
        if sizes != {c}:
            problems.append(f"clipped_relative: attention blocks of {sorted(sizes)} frames, ours {c}")
        return problems
    if rec.value_keys:  # VITS: its own key logits and value sums over the window, zero beyond it
        return problems + _vits_window_problems(model, rec)
    if rec.effect == "bias":  # Phi-4-multimodal's audio encoder: its own bias module on 2 M + 5 frames
        layer = next((m for m in model.modules() if hasattr(m, "bias_values")), None)
        if layer is None:
            return problems + ["clipped_relative: no module with bias_values in the model"]
        n = rec.left + rec.right + 6
        with torch.no_grad():
            theirs = layer(torch.zeros(1, n, 1))[0].double().numpy()
        table = layer.bias_values.weight.detach().double().numpy()
        index = rec.index(np.arange(n)[:, None], np.arange(n)[None, :])
        if index.min() < 0 or index.max() >= len(table):
            return problems + [
                f"clipped_relative: our rows {index.min()}..{index.max()} leave the model's {len(table)}"
            ]
        if not np.array_equal(theirs, np.moveaxis(table[index], -1, 0)):
            problems.append("clipped_relative: the model's relative attention bias differs from ours")
        return problems
    attn = next((m for m in model.modules() if hasattr(m, "distance_embedding")), None)
    apply = (
        None
        if attn is None
        else getattr(sys.modules[type(attn).__module__], "_apply_relative_key_position_encoding", None)
    )
    if apply is None:
        return problems + ["clipped_relative: no attention module with distance_embedding and its function"]
    n = rec.left + rec.right + 5
    torch.manual_seed(0)
    q = torch.randn(1, 2, n, rec.head_dim)
    with torch.no_grad():
        _, bias = apply(attn, q, q)
    table = attn.distance_embedding.weight.detach().double().numpy()
    index = rec.index(np.arange(n)[:, None], np.arange(n)[None, :])
    if index.min() < 0 or index.max() >= len(table):
        return problems + [f"clipped_relative: our rows {index.min()}..{index.max()} leave the model's {len(table)}"]
    ours = np.einsum("bhld,lrd->bhlr", q.double().numpy(), table[index])
    ours = ours * attn.scaling
    err = np.abs(bias.double().numpy() - ours).max()
    if err > 1e-5:
        problems.append(f"clipped_relative: the model's relative_key bias differs from ours by {err:.3g}")
    return problems


def _vits_window_problems(model, rec) -> list[str]:
    """VITS: for 2 w + 5 frames, the attention's own ``_get_relative_embeddings`` with
    ``_relative_position_to_absolute_position`` (keys) and ``_absolute_position_to_relative_position``
    (values) against ours: ``q . E_k[index]`` and ``sum_j p_ij E_v[index]``, zero past the window."""
    import torch

    attn = next((m for m in model.modules() if hasattr(m, "emb_rel_k")), None)
    if attn is None:
        return ["clipped_relative: no attention module with emb_rel_k"]
    n = rec.left + rec.right + 5
    torch.manual_seed(0)
    q = torch.randn(2, n, rec.head_dim)
    p = torch.softmax(torch.randn(2, n, n), dim=-1)
    with torch.no_grad():
        keys = attn._relative_position_to_absolute_position(
            q @ attn._get_relative_embeddings(attn.emb_rel_k, n).transpose(-2, -1)
        )
        values = attn._absolute_position_to_relative_position(p) @ attn._get_relative_embeddings(attn.emb_rel_v, n)
    index = rec.index(np.arange(n)[:, None], np.arange(n)[None, :])
    problems = []
    for name, table, theirs in (("key", attn.emb_rel_k, keys), ("value", attn.emb_rel_v, values)):
        padded = np.concatenate([table[0].detach().double().numpy(), np.zeros((1, rec.head_dim))])  # row -1: zero
        rows = padded[index]  # (n, n, head_dim)
        if name == "key":
            ours = np.einsum("bid,ijd->bij", q.double().numpy(), rows)
        else:
            ours = np.einsum("bij,ijd->bid", p.double().numpy(), rows)
        err = np.abs(theirs.double().numpy() - ours).max()
        if err > 1e-5:
            problems.append(f"clipped_relative: VITS's relative {name} terms differ from ours by {err:.3g}")
    return problems


KIND_CHECKS["clipped_relative"] = _clipped_relative_problems


# ----------------------------------------------------------------------------- BROS box sinusoids (issue 36)


def _bbox_sinusoid_problems(model, mech, directory: Path) -> list[str]:
    """BROS: the model's own ``BrosBboxEmbeddings.bbox_sinusoid_emb`` on the scaled differences of
    random boxes (4-coordinate boxes expanded to 8 as the model does) against our ``encode``, within
    float32 rounding of its angles; its ``bbox_projection`` is the key we name, and its width ours."""
    import torch

    rec = mech.record
    module = next((m for m in model.modules() if type(m).__name__.endswith("BboxEmbeddings")), None)
    if module is None:
        return ["bbox_sinusoid: no *BboxEmbeddings module in the model"]
    problems = []
    gen = np.random.default_rng(0)
    boxes4 = np.sort(gen.uniform(0, 1, (9, 2, 2)), axis=1).reshape(9, 4)[:, [0, 2, 1, 3]]  # x0, y0, x1, y1
    boxes = boxes4[:, [0, 1, 2, 1, 2, 3, 0, 3]]
    if rec.coords != boxes.shape[1]:
        return [f"bbox_sinusoid: {rec.coords} coordinates per box, BROS's forward makes {boxes.shape[1]}"]
    scaled = torch.tensor(boxes * model.config.bbox_scale, dtype=torch.float32)[None]  # (1, n, 8)
    bbox_t = scaled.transpose(0, 1)
    with torch.no_grad():
        theirs = module.bbox_sinusoid_emb(bbox_t[None, :, :, :] - bbox_t[:, None, :, :])[:, :, 0].double().numpy()
    ours = rec.encode(scaled[0].double().numpy() / model.config.bbox_scale)
    tol = 4 * 2.0**-24 * float(np.abs(boxes).max() * rec.scale) + 1e-6
    if theirs.shape != ours.shape:
        problems.append(f"bbox_sinusoid: the model's sinusoids {theirs.shape}, ours {ours.shape}")
    elif np.abs(theirs - ours).max() > tol:
        problems.append(f"bbox_sinusoid: the model's sinusoids differ from ours by {np.abs(theirs - ours).max():.3g}")
    names = dict(model.named_parameters())
    if not any(rec.key == n or rec.key.endswith("." + n) for n in names if n.endswith("bbox_projection.weight")):
        problems.append(f"bbox_sinusoid: {rec.key} is not the model's bbox_projection")
    return problems


KIND_CHECKS["bbox_sinusoid"] = _bbox_sinusoid_problems


# ----------------------------------------------------------------------------- LayoutLMv3 relative biases (issue 36)


def _layout_bias_problems(model, mech, directory: Path) -> list[str]:
    """LayoutLMv3: the encoder's own ``_cal_1d_pos_emb`` and ``_cal_2d_pos_emb`` on 40 positions and 40
    random boxes (coordinates up to 1000, so that every 2-D bucket is used) against our ``bias``
    (bit-equal: lookups), and the tables we name are the encoder's."""
    import torch

    rec = mech.record
    encoder = next((m for m in model.modules() if hasattr(m, "_cal_1d_pos_emb")), None)
    if encoder is None:
        return ["layout_relative_bias: no encoder with _cal_1d_pos_emb in the model"]
    n = 40
    gen = np.random.default_rng(0)
    xy = np.sort(gen.integers(0, 1001, (n, 2, 2)), axis=1)
    boxes = np.stack([xy[:, 0, 0], xy[:, 0, 1], xy[:, 1, 0], xy[:, 1, 1]], axis=-1)
    pos = np.arange(n) + 2 * gen.integers(0, 3, n).cumsum()  # gaps: distances past the exact buckets
    with torch.no_grad():
        theirs = encoder._cal_1d_pos_emb(torch.from_numpy(pos)[None])[0]
        if rec.box_buckets is not None:
            theirs = theirs + encoder._cal_2d_pos_emb(torch.from_numpy(boxes)[None])[0]
    ours = rec.bias(pos, boxes if rec.box_buckets is not None else None)
    problems = []
    if theirs.shape != ours.shape:
        problems.append(f"layout_relative_bias: the encoder's bias {tuple(theirs.shape)}, ours {ours.shape}")
    elif np.abs(theirs.double().numpy() - ours).max() > 1e-6:  # sums of two float32 lookups
        problems.append(
            f"layout_relative_bias: the encoder's bias differs from ours by {np.abs(theirs.double().numpy() - ours).max():.3g}"
        )
    params = dict(model.named_parameters())
    for key, w in zip(rec.keys, rec.weights, strict=True):
        name = next((p for p in params if key == p or key.endswith("." + p) or p.endswith("." + key)), None)
        if name is None or not np.array_equal(params[name].detach().numpy(), w):
            problems.append(f"layout_relative_bias: {key} is not the model's table")
    if getattr(model.config, "has_spatial_attention_bias", False) != (rec.box_buckets is not None):
        problems.append("layout_relative_bias: the spatial bias is read where the model has none, or the reverse")
    return problems


KIND_CHECKS["layout_relative_bias"] = _layout_bias_problems

# ----------------------------------------------------------------------------- decomposed relative positions (issue 35 item 6)

#: get_rel_pos in float32 (ours, transformers') against float64: torch's float32 source indices and
#: weights (which ours reproduce bit for bit) round the weights by up to 2**-24 times the index, so
#: both lie within this many float32 ulps of the table's largest magnitude of the exact formula;
#: ours and transformers' differ only in the last rounding of the two products (2 ulps).
REL_POS_ULPS = 64
REL_POS_OURS_VS_THEIRS_ULPS = 2


def _rel_pos_attention(model):
    """``[(name, module)]`` of every module holding ``rel_pos_h`` and ``rel_pos_w`` parameters, in order."""
    import torch

    return [
        (n, m)
        for n, m in model.named_modules()
        if isinstance(getattr(m, "rel_pos_h", None), torch.nn.Parameter) and hasattr(m, "rel_pos_w")
    ]


def _their_get_rel_pos(module):
    own = getattr(module, "get_rel_pos", None)
    return own if callable(own) else getattr(sys.modules[type(module).__module__], "get_rel_pos", None)


def _their_bias(module, query, rel_h, rel_w, q_size, k_size):
    """The model's own decomposed bias ``(batch, qh * qw, kh * kw)`` (SAM's ``get_decomposed_rel_pos``,
    or ViTDet's/SegGPT's ``add_decomposed_rel_pos`` onto zero logits)."""
    import torch

    b = query.shape[0]
    n_q, n_k = q_size[0] * q_size[1], k_size[0] * k_size[1]
    if callable(getattr(module, "get_decomposed_rel_pos", None)):
        return module.get_decomposed_rel_pos(query, rel_h, rel_w, q_size, k_size).reshape(b, n_q, n_k)
    add = getattr(module, "add_decomposed_rel_pos", None) or getattr(
        sys.modules[type(module).__module__], "add_decomposed_relative_positions", None
    )
    return add(torch.zeros(b, n_q, n_k), query, rel_h, rel_w, q_size, k_size).reshape(b, n_q, n_k)


@functools.cache
def _jitted(function, *static_argnums: int):
    """``jax.jit(function)`` with its sizes static, made once: called as users call it on an
    accelerator, one compiled program per shape instead of an eager dispatch per operation."""
    import jax

    return jax.jit(function, static_argnums=static_argnums)


def rel_pos_parity(theirs_fn, table: np.ndarray, q: int, k: int) -> tuple[float, float, float]:
    """``(transformers, ours, ours vs transformers)``: float32 ``get_rel_pos`` of ``table`` at ``(q, k)``
    against float64, in float32 ulps of the table's largest magnitude."""
    import torch

    import flax_posenc as fp
    from flax_posenc.rel_pos_config import rel_pos_table_float64

    with torch.no_grad():
        theirs = theirs_fn(q, k, torch.from_numpy(np.ascontiguousarray(table, np.float32))).double().numpy()
    ours = np.asarray(_jitted(fp.decomposed_rel_pos_table, 1, 2)(table.astype(np.float32), q, k), np.float64)
    ref = rel_pos_table_float64(table, q, k)
    ulp = float(np.spacing(np.float32(np.abs(table).max())))
    return (
        float(np.abs(theirs - ref).max() / ulp),
        float(np.abs(ours - ref).max() / ulp),
        float(np.abs(ours - theirs).max() / ulp),
    )


def _decomposed_rel_pos_problems(model, mech, directory: Path) -> list[str]:
    """SAM/ViTDet decomposed relative positions: one record layer per attention module holding
    ``rel_pos_h``/``rel_pos_w`` (tables bit-equal, rows ``2 S - 1``); ``fp.decomposed_rel_pos_table``
    against the module's own ``get_rel_pos`` at the trained size, larger, smaller and with
    ``q != k`` (:data:`REL_POS_ULPS` from float64, :data:`REL_POS_OURS_VS_THEIRS_ULPS` from
    transformers); ``fp.decomposed_rel_pos_bias`` against the module's own decomposed bias at the
    trained size and at a resampled one (``1e-5`` relative to the bias's largest magnitude)."""
    import torch

    import flax_posenc as fp

    rec = mech.record
    found = _rel_pos_attention(model)
    if len(found) != len(rec.attention_layers):
        return [
            f"{len(rec.attention_layers)} layers of tables read; the model has {len(found)} attention modules with them"
        ]
    problems: list[str] = []
    rng = np.random.default_rng(0)
    for (name, module), layer in zip(found, rec.attention_layers):
        theirs_h = module.rel_pos_h.detach().numpy()
        theirs_w = module.rel_pos_w.detach().numpy()
        if not (np.array_equal(theirs_h, layer.rel_pos_h) and np.array_equal(theirs_w, layer.rel_pos_w)):
            problems.append(f"{name}: rel_pos_h/rel_pos_w differ from {layer.key_h}, {layer.key_w}")
            continue
        get = _their_get_rel_pos(module)
        if get is None:
            return problems + [f"{name}: no get_rel_pos found in the model's modeling file"]
        s = layer.size[0]
        # tables with values (a fresh model's are zeros): the stored ones, then random ones
        tables = [layer.rel_pos_h, rng.standard_normal(layer.rel_pos_h.shape).astype(np.float32)]
        for table in tables:
            for q, k in ((s, s), (s + 2, s + 2), (max(s - 1, 1), max(s - 1, 1)), (s, s + 1), (s + 1, max(s - 1, 1))):
                if not np.abs(table).max():
                    continue
                t_ulps, o_ulps, d_ulps = rel_pos_parity(get, table, q, k)
                if t_ulps > REL_POS_ULPS or o_ulps > REL_POS_ULPS or d_ulps > REL_POS_OURS_VS_THEIRS_ULPS:
                    problems.append(
                        f"{name}: get_rel_pos({q}, {k}): transformers {t_ulps:.3g}, ours {o_ulps:.3g} ulps from "
                        f"float64, ours vs transformers {d_ulps:.3g}"
                    )
        rel_h = rng.standard_normal(layer.rel_pos_h.shape).astype(np.float32)
        rel_w = rng.standard_normal(layer.rel_pos_w.shape).astype(np.float32)
        for size in (layer.size, (layer.size[0] + 1, layer.size[1] + 2)):
            query = rng.standard_normal((2, size[0] * size[1], rel_h.shape[1])).astype(np.float32)
            with torch.no_grad():
                theirs = _their_bias(
                    module, torch.from_numpy(query), torch.from_numpy(rel_h), torch.from_numpy(rel_w), size, size
                ).numpy()
            ours = np.asarray(_jitted(fp.decomposed_rel_pos_bias, 3, 4)(query, rel_h, rel_w, size, size))
            scale = np.abs(theirs).max()
            if ours.shape != theirs.shape or np.abs(ours - theirs).max() > 1e-5 * scale:
                problems.append(f"{name}: decomposed_rel_pos_bias at {size} differs from the model's own bias")
    return problems


def _sam_grid_problems(model, mech) -> list[str]:
    """SAM's ``(1, gh, gw, dim)`` ``pos_embed``: rows bit-equal; the patch embedding gives the
    trained grid at ``image_size``; where the encoder resizes it (``interpolate_pos_encoding(h, w)``),
    ``fp.resize_grid`` at twice the size within 8 float32 ulps of it; an image one patch larger a
    side is refused by the encoder when we say it does not resize, and runs when we say it does."""
    import torch

    import flax_posenc as fp

    table = mech.record.table
    names = [
        n
        for n, _ in model.named_parameters()
        if n == table.key or table.key.endswith("." + n) or n.endswith("." + table.key) or n.endswith(table.key)
    ]
    if not names:
        return [f"grid {table.key}: no parameter of the model has that name"]
    name = min(names, key=len)
    path = name.rpartition(".")[0]
    encoder = model.get_submodule(path) if path else model
    stored = model.get_parameter(name).detach().numpy()
    problems = []
    if stored.shape != (1, *table.grid, table.dim) or not np.array_equal(stored.reshape(-1, table.dim), table.weights):
        problems.append(f"grid {table.key} differs from the model's {name} {tuple(stored.shape)}")
    config = model.config
    h, w = table.image_size
    with torch.no_grad():
        patches = encoder.patch_embed(torch.zeros(1, config.num_channels, h, w))
    if tuple(patches.shape[1:3]) != table.grid:
        problems.append(
            f"the patch embedding gives {tuple(patches.shape[1:3])} patches at {h} x {w} px; we read {table.grid}"
        )
    if table.resizes_itself:
        with torch.no_grad():
            ref = encoder.interpolate_pos_encoding(2 * table.grid[0], 2 * table.grid[1]).reshape(-1, table.dim).numpy()
        ours = np.asarray(fp.resize_grid(table, (2 * h, 2 * w)))
        err = np.abs(ours.astype(np.float64) - ref).max() / np.spacing(np.float32(np.abs(table.weights).max()))
        if ours.shape != ref.shape or err > 8:
            problems.append(f"resize_grid at {2 * h} px differs from interpolate_pos_encoding by {err:.3g} ulps")
    (ph, pw), (gh, gw) = table.patch_size, table.grid
    try:
        with torch.no_grad(), quiet():
            encoder(torch.zeros(1, config.num_channels, (gh + 1) * ph, (gw + 1) * pw))
        ran = True
    except (ValueError, RuntimeError):
        ran = False
    if ran != table.resizes_itself:
        problems.append(
            f"one patch more a side: the encoder runs {ran}; we say it resizes its grid {table.resizes_itself}"
        )
    return problems


KIND_CHECKS["decomposed_rel_pos"] = _decomposed_rel_pos_problems
