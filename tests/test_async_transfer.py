"""
`FileWeightTransfer` (grpo_curriculum/training/_trl/async_transfer.py, docs/async.md "Weight transfer without NCCL")
without a server: what it sends, in which order, the file it writes, its folder's life and its errors. The real
engine loading the file: tests/test_async_transfer_real.py (`make test-vllm`).
"""

from __future__ import annotations

import os

import pytest
import requests
import torch
from safetensors.torch import load_file

from grpo_curriculum.training._trl.async_transfer import WEIGHTS_FILE, FileWeightTransfer


class _Answer:
    def __init__(self, status=200, body=None):
        self.status_code, self.body, self.text = status, body or {}, str(body)

    def json(self):
        return self.body


@pytest.fixture
def server(monkeypatch):
    """A stand-in for the server's HTTP API: records each POST (path, query, JSON body, what the folder held)."""
    calls, answers = [], {}

    def post(url, timeout=None, params=None, json=None):
        path = url.removeprefix("http://server:8000")
        folder = (json or {}).get("kwargs", {}).get("weights_path")
        held = load_file(os.path.join(folder, WEIGHTS_FILE)) if folder else None
        calls.append((path, params, json, held))
        return answers.get(path, _Answer(200, {"success": True} if path == "/reset_prefix_cache" else None))

    monkeypatch.setattr(requests, "post", post)
    return calls, answers


def test_a_sync_pauses_writes_reloads_resets_and_resumes_then_destroy_removes_the_folder(server):
    calls, _ = server
    transfer = FileWeightTransfer("http://server:8000/")
    transfer.init_weight_transfer()
    folder = transfer.folder
    assert os.path.isdir(folder) and os.listdir(folder) == []
    weights = {"model.embed_tokens.weight": torch.randn(5, 3), "lm_head.weight": torch.randn(5, 3).t()}  # strided
    transfer.pause()
    transfer.send_weights(iter(weights.items()))
    transfer.resume()
    assert [c[0] for c in calls] == ["/pause", "/collective_rpc", "/reset_prefix_cache", "/resume"]
    assert calls[0][1] == {"mode": "keep"} and calls[2][1] == {"reset_running_requests": "true"}
    rpc = calls[1][2]
    assert rpc["method"] == "reload_weights" and rpc["kwargs"] == {"weights_path": folder}
    held = calls[1][3]  # the file was complete when the server was asked to read it
    assert held.keys() == weights.keys() and all(torch.equal(held[k], weights[k]) for k in weights)
    assert sorted(os.listdir(folder)) == [WEIGHTS_FILE] and transfer.syncs == 1  # no partial file left
    transfer.send_weights(iter({k: v + 1 for k, v in weights.items()}.items()))  # the next sync overwrites it
    assert torch.equal(load_file(os.path.join(folder, WEIGHTS_FILE))["lm_head.weight"], weights["lm_head.weight"] + 1)
    transfer.destroy()
    assert not os.path.exists(folder) and transfer.folder is None
    transfer.destroy()  # twice: nothing to do


def test_the_folder_is_made_inside_folder_parent(server, tmp_path):
    (tmp_path / "user.txt").write_text("mine")
    transfer = FileWeightTransfer("http://server:8000", folder_parent=str(tmp_path))
    transfer.init_weight_transfer()
    assert os.path.dirname(transfer.folder) == str(tmp_path)
    transfer.send_weights(iter({"w": torch.ones(2)}.items()))
    transfer.destroy()
    assert [p.name for p in tmp_path.iterdir()] == ["user.txt"] and (tmp_path / "user.txt").read_text() == "mine"


def test_a_server_without_dev_mode_is_named_with_the_fix(server):
    _, answers = server
    answers["/collective_rpc"] = _Answer(404, {"detail": "Not Found"})
    transfer = FileWeightTransfer("http://server:8000")
    with pytest.raises(RuntimeError, match=r"loading the weights failed.*no `POST /collective_rpc`.*DEV_MODE=1"):
        transfer.send_weights(iter({"w": torch.ones(2)}.items()))
    transfer.destroy()


def test_a_failed_reload_or_cache_reset_is_an_error(server):
    _, answers = server
    transfer = FileWeightTransfer("http://server:8000")
    answers["/collective_rpc"] = _Answer(500, {"error": "Worker failed with error 'size mismatch'"})
    with pytest.raises(RuntimeError, match=r"loading the weights failed.*answered 500.*size mismatch"):
        transfer.send_weights(iter({"w": torch.ones(2)}.items()))
    answers.pop("/collective_rpc")
    answers["/reset_prefix_cache"] = _Answer(200, {"success": False})
    with pytest.raises(RuntimeError, match="could not reset its prefix cache"):
        transfer.send_weights(iter({"w": torch.ones(2)}.items()))
    transfer.destroy()


def test_no_answer_names_the_server(monkeypatch):
    def post(url, **kwargs):
        raise requests.ConnectionError("refused")

    monkeypatch.setattr(requests, "post", post)
    with pytest.raises(RuntimeError, match=r"pausing the server failed: the vLLM server at http://server:8000 did"):
        FileWeightTransfer("http://server:8000").pause()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"server_url": "server:8000"}, r"server_url = 'server:8000' must be an http:// or https:// URL; pass"),
    ({"server_url": None}, r"server_url = None must be an http"),
    ({"server_url": "http://s", "timeout": 0}, r"timeout = 0 must be a positive number of seconds; pass e.g."),
    ({"server_url": "http://s", "timeout": True}, r"timeout = True must be a positive"),
    ({"server_url": "http://s", "folder_parent": "/no/such/folder"},
     r"folder_parent = '/no/such/folder' must be an existing folder .*create it or leave folder_parent unset"),
])  # fmt: skip
def test_bad_arguments_are_named_with_the_rule_and_a_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FileWeightTransfer(**kwargs)
