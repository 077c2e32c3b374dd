"""The supported TRL range: stated once, checked when the package is imported (docs/compatibility.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_curriculum.compat import TRL_RANGE, trl_requirement, unsupported_trl_message

ROOT = Path(__file__).resolve().parent.parent

# `import grpo_curriculum` with the installed TRL's metadata reporting `version` (TRL itself is never imported).
FAKE_TRL_VERSION = """
import importlib.metadata, sys
real = importlib.metadata.version
importlib.metadata.version = lambda name: sys.argv[1] if name == "trl" else real(name)
import grpo_curriculum
print("imported", "trl" in sys.modules)
"""


def import_with_trl(version: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", FAKE_TRL_VERSION, version], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=60)  # fmt: skip


def test_pyproject_states_the_supported_range():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.findall(r'"(trl[<>=!~][^"]*)"', text) == [trl_requirement()] == ["trl>=1.14,<1.17"]
    assert TRL_RANGE == ((1, 14), (1, 17))


@pytest.mark.parametrize("version", ["1.14.0", "1.14.2", "1.15.0", "1.16.0", "1.16.1"])
def test_supported_releases_pass(version):
    assert unsupported_trl_message(version) is None


@pytest.mark.parametrize("version", ["1.13.0", "1.17.0", "1.17.0.dev0", "2.0.0", "0.29.1", "unknown"])
def test_unsupported_releases_get_one_line_naming_the_range(version):
    message = unsupported_trl_message(version)
    assert "\n" not in message
    assert f"supports trl>=1.14,<1.17 (TRL 1.14, 1.15 and 1.16); the installed TRL is {version}." in message
    assert "pip install 'trl>=1.14,<1.17'" in message


def test_importing_the_package_on_an_unsupported_trl_fails_at_once_with_one_line_and_exit_2():
    """It printed a 9-line traceback (for every command, `check` included) and exited 1."""
    done = import_with_trl("1.13.0")
    assert done.returncode == 2 and "imported" not in done.stdout
    assert done.stderr.strip().splitlines() == [f"grpo-curriculum: error: {unsupported_trl_message('1.13.0')}"]
    for value in ("1", "true", "YES", "on"):  # at one's own risk: a warning (only `1` was accepted)
        allowed = import_with_trl("1.17.0", GRPO_CURRICULUM_ANY_TRL=value)
        assert allowed.returncode == 0 and allowed.stdout.split() == ["imported", "False"], allowed.stderr
        assert unsupported_trl_message("1.17.0") in allowed.stderr
    assert import_with_trl("1.17.0", GRPO_CURRICULUM_ANY_TRL="0").returncode == 2
    script = ("import importlib.metadata as m, sys; m.version = lambda n: '1.13.0'\n"
              "try:\n import grpo_curriculum\nexcept ImportError as e: print('caught', type(e).__mro__[1].__name__)\n"
              "raise KeyError('other')")
    caught = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)  # fmt: skip
    assert caught.stdout.split() == ["caught", "ImportError"]  # an ImportError a script can catch
    assert caught.returncode == 1 and caught.stderr.splitlines()[-1] == "KeyError: 'other'"  # others untouched


@pytest.mark.parametrize("version, accelerator, refused", [
    ("1.15.0", False, True), ("1.15.2", False, True), ("1.15.0", True, False),
    ("1.14.2", False, False), ("1.16.0", False, False), ("1.16.0", True, False),
])
def test_trl_1_15_on_a_cpu_is_refused_before_training_naming_1_14_and_1_16(version, accelerator, refused):
    from grpo_curriculum.compat import cpu_trl_problem

    why = cpu_trl_problem(version, accelerator)
    assert (why is not None) == refused
    if refused:
        assert why.startswith(f"TRL {version} cannot train on a CPU") and "1.14 and 1.16" in why
    supported = import_with_trl("1.15.0")
    assert supported.returncode == 0 and supported.stdout.split() == ["imported", "False"], supported.stderr


def test_an_interactive_session_survives_an_import_on_an_unsupported_trl():
    """The one-line hook exits with status 2 for a script; a REPL must go on (it would have been killed)."""
    done = subprocess.run([sys.executable, "-i", "-c", FAKE_TRL_VERSION, "1.13.0"], input="print('still here')\n",
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONSTARTUP": ""})  # fmt: skip
    assert "still here" in done.stdout and "grpo-curriculum: error: grpo-curriculum supports" in done.stderr
