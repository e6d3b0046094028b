"""DETR-family 2-D position embeddings: ours and transformers' float32 against float64, in ulps.

    python benchmarks/detr_parity.py                     # ~1 min on 2 cores; needs torch, transformers
    python benchmarks/detr_parity.py --figure docs/figures/detr_sine.png

For each model type read (its published width: ``d_model`` 256, so 128 channels per axis;
DAB-DETR's default temperatures 20 / 20), a batch of two images as a DETR image processor pads
them (800 x 1066 and 800 x 1201 px, padded to 800 x 1201) gives its pixel mask, downsampled to the
feature map as the model does (``fp.detr_feature_mask``, checked against ``interpolate``): stride
32 (25 x 38 cells) for DETR, conditional DETR, Table Transformer and DAB-DETR, stride 8
(100 x 151) for deformable DETR's largest level; RT-DETR (and D-FINE, DEIMv2) takes no mask: one 640 x 640 image, its
AIFI level at stride 32 (20 x 20). Columns, in float32 ulps of 1.0 (``2**-23``):

- ``ours vs float64``: ``fp.detr_sine_embedding`` (float32, jitted) against the float64 formula
  (``flax_posenc.detr_config.detr_sine_values``, numpy; cross-checked here against DETR's own
  ``build_sine_position_embedding`` run in float64, printed below the table);
- ``transformers float32 vs float64``: the model's own position module (built by its own
  classes from a tiny config with that width) in float32 against the same reference;
- ``ours vs transformers``: the two float32 results against each other.

Cells of a row or column without any valid cell (padding below the image, for ``y``) are left
out: there deformable DETR's offset makes the angle ``-0.5 / 1e-6 * 2 pi`` (about -3e6 rad), where
float32 keeps no digit of it (both results are finite and arbitrary). The learned variant is a
gather of its tables: bit-equal (0 ulps) to transformers', checked by the conformance suite.
"""

from __future__ import annotations

import argparse
import inspect

import numpy as np

WIDTH = 256
MODELS = {  # model type -> (config class, model class, extra config, stride)
    "detr": ("DetrConfig", "DetrModel", {}, 32),
    "conditional_detr": ("ConditionalDetrConfig", "ConditionalDetrModel", {}, 32),
    "table-transformer": ("TableTransformerConfig", "TableTransformerModel", {}, 32),
    "deformable_detr": (
        "DeformableDetrConfig",
        "DeformableDetrModel",
        {"num_feature_levels": 1, "encoder_n_points": 1, "decoder_n_points": 1},
        8,
    ),
    "dab-detr": ("DabDetrConfig", "DabDetrModel", {}, 32),
    "rt_detr": ("RTDetrConfig", "RTDetrModel", {}, 32),
    "rt_detr_v2": ("RTDetrV2Config", "RTDetrV2Model", {}, 32),
    "d_fine": ("DFineConfig", "DFineModel", {}, 32),
    "deimv2": ("Deimv2Config", "Deimv2Model", {}, 32),
}
#: D-FINE and DEIMv2's HGNet-V2 backbone, tiny (only the encoder's width matters here).
HGNET = {
    "stem_channels": [3, 8, 8],
    "stage_in_channels": [8, 8, 16, 16],
    "stage_mid_channels": [8, 8, 8, 8],
    "stage_out_channels": [8, 16, 16, 16],
    "stage_num_blocks": [1, 1, 1, 1],
    "stage_numb_of_layers": [1, 1, 1, 1],
    "hidden_sizes": [8, 16, 16, 16],
    "depths": [1, 1, 1, 1],
    "embedding_size": 8,
    "out_indices": [2, 3, 4],
}
#: RT-DETR: its own ResNet variant, channels matched to the encoder's inputs; no mask (one 640 px image).
RT_DETR = {
    "encoder_in_channels": [8, 16, 16],
    "encoder_hidden_dim": WIDTH,
    "decoder_in_channels": [WIDTH] * 3,
    "num_denoising": 0,
}


def _pixel_mask() -> np.ndarray:
    mask = np.zeros((2, 800, 1201), np.int64)
    mask[0, :, :1066] = 1
    mask[1] = 1
    return mask


def _model(model_type: str):
    import torch
    import transformers
    from transformers import ResNetConfig

    config_name, model_name, extra, _ = MODELS[model_type]
    backbone = ResNetConfig(hidden_sizes=[8, 8, 16, 16], depths=[1, 1, 1, 1], embedding_size=8, out_features=["stage4"])
    width = {"hidden_size": WIDTH} if model_type == "dab-detr" else {"d_model": WIDTH}
    if model_type.startswith("rt_detr"):
        backbone = transformers.RTDetrResNetConfig(
            hidden_sizes=[8, 8, 16, 16], depths=[1, 1, 1, 1], embedding_size=8, out_indices=[2, 3, 4]
        )
        extra = {**extra, **RT_DETR}
    if model_type in ("d_fine", "deimv2"):
        backbone = transformers.HGNetV2Config(**HGNET)
        extra = {**extra, **RT_DETR, "encoder_in_channels": [16, 16, 16]}
    config = getattr(transformers, config_name)(
        backbone_config=backbone,
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        encoder_layers=1,
        decoder_layers=1,
        num_queries=5,
        **width,
        **extra,
    )
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    (module,) = [m for m in model.modules() if type(m).__name__.endswith("SinePositionEmbedding")]
    return model, module


def _valid(mask: np.ndarray, f: int) -> np.ndarray:
    b, h, w = mask.shape
    y = np.broadcast_to(mask.any(1, keepdims=True)[:, None], (b, f, h, w))
    x = np.broadcast_to(mask.any(2, keepdims=True)[:, None], (b, f, h, w))
    return np.concatenate([y, x], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figure", help="also write the DETR sine figure (PNG) here")
    args = parser.parse_args()
    import jax
    import torch
    from transformers.utils import logging as hf_logging

    import flax_posenc as fp
    from flax_posenc.conversion import inspect_source
    from flax_posenc.detr_config import detr_sine_values

    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)
    pixel = _pixel_mask()
    ulp = 2.0**-23
    print(
        "| model type | feature map | variant | ours vs float64 | transformers float32 vs float64 | ours vs transformers |"
    )
    print("|---|---|---|---|---|---|")
    cross = None
    import tempfile

    for model_type, (_, _, _, stride) in MODELS.items():
        model, module = _model(model_type)
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            rec = inspect_source(tmp).mechanisms[0].record
        cfg = rec.sine
        h, w = -(-pixel.shape[1] // stride), -(-pixel.shape[2] // stride)
        mask = np.asarray(fp.detr_feature_mask(pixel, (h, w)))
        ref_mask = torch.nn.functional.interpolate(torch.from_numpy(pixel)[None].float(), size=(h, w)).bool()[0]
        assert np.array_equal(mask, ref_mask.numpy())
        rt_detr = list(inspect.signature(module.forward).parameters)[0] == "width"
        if rt_detr:  # no mask: one unpadded 640 x 640 image
            h = w = 640 // stride
            mask = np.ones((1, h, w), bool)
        ref = detr_sine_values(mask, cfg)
        ours = np.asarray(jax.jit(lambda m, cfg=cfg: fp.detr_sine_embedding(m, cfg))(mask), np.float64)
        tm = torch.from_numpy(mask)
        with torch.no_grad():
            if rt_detr:  # (1, H * W, D) in float64, cast to float32
                out = module(width=w, height=h, device=torch.device("cpu"), dtype=torch.float32).double().numpy()
                theirs = out.reshape(1, h, w, -1).transpose(0, 3, 1, 2)
            elif list(inspect.signature(module.forward).parameters)[0] != "shape":  # (pixel_values, pixel_mask)
                theirs = module(torch.zeros(2, WIDTH, h, w), tm.long()).double().numpy()
            else:
                shape = torch.Size((2, WIDTH, h, w))
                theirs = module(shape=shape, device="cpu", dtype=torch.float32, mask=tm).double().numpy()
                if cross is None:
                    f64 = module(shape=shape, device="cpu", dtype=torch.float64, mask=tm).numpy()
                    cross = float(np.abs(f64 - ref).max())
        v = _valid(mask, cfg.num_pos_feats)
        variant = (
            f"offset {cfg.offset:g}, T {cfg.temperature_height:g}/{cfg.temperature_width:g}, "
            f"{'normalize' if cfg.normalize else 'raw'}, {cfg.layout}"
        )
        print(
            f"| {model_type} | {h} x {w} (stride {stride}) | {variant} | {np.abs(ours - ref)[v].max() / ulp:.2f} "
            f"| {np.abs(theirs - ref)[v].max() / ulp:.2f} | {np.abs(ours - theirs)[v].max() / ulp:.2f} |"
        )
        if args.figure and model_type == "detr":
            fp.plots.plot_detr_sine(
                ours[0],
                mask[0],
                args.figure,
                title=(
                    f"DETR sine position embedding, d_model {WIDTH} (y channels, then x),\nof an 800 x 1066 px "
                    f"image padded to 800 x 1201 px: a {h} x {w} feature map.\nA formula: no weights."
                ),
            )
    print(f"\nreference check: DETR's own build_sine_position_embedding in float64 vs ours in float64: {cross:.3g}")


if __name__ == "__main__":
    main()
