"""
The vLLM server TRL's asynchronous trainer generates from (`trl.experimental.async_grpo`, TRL 1.16): waited for as the
trainer waits for it, so that `grpo-curriculum train` can say it is not there before any model loads (the trainer itself
waits only at its first step, after the model has loaded, and ends in a `TimeoutError` traceback).
"""

from __future__ import annotations


def vllm_server_unready(url: str, timeout: float) -> str | None:
    """
    Wait for the vLLM server at `url` with TRL's own client (`VLLMClient.wait_for_server_ready`: `GET /health` every 2
    s until it answers 200, for up to `timeout` seconds, `AsyncGRPOConfig.vllm_server_timeout`). Returns TRL's message
    when it never answered, else `None`.
    """
    from accelerate import PartialState
    from trl.experimental.async_grpo.vllm_client import VLLMClient

    PartialState()  # TRL's client logs through accelerate's logger, which needs the state (the trainer makes it later)
    try:
        VLLMClient(url, timeout).wait_for_server_ready()
    except TimeoutError as error:
        return str(error)
    return None
