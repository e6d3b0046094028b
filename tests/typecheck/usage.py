"""The public API called as users call it, for the type checker (`make typecheck`, [tool.mypy]
in pyproject.toml): every call here must type-check, so a signature too loose (``str`` where a
``Literal`` policy belongs) or too tight (a module that rejects the arguments its docstring
shows) is a mypy error. ``rejected`` holds calls mypy must refuse: each carries a
``type: ignore[arg-type]``, and with ``warn_unused_ignores`` an ignore that is no longer needed
(a policy loosened back to ``str``) is itself an error. Only functions: nothing runs on import
(pytest's doctest collection imports this file).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import flax_posenc as fp
from flax_posenc.block import InputSpec, PositionSpec, transformer_input
from flax_posenc.conversion import inspect_source, load_input_block, load_position_table, load_relative_bias
from flax_posenc.extend import extend_table


def functional_core() -> None:
    table: jax.Array = fp.sinusoidal_table(1024, 768, layout="concatenated", endpoint=True)
    enc: jax.Array = fp.sinusoidal_encoding(jnp.arange(8), 64, on_overflow="clip")
    enc = jax.jit(lambda p: fp.sinusoidal_encoding(p, 768))(jnp.array([0, 2**20]))
    freqs: np.ndarray = fp.sinusoidal_frequencies(64)
    positions: jax.Array = fp.padding_aware_positions(jnp.ones((2, 8), jnp.int32), start=3)
    positions = fp.packed_positions(jnp.array([[1, 1, 2, 2, 0]]))
    positions = fp.sequential_positions(8, start=jnp.int32(4))
    rows: jax.Array = fp.lookup_positions(table, positions, on_overflow="fill")
    print(table, enc, freqs, rows, fp.describe_limit("position table", 1024))


def relative_encodings() -> None:
    config = fp.RopeConfig(head_dim=64, max_position_embeddings=4096)
    q = k = jnp.ones((1, 16, 4, 64))
    rotated: jax.Array = fp.apply_rope(q, config, start=3, on_overflow="error")
    rq, rk = fp.apply_rope_qk(q, k, config, jnp.arange(16))
    cos, sin = fp.rotary_cos_sin(jnp.arange(16), config)
    bias: jax.Array = fp.alibi_bias(fp.AlibiConfig(num_heads=8), 16)
    slopes: np.ndarray = fp.alibi_slopes(8)
    buckets: jax.Array = fp.relative_position_bucket(jnp.arange(16)[None, :] - jnp.arange(16)[:, None], num_buckets=32)
    print(rotated, rq, rk, cos, sin, bias, slopes, buckets)


def nnx_shells() -> None:
    rngs = nnx.Rngs(0)
    wpe = fp.nnx.LearnedPositionalEmbedding(
        PositionSpec("learned", dim=768, num_positions=1024), on_overflow="clip", rngs=rngs
    )
    wpe = fp.nnx.LearnedPositionalEmbedding.from_arguments(1024, 768, offset=2, on_overflow="clip", rngs=rngs)
    out: jax.Array = wpe(length=128)
    out = wpe(jnp.arange(4), start=jnp.int32(2))
    pe = fp.nnx.SinusoidalPositionalEncoding(
        PositionSpec("sinusoidal", dim=512, num_positions=2048), on_overflow="fill"
    )
    pe = fp.nnx.SinusoidalPositionalEncoding(fp.PositionSpec("sinusoidal", dim=512))  # the top-level name
    pe = fp.nnx.SinusoidalPositionalEncoding.from_arguments(512, num_positions=2048, layout="concatenated")
    out = pe(length=128)
    block = fp.nnx.TransformerInput.from_arguments(50257, 768, num_positions=1024, rngs=rngs)
    block = fp.nnx.TransformerInput(InputSpec.from_arguments(100, 16, num_positions=32), rngs=rngs)
    out = block(jnp.zeros((2, 8), jnp.int32), attention_mask=jnp.ones((2, 8)), deterministic=True)
    loaded: fp.nnx.TransformerInput = fp.nnx.TransformerInput.from_pretrained("gpt2", on_overflow="clip")
    graphdef, state = nnx.split(loaded)
    embed = jax.jit(lambda state, ids: nnx.merge(graphdef, state)(ids))
    out = embed(state, jnp.zeros((2, 8), jnp.int32))
    step = fp.position_errors(jax.jit(functools.partial(transformer_input, loaded.spec)))
    out = step(loaded.params(), jnp.zeros((2, 1), jnp.int32), start=511)
    longer: fp.nnx.TransformerInput = loaded.extend_positions(2048, method="linear")
    rope = fp.nnx.RotaryEmbedding(fp.RopeConfig(head_dim=8, max_position_embeddings=16), on_overflow="clip")
    out = rope(jnp.ones((2, 4, 3, 8)), start=2)
    out = fp.nnx.RotaryEmbedding.from_pretrained("path/to/llama", layer=3)(jnp.ones((2, 4, 3, 8)))
    out = fp.nnx.ALiBiBias(12, causal=False, on_overflow="error")(5)
    rel = fp.nnx.RelativePositionBias.from_pretrained("path/to/t5", stack="decoder", param_dtype=jnp.bfloat16)
    rel = fp.nnx.RelativePositionBias(fp.RelativeBiasSpec(8, fp.BucketConfig(32, 128, False)), rngs=rngs)
    rel = fp.nnx.RelativePositionBias.from_arguments(8, num_buckets=32, bidirectional=False, rngs=rngs)
    grid = fp.nnx.PatchPositionalEmbedding(fp.GridSpec((14, 14), 768, patch_size=16), interpolate=True, rngs=rngs)
    grid = fp.nnx.PatchPositionalEmbedding.from_arguments(14, 768, prefix_tokens=2, rngs=rngs)
    out = grid(jnp.zeros((1, 198, 768)), image_size=224)
    boxes = fp.nnx.BoundingBoxEmbedding(fp.BboxSpec(1024, 128, 128, "concat"), rngs=rngs)
    boxes = fp.nnx.BoundingBoxEmbedding.from_arguments(1024, 768, on_overflow="clip", rngs=rngs)
    boxes = fp.nnx.BoundingBoxEmbedding(1024, 128, combine="concat", rngs=rngs)  # the flat calls
    wpe = fp.nnx.LearnedPositionalEmbedding(1024, 768, offset=2, rngs=rngs)
    wpe = fp.nnx.LearnedPositionalEmbedding(num_positions=1024, dim=768, rngs=rngs)
    pe = fp.nnx.SinusoidalPositionalEncoding(512, num_positions=2048, layout="concatenated")
    rel = fp.nnx.RelativePositionBias(8, num_buckets=32, bidirectional=False, rngs=rngs)
    grid = fp.nnx.PatchPositionalEmbedding((14, 14), 768, patch_size=16, rngs=rngs)
    block = fp.nnx.TransformerInput(50257, 768, num_positions=1024, rngs=rngs)
    boxes = fp.nnx.BoundingBoxEmbedding.from_pretrained("path/to/layoutlm")
    out = boxes(jnp.array([[[10, 20, 110, 40]]]))
    bbox_rec: fp.conversion.BboxTableSource = fp.conversion.load_bbox_tables("path/to/lilt")
    out = fp.bbox_embedding(jnp.zeros((1, 4), jnp.int32), *bbox_rec.weights, bbox_rec.spec, on_overflow="fill")
    q, k = rope.rotate_qk(jnp.ones((2, 4, 3, 8)), jnp.ones((2, 4, 3, 8)), jnp.arange(4))
    detr_sine = fp.nnx.DetrSinePositionEmbedding(fp.DetrSineConfig(128, offset=-0.5), dtype=jnp.bfloat16)
    detr_learned = fp.nnx.DetrLearnedPositionEmbedding(128, rngs=rngs)
    mask = fp.detr_feature_mask(jnp.ones((2, 800, 1066), bool), (25, 34))
    out = detr_sine(mask) + detr_learned(mask) + fp.detr_sine_embedding(mask, fp.DetrSineConfig(128))
    bf16 = fp.nnx.TransformerInput.from_pretrained("gpt2", dtype=jnp.bfloat16, param_dtype=jnp.float32)
    print(q, k, bf16)
    out = rel(8, 8)
    print(out, longer)


def linen_shells() -> None:
    key = jax.random.key(0)
    ids = jnp.zeros((2, 8), jnp.int32)
    block = fp.linen.TransformerInput.from_arguments(100, 16, num_positions=32, layer_norm=True, dropout_rate=0.1)
    block = fp.linen.TransformerInput(InputSpec.from_arguments(100, 16, num_positions=32))
    variables = block.init(key, ids)
    out = block.apply(variables, ids, deterministic=False, rngs={"dropout": key})
    module, params = fp.linen.TransformerInput.from_pretrained("gpt2", on_overflow="fill")
    out = module.apply(params, ids)
    spec = PositionSpec("sinusoidal", dim=512, layout="concatenated")
    pe = fp.linen.SinusoidalPositionalEncoding(spec, on_overflow="clip", dtype=jnp.bfloat16)
    pe = fp.linen.SinusoidalPositionalEncoding.from_arguments(512, layout="concatenated", on_overflow="clip")
    out = pe.apply({}, length=128)
    wpe = fp.linen.LearnedPositionalEmbedding(PositionSpec("learned", dim=768, num_positions=1024), on_overflow="fill")
    wpe = fp.linen.LearnedPositionalEmbedding.from_arguments(1024, 768, param_dtype=jnp.bfloat16)
    out = wpe.apply(wpe.init(key, length=4), length=4)
    rope = fp.linen.RotaryEmbedding(fp.RopeConfig(head_dim=8, max_position_embeddings=16), on_overflow="clip")
    out = rope.apply({}, jnp.ones((2, 4, 3, 8)))
    alibi = fp.linen.ALiBiBias(fp.AlibiConfig(num_heads=12), on_overflow="error")
    out = alibi.apply({}, 5)
    rope_module, rope_variables = fp.linen.RotaryEmbedding.from_pretrained("path/to/gemma", layer=1)
    q, k = rope_module.apply(rope_variables, jnp.ones((1, 4, 2, 8)), jnp.ones((1, 4, 2, 8)), method="rotate_qk")
    bias_module, bias_variables = fp.linen.RelativePositionBias.from_pretrained("path/to/t5", dtype=jnp.bfloat16)
    out = bias_module.apply(bias_variables, 8, 8)
    rel = fp.linen.RelativePositionBias(fp.RelativeBiasSpec(8, num_rows=64), dtype=jnp.bfloat16)
    rel = fp.linen.RelativePositionBias.from_arguments(8, num_buckets=32, max_distance=128)
    grid = fp.linen.PatchPositionalEmbedding(fp.GridSpec((14, 14), 768, convention="deit"), interpolate=True)
    grid = fp.linen.PatchPositionalEmbedding.from_arguments((14, 14), 768, patch_size=16)
    detr = fp.linen.DetrLearnedPositionEmbedding(128)
    mask = jnp.ones((1, 25, 34), bool)
    out = detr.apply(detr.init(key, mask), mask) + fp.linen.DetrSinePositionEmbedding(fp.DetrSineConfig(128)).apply(
        {}, mask
    )
    box_module, box_variables = fp.linen.BoundingBoxEmbedding.from_pretrained("path/to/layoutlmv3")
    out = box_module.apply(box_variables, jnp.zeros((1, 2, 4), jnp.int32))
    box_flat = fp.linen.BoundingBoxEmbedding.from_arguments(1024, 128, combine="concat", shape_clip=1023)
    print(box_flat)
    # the flat calls, as nn.Embed(num_embeddings, features): type checkers see them (InitVar fields)
    block = fp.linen.TransformerInput(100, 16, num_positions=32, layer_norm=True, dropout_rate=0.1)
    wpe = fp.linen.LearnedPositionalEmbedding(1024, 768, offset=2, param_dtype=jnp.bfloat16)
    pe = fp.linen.SinusoidalPositionalEncoding(512, num_positions=2048, layout="concatenated", on_overflow="clip")
    rel = fp.linen.RelativePositionBias(8, num_buckets=32, bidirectional=False)
    grid = fp.linen.PatchPositionalEmbedding((14, 14), 768, patch_size=16, interpolate=True)
    box_flat = fp.linen.BoundingBoxEmbedding(1024, 128, combine="concat")
    window = fp.linen.WindowRelativeBias(4, 7, class_token=True)
    print(block, wpe, pe, rel, grid, box_flat, window)
    print(rel, grid)
    longer, longer_variables = module.extend_positions(params, 2048, method="linear")
    logits = module.apply(params, jnp.ones((2, 8, 768)), method="attend")
    print(q, k, longer, longer_variables, logits)
    print(out)


def conversion() -> None:
    t = load_position_table("sinusoidal:8:4")
    weights: np.ndarray = t.weights
    n: int = t.num_positions
    rec = inspect_source("path/to/mpnet")
    limit: int | None = rec.limit
    ok, line = rec.check_length(513)
    weights_block = load_input_block("path/to/bert")
    bias = load_relative_bias("path/to/t5", stack="encoder", layer=0)
    longer: np.ndarray = extend_table(t.weights, 16, method="cubic")
    print(weights, n, limit, ok, line, weights_block, bias, longer)


def vision_rope() -> None:  # issue 35, item 2
    cfg = fp.VisionRopeConfig(head_dim=16, split="pixtral", patches_per_side=8)
    positions = cfg.positions([[1, 2, 4]])
    _, _ = (
        fp.vision_patch_positions([[1, 4, 4]], spatial_merge_size=2),
        fp.vision_window_index([[1, 4, 4]], spatial_merge_size=2, window_size=8, patch_size=2),
    )
    cos, sin = fp.vision_rope_cos_sin(positions, cfg)
    x: jax.Array = fp.apply_vision_rope(jnp.ones((8, 2, 16)), cfg, positions)
    q, k = fp.apply_vision_rope_qk(x, x, cfg, positions, on_overflow="fill")
    y: jax.Array = fp.nnx.VisionRotaryEmbedding(cfg)(q, positions)
    z = fp.linen.VisionRotaryEmbedding(cfg).apply({}, k, positions)
    del cos, sin, y, z


def rejected() -> None:
    learned, sinusoidal = PositionSpec("learned", dim=4, num_positions=8), PositionSpec("sinusoidal", dim=8)
    PositionSpec("learned", 4, 8)  # type: ignore[call-arg]  # dim and num_positions by keyword only
    fp.nnx.LearnedPositionalEmbedding(learned, on_overflow="clamp", rngs=nnx.Rngs(0))  # type: ignore[arg-type]
    fp.nnx.LearnedPositionalEmbedding(8, 4, on_overflow="clamp", rngs=nnx.Rngs(0))  # type: ignore[arg-type]
    fp.nnx.SinusoidalPositionalEncoding(sinusoidal, on_overflow="wrap")  # type: ignore[arg-type]
    fp.nnx.RotaryEmbedding(8, on_overflow="nan")  # type: ignore[arg-type]
    fp.linen.SinusoidalPositionalEncoding(sinusoidal, on_overflow="wrap")  # type: ignore[arg-type]
    fp.linen.LearnedPositionalEmbedding(learned, on_overflow="clamp")  # type: ignore[arg-type]
    fp.linen.LearnedPositionalEmbedding(1024, 768, layout="interleaved")  # type: ignore[call-arg]
    fp.nnx.LearnedPositionalEmbedding(1024, 768, base=1.0, rngs=nnx.Rngs(0))  # type: ignore[call-arg]
    fp.sinusoidal_encoding(jnp.arange(4), 8, on_overflow="ignore")  # type: ignore[arg-type]
    fp.apply_rope(jnp.ones((1, 4, 1, 8)), 8, on_overflow="wrap")  # type: ignore[arg-type]
    fp.sinusoidal_table(8, 4, layout="split")  # type: ignore[arg-type]
    fp.nnx.SinusoidalPositionalEncoding(8, layout="split")  # type: ignore[arg-type]
    fp.linen.SinusoidalPositionalEncoding.from_arguments(8, layout="split")  # type: ignore[arg-type]
    block = fp.nnx.TransformerInput.from_arguments(10, 4, num_positions=8, rngs=nnx.Rngs(0))
    block.extend_positions(16, method="nearest")  # type: ignore[arg-type]


def window_bias_usage() -> None:
    """Window relative position bias (issue 35), as users would write it."""
    from flax_posenc.conversion import WindowBiasSource, load_window_bias

    table = jnp.zeros((49, 4))
    bias: jax.Array = fp.window_bias(table, 4)
    bigger: jax.Array = fp.resize_window_table(table, 4, 7, convention="timm")
    beit: jax.Array = fp.window_bias(jnp.zeros((52, 2)), (4, 4), class_token=True)
    v2: jax.Array = fp.continuous_window_bias(
        jnp.zeros((8, 2)), jnp.zeros(8), jnp.zeros((4, 8)), 8, pretrained_window=4
    )
    module = fp.nnx.WindowRelativeBias(fp.WindowBiasSpec(4, (7, 7)), rngs=nnx.Rngs(0))
    flat = fp.nnx.WindowRelativeBias.from_arguments(4, 7, class_token=False, rngs=nnx.Rngs(0))
    linen = fp.linen.WindowRelativeBias(fp.WindowBiasSpec(4, (7, 7)), convention="transformers")
    loaded, variables = fp.linen.WindowRelativeBias.from_pretrained("path/to/swin", layer=1)
    record: WindowBiasSource = load_window_bias("path/to/swin")
    print(bias, bigger, beit, v2, module(), flat(window=8), linen, loaded, variables, record.layers[0].bias())


def convolutional_positions(path: str) -> None:
    from flax import linen as nn

    from flax_posenc.conversion import load_conv_positions

    spec = fp.ConvPositionSpec(768, 128, groups=16)
    hidden = jnp.zeros((1, 50, 768))
    loaded = load_conv_positions(path)
    positions: jax.Array = fp.conv_positions(hidden, loaded.kernel, loaded.bias, loaded.spec)
    summed: jax.Array = fp.add_conv_positions(hidden, loaded.kernel, loaded.bias, loaded.spec)
    weight: np.ndarray = fp.fold_weight_norm(np.ones((1, 1, 128)), np.ones((768, 48, 128)))
    conv = fp.nnx.ConvPositionalEmbedding(spec, rngs=nnx.Rngs(0))
    conv = fp.nnx.ConvPositionalEmbedding.from_pretrained(path)
    module, variables = fp.linen.ConvPositionalEmbedding.from_pretrained(path)
    out = module.apply(variables, hidden, add=True)
    linen_module: nn.Module = fp.linen.ConvPositionalEmbedding(spec)
    print(positions, summed, weight, conv(hidden), out, linen_module)


def naflex_usage() -> None:
    """Variable-resolution grids (issue 35 item 3: SigLIP 2, LFM2-VL), as users would write it."""
    from flax_posenc.conversion import NaflexGridSource, NaflexGridTable, load_naflex_grid

    grid: NaflexGridTable = load_naflex_grid("path/to/siglip2-naflex")
    one: jax.Array = fp.naflex_positions(grid, (12, 20))
    batch: jax.Array = fp.naflex_positions(jnp.zeros((256, 8)), [(12, 20), (16, 16)], max_num_patches=256)
    timm: jax.Array = fp.naflex_positions(grid, (8, 32), convention="timm")
    size: tuple[int, int] = fp.naflex_image_size(480, 640, 16, 256)
    record = NaflexGridSource(grid)
    fits, line = record.check_image_size((192, 320), max_num_patches=576)
    print(one, batch, timm, size, fits, line, fp.NAFLEX_CONVENTIONS["siglip2"].padding)


def decomposed_rel_pos_usage() -> None:
    """SAM/ViTDet decomposed relative positions (issue 35 item 6), as users would write it."""
    table: jax.Array = fp.decomposed_rel_pos_table(jnp.zeros((27, 16)), 14, 14)
    resized: jax.Array = fp.decomposed_rel_pos_table(jnp.zeros((27, 16)), 16, 16, interpolate=True)
    rel_pos_h = rel_pos_w = jnp.zeros((27, 16))
    bias: jax.Array = fp.decomposed_rel_pos_bias(jnp.zeros((2, 196, 16)), rel_pos_h, rel_pos_w, (14, 14), (14, 14))
    from flax_posenc.rel_pos_config import DecomposedRelPosSpec

    module = fp.nnx.DecomposedRelativePosition(DecomposedRelPosSpec((14, 14), 16), rngs=nnx.Rngs(0))
    linen = fp.linen.DecomposedRelativePosition(DecomposedRelPosSpec((14, 14), 16))
    print(table, resized, bias, module(jnp.zeros((2, 196, 16))), module(jnp.zeros((2, 256, 16)), (16, 16)), linen)


def fourier_positions_usage() -> None:
    """SAM's random Fourier positional encoding (issue 35 item 6), as users would write it."""
    from flax_posenc.fourier_encoding import image_wide_coordinates

    gaussian = jnp.zeros((2, 64))
    dense: jax.Array = fp.fourier_positions(image_wide_coordinates(64), gaussian)
    points: jax.Array = fp.fourier_positions(jnp.zeros((1, 3, 2)), gaussian, input_shape=(480, 640))
    print(dense, points)
