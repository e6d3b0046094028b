"""``config_json_path``: a SOURCE's ``config.json``, Hub ids through the one resolver, against a real HTTP Hub.

The Hub is ``tests/hub_server.py`` (a ``ThreadingHTTPServer`` on 127.0.0.1 answering as the Hub
answers ``hf_hub_download``), not a mock of huggingface_hub. The code under test runs in a
subprocess with ``HF_ENDPOINT`` at the server, ``HF_HOME`` in ``tmp_path`` and ``HF_HUB_OFFLINE``
set or not, because huggingface_hub reads them at import.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from hub_server import FakeHub, parse_resolve, run, run_python
from safetensors.numpy import save

from flax_posenc.conversion.hub_download import HUB_TIMEOUT_ENV
from flax_posenc.conversion.sources import config_json_path
from flax_posenc.errors import CheckpointError

LLAMA = "meta-llama/Llama-3.1-8B"
#: Llama 3.1 8B's config.json as the Hub holds it (transformers 4.43 spelling).
LLAMA31_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "vocab_size": 128256,
}
#: what a sharded repository also holds: it must never be asked for.
LLAMA_WEIGHTS = {
    "model.safetensors.index.json": {"weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}},
    "model-00001-of-00001.safetensors": b"\x00" * 64,
}

ROWS, DIM, VOCAB = 8, 4, 10
GPT2_CONFIG = {"model_type": "gpt2", "n_positions": ROWS, "n_embd": DIM, "vocab_size": VOCAB}
GPT2_TENSORS = {
    "wpe.weight": np.random.default_rng(0).standard_normal((ROWS, DIM)).astype(np.float32),
    "wte.weight": np.random.default_rng(1).standard_normal((VOCAB, DIM)).astype(np.float32),
    "ln_f.weight": np.ones(DIM, np.float32),
    "ln_f.bias": np.zeros(DIM, np.float32),
}

RESOLVE = """
import json, sys
from flax_posenc.conversion.sources import config_json_path
from flax_posenc.errors import CheckpointError
try:
    path = config_json_path(sys.argv[1])
except CheckpointError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({"path": None if path is None else str(path)}))
"""


def resolve(hub: FakeHub, source: str, hf_home: Path, *, offline: bool = False, timeout: float | None = None) -> dict:
    """``config_json_path(source)`` in a subprocess: ``{"path": ...}`` or ``{"error": line}``.

    ``timeout``: ``FLAX_POSENC_HUB_TIMEOUT`` for the subprocess (the one deadline of an exchange)."""
    cwd = hf_home.parent / "cwd"
    cwd.mkdir(exist_ok=True)
    env = hub.env(hf_home, offline=offline)
    if timeout is not None:
        env[HUB_TIMEOUT_ENV] = str(timeout)
    proc = run_python(RESOLVE, source, env=env, cwd=cwd)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert list(cwd.iterdir()) == []  # nothing written outside HF_HOME
    return json.loads(proc.stdout)


def files_under(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def one_line(error: str) -> str:
    assert "\n" not in error and "Traceback" not in error
    return error


# ----------------------------------------------------------------------------- (a), (b) online, then offline


def test_online_downloads_config_json_and_nothing_else(hub_server, tmp_path):
    repo = hub_server.add(LLAMA, {"config.json": LLAMA31_CONFIG, **LLAMA_WEIGHTS})
    got = resolve(hub_server, LLAMA, tmp_path / "hf")
    snapshot = tmp_path / "hf" / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / repo.commit
    assert got == {"path": str(snapshot / "config.json")}
    assert (snapshot / "config.json").read_bytes() == repo.files["config.json"]
    # only config.json was asked for (its metadata, then its bytes), at the Hub's address
    assert hub_server.requested_files() == ["config.json"]
    assert {p for _, p in hub_server.log} == {f"/{LLAMA}/resolve/main/config.json"}
    assert "GET" in {m for m, _ in hub_server.log}
    assert not any(n.endswith((".safetensors", ".bin")) or "index" in n for n in files_under(tmp_path / "hf"))


def test_cached_config_resolves_offline_and_online_without_a_request(hub_server, tmp_path):
    hub_server.add(LLAMA, {"config.json": LLAMA31_CONFIG, **LLAMA_WEIGHTS})
    first = resolve(hub_server, LLAMA, tmp_path / "hf")  # the cache, filled by a real download
    assert hub_server.requested_files() == ["config.json"]
    hub_server.clear()
    assert resolve(hub_server, LLAMA, tmp_path / "hf", offline=True) == first
    assert hub_server.log == [] and hub_server.connections == 0
    # online, a cached config is not asked for again either (cache first)
    assert resolve(hub_server, LLAMA, tmp_path / "hf") == first
    assert hub_server.log == [] and hub_server.connections == 0


# ----------------------------------------------------------------------------- (c), (d), (e) one-line errors


def test_offline_and_not_cached_is_one_line_and_asks_nothing(hub_server, tmp_path):
    hub_server.add(LLAMA, {"config.json": LLAMA31_CONFIG})
    got = resolve(hub_server, LLAMA, tmp_path / "hf", offline=True)
    assert one_line(got["error"]) == (
        f"{LLAMA}: expected a Hub model id already in the local cache ({tmp_path / 'hf' / 'hub'}) because "
        "HF_HUB_OFFLINE=1, found no cached config.json; run once online, unset HF_HUB_OFFLINE, or pass a local directory"
    )
    assert hub_server.log == [] and hub_server.connections == 0


def test_unknown_repository_is_one_line_naming_the_id(hub_server, tmp_path):
    got = resolve(hub_server, "nobody/missing", tmp_path / "hf")
    assert one_line(got["error"]) == (
        f"nobody/missing: expected a Hugging Face model id on {hub_server.endpoint} (or a local path), "
        "found no such repository on the Hub (or it is private/gated)"
    )
    assert hub_server.requested_files() == ["config.json"]


def test_repository_without_config_json_is_one_line(hub_server, tmp_path):
    hub_server.add("org/weights-only", {"model.safetensors": save(GPT2_TENSORS)})
    got = resolve(hub_server, "org/weights-only", tmp_path / "hf")
    assert (
        one_line(got["error"])
        == "org/weights-only: expected config.json in the Hub repository, found not in the repository"
    )
    assert hub_server.requested_files() == ["config.json"]


NOT_CACHED = "expected a Hub model id in the local cache or a reachable Hugging Face Hub, found not cached, and"
RETRY_HINT = "; set HF_HUB_OFFLINE=1 to use the cache only, or pass a local directory"


BAD_ANSWERS = {
    "not-a-hub": "{id}: "
    + NOT_CACHED
    + " {endpoint} answered without the Hub's X-Repo-Commit/ETag headers (is HF_ENDPOINT a Hub?)"
    + RETRY_HINT,
    "head-403": "{id}: " + NOT_CACHED + " {endpoint} answered HTTP 403" + RETRY_HINT,
    "get-500": "{id}/config.json: expected a file downloadable from the Hugging Face Hub, found HTTP 500 from {endpoint}",
    "short-body": "{id}/config.json: expected the {size} bytes the Hub announced, found {half} bytes "
    "(the download was cut short; the partial file was removed)",
    "long-body": "{id}/config.json: expected at most the {size} bytes announced, found more "
    "(refused; the partial file was removed)",
    "head-503": "{id}: " + NOT_CACHED + " {endpoint} answered HTTP 503" + RETRY_HINT,
}


def test_a_server_that_answers_badly_is_one_line(hub_server, tmp_path):
    """A web server that is not a Hub, a proxy refusing, the Hub down (503: no retries), a failed download,
    a truncated or overlong one: one line naming the id, nothing left in the cache (no snapshot, no blob,
    no partial file). One repository per fault, resolved in one subprocess (one interpreter start)."""
    ids = {fault: f"org/broken-{fault}" for fault in BAD_ANSWERS}
    repos = {fault: hub_server.add(ids[fault], {"config.json": LLAMA31_CONFIG}, fault=fault) for fault in BAD_ANSWERS}
    got = resolve_many(hub_server, list(ids.values()), tmp_path / "hf")
    for (fault, expected), answer in zip(BAD_ANSWERS.items(), got):
        size = len(repos[fault].files["config.json"])
        expected = expected.format(id=ids[fault], endpoint=hub_server.endpoint, size=size, half=size // 2)
        assert one_line(answer.get("error", "")) == expected, fault
    # each repository was asked for config.json and nothing else
    requested = [parse_resolve(path) for _, path in hub_server.log]
    assert {(r[0], r[2]) for r in requested if r} == {(i, "config.json") for i in ids.values()}
    assert None not in requested
    assert not [p for p in (tmp_path / "hf").rglob("*") if p.is_file() or p.is_symlink()]


def test_hub_unreachable_is_one_line(tmp_path):
    hub = FakeHub()  # never started: its port is closed
    endpoint = hub.endpoint
    hub.stop()
    got = resolve(hub, "org/name", tmp_path / "hf")
    assert one_line(got["error"]).startswith(
        f"org/name: {NOT_CACHED} the Hub is 127.0.0.1:{endpoint.rsplit(':', 1)[1]} unreachable"
    )
    assert got["error"].endswith(RETRY_HINT)


def test_renamed_repository_follows_the_hubs_redirect(hub_server, tmp_path):
    repo = hub_server.add("new-org/model", {"config.json": LLAMA31_CONFIG})
    hub_server.rename("old-org/model", "new-org/model")
    got = resolve(hub_server, "old-org/model", tmp_path / "hf")
    assert Path(got["path"]).read_bytes() == repo.files["config.json"]
    assert Path(got["path"]).is_relative_to(tmp_path / "hf" / "hub" / "models--old-org--model")
    assert hub_server.requested_files() == ["config.json"]
    assert "/new-org/model/resolve/main/config.json" in {p for _, p in hub_server.log}


# ----------------------------------------------------------------------------- local forms (no Hub asked)


def test_local_sources_and_non_config_sources(hub_server, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub_server.endpoint)  # any Hub request would show in the log
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(GPT2_CONFIG))
    (ckpt / "model.safetensors").write_bytes(save(GPT2_TENSORS))
    (ckpt / "model.safetensors.index.json").write_text("{}")
    (ckpt / "other.json").write_text("{}")
    bare = tmp_path / "bare"
    bare.mkdir()
    assert config_json_path(ckpt) == ckpt / "config.json"
    assert config_json_path(str(ckpt)) == ckpt / "config.json"
    assert config_json_path(ckpt / "config.json") == ckpt / "config.json"
    assert config_json_path(ckpt / "other.json") == ckpt / "other.json"
    for source in (
        bare,  # a directory without config.json
        ckpt / "model.safetensors",
        ckpt / "model.safetensors.index.json",
        "sinusoidal:16:8",
        str(tmp_path / "missing.json"),
        Path("org/name"),  # a Path is never a Hub id (as open_checkpoint)
    ):
        assert config_json_path(source) is None, source
    assert hub_server.log == [] and hub_server.connections == 0
    with pytest.raises(CheckpointError, match="expected a path, a Hub model id"):
        config_json_path(123)


def test_a_config_link_out_of_the_checkpoint_is_refused(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(GPT2_CONFIG))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").symlink_to(outside)
    with pytest.raises(CheckpointError) as e:
        config_json_path(ckpt)
    assert str(e.value) == (
        f"{ckpt / 'config.json'}: expected config.json inside {ckpt}, found a path outside it (refused, not read)"
    )


# ----------------------------------------------------------------------------- the command line on a Hub id

SCRIPT = shutil.which("flax-posenc", path=str(Path(sys.executable).parent)) or "flax-posenc"


def cli(hub: FakeHub, hf_home: Path, *args: str, offline: bool = False):
    cwd = hf_home.parent / "cwd"
    cwd.mkdir(exist_ok=True)
    return run([SCRIPT, *args], env=hub.env(hf_home, offline=offline), cwd=cwd)


def test_cli_check_hub_id_learned_table(hub_server, tmp_path):
    """``flax-posenc check org/name --length N`` on a learned table: config.json and the weights, through
    the one resolver; then offline from the cache, without a request."""
    hub_server.add("org/tiny-gpt2", {"config.json": GPT2_CONFIG, "model.safetensors": save(GPT2_TENSORS)})
    ok = cli(hub_server, tmp_path / "hf", "check", "org/tiny-gpt2", "--length", str(ROWS))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"ok: {ROWS} positions fit;") and f"holds {ROWS} positions (0..{ROWS - 1})" in ok.stdout
    assert hub_server.requested_files() == ["config.json", "model.safetensors"]
    hub_server.clear()
    over = cli(hub_server, tmp_path / "hf", "check", "org/tiny-gpt2", "--length", str(ROWS + 1), offline=True)
    assert over.returncode == 1
    assert over.stderr.strip().endswith(f"asked for {ROWS + 1} positions (0..{ROWS}): 1 past the limit")
    assert hub_server.log == [] and hub_server.connections == 0


def test_cli_check_hub_id_rope_config(hub_server, tmp_path):
    """A RoPE Hub id: only config.json is fetched; its limit is max_position_embeddings (131072)."""
    hub_server.add(LLAMA, {"config.json": LLAMA31_CONFIG, **LLAMA_WEIGHTS})
    cwd = tmp_path / "cwd"

    def check(n: int, offline: bool = False) -> tuple[int, str]:
        proc = cli(hub_server, tmp_path / "hf", "check", LLAMA, "--length", str(n), offline=offline)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, (proc.stdout or proc.stderr).strip()

    limit = LLAMA31_CONFIG["max_position_embeddings"]
    code, line = check(limit)
    assert code == 0 and line.startswith(f"ok: {limit} positions fit;"), line
    assert hub_server.requested_files() == ["config.json"]
    hub_server.clear()
    code, line = check(limit + 1, offline=True)
    assert code == 1 and line.endswith(f"asked for {limit + 1} positions (0..{limit}): 1 past the limit"), line
    assert hub_server.log == [] and hub_server.connections == 0
    assert os.listdir(cwd) == []


# ----------------------------------------------------------------------------- a hostile Hub (issue 34)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


RESOLVE_MANY = """
import json, sys
from flax_posenc.conversion.sources import config_json_path
from flax_posenc.errors import CheckpointError
out = []
for source in sys.argv[1:]:
    try:
        out.append({"path": str(config_json_path(source))})
    except CheckpointError as e:
        out.append({"error": str(e)})
print(json.dumps(out))
"""


def resolve_many(hub: FakeHub, sources: list[str], hf_home: Path, *, timeout: float | None = None) -> list[dict]:
    """``config_json_path`` of each source, in one subprocess (one interpreter start for many cases)."""
    cwd = hf_home.parent / "cwd"
    cwd.mkdir(exist_ok=True)
    env = hub.env(hf_home)
    if timeout is not None:
        env[HUB_TIMEOUT_ENV] = str(timeout)
    proc = run_python(RESOLVE_MANY, *sources, env=env, cwd=cwd)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert list(cwd.iterdir()) == []
    return json.loads(proc.stdout)


HOSTILE_HEADERS = [
    ("etag", "../../../../outside/x"),
    ("etag", "{tmp}/absolute/x"),
    ("etag", ".."),
    ("etag", "a/b"),
    ("etag", ""),
    ("commit_header", "../../../../outside"),
    ("commit_header", "{tmp}/absolute"),
    ("commit_header", "0" * 39 + "/"),
]


def test_an_etag_or_commit_that_is_a_path_writes_nothing_anywhere(hub_server, tmp_path):
    """huggingface_hub builds ``blobs/ETAG`` and ``snapshots/COMMIT/`` from the server's headers: a path
    there once created the file, with the server's bytes, outside ``HF_HOME``. Refused before any byte is
    written: nothing outside the cache, and nothing in it either (8 hostile answers, one subprocess)."""
    ids = []
    for i, (field, value) in enumerate(HOSTILE_HEADERS):
        repo = hub_server.add(f"org/hostile{i}", {"config.json": LLAMA31_CONFIG})
        setattr(repo, field, value.format(tmp=tmp_path))
        ids.append(f"org/hostile{i}")
    for repo_id, got in zip(ids, resolve_many(hub_server, ids, tmp_path / "hf")):
        line = one_line(got.get("error", ""))
        assert line.startswith(
            f"{repo_id}/config.json: expected a Hub answer whose X-Repo-Commit is 40 hex digits and whose ETag "
            "is a plain token (a digest), found"
        ), line
        assert line.endswith("(refused: nothing was written)")
    assert tree(tmp_path) <= {"cwd", "hf"}
    assert not [p for p in (tmp_path / "hf").rglob("*") if not p.is_dir()]
    assert "GET" not in {m for m, _ in hub_server.log}  # refused on the metadata: the body never asked for


def test_a_config_json_announced_too_large_is_refused_before_downloading(hub_server, tmp_path):
    """A 200 MB config.json (the JSON reader's bound is 64 MiB): refused on the size the Hub announces,
    never downloaded, nothing in the cache."""
    repo = hub_server.add("org/huge", {"config.json": LLAMA31_CONFIG})
    repo.announce = 200_000_000
    got = resolve(hub_server, "org/huge", tmp_path / "hf")
    assert one_line(got["error"]) == (
        "org/huge/config.json: expected a file of at most 67108864 bytes, "
        "found 200000000 bytes announced by the Hub (refused before downloading it)"
    )
    assert [m for m, _ in hub_server.log] == ["HEAD"]
    assert not [p for p in (tmp_path / "hf").rglob("*") if not p.is_dir()]


def test_a_hub_that_never_finishes_is_bounded_by_one_deadline(hub_server, tmp_path):
    """Accepted and never answered, or one byte every 2 s (each read succeeds: a timeout per read never
    fires; the config would take ~30 min): one line once ``FLAX_POSENC_HUB_TIMEOUT`` (here 2 s) has passed
    for the whole exchange, and no partial file left in the cache."""
    import time

    faults = ["stall-head", "drip-head", "drip-body"]
    for fault in faults:
        hub_server.add(f"org/{fault}", {"config.json": LLAMA31_CONFIG}, fault=fault)
    start = time.monotonic()
    got = resolve_many(hub_server, [f"org/{f}" for f in faults], tmp_path / "hf", timeout=2)
    elapsed = time.monotonic() - start
    for fault, answer in zip(faults, got):
        assert one_line(answer["error"]) == (
            f"org/{fault}/config.json: expected a complete answer from the Hub at {hub_server.endpoint} within "
            f"2 s (plus 1 s per MiB announced; {HUB_TIMEOUT_ENV}), found none in time "
            "(the Hub accepted the connection, then did not finish answering)"
        )
    assert elapsed < 3 * 2 + 20, elapsed  # three deadlines, plus the subprocess's start on a loaded machine
    assert not [p for p in (tmp_path / "hf").rglob("*") if not p.is_dir()]


@pytest.mark.parametrize("fault", ["head-503", "get-500"])
def test_cli_json_on_a_failing_hub_is_one_json_object_and_a_quiet_stderr(hub_server, tmp_path, fault):
    """An HTTP 5xx from the Hub: no retry warnings on stderr (they were 11 lines over 24 s), exit 2, one
    JSON error on stdout."""
    hub_server.add("org/down", {"config.json": LLAMA31_CONFIG}, fault=fault)
    proc = cli(hub_server, tmp_path / "hf", "inspect", "org/down", "--json")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ""
    assert "HTTP 50" in json.loads(proc.stdout)["error"]
    assert len([m for m, _ in hub_server.log if m == "HEAD"]) == 1  # asked once, not retried


EXPORT_MANY = """
import json, sys
import numpy as np
from flax_posenc.conversion import export_position_table
from flax_posenc.errors import CheckpointError
out_root = sys.argv[1]
answers = []
for i, repo_id in enumerate(sys.argv[2:]):
    try:
        out = export_position_table(repo_id, np.zeros((NEW_ROWS, WIDTH), np.float32), f"{out_root}/out{i}")
        answers.append({"path": str(out)})
    except CheckpointError as e:
        answers.append({"error": str(e)})
print(json.dumps(answers))
""".replace("NEW_ROWS", str(ROWS + 2)).replace("WIDTH", str(DIM))


def test_export_from_a_hub_id_downloads_the_snapshot_checked(hub_server, tmp_path):
    """``extend``/``export_position_table`` of a Hub id not cached: the whole snapshot, listed by the Hub's API,
    every file checked as the resolver checks one (no huggingface_hub ``snapshot_download`` online): a healthy
    repository exports; a listed name that climbs out, or a file whose ETag is a path, is refused with
    nothing written outside the cache."""
    files = {"config.json": GPT2_CONFIG, "model.safetensors": save(GPT2_TENSORS), "README.md": "tiny"}
    hub_server.add("org/good", files)
    hub_server.add("org/climbing", files).listed = ["config.json", "../../../../outside/y"]
    hub_server.add("org/etag", files).etag = "../../../../outside/z"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = run_python(
        EXPORT_MANY,
        str(tmp_path / "outs"),
        "org/good",
        "org/climbing",
        "org/etag",
        env=hub_server.env(tmp_path / "hf"),
        cwd=cwd,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    good, climbing, etag = json.loads(proc.stdout)
    out = Path(good["path"])
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "config.json",
        "flax_posenc_export.json",
        "model.safetensors",
    ]
    assert json.loads((out / "config.json").read_text())["n_positions"] == ROWS + 2
    assert one_line(climbing["error"]) == (
        "org/climbing (the Hub's file list): expected a file name as a file name inside the checkpoint, "
        "found '../../../../outside/y' (refused, not read)"
    )
    assert one_line(etag["error"]).startswith("org/etag/")
    assert "is a plain token (a digest), found" in etag["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "hf", "outs"]  # nothing else written
    assert sorted(p.name for p in (tmp_path / "outs").iterdir()) == ["out0"]  # refused exports: no output
    assert not (tmp_path / "outside").exists() and list(cwd.iterdir()) == []
    snapshot = tmp_path / "hf" / "hub" / "models--org--good" / "snapshots" / hub_server.repos["org/good"].commit
    assert sorted(p.name for p in snapshot.iterdir()) == ["README.md", "config.json", "model.safetensors"]


def test_a_snapshot_file_answered_for_another_commit_is_refused(hub_server, tmp_path):
    """The API lists commit A; a file asked at A is answered with ``X-Repo-Commit`` B (40 hex digits,
    a valid token: only the comparison with A catches it). Refused, and nothing of B in the cache."""
    files = {"config.json": GPT2_CONFIG, "model.safetensors": save(GPT2_TENSORS)}
    repo = hub_server.add("org/moved", files)
    other = "f" * 40
    assert repo.commit != other
    repo.commit_header = other
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = run_python(EXPORT_MANY, str(tmp_path / "outs"), "org/moved", env=hub_server.env(tmp_path / "hf"), cwd=cwd)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    (moved,) = json.loads(proc.stdout)
    line = one_line(moved.get("error", ""))
    assert line.startswith("org/moved/"), moved
    assert line.endswith(
        f": expected the Hub's answer for commit {repo.commit}, found X-Repo-Commit {other!r} (refused)"
    ), line
    assert not (tmp_path / "outs" / "out0").exists()
    assert not list((tmp_path / "hf").rglob(other))  # no snapshot folder of the other commit
