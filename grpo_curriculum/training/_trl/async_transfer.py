"""
A weight transfer for TRL's asynchronous GRPO trainer (`trl.experimental.async_grpo.AsyncGRPOTrainer`, TRL 1.16)
without NCCL: through a file the vLLM server reads (docs/async.md, "Weight transfer without NCCL").

TRL's own transfer (`WeightTransferClient`) streams the weights over NCCL, which needs a CUDA device on both sides.
[`FileWeightTransfer`] implements TRL's public seam instead (`WeightTransferProtocol`, the trainer's
`weight_transfer=` argument): at each of TRL's weight syncs it writes the stream TRL hands it (every parameter the
server receives, under its checkpoint name) into one safetensors file in a folder of its own, asks the server to reload
its weights from that folder (vLLM's `reload_weights` through the dev endpoint `POST /collective_rpc`), and resets the
server's prefix cache, between TRL's usual pause and resume of the server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from urllib.parse import urlparse

WEIGHTS_FILE = "model.safetensors"  # vLLM's loader reads every `*.safetensors` file of the folder


class FileWeightTransfer:
    """
    TRL's `WeightTransferProtocol` through a safetensors file: pass it as `weight_transfer=` to
    [`~training.async_grpo.CurriculumAsyncGRPOTrainer`] (or TRL's `AsyncGRPOTrainer`) to train without NCCL, e.g. on a
    CPU.

    At each weight sync (TRL calls `pause`, `send_weights`, `resume` on the main process) it:

    1. pauses the server as TRL's own transfer does (`POST /pause?mode=keep`: requests in flight are frozen, not
       aborted);
    2. writes the `(name, tensor)` pairs TRL streams (TRL's checkpoint names, the trainer's dtype) to
       `model.safetensors` in a folder it made with `tempfile` (written aside, then renamed into place);
    3. asks the server to load it: `POST /collective_rpc` with `{"method": "reload_weights", "kwargs": {"weights_path":
       folder}}` (vLLM's `GPUModelRunner.reload_weights`, which its CPU runner inherits; the served model name does not
       change);
    4. resets the prefix cache, preempting the frozen requests (`POST /reset_prefix_cache` with
       `reset_running_requests=true`): no cached key/value computed with the old weights is reused; the frozen requests
       recompute theirs with the new weights when the server resumes;
    5. resumes the server (`POST /resume`).

    The folder is removed by `destroy` (TRL calls it when training ends). Limits: the server must see the trainer's
    file system (the same machine, or a shared file system through `folder_parent`); every sync writes and reads the
    full weights (for a 0.5B model in bfloat16, about 1 GB a sync); the server must run in vLLM's dev mode
    (`VLLM_SERVER_DEV_MODE=1`, which `trl vllm-serve` sets) for `/collective_rpc`, `/pause`, `/resume` and
    `/reset_prefix_cache`; a LoRA adapter is merged by TRL before the stream, as for its NCCL transfer.

    Args:
        server_url (`str`):
            The vLLM server's base URL (`AsyncGRPOConfig.vllm_server_base_url`), `http://` or `https://`.
        timeout (`float`, *optional*, defaults to `300.0`):
            Seconds allowed for each request to the server (the reload included).
        folder_parent (`str`, *optional*):
            Where the transfer makes its folder (a new one, never an existing folder's files); the system's temporary
            folder by default. Give a folder on a file system the server shares when it runs on another machine.
    """

    def __init__(self, server_url: str, timeout: float = 300.0, folder_parent: str | None = None):
        if not isinstance(server_url, str) or urlparse(server_url).scheme not in ("http", "https"):
            raise ValueError(f"FileWeightTransfer: server_url = {server_url!r} must be an http:// or https:// URL; "
                             "pass the server's base URL, e.g. 'http://127.0.0.1:8000' (AsyncGRPOConfig."
                             "vllm_server_base_url)")  # fmt: skip
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"FileWeightTransfer: timeout = {timeout!r} must be a positive number of seconds; pass "
                             "e.g. timeout=300")  # fmt: skip
        if folder_parent is not None and not os.path.isdir(folder_parent):
            raise ValueError(f"FileWeightTransfer: folder_parent = {folder_parent!r} must be an existing folder (the "
                             "transfer makes its own folder inside it); create it or leave folder_parent "
                             "unset")  # fmt: skip
        self.server_url = server_url.rstrip("/")
        self.timeout = float(timeout)
        self.folder_parent = folder_parent
        self.folder: str | None = None
        self.syncs = 0  # weight files the server has loaded

    def _post(self, path: str, what: str, **kwargs):
        import requests

        try:
            response = requests.post(f"{self.server_url}{path}", timeout=self.timeout, **kwargs)
        except requests.RequestException as error:
            raise RuntimeError(f"FileWeightTransfer: {what} failed: the vLLM server at {self.server_url} did not "
                               f"answer `POST {path}` ({error})") from error  # fmt: skip
        if response.status_code == 404:
            raise RuntimeError(f"FileWeightTransfer: {what} failed: the vLLM server at {self.server_url} has no "
                               f"`POST {path}`; start it in vLLM's dev mode (`trl vllm-serve` does, or set "
                               "VLLM_SERVER_DEV_MODE=1 for `vllm serve`)")  # fmt: skip
        if response.status_code != 200:
            raise RuntimeError(f"FileWeightTransfer: {what} failed: `POST {path}` answered {response.status_code}: "
                               f"{response.text[:2000]}")  # fmt: skip
        return response

    def init_weight_transfer(self) -> None:
        """Make the transfer's folder (TRL calls this once, when training begins, before the first sync)."""
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="grpo-curriculum-weights-", dir=self.folder_parent)

    def pause(self) -> None:
        """Freeze the server's requests (`POST /pause?mode=keep`, as TRL's own transfer pauses it)."""
        self._post("/pause", "pausing the server", params={"mode": "keep"})

    def send_weights(self, iterator) -> None:
        """Write the `(name, tensor)` pairs of `iterator` to the folder's weight file, have the server load it, and
        reset its prefix cache."""
        from safetensors.torch import save_file

        self.init_weight_transfer()
        tensors = {name: tensor.detach().to("cpu").contiguous() for name, tensor in iterator}
        path = os.path.join(self.folder, WEIGHTS_FILE)
        partial = path + ".partial"  # not `*.safetensors`: the loader never sees a half-written file
        save_file(tensors, partial)
        os.replace(partial, path)
        self._post("/collective_rpc", "loading the weights", json={
            "method": "reload_weights", "kwargs": {"weights_path": self.folder}, "timeout": self.timeout})  # fmt: skip
        answer = self._post("/reset_prefix_cache", "resetting the prefix cache",
                            params={"reset_running_requests": "true"}).json()  # fmt: skip
        if answer.get("success") is False:
            raise RuntimeError(f"FileWeightTransfer: the vLLM server at {self.server_url} could not reset its prefix "
                               "cache after loading the weights (`POST /reset_prefix_cache` answered "
                               f"{answer}); its cached prompts would be computed with the old weights")  # fmt: skip
        self.syncs += 1

    def resume(self) -> None:
        """Let the server generate again (`POST /resume`)."""
        self._post("/resume", "resuming the server")

    def destroy(self) -> None:
        """Remove the transfer's folder (TRL calls this when training ends)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
