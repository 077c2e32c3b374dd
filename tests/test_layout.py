"""The package's layers: the pure core imports no torch, TRL or transformers; no module imports a layer above it; the
TRL seam (`training/_trl/`) and the trainer hold to their contract (`CurriculumHost`). Its files: docs/layout.md names
each of them."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import textwrap
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



SEAM = PACKAGE / "training" / "_trl"


def _protocol_members(protocol) -> tuple[set[str], set[str]]:
    """A `typing.Protocol`'s (methods, attributes): the names its class body defines and annotates."""
    methods = {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("__")}
    return methods, set(protocol.__annotations__)


def _mixin_attributes(mixin) -> set[str]:
    """The attributes `mixin` sets: those of its class body (and its bases') and every `self.NAME = ...` in them."""
    found = set()
    for cls in mixin.__mro__[:-1]:
        found |= {name for name in vars(cls) if not name.startswith("__")}
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(cls)))):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            found |= {target.attr for target in targets if isinstance(target, ast.Attribute)
                      and isinstance(target.value, ast.Name) and target.value.id == "self"}  # fmt: skip
    return found


def test_the_trainer_mixin_implements_the_seams_contract():
    """`CurriculumHost` (training/_trl/contract.py), the Protocol the hooks call the trainer through: the mixin of the
    synchronous trainers has each of its methods, with the same parameters, and sets each of its attributes."""
    from grpo_curriculum.training._trl.contract import CurriculumHost
    from grpo_curriculum.training.trainer import CurriculumTrainerMixin

    methods, attributes = _protocol_members(CurriculumHost)
    assert {"_curriculum_round_start", "_curriculum_save", "_curriculum_load"} <= methods and "_round" in attributes
    missing = sorted(name for name in methods if not callable(getattr(CurriculumTrainerMixin, name, None)))
    assert not missing, f"CurriculumTrainerMixin lacks the contract's methods {missing}"
    differ = {name: (list(inspect.signature(getattr(CurriculumTrainerMixin, name)).parameters),
                     list(inspect.signature(getattr(CurriculumHost, name)).parameters))
              for name in methods}  # fmt: skip
    differ = {name: pair for name, pair in differ.items() if pair[0] != pair[1]}
    assert not differ, f"(the mixin's parameters, the contract's) differ: {differ}"
    unset = sorted(attributes - _mixin_attributes(CurriculumTrainerMixin))
    assert not unset, f"CurriculumTrainerMixin never sets the contract's attributes {unset}"


def test_the_seam_calls_no_curriculum_event_outside_its_contract():
    """Every `_curriculum_*` name the seam's modules use is a member of `CurriculumHost`, and so is every other name
    the seam reads that only the trainer mixin defines (`_round`, `trainer_kind`, `_curriculum`)."""
    from trl import GRPOTrainer, RLOOTrainer

    from grpo_curriculum.training._trl.contract import CurriculumHost
    from grpo_curriculum.training.trainer import CurriculumTrainerMixin

    contract = set().union(*_protocol_members(CurriculumHost))
    own = _mixin_attributes(CurriculumTrainerMixin) - set(dir(GRPOTrainer)) - set(dir(RLOOTrainer))  # not TRL's API
    used = {}
    for path in sorted(SEAM.glob("*.py")):
        if path.name == "contract.py":
            continue
        names = {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}
        outside = sorted(name for name in names - contract
                         if name.startswith("_curriculum_") or name in own)  # fmt: skip
        if outside:
            used[path.name] = outside
    assert not used, f"the seam uses trainer-mixin names its contract (CurriculumHost) does not declare: {used}"
    hooks = {node.attr for node in ast.walk(ast.parse((SEAM / "hooks.py").read_text()))
             if isinstance(node, ast.Attribute) and node.attr.startswith("_curriculum_")}  # fmt: skip
    assert hooks == {name for name in contract if name.startswith("_curriculum_")}, "an event the hooks never call"


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
