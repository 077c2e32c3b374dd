"""
Test support: run TRL's real vLLM generation code (`VLLMGeneration`, `VLLMClient`) on CPU, without vLLM.

Only the outermost boundaries are replaced; every line of TRL between the trainer and them runs as shipped (TRL 1.14 to 1.16):

Server mode ([`fake_vllm_server`]), in `trl.generation.vllm_client` and `trl.generation.vllm_generation`:

- `is_vllm_available` (both modules): the `ImportError` guards of `VLLMGeneration._init_vllm` and
  `VLLMClient.__init__`. The fake answers `True` without `min_version` and `False` with one, consistently with the
  version flags TRL computed at import time without vLLM (`_HAS_STATEFUL_TRAINER_ENGINE`,
  `_HAS_RESET_PREFIX_CACHE_SUCCESS`): TRL takes its code paths for a vLLM older than 0.26. TRL 1.14's
  `_HAS_WEIGHT_UPDATE_LIFECYCLE` is set (a vLLM of at least 0.21, whose weight updates later releases always assume).
- `socket.gethostbyname` in `vllm_client` (TRL < 1.15 resolves the server's host name in `VLLMClient.__init__`): the
  fake server's host name resolves to the loopback address; no request leaves the process all the same.
- `requests` (the module object `vllm_client` imported): `requests.Session()` and `requests.get` reach a
  [`FakeVLLMServer`] instead of the network, so `VLLMClient.__init__`, `check_server`, `_get`, `_post`,
  `get_server_info`, `get_world_size`, `generate`, `_generate_from_features`, `weight_update`, `update_named_params`
  and `reset_prefix_cache` all run TRL's code and send the HTTP requests a real server would get.
- The NCCL transport of weight updates: `NCCLWeightTransferEngine` / `NCCLTrainerSendWeightsArgs` (pre-0.28 path) and
  `packed_nccl_broadcast_producer` (0.28+ path), injected into `vllm_client` (they are absent without vLLM). The fake
  consumes the `(name, tensor)` iterator, so `VLLMGeneration._iter_named_params` runs, and records what was sent.
- `VLLMClient.init_communicator`, replaced as a whole: TRL's raises `NotImplementedError` for a non-CUDA device (the
  trainer's device is the CPU here) and opens an NCCL rendezvous. The replacement makes the same HTTP calls
  (`/server_info`, `/get_world_size`, `/init_weight_transfer_engine`) and sets a fake communicator.

Colocate mode ([`fake_vllm_colocate`]):

- A fake `vllm` module (and `vllm.sampling_params`) in `sys.modules`, with `LLM`, `SamplingParams`, `RequestOutput`,
  `CompletionOutput`, `Logprob`, `StructuredOutputsParams`.
- `trl.generation.vllm_generation.{LLM, SamplingParams, RequestOutput, StructuredOutputsParams}`: TRL binds these names
  at import time only when vLLM is installed, so they are set on the module to the fake module's classes.
- `trl.generation.vllm_generation.is_vllm_available`, as above.
- The environment variables `_init_vllm` writes (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`) are
  restored after the test.

The tiny policy model is never replaced: the trainer computes rewards and log-probabilities with it. Only the sampling
is fake, and deterministic: see [`fake_completion_ids`].
"""

from __future__ import annotations

import importlib.machinery
import itertools
import os
import sys
import threading
import types
from dataclasses import dataclass, field
from types import SimpleNamespace
from urllib.parse import urlparse

import pytest
import requests as _real_requests

from grpo_curriculum.demo.tasks import DIGITS, VOCAB, WORDS

EOS_ID = VOCAB.index("<eos>")
WORD_IDS = frozenset(VOCAB.index(word) for word in WORDS)
DIGIT_IDS = [VOCAB.index(digit) for digit in DIGITS]
FAKE_VLLM_VERSION = "0.25.0"  # consistent with the import-time version flags TRL computed without vLLM


# --- deterministic completions ---------------------------------------------------------------------------------------


def fake_completion_ids(prompt_ids: list[int], position: int, sample: int, max_tokens: int) -> list[int]:
    """
    The fake engine's completion: the prompt's word tokens (for the echo task, `"echo : w1 w2 ="` gives `w1 w2`), then
    `position` as two digit tokens, then `sample` as one digit token, then `<eos>`, truncated to `max_tokens`.

    Args:
        prompt_ids (`list[int]`):
            The prompt's token ids.
        position (`int`):
            Index of the completion in the response of its call: the choice index of a server response (prompt-major,
            `prompt_index x n + sample`), the output index of a colocated `LLM.generate` call.
        sample (`int`):
            Index of the completion among the `n` of its request.
        max_tokens (`int`):
            The request's `max_tokens`.

    Returns:
        `list[int]`: Token ids, all in [`~grpo_curriculum.demo.tasks.VOCAB`].
    """
    words = [token for token in prompt_ids if token in WORD_IDS]
    digits = [DIGIT_IDS[(position // 10) % 10], DIGIT_IDS[position % 10], DIGIT_IDS[sample % 10]]
    return (words + digits + [EOS_ID])[:max_tokens]


def fake_logprob(token_id: int, index: int) -> float:
    """
    A deterministic log-probability for the `index`-th token of a completion, near `-log(len(VOCAB))` (what the
    untrained tiny model gives any token), so TRL's importance-sampling ratios stay near 1.
    """
    return -3.4 + 0.02 * ((token_id + index) % 5)


@dataclass(frozen=True)
class FakeCompletion:
    """What a decoded fake completion says: the prompt's words, its position in its response, its sample index."""

    words: tuple[str, ...]
    position: int
    sample: int


def decode_fake_completion(text: str) -> FakeCompletion:
    """
    Read back a completion of [`fake_completion_ids`] decoded by the tokenizer (special tokens skipped).

    Raises:
        `ValueError`: If the text was not made by the fake engine (or was truncated).
    """
    tokens = text.split()
    if len(tokens) < 3 or any(token not in DIGITS for token in tokens[-3:]):
        raise ValueError(f"not a fake vLLM completion (or truncated: raise max_completion_length): {text!r}")
    tens, ones, sample = (DIGITS.index(token) for token in tokens[-3:])
    return FakeCompletion(tuple(tokens[:-3]), 10 * tens + ones, sample)


def _fake_is_vllm_available(min_version: str | None = None) -> bool:
    return min_version is None


# --- server mode -----------------------------------------------------------------------------------------------------


@dataclass
class CompletionRequest:
    """One generation request the fake server received."""

    endpoint: str
    prompts: list[list[int]]
    n: int
    temperature: float | None
    max_tokens: int
    payload: dict
    features: list | None = None


@dataclass
class WeightUpdate:
    """One weight update: what was announced over HTTP and what was broadcast over the (fake) NCCL group."""

    announced: list[str] = field(default_factory=list)
    received: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    finished: bool = False


class FakeResponse:
    def __init__(self, status_code: int, body=None, headers=None):
        self.status_code = status_code
        self._body = {} if body is None else body
        self.headers = headers or {}
        self.text = str(self._body)

    def json(self):
        return self._body


class FakeVLLMServer:
    """
    An in-process stand-in for `vllm serve` with TRL's flags, answering the HTTP endpoints `VLLMClient` uses.

    Attributes:
        requests (`list[tuple[str, str, dict | None]]`):
            Every HTTP call: method, path, JSON body.
        completions (`list[CompletionRequest]`):
            Every generation call (`/v1/completions`, `/inference/v1/generate`).
        weight_updates (`list[WeightUpdate]`):
            Every weight update.
        prefix_cache_resets (`int`):
            Calls to `/reset_prefix_cache`.
        communicator_inits (`list[dict]`):
            `init_info` of every `/init_weight_transfer_engine`.
    """

    base_url = "http://fake-vllm:8000"

    def __init__(self, data_parallel_size: int = 1, tensor_parallel_size: int = 1, model: str = "fake/tiny-llama"):
        self.data_parallel_size = data_parallel_size
        self.tensor_parallel_size = tensor_parallel_size
        self.model = model
        self.logprobs_mode = "processed_logprobs"
        # False: `/server_info` answers 404, like a server started without VLLM_SERVER_DEV_MODE.
        self.expose_dev_endpoints = True
        self.requests: list[tuple[str, str, dict | None]] = []
        self.completions: list[CompletionRequest] = []
        self.weight_updates: list[WeightUpdate] = []
        self.prefix_cache_resets = 0
        self.communicator_inits: list[dict] = []
        # The sampling, (prompt_ids, position, sample, max_tokens) -> token ids, and the detokenizer of the responses.
        self.complete = fake_completion_ids
        self.detokenize = lambda tokens: " ".join(VOCAB[token] for token in tokens)
        self._lock = threading.Lock()

    # -- what the server reports --

    def server_info(self) -> dict:
        return {
            "model_config": {"model": self.model, "logprobs_mode": self.logprobs_mode},
            "parallel_config": {
                "data_parallel_size": self.data_parallel_size,
                "tensor_parallel_size": self.tensor_parallel_size,
            },
            "weight_transfer_config": {"backend": "nccl"},
        }

    @property
    def generation_requests(self) -> list[CompletionRequest]:
        """The `/v1/completions` calls (one per generation round in TRL's server mode)."""
        return [request for request in self.completions if request.endpoint == "/v1/completions"]

    # -- HTTP --

    def handle(self, method: str, url: str, json=None, params=None, **kwargs) -> FakeResponse:
        if not url.startswith(self.base_url):
            raise _real_requests.exceptions.ConnectionError(f"fake vLLM server is at {self.base_url}, not {url}")
        path = urlparse(url).path
        with self._lock:
            self.requests.append((method, path, json))
        route = self._routes().get((method, path))
        if route is None:
            return FakeResponse(404, {"detail": "Not Found"})
        return route(json or {})

    def _routes(self):
        return {
            ("GET", "/health"): lambda body: FakeResponse(200),
            ("GET", "/v1/models"): lambda body: FakeResponse(200, {"data": [{"id": self.model}]}),
            ("GET", "/server_info"): self._server_info,
            ("GET", "/get_world_size"): lambda body: FakeResponse(
                200, {"world_size": self.data_parallel_size * self.tensor_parallel_size}
            ),
            ("POST", "/init_weight_transfer_engine"): self._init_weight_transfer_engine,
            ("POST", "/start_weight_update"): self._start_weight_update,
            ("POST", "/update_weights"): self._update_weights,
            ("POST", "/finish_weight_update"): self._finish_weight_update,
            ("POST", "/reset_prefix_cache"): self._reset_prefix_cache,
            ("POST", "/v1/completions"): self._completions,
            ("POST", "/inference/v1/generate"): self._generate_from_token_ids,
        }

    def _server_info(self, body):
        if not self.expose_dev_endpoints:
            return FakeResponse(404, {"detail": "Not Found"})
        return FakeResponse(200, {"vllm_config": self.server_info()})

    def _init_weight_transfer_engine(self, body):
        self.communicator_inits.append(body["init_info"])
        return FakeResponse(200, {})

    def _start_weight_update(self, body):
        self.weight_updates.append(WeightUpdate())
        return FakeResponse(200, {})

    def _update_weights(self, body):
        self.weight_updates[-1].announced.extend(body["update_info"]["names"])
        return FakeResponse(200, {})

    def _finish_weight_update(self, body):
        self.weight_updates[-1].finished = True
        return FakeResponse(200, {})

    def _reset_prefix_cache(self, body):
        self.prefix_cache_resets += 1
        return FakeResponse(200, {"success": True})

    def receive_weights(self, named_tensors) -> None:
        """The NCCL side of an update: consume the trainer's `(name, tensor)` stream."""
        update = self.weight_updates[-1] if self.weight_updates else None
        for name, tensor in named_tensors:
            if update is not None:
                update.received.append((name, tuple(tensor.shape)))

    def _completions(self, body):
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        if any(isinstance(prompt, str) for prompt in prompts):
            return FakeResponse(400, {"detail": "the fake vLLM server only takes token-id prompts"})
        n, max_tokens, logprobs = body.get("n", 1), body.get("max_tokens", 16), body.get("logprobs")
        choices = []
        for i, prompt_ids in enumerate(prompts):
            for j in range(n):
                position = i * n + j
                tokens = self.complete(prompt_ids, position, j, max_tokens)
                choices.append(
                    {
                        "index": position,
                        "text": self.detokenize(tokens),
                        "prompt_token_ids": list(prompt_ids),
                        "token_ids": tokens,
                        "logprobs": None if logprobs is None else _completions_logprobs(tokens),
                        "finish_reason": "stop" if tokens and tokens[-1] == EOS_ID else "length",
                    }
                )
        with self._lock:
            self.completions.append(
                CompletionRequest(
                    "/v1/completions", [list(p) for p in prompts], n, body.get("temperature"), max_tokens, body
                )
            )
        body = {"id": "cmpl-fake", "object": "text_completion", "model": self.model, "choices": choices}
        return FakeResponse(200, body)

    def _generate_from_token_ids(self, body):
        params = body["sampling_params"]
        n, max_tokens, logprobs = params.get("n", 1), params.get("max_tokens", 16), params.get("logprobs")
        prompt_ids = body["token_ids"]
        choices = []
        for j in range(n):
            tokens = self.complete(prompt_ids, j, j, max_tokens)
            choices.append(
                {"index": j, "token_ids": tokens, "logprobs": None if logprobs is None else _content_logprobs(tokens)}
            )
        with self._lock:
            self.completions.append(
                CompletionRequest(
                    "/inference/v1/generate", [list(prompt_ids)], n, params.get("temperature"), max_tokens, body,
                    features=[body.get("features")],
                )
            )
        return FakeResponse(200, {"request_id": body.get("request_id"), "choices": choices})


def _completions_logprobs(tokens: list[int]) -> dict:
    """`/v1/completions` logprobs with `return_tokens_as_token_ids`, as `parse_logprobs` reads them."""
    values = [fake_logprob(token, i) for i, token in enumerate(tokens)]
    names = [f"token_id:{token}" for token in tokens]
    return {
        "tokens": names,
        "token_logprobs": values,
        "top_logprobs": [{name: value} for name, value in zip(names, values, strict=True)],
        "text_offset": list(range(len(tokens))),
    }


def _content_logprobs(tokens: list[int]) -> dict:
    """Token-id/chat style logprobs (`{"content": [...]}`), as `parse_logprobs` reads them."""
    content = []
    for i, token in enumerate(tokens):
        name, value = f"token_id:{token}", fake_logprob(token, i)
        content.append({"token": name, "logprob": value, "top_logprobs": [{"token": name, "logprob": value}]})
    return {"content": content}


class _FakeSession:
    def __init__(self, server: FakeVLLMServer):
        self._server = server
        self.adapters = {}

    def mount(self, prefix, adapter):
        self.adapters[prefix] = adapter

    def get(self, url, **kwargs):
        return self._server.handle("GET", url, **kwargs)

    def post(self, url, **kwargs):
        return self._server.handle("POST", url, **kwargs)

    def close(self):
        pass


@dataclass
class FakeNCCLTrainerSendWeightsArgs:
    group: object
    packed: bool = False


class FakeCommunicator:
    """What `init_communicator` leaves in `VLLMClient.communicator`; `close_communicator` clears `group`'s fields."""

    def __init__(self, server: FakeVLLMServer, world_size: int):
        self.server = server
        self.world_size = world_size
        self.group = SimpleNamespace(store=object(), socket=object())


class FakeNCCLWeightTransferEngine:
    """Stands in for vLLM's `NCCLWeightTransferEngine` (< 0.28): the trainer-side broadcast of the weights."""

    @staticmethod
    def trainer_send_weights(iterator, trainer_args):
        trainer_args.group.server.receive_weights(iterator)


def _fake_packed_nccl_broadcast_producer(iterator, group, src=0, post_iter_func=None, **kwargs):
    """Stands in for vLLM's `packed_nccl_broadcast_producer` (>= 0.28)."""
    group.server.receive_weights(iterator)


def install_fake_vllm_server(monkeypatch, server: FakeVLLMServer) -> FakeVLLMServer:
    """Route TRL's `VLLMClient` to `server` (see the module docstring for the exact patch points)."""
    from trl.generation import vllm_client as client_module
    from trl.generation import vllm_generation as generation_module

    monkeypatch.setattr(generation_module, "is_vllm_available", _fake_is_vllm_available)
    monkeypatch.setattr(client_module, "is_vllm_available", _fake_is_vllm_available)
    shim = SimpleNamespace(
        Session=lambda: _FakeSession(server),
        get=lambda url, **kwargs: server.handle("GET", url, **kwargs),
        post=lambda url, **kwargs: server.handle("POST", url, **kwargs),
        exceptions=_real_requests.exceptions,
        ConnectionError=_real_requests.ConnectionError,
    )
    monkeypatch.setattr(client_module, "requests", shim)
    # TRL 1.14 sends `/start_weight_update` and `/finish_weight_update` only for a vLLM >= 0.21 (later releases always):
    # the fake server is one, as for TRL 1.15 and 1.16.
    monkeypatch.setattr(client_module, "_HAS_WEIGHT_UPDATE_LIFECYCLE", True, raising=False)
    if hasattr(client_module, "socket"):  # TRL < 1.15 resolves the server's host name when the client is built
        fake_host = urlparse(server.base_url).hostname
        resolve = client_module.socket.gethostbyname
        monkeypatch.setattr(client_module, "socket", SimpleNamespace(
            gethostbyname=lambda host: "127.0.0.1" if host == fake_host else resolve(host)))  # fmt: skip
    monkeypatch.setattr(client_module, "NCCLWeightTransferEngine", FakeNCCLWeightTransferEngine, raising=False)
    monkeypatch.setattr(client_module, "NCCLTrainerSendWeightsArgs", FakeNCCLTrainerSendWeightsArgs, raising=False)
    monkeypatch.setattr(
        client_module, "packed_nccl_broadcast_producer", _fake_packed_nccl_broadcast_producer, raising=False
    )

    def init_communicator(client, device=0):
        # TRL's raises NotImplementedError for a non-CUDA device and joins an NCCL rendezvous; same HTTP calls here.
        if hasattr(client, "get_server_info") and client.get_server_info()["weight_transfer_config"] is None:  # 1.16
            raise RuntimeError("fake vLLM server has no weight-transfer engine")
        world_size = client.get_world_size() + 1
        init_info = {"master_address": "127.0.0.1", "master_port": client.group_port, "rank_offset": 1,
                     "world_size": world_size}  # fmt: skip
        client._post(f"{client.base_url}/init_weight_transfer_engine", json={"init_info": init_info})
        client.communicator = FakeCommunicator(server, world_size)

    monkeypatch.setattr(client_module.VLLMClient, "init_communicator", init_communicator)
    return server


@pytest.fixture
def fake_vllm_server(monkeypatch):
    """
    A [`FakeVLLMServer`] (one engine; set `data_parallel_size` before building the trainer to change it) behind TRL's
    real `VLLMClient`. Build trainers with `use_vllm=True, vllm_mode="server",
    vllm_server_base_url=FakeVLLMServer.base_url`.
    """
    return install_fake_vllm_server(monkeypatch, FakeVLLMServer())


# --- colocate mode ---------------------------------------------------------------------------------------------------


class FakeSamplingParams:
    """Records the keyword arguments TRL builds `SamplingParams` with; exposes them as attributes."""

    def __init__(self, **kwargs):
        self.kwargs = dict(kwargs)
        self.n = 1
        self.temperature = 1.0
        self.max_tokens = 16
        self.logprobs = None
        self.__dict__.update(kwargs)

    def __repr__(self):
        return f"SamplingParams({self.kwargs})"


class FakeStructuredOutputsParams:
    def __init__(self, **kwargs):
        self.kwargs = dict(kwargs)


@dataclass
class FakeLogprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class FakeCompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, FakeLogprob]] | None
    finish_reason: str | None = None


@dataclass
class FakeRequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[FakeCompletionOutput]
    finished: bool = True


@dataclass
class GenerateCall:
    """One colocated `LLM.generate` call."""

    prompts: list[list[int]]
    sampling_params: FakeSamplingParams
    outputs: list[FakeRequestOutput]


class _FakeModel:
    def __init__(self, engine):
        self._engine = engine

    def load_weights(self, weights):
        for name, tensor in weights:
            self._engine.loaded_weights.append((name, tuple(tensor.shape)))


class FakeVLLMColocate:
    """
    What the colocated fake vLLM saw.

    Attributes:
        llms (`list`): The `LLM` instances, each with `init_kwargs`.
        generate_calls (`list[GenerateCall]`): Every `LLM.generate` call.
        loaded_weights (`list[tuple[str, tuple]]`): Every `load_weights` entry (name, shape), in order.
        prefix_cache_resets (`int`), sleeps (`list[int]`), wake_ups (`list`): The other engine calls.
        module (`types.ModuleType`): The fake `vllm` module.
    """

    def __init__(self):
        self.llms = []
        self.generate_calls: list[GenerateCall] = []
        self.loaded_weights: list[tuple[str, tuple[int, ...]]] = []
        self.prefix_cache_resets = 0
        self.sleeps: list[int] = []
        self.wake_ups: list = []
        self.module = _build_fake_vllm_module(self)


def _build_fake_vllm_module(engine: FakeVLLMColocate) -> types.ModuleType:
    request_ids = itertools.count()

    class LLM:
        def __init__(self, model=None, **kwargs):
            self.model = model
            self.init_kwargs = dict(kwargs)
            self.llm_engine = SimpleNamespace(
                model_config=SimpleNamespace(max_model_len=kwargs.get("max_model_len") or 64),
                model_executor=SimpleNamespace(
                    driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=_FakeModel(engine)))
                ),
            )
            engine.llms.append(self)

        def generate(self, prompts, sampling_params=None, use_tqdm=True, **kwargs):
            params = sampling_params or FakeSamplingParams()
            results, prompt_lists = [], []
            for i, prompt in enumerate(prompts):
                prompt_ids = list(prompt["prompt_token_ids"] if isinstance(prompt, dict) else prompt)
                prompt_lists.append(prompt_ids)
                outputs = []
                for j in range(params.n):
                    tokens = fake_completion_ids(prompt_ids, i * params.n + j, j, params.max_tokens)
                    logprobs = None
                    if params.logprobs is not None:
                        logprobs = [
                            {token: FakeLogprob(fake_logprob(token, k), rank=1, decoded_token=VOCAB[token])}
                            for k, token in enumerate(tokens)
                        ]
                    outputs.append(
                        FakeCompletionOutput(
                            index=j,
                            text=" ".join(VOCAB[token] for token in tokens),
                            token_ids=tokens,
                            cumulative_logprob=None,
                            logprobs=logprobs,
                            finish_reason="stop" if tokens and tokens[-1] == EOS_ID else "length",
                        )
                    )
                results.append(FakeRequestOutput(str(next(request_ids)), None, prompt_ids, outputs))
            engine.generate_calls.append(GenerateCall(prompt_lists, params, results))
            return results

        def sleep(self, level=1):
            engine.sleeps.append(level)

        def wake_up(self, tags=None):
            engine.wake_ups.append(tags)

        def reset_prefix_cache(self):
            engine.prefix_cache_resets += 1
            return True

    module = types.ModuleType("vllm")
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", loader=None)
    module.__version__ = FAKE_VLLM_VERSION
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.__spec__ = importlib.machinery.ModuleSpec("vllm.sampling_params", loader=None)
    sampling.SamplingParams = FakeSamplingParams
    sampling.StructuredOutputsParams = FakeStructuredOutputsParams
    module.sampling_params = sampling
    module.LLM = LLM
    module.SamplingParams = FakeSamplingParams
    module.RequestOutput = FakeRequestOutput
    module.CompletionOutput = FakeCompletionOutput
    module.Logprob = FakeLogprob
    return module


_INIT_VLLM_ENVIRONMENT = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def install_fake_vllm_colocate(monkeypatch) -> FakeVLLMColocate:
    """
    Put a fake `vllm` module behind TRL's real colocate path (see the module docstring for the exact patch points) and
    return its [`FakeVLLMColocate`] recorder. `monkeypatch` is pytest's fixture, or a `pytest.MonkeyPatch()` outside
    pytest (e.g. in a `torchrun` worker). The environment variables `_init_vllm` writes are not restored here.
    """
    from trl.generation import vllm_generation as generation_module

    engine = FakeVLLMColocate()
    module = engine.module
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", module.sampling_params)
    monkeypatch.setattr(generation_module, "is_vllm_available", _fake_is_vllm_available)
    for name in ("LLM", "SamplingParams", "RequestOutput"):
        monkeypatch.setattr(generation_module, name, getattr(module, name), raising=False)
    monkeypatch.setattr(
        generation_module, "StructuredOutputsParams", module.sampling_params.StructuredOutputsParams, raising=False
    )
    return engine


@pytest.fixture
def fake_vllm_colocate(monkeypatch):
    """
    A [`FakeVLLMColocate`] recorder behind TRL's real colocate path. Build trainers with `use_vllm=True,
    vllm_mode="colocate"`.
    """
    engine = install_fake_vllm_colocate(monkeypatch)
    saved = {key: os.environ.get(key) for key in _INIT_VLLM_ENVIRONMENT}
    yield engine
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
