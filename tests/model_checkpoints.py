"""Tiny Hugging Face checkpoints for the reference models of examples/models (not a test file).

``build(kind, path)`` writes a 2-layer, width-64, vocab-1000 checkpoint of ``kind`` with random
weights (``save_pretrained``: config.json + model.safetensors) and returns the torch model in
eval mode; ``load_example(name)`` imports ``examples/models/<name>.py`` (once per process);
``example, checkpoint, model = example_fixtures(name)`` gives a test module the example and its
two fixtures (the tiny checkpoint built once, and the example model loaded from it); :data:`IDS` are the
token ids the decoder tests feed.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "examples" / "models"
#: the ids every decoder test feeds: 2 sequences of 24 tokens of the tiny vocabulary
IDS = np.random.default_rng(0).integers(0, 1000, (2, 24))

# kind -> (config class, config kwargs, model class)
TINY = {
    "gpt2": (
        "GPT2Config",
        dict(
            vocab_size=1000,
            n_positions=64,
            n_embd=64,
            n_layer=2,
            n_head=4,
            bos_token_id=999,
            eos_token_id=999,
            pad_token_id=999,
        ),
        "GPT2LMHeadModel",
    ),
    "llama": (
        "LlamaConfig",
        dict(
            vocab_size=1000,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=10000.0,
            tie_word_embeddings=False,
            rms_norm_eps=1e-6,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 4.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
            bos_token_id=999,
            eos_token_id=999,
            pad_token_id=999,
        ),
        "LlamaForCausalLM",
    ),
    "bloom": (
        "BloomConfig",
        dict(
            vocab_size=1000, hidden_size=64, n_layer=2, n_head=4, bos_token_id=999, eos_token_id=999, pad_token_id=999
        ),
        "BloomForCausalLM",
    ),
    "bert": (
        "BertConfig",
        dict(
            vocab_size=1000,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
        ),
        "BertModel",
    ),
}


def build(kind: str, path: Path, *, std: float = 0.2, **overrides):
    """Write a tiny random ``kind`` checkpoint to ``path``; return the torch model (eval mode)."""
    import torch
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    config_cls, kwargs, model_cls = TINY[kind]
    config = getattr(transformers, config_cls)(**{**kwargs, **overrides})
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config)
    with torch.no_grad():  # random everything: norms near 1, biases and matrices random
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name.lower() or "ln" in name else 0.0))
            else:
                p.copy_(torch.randn_like(p) * std)
    model.save_pretrained(path)
    return model.eval()


def example_fixtures(name: str, kind: str | None = None, *, model_name: str = "model"):
    """``examples/models/<name>.py`` and a test module's two module-scoped fixtures for it:
    ``checkpoint`` -> ``(path, torch model)``, a tiny ``kind`` (default ``name``) checkpoint built
    once (:func:`build`), and ``model_name`` -> ``example.from_pretrained(path)``.

    Assign all three: ``bloom, checkpoint, model = example_fixtures("bloom")``.
    """
    example = load_example(name)

    @pytest.fixture(scope="module", name="checkpoint")
    def checkpoint(tmp_path_factory):
        path = tmp_path_factory.mktemp(name)
        return path, build(kind or name, path)

    @pytest.fixture(scope="module", name=model_name)
    def model(checkpoint):
        return example.from_pretrained(checkpoint[0])

    return example, checkpoint, model


def hf_logits(model, ids, attention_mask=None):
    """The torch model's logits (or last hidden state) for numpy ids, as float32 numpy."""
    import numpy as np
    import torch

    with torch.no_grad():
        kwargs = {} if attention_mask is None else {"attention_mask": torch.tensor(np.asarray(attention_mask))}
        out = model(torch.tensor(np.asarray(ids)), **kwargs)
    value = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return value.float().numpy()


def hf_generate(model, prompt, max_new_tokens: int):
    """Greedy ids from transformers' ``generate(do_sample=False)`` (no early stop), numpy."""
    import numpy as np
    import torch

    ids = torch.tensor(np.asarray(prompt))
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
        )
    return out.numpy()


@functools.cache
def load_example(name: str):
    """Import ``examples/models/<name>.py`` as a module, once per process: every test then holds
    the same classes, so equal models have equal graph definitions and share compiled programs
    (the decoding loop of ``common.generate``, the helpers below)."""
    spec = importlib.util.spec_from_file_location(f"example_models_{name}", MODELS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@functools.cache
def _merged_call():
    """``run(graphdef, state, *args, **kwargs)``: ``nnx.merge(graphdef, state)(*args, **kwargs)`` under
    plain ``jax.jit``, the graph definition static: one program per model structure and argument
    shapes, whichever test (or model of the same structure) asks first."""
    import jax
    from flax import nnx

    return jax.jit(
        lambda graphdef, state, *args, **kwargs: nnx.merge(graphdef, state)(*args, **kwargs), static_argnums=0
    )


def prefill_then_decode(model, ids, prefill: int):
    """Logits of ``ids`` computed as a cached prefill of ``prefill`` tokens then one token per
    step, every call under plain ``jax.jit`` with a traced ``start``; ``(batch, seq, vocab)`` numpy."""
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    graphdef, state = nnx.split(model)
    run = _merged_call()
    cache = model.init_cache(ids.shape[0], ids.shape[1])
    out = []
    for begin, end in [(0, prefill)] + [(t, t + 1) for t in range(prefill, ids.shape[1])]:
        logits, cache = run(graphdef, state, jnp.asarray(ids[:, begin:end]), cache=cache, start=jnp.int32(begin))
        out.append(np.asarray(logits))
    return np.concatenate(out, axis=1)


def jitted(model):
    """``model(ids, ...)`` under plain ``jax.jit`` (split once, merged inside)."""
    from flax import nnx

    graphdef, state = nnx.split(model)
    run = _merged_call()
    return lambda *args: run(graphdef, state, *args)


def decode_step(model, max_len: int):
    """``step(start) -> logits`` of one token at the traced position ``start`` with an empty
    cache of ``max_len``, under plain ``jax.jit`` (for the overflow tests)."""
    import jax.numpy as jnp
    from flax import nnx

    graphdef, state = nnx.split(model)
    cache = model.init_cache(1, max_len)
    run = _merged_call()
    token = jnp.zeros((1, 1), jnp.int32)
    return lambda start: run(graphdef, state, token, cache=cache, start=jnp.int32(start))[0]


def minilm_texts(minilm_dir: Path) -> list[str]:
    """Three real English texts of different lengths, fixed by the pinned wheel: the
    all-MiniLM-L6-v2 model card (more than 512 tokens), one sentence, and a paragraph of the card."""
    card = (Path(minilm_dir) / "README.md").read_text(encoding="utf-8").split("---", 2)[-1]
    return [card, "The server rejected the request.", card[3000:4500]]
