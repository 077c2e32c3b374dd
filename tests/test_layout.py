"""The package's layers: the pure core imports no torch, TRL or transformers; no module imports a layer above it. Its
files: docs/layout.md names each of them."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "grpo_curriculum"
# Each layer may import the layers before it in this list (and itself); `config` knows the built-in names without the
# demo assets (config/builtins.py), `demo` holds those assets for the CLI and recipes.
LAYERS = ["core", "training", "config", "demo", "cli"]


def test_the_core_imports_with_torch_trl_and_transformers_hidden():
    code = (
        "import sys\n"
        "for name in ('torch', 'trl', 'transformers', 'datasets', 'accelerate'): sys.modules[name] = None\n"
        "import grpo_curriculum, pkgutil, importlib\n"
        "import grpo_curriculum.core as core\n"
        "for module in pkgutil.iter_modules(core.__path__):\n"
        "    importlib.import_module(f'grpo_curriculum.core.{module.name}')\n"
        "from grpo_curriculum import Adaptive, Stage, StageSchedule, BatchGeometry\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def _imported_layers(path: Path) -> set[str]:
    """The subpackages of grpo_curriculum a module imports (relative or absolute, at top level or inside functions)."""
    here = path.relative_to(PACKAGE).parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - node.level + 1]) + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("grpo_curriculum"):
                base = node.module.split(".")[1:]
            else:
                continue
            found.update([base[0]] if base else [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[1] for alias in node.names
                         if alias.name.startswith("grpo_curriculum.") and alias.name.count("."))  # fmt: skip
    return {layer for layer in found if layer in LAYERS}


@pytest.mark.parametrize("layer", LAYERS)
def test_no_module_imports_a_layer_above_its_own(layer):
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    wrong = {str(path.relative_to(PACKAGE)): sorted(_imported_layers(path) - allowed)
             for path in (PACKAGE / layer).rglob("*.py")}  # fmt: skip
    assert not {path: layers for path, layers in wrong.items() if layers}, f"{layer} may import only {sorted(allowed)}"


def _imports(tree: ast.AST) -> list[ast.ImportFrom | ast.Import]:
    """Every import of a module, at top level or inside functions, except those under `if TYPE_CHECKING:`."""
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit_one(other)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        visit(node)

    visit(tree)
    return found


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, named from `grpo_curriculum/` (`core.adaptive`, `cli.sweep.table`;
    a package by its folder, `cli`). `from . import x` names module `x` when there is one, else the package."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = [part for part in package if part]
        edges = set()
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
                elif (node.module or "").split(".")[0] == "grpo_curriculum":
                    base = node.module.split(".")[1:]
                else:
                    continue
                for alias in node.names:
                    target = ".".join((*base, alias.name))
                    edges.add(target if target in modules else ".".join(base))
            else:
                edges.update(".".join(alias.name.split(".")[1:]) for alias in node.names
                             if alias.name.split(".")[0] == "grpo_curriculum")  # fmt: skip
        graph[name] = {edge for edge in edges if edge in modules and edge != name}
    return graph


def test_no_module_is_on_an_import_circle():
    """In every package of grpo_curriculum (and across them) modules import each other one way: no circle, imports
    inside functions included (`TYPE_CHECKING` ones left out); e.g. `sweep.command` -> `sweep.memory` ->
    `sweep.child`, never back, and `core.policies` -> `core.allocation` -> `core.adaptive`."""
    graph = _import_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for name in graph.get(todo.pop(), ()):
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
        return seen

    circles = sorted(name for name in graph if name in reach(name))
    assert not circles, f"modules on an import circle: {circles}"
    assert "cli.sweep.child" in graph["cli.sweep.memory"] and "cli.sweep.command" not in graph["cli.sweep.memory"]
    assert {"core.adaptive", "core.allocation"} <= graph["core.policies"] and "core.adaptive" in graph["core.allocation"]


def test_only_training_imports_the_trl_seam():
    """`training/_trl/` knows TRL internals; the other layers reach it through training's public modules."""
    reaching = set()
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] == "training":  # training/ and the seam itself
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            pairs = [tuple(parts[i:i + 2]) for parts in (name.split(".") for name in names) for i in range(len(parts))]
            if any(pair[0] == "training" and pair[1:] and pair[1].startswith("_trl") for pair in pairs):
                reaching.add(str(path.relative_to(PACKAGE)))
    assert not reaching, f"import training's public modules instead of the seam: {sorted(reaching)}"


# An entry of docs/layout.md's tree: `├── NAME` or `└── NAME` after 4 columns a level (`│   ` or 4 spaces).
TREE_ENTRY = re.compile(r"^(?P<levels>(?:[│ ]   )*)[├└]── (?P<name>\S+)")


def documented_files(text: str) -> set[str]:
    """
    The files the tree of docs/layout.md (its first code block, rooted at `grpo_curriculum/`) names, as paths inside
    the package: each entry's folder is given by its depth, a name ending in `/` is a folder; lines without an entry
    (descriptions, the lines after the tree) name nothing.
    """
    files, folders = set(), []
    for line in text.split("```")[1].splitlines():
        entry = TREE_ENTRY.match(line)
        if entry is None:
            continue
        depth = len(entry["levels"]) // 4
        assert depth <= len(folders), f"docs/layout.md: {line!r} is deeper than any folder above it"
        del folders[depth:]
        if entry["name"].endswith("/"):
            folders.append(entry["name"].rstrip("/"))
        else:
            files.add("/".join([*folders, entry["name"]]))
    return files


def test_documented_files_reads_the_tree():
    tree = "```\ngrpo_curriculum/\n├── a.py   text, b.py\n│              more\n├── sub/\n│   ├── c.py\n" \
           "│   └── deep/\n│       └── d.json\n└── e.yaml\nother/  f.py\n```\n"  # fmt: skip
    assert documented_files(tree) == {"a.py", "sub/c.py", "sub/deep/d.json", "e.yaml"}


def test_docs_layout_names_every_file_of_the_package():
    """A module (or shipped data file) added, moved or removed without docs/layout.md's tree saying so fails here."""
    documented = documented_files((PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8"))
    files = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*")
             if path.is_file() and "__pycache__" not in path.parts and not path.name.startswith(".")
             and path.suffix != ".pyc"}  # fmt: skip
    assert (sorted(files - documented), sorted(documented - files)) == ([], []), \
        "(files missing from docs/layout.md's tree, entries of it that are no file)"
