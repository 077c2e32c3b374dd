"""The wheel `pip install grpo-curriculum` gets: the demo recipes, matplotlib as a dependency, an SPDX license."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_carries_the_demo_recipes_and_builds_without_deprecation_warnings(tmp_path):
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info next to pyproject.toml
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "runs", "wandb", "*.egg-info", "__pycache__", ".pytest_cache"))  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-v",
         "-w", str(tmp_path / "wheel"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "deprecated" not in output.lower(), [line for line in output.splitlines() if "eprecat" in line]
    (wheel,) = (tmp_path / "wheel").glob("grpo_curriculum-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    shipped = {f"grpo_curriculum/recipes/{p.name}" for p in (ROOT / "grpo_curriculum" / "recipes").glob("*.yaml")}
    assert "grpo_curriculum/recipes/demo.yaml" in shipped and shipped <= names
    assert "grpo_curriculum/config/trl_fields.json" in names
    headers = metadata.split("\n\n", 1)[0].splitlines()
    assert "License-Expression: Apache-2.0" in headers
    assert any(line.startswith("Requires-Dist: matplotlib") and "extra ==" not in line for line in headers)
