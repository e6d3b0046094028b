"""Multimodal rotary positions (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V): config and 3-D position ids (numpy only).

A Qwen-VL language model rotates every query and key with *three* positions: temporal, height and
width. Text tokens carry the same position in all three (so text alone is plain RoPE); the tokens
that stand for an image or a video carry their patch's place in its ``(t, h, w)`` grid. The
rotary frequencies are split by ``mrope_section`` (``[16, 24, 24]`` for a 128-wide head): the
first 16 frequencies turn with the temporal position, the next 24 with the height, the last 24
with the width (sections beyond three cycle: section ``i`` uses component ``i % 3``).

:func:`mrope_positions` computes the ``(3, batch, seq)`` position ids exactly as transformers
5.x's ``Qwen2VLModel.get_rope_index`` / ``Qwen2_5_VLModel.get_rope_index`` do:

- each run of ``image_token_id`` (``video_token_id``) tokens consumes the next row of
  ``image_grid_thw`` (``video_grid_thw``), whose ``t * (h // m) * (w // m)`` tokens
  (``m = spatial_merge_size``) get positions ``start + (t_index * interval, h_index, w_index)``;
  the next token starts at ``start + max(h, w) // m``;
- text runs count on by one in all three components;
- padding (``attention_mask == 0``) gets position 0 and is skipped when counting;
- the temporal interval is 1 for images and for Qwen2-VL's videos, and
  ``tokens_per_second * second_per_grid_t`` for Qwen2.5-VL's videos (formed in float32 and
  truncated toward zero, as transformers does with the processor's float32 ``second_per_grid_ts``).
- GLM-4V and Qwen3-VL (``split_video_frames``) give every video frame its own run and grid row
  (their processors put a timestamp between frames), as their ``get_rope_index`` does.

The computation is data-dependent (where the image tokens are decides the layout), so it runs on
the host, like transformers' own, and returns a numpy array: positions that are *known* when a
jitted function is traced, so the limit is checked while tracing
(:func:`flax_posenc.mrope_cos_sin`). Inputs may be numpy, lists, or concrete jax arrays; a traced
array is refused with one line.

>>> import numpy as np
>>> from flax_posenc.rope_config import RopeConfig
>>> cfg = MRopeConfig(RopeConfig(head_dim=16, max_position_embeddings=64), mrope_section=(2, 3, 3),
...                   image_token_id=9, spatial_merge_size=2)
>>> ids = np.array([[1, 2, 9, 9, 9, 9, 3]])             # text, a 1 x 4 x 4 patch grid (2 x 2 tokens), text
>>> mrope_positions(ids, image_grid_thw=[[1, 4, 4]], config=cfg)[:, 0]
array([[0, 1, 2, 2, 2, 2, 4],
       [0, 1, 2, 2, 3, 3, 4],
       [0, 1, 2, 3, 2, 3, 4]])
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from flax_posenc.rope_config import RopeConfig

__all__ = ["MRopeConfig", "mrope_positions", "section_components"]


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class MRopeConfig:
    """A Qwen-VL language model's multimodal RoPE; frozen and hashable (a static ``jit`` argument).

    Attributes:
      rope: the :class:`~flax_posenc.RopeConfig` of the text tower (``head_dim``, ``rope_theta``,
        ``max_position_embeddings``: the limit, checked on the largest of the three components).
        Its layout must be ``"half"`` (transformers' ``rotate_half``).
      mrope_section: how many rotary frequencies each component turns (temporal, height, width;
        section ``i`` uses component ``i % 3``); they must sum to ``rope.rotary_dim // 2``.
        transformers' default: ``(16, 24, 24)`` (a 128-wide head).
      image_token_id, video_token_id: the placeholder tokens of an image and a video in
        ``input_ids`` (``None``: the model has none; a text tower alone).
      spatial_merge_size: patches merged per side into one token (Qwen-VL: 2).
      tokens_per_second: Qwen2.5-VL's temporal scale (``vision_config.tokens_per_second``): a video's
        temporal positions step by ``tokens_per_second * second_per_grid_t``. ``None``: Qwen2-VL,
        whose temporal positions step by 1.
      split_video_frames: each frame of a video is its own run of video tokens with its own grid
        row ``(1, h, w)`` (GLM-4V and Qwen3-VL separate frames with timestamp text): a
        ``video_grid_thw`` row ``(t, h, w)`` stands for ``t`` runs.
      interleaved_sections: Qwen3-VL's assignment of frequencies to components: height takes
        frequencies ``1, 4, 7, ...`` below ``3 * mrope_section[1]``, width ``2, 5, 8, ...`` below
        ``3 * mrope_section[2]``, temporal the rest (the sections need not sum to anything: as in
        transformers, indices past the rotary width are dropped); otherwise (Qwen2-VL, GLM-4V) the
        sections are contiguous runs summing to ``rotary_dim // 2``.

    The layout of ``rope`` is the model's: ``"half"`` (Qwen2-VL's ``rotate_half``) or
    ``"interleaved"`` (GLM-4V's ``rotate_half_llm`` with ``repeat_interleave``); a
    ``partial_rotary_factor`` rotates the first dims only (GLM-4V: half of each head).

    Raises:
      ValueError: one line naming the field: ``mrope_section`` not summing to half the rotary
        width, a negative section, a non-positive ``spatial_merge_size`` or ``tokens_per_second``,
        token ids that are not non-negative integers or are equal.

    >>> MRopeConfig(RopeConfig(head_dim=16), mrope_section=(2, 3, 2))
    Traceback (most recent call last):
    ...
    ValueError: mrope_section: expected sections summing to rotary_dim // 2 = 8 (half the rotary width of head_dim 16), got (2, 3, 2) (sum 7)
    """

    rope: RopeConfig
    mrope_section: tuple[int, ...] = (16, 24, 24)
    image_token_id: int | None = None
    video_token_id: int | None = None
    spatial_merge_size: int = 2
    tokens_per_second: float | None = None
    split_video_frames: bool = False
    interleaved_sections: bool = False

    def __post_init__(self):
        if not isinstance(self.rope, RopeConfig):
            raise TypeError(f"rope: expected a RopeConfig, got {type(self.rope).__name__}")
        section = self.mrope_section
        if isinstance(section, (str, bytes)) or not hasattr(section, "__len__"):
            raise ValueError(f"mrope_section: expected a sequence of non-negative integers, got {section!r}"[:200])
        if not section or not all(_is_int(s) and s >= 0 for s in section):
            raise ValueError(f"mrope_section: expected a sequence of non-negative integers, got {section!r}"[:200])
        section = tuple(int(s) for s in section)
        object.__setattr__(self, "mrope_section", section)
        half = self.rope.rotary_dim // 2
        if sum(section) != half and not self.interleaved_sections:
            raise ValueError(
                f"mrope_section: expected sections summing to rotary_dim // 2 = {half} (half the rotary width "
                f"of head_dim {self.rope.head_dim}), got {section} (sum {sum(section)})"
            )
        for name in ("split_video_frames", "interleaved_sections"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected True or False, got {getattr(self, name)!r}")
        if self.interleaved_sections is True and len(section) != 3:
            raise ValueError(f"mrope_section: expected 3 sections (temporal, height, width), got {section}")
        for name in ("image_token_id", "video_token_id"):
            value = getattr(self, name)
            if value is not None and not (_is_int(value) and value >= 0):
                raise ValueError(f"{name}: expected a non-negative integer or None, got {value!r}")
        if self.image_token_id is not None and self.image_token_id == self.video_token_id:
            raise ValueError(f"video_token_id: expected a token other than image_token_id, got {self.video_token_id}")
        if not (_is_int(self.spatial_merge_size) and self.spatial_merge_size >= 1):
            raise ValueError(f"spatial_merge_size: expected a positive integer, got {self.spatial_merge_size!r}")
        tps = self.tokens_per_second
        if tps is not None and not (
            isinstance(tps, (int, float, np.number)) and not isinstance(tps, bool) and 0 < tps < 1e6
        ):
            raise ValueError(f"tokens_per_second: expected a positive number below 1e6 or None, got {tps!r}")

    @property
    def limit(self) -> int | None:
        """Usable positions ``0 .. limit - 1`` of every component (the text tower's RoPE limit)."""
        return self.rope.limit

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (the RoPE's under ``rope``) and the limit."""
        return {
            "mrope_section": list(self.mrope_section),
            "image_token_id": self.image_token_id,
            "video_token_id": self.video_token_id,
            "spatial_merge_size": self.spatial_merge_size,
            "tokens_per_second": self.tokens_per_second,
            "split_video_frames": self.split_video_frames,
            "interleaved_sections": self.interleaved_sections,
            "layout": self.rope.layout,
            "limit": self.limit,
            "rope": self.rope.to_dict(),
        }


def section_components(
    mrope_section: tuple[int, ...], *, interleaved: bool = False, width: int | None = None
) -> np.ndarray:
    """Which component (0 temporal, 1 height, 2 width) turns each rotary frequency.

    Contiguous sections (Qwen2-VL, GLM-4V: section ``i`` uses component ``i % 3``), or Qwen3-VL's
    interleaved assignment (``interleaved=True``: height at ``1, 4, ...``, width at ``2, 5, ...``).

    >>> section_components((1, 2, 2)).tolist()
    [0, 1, 1, 2, 2]
    >>> section_components((4, 2, 2), interleaved=True).tolist()
    [0, 1, 2, 0, 1, 2, 0, 0]
    >>> section_components((24, 20, 20), interleaved=True, width=8).tolist()   # indices past 8 dropped
    [0, 1, 2, 0, 1, 2, 0, 1]
    """
    if not interleaved:
        return np.repeat(np.arange(len(mrope_section)) % 3, mrope_section).astype(np.int64)
    out = np.zeros(sum(mrope_section) if width is None else width, np.int64)
    for component in (1, 2):
        out[component : 3 * mrope_section[component] : 3] = component
    return out


def _host(name: str, value: Any, *, dtype=None) -> np.ndarray:
    """``value`` as a numpy array; a traced jax array is refused with one line."""
    try:
        out = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
    except Exception as e:  # noqa: BLE001 - a jax tracer (TracerArrayConversionError) or an odd object
        raise TypeError(
            f"{name}: expected a concrete array (M-RoPE positions are computed on the host, from the token "
            f"values, as transformers' get_rope_index), got {type(value).__name__}: {type(e).__name__}"
        ) from None
    return out


def _grids(name: str, value: Any, merge: int) -> np.ndarray:
    if value is None:
        return np.zeros((0, 3), np.int64)
    grid = _host(name, value)
    if grid.size == 0:
        return np.zeros((0, 3), np.int64)
    if grid.ndim != 2 or grid.shape[1] != 3 or not np.issubdtype(grid.dtype, np.integer):
        raise ValueError(
            f"{name}: expected an integer array of shape (count, 3) rows (t, h, w), got {grid.dtype} {grid.shape}"
        )
    grid = grid.astype(np.int64)
    for i, (t, h, w) in enumerate(grid.tolist()):
        if min(t, h, w) < 1 or h % merge or w % merge:
            raise ValueError(
                f"{name}: expected row {i} (t, h, w) positive with h and w divisible by spatial_merge_size "
                f"{merge}, got {(t, h, w)}"
            )
    return grid


def mrope_positions(
    input_ids: Any,
    *,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    attention_mask: Any = None,
    second_per_grid_ts: Any = None,
    config: MRopeConfig,
    return_deltas: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The ``(3, batch, seq)`` M-RoPE position ids of a prompt: transformers' ``get_rope_index``.

    Args:
      input_ids: ``(batch, seq)`` integer token ids (numpy, a list, or a concrete jax array).
      image_grid_thw: ``(num_images, 3)`` rows ``(t, h, w)`` in patches, one per run of
        ``config.image_token_id`` tokens, in order over the batch (row-major); ``None``: none.
      video_grid_thw: the same for runs of ``config.video_token_id``.
      attention_mask: ``(batch, seq)`` of 1 (token) and 0 (padding, left or right); padding gets
        position 0 and does not count.
      second_per_grid_ts: ``(num_videos,)`` seconds per temporal grid step (Qwen2.5-VL; default 1
        each); ignored when ``config.tokens_per_second`` is ``None`` (Qwen2-VL).
      config: the :class:`MRopeConfig`.
      return_deltas: also return ``rope_deltas`` ``(batch, 1)``: ``max(position) + 1 - tokens``,
        what a decoder adds to ``cache_length + arange`` for the tokens it generates next.

    Returns:
      int64 ``(3, batch, seq)`` (temporal, height, width), or ``(positions, deltas)``.

    Raises:
      ValueError: one line naming the argument: not ``(batch, seq)`` integers, a mask of another
        shape or not 0/1, a grid row count that does not match the runs of image (video) tokens,
        a run whose length is not its grid's ``t * (h // m) * (w // m)`` tokens. (With
        ``image_token_id`` ``None`` no token is an image token; the same for videos.)
      TypeError: a traced (abstract) array: call it outside ``jit``.
    """
    ids = _host("input_ids", input_ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids: expected (batch, seq) integer token ids, got {ids.dtype} {ids.shape}")
    if attention_mask is None:
        mask = np.ones(ids.shape, bool)
    else:
        raw = _host("attention_mask", attention_mask)
        if raw.shape != ids.shape or not np.isin(raw, (0, 1)).all():
            raise ValueError(
                f"attention_mask: expected 0/1 values of the input_ids shape {ids.shape}, got {raw.dtype} {raw.shape}"
            )
        mask = raw.astype(bool)
    merge = config.spatial_merge_size
    grids = {1: _grids("image_grid_thw", image_grid_thw, merge), 2: _grids("video_grid_thw", video_grid_thw, merge)}
    if config.split_video_frames:  # one run (and one (1, h, w) row) per frame
        grids[2] = np.repeat(grids[2], grids[2][:, 0], axis=0)
        grids[2][:, 0] = 1
    token_ids = {1: config.image_token_id, 2: config.video_token_id}
    names = {1: "image", 2: "video"}
    seconds = None
    if second_per_grid_ts is not None and config.tokens_per_second is not None:
        seconds = _host("second_per_grid_ts", second_per_grid_ts).astype(np.float32).reshape(-1)
        if seconds.shape[0] != grids[2].shape[0] or not (np.isfinite(seconds).all() and (seconds >= 0).all()):
            raise ValueError(
                f"second_per_grid_ts: expected {grids[2].shape[0]} non-negative seconds, one per video_grid_thw row, "
                f"got {seconds.shape[0]} values"
            )
    kinds = np.zeros(ids.shape, np.int64)
    for kind, token in token_ids.items():
        if token is not None:
            kinds[ids == token] = kind
    used = {1: 0, 2: 0}
    out = np.zeros((3,) + ids.shape, np.int64)
    deltas = np.zeros((ids.shape[0], 1), np.int64)
    for b in range(ids.shape[0]):
        row = kinds[b][mask[b]]
        pieces = []
        start = 0
        edges = np.flatnonzero(np.diff(row)) + 1
        for lo, hi in zip(np.r_[0, edges], np.r_[edges, row.size]):
            if hi <= lo:
                continue
            kind = int(row[lo])
            if kind == 0:
                pieces.append(np.broadcast_to(np.arange(start, start + hi - lo), (3, hi - lo)))
                start += hi - lo
                continue
            name, i = names[kind], used[kind]
            table = grids[kind]
            if i >= table.shape[0]:
                raise ValueError(
                    f"{name}_grid_thw: expected a row for every run of {name} tokens ({name}_token_id "
                    f"{token_ids[kind]}) in input_ids, got {table.shape[0]} rows for more runs (batch row {b})"
                )
            t, h, w = (int(v) for v in table[i])
            gh, gw = h // merge, w // merge
            if t * gh * gw != hi - lo:
                raise ValueError(
                    f"{name}_grid_thw: expected row {i} {(t, h, w)} to cover its run of {name} tokens, "
                    f"t * (h // {merge}) * (w // {merge}) = {t * gh * gw}, found {hi - lo} tokens (batch row {b})"
                )
            temporal = np.arange(t)
            if kind == 2 and config.tokens_per_second is not None:
                step = np.float32(1.0) if seconds is None else seconds[i]
                interval = np.float32(config.tokens_per_second) * np.float32(step)
                temporal = (np.arange(t, dtype=np.float32) * interval).astype(np.int64)
            tt, hh, ww = np.meshgrid(temporal + start, np.arange(gh) + start, np.arange(gw) + start, indexing="ij")
            pieces.append(np.stack([tt.reshape(-1), hh.reshape(-1), ww.reshape(-1)]))
            start += max(h, w) // merge
            used[kind] += 1
        positions = np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), np.int64)
        out[:, b, mask[b]] = positions
        deltas[b, 0] = (int(positions.max()) + 1 if positions.size else 0) - positions.shape[1]
    for kind, table in grids.items():
        if used[kind] != table.shape[0]:
            name = names[kind]
            raise ValueError(
                f"{name}_grid_thw: expected {used[kind]} rows, one per run of {name} tokens ({name}_token_id "
                f"{token_ids[kind]}) in input_ids, got {table.shape[0]}"
            )
    return (out, deltas) if return_deltas else out
