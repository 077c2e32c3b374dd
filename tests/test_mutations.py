"""
The mutation runner itself (benchmarks/mutations.py, issue 55): it reports a kill only where the mutant's tests failed
on assertions after passing unmutated. Each case runs the real runner (real copies, real pytest subprocesses) on a
repository of two small files made for it, so a case takes about a second.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from mutations import MUTATIONS, Mutation, Runner  # noqa: E402

CODE = "def add(a, b):\n    return a + b\n\n\ndef unused(a):\n    return a * 2\n"
TESTS = {
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "test_red.py": "def test_always_red():\n    assert 1 == 2\n",
    "test_fixture.py": ("import pytest\n\nfrom calc import add\n\n\n@pytest.fixture\ndef three():\n"
                        "    assert add(1, 2) == 3\n    return 3\n\n\ndef test_uses_it(three):\n    pass\n"),
    "test_slow.py": "import time\n\nfrom calc import add\n\n\ndef test_waits():\n    time.sleep(add(0, 0))\n",
}


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "calc.py").write_text(CODE)
    tests = tmp_path / "tests"
    tests.mkdir()
    for name, text in TESTS.items():
        (tests / name).write_text(text)
    return tmp_path


def _run(repo, tests, old="return a + b", new="return a - b", timeout=60):
    runner = Runner(repo, timeout=timeout)
    try:
        return runner.run(Mutation("m", "calc.py", old, new, tests, "a mutant"))
    finally:
        runner.close()


def test_a_failing_assertion_on_the_mutant_is_a_kill_with_its_message(repo):
    result, _, tail = _run(repo, ("tests/test_calc.py",))
    assert result == "killed" and "assert -1 == 3" in tail


def test_a_mutant_the_tests_do_not_see_survives(repo):
    assert _run(repo, ("tests/test_calc.py",), old="return a * 2", new="return a * 3")[0] == "survived"


@pytest.mark.parametrize(("tests", "said"), [
    (("tests/test_nosuch.py",), "broken selection (usage error unmutated)"),  # pytest: file or directory not found
    (("tests/test_red.py",), "broken selection (tests failed unmutated)"),
    (("tests/test_calc.py", "-k", "nosuch"), "broken selection (no tests collected unmutated)"),
])
def test_a_selection_that_does_not_pass_unmutated_is_reported_broken_and_the_mutant_not_run(repo, tests, said):
    result, _, _ = _run(repo, tests)
    assert result == said


def test_an_error_is_not_a_kill(repo):
    """The mutant breaks a fixture: pytest exits 1 ("tests failed") with an error and no failed assertion."""
    assert _run(repo, ("tests/test_fixture.py",))[0] == "not killed: tests failed, 1 errors"


def test_a_timeout_is_not_a_kill(repo):
    result, seconds, _ = _run(repo, ("tests/test_slow.py",), new="return 60", timeout=10)
    assert result == "not killed: timeout" and seconds < 30


@pytest.mark.parametrize("xdist", [True, False])
def test_n_0_is_passed_only_where_pytest_xdist_is_installed(monkeypatch, xdist):
    """Without pytest-xdist, `-n 0` is a usage error (exit 4) on every run: the old runner read each as a kill."""
    import importlib.util

    import mutations

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (find_spec(name, *a) if xdist else None)
                        if name == "xdist" else find_spec(name, *a))
    command = mutations.pytest_command(("tests/test_calc.py",), "report.xml")
    assert ("-n" in command) == xdist and command[-1] == "tests/test_calc.py"


def test_a_mutant_whose_text_is_gone_is_stale(repo):
    assert _run(repo, ("tests/test_calc.py",), old="return a + c")[0] == "stale"


def test_a_selection_runs_unmutated_once_for_all_its_mutants(repo, monkeypatch):
    import mutations

    calls = []
    real = mutations.run_selection
    monkeypatch.setattr(mutations, "run_selection", lambda copy, tests, timeout: calls.append(copy) or real(
        copy, tests, timeout))
    runner = Runner(repo, timeout=60)
    try:
        for new in ("return a - b", "return b - a"):
            assert runner.run(Mutation(new, "calc.py", "return a + b", new, ("tests/test_calc.py",), ""))[0] == \
                "killed"
    finally:
        runner.close()
    assert len(calls) == 3 and len(set(calls)) == 3  # one clean copy (once), then a copy for each mutant


def test_every_mutation_names_a_file_its_text_and_its_test_files():
    root = Path(__file__).resolve().parent.parent
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)
    for mutation in MUTATIONS:
        assert (root / mutation.path).read_text().count(mutation.old) == 1, mutation.name
        assert mutation.old != mutation.new, mutation.name
        files = [t.split("::")[0] for t in mutation.tests if t.startswith("tests/")]
        assert files and all((root / f).is_file() for f in files), mutation.name
