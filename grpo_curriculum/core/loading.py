"""
Reading YAML recipe files without trusting them.

Every way a file can be wrong becomes a [`Problem`] naming the file, never a traceback or a hang: a file that does not
exist or is not a regular file, one over [`MAX_BYTES`], bytes that are not UTF-8, YAML syntax errors (with line and
column), integers too long to read, nesting deeper than libyaml's limit, aliases that refer to themselves or expand to
more than [`MAX_VALUES`] values (an "alias bomb" of a few hundred bytes expands to billions), and duplicate keys.
PyYAML's libyaml parser is used when it is built in (about three times faster than the pure-Python one on a 1 MB file).
"""

from __future__ import annotations

import os
import re

import yaml

from .errors import MISSING, CurriculumError, Problem, list_text, shorten_text

MAX_BYTES = 64 * 1024
"""Largest recipe file read, in bytes (the shipped recipes are about 1 KB)."""

MAX_VALUES = 10_000
"""Most YAML values (scalars, lists, mappings) a file may hold once its aliases are expanded."""

_MAX_DIGITS = 40  # longer integers are refused while parsing (they are no count, and Python cannot print 4300+ digits)


def _loader_class(base: type) -> type:
    """`base` (a safe loader) reading `1e-5` as a float (as YAML 1.2 and TRL's CLI do), refusing very long integers and
    recording duplicate keys."""

    class Loader(base):
        def __init__(self, stream, name: str):
            super().__init__(stream)
            self.name = name
            self.duplicates: dict[str, list[int]] = {}  # key -> the lines it appears on

        def construct_mapping(self, node, deep=False):
            lines: dict[str, list[int]] = {}
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode):
                    lines.setdefault(key.value, []).append(key.start_mark.line + 1)
            self.duplicates.update({key: found for key, found in lines.items() if len(found) > 1})
            return super().construct_mapping(node, deep)

        def construct_yaml_int(self, node):
            if len(node.value) > _MAX_DIGITS:
                raise CurriculumError([Problem(f"{self.name}:{node.start_mark.line + 1}", node.value,
                                               f"is an integer of {len(node.value)} characters, more than the "
                                               f"{_MAX_DIGITS} read", "write a smaller number")])
            return super().construct_yaml_int(node)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return Loader


_Loader = _loader_class(getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's parser when PyYAML has it


def _size_problem(root: yaml.Node, name: str) -> Problem | None:
    """A problem when `root` holds more than [`MAX_VALUES`] values once every alias is expanded, or an alias inside the
    value it refers to (which would expand forever)."""
    sizes: dict[int, int] = {}  # id(node) -> values it holds, expanded (at most MAX_VALUES + 1)
    stack, open_nodes = [(root, False)], set()
    while stack:
        node, finished = stack.pop()
        children = [] if isinstance(node, yaml.ScalarNode) else (
            [v for pair in node.value for v in pair] if isinstance(node, yaml.MappingNode) else node.value)
        if finished:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(1 + sum(sizes[id(child)] for child in children), MAX_VALUES + 1)
        elif id(node) in open_nodes:
            return Problem(name, MISSING, "holds a YAML alias (`*name`) inside the value it refers to, which would "
                           "expand forever", "write the values out")
        elif id(node) not in sizes:
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children)
    if sizes[id(root)] <= MAX_VALUES:
        return None
    if len(sizes) > MAX_VALUES:
        return Problem(name, MISSING, f"holds more than {MAX_VALUES} values (the shipped recipes hold fewer than 100)",
                       "keep only settings in the recipe")
    return Problem(name, MISSING, f"expands to more than {MAX_VALUES} values through its YAML aliases (`*name`)",
                   "write the values out, or use fewer aliases")


def _yaml_problem(error: yaml.YAMLError, text: str, name: str) -> Problem:
    lines = text.splitlines()
    if isinstance(error, yaml.reader.ReaderError):  # a control character: likely a binary file
        line = text.count("\n", 0, error.position)
        code = error.character if isinstance(error.character, int) else ord(error.character)
        return Problem(f"{name}:{line + 1}", shorten_text(lines[line].strip()) if line < len(lines) else MISSING,
                       f"is not valid YAML at line {line + 1}: holds the character #x{code:04x} ({error.reason})",
                       "remove it (is this a text file?)")
    mark, started = getattr(error, "problem_mark", None), getattr(error, "context_mark", None)
    mark = mark or started
    if mark is None:
        return Problem(name, MISSING, f"is not valid YAML: {error}", "fix the syntax")
    line_text = shorten_text(lines[mark.line].strip()) if mark.line < len(lines) else "<end of file>"
    rule = f"is not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {error.problem or error}"
    if started is not None and started is not mark and getattr(error, "context", None):
        rule += f" ({error.context} that starts at line {started.line + 1}, column {started.column + 1})"
    fix = "fix the syntax there (indentation, a missing `:`, an unclosed bracket or quote)"
    return Problem(f"{name}:{mark.line + 1}", line_text, rule, fix)


def parse_yaml(text: str, name: str) -> tuple[object, list[Problem]]:
    """
    Parse YAML text within the limits.

    Args:
        text (`str`): The YAML.
        name (`str`): What it is (a path), for messages.

    Returns:
        `tuple[object, list[Problem]]`: The data, and one problem for each duplicated key.

    Raises:
        [`CurriculumError`]: for a syntax error, an over-long integer, too deep nesting, or aliases that refer to
        themselves or expand to more than [`MAX_VALUES`] values.
    """
    try:
        loader = _Loader(text, name)  # (the pure-Python reader checks the characters here)
    except yaml.YAMLError as error:
        raise CurriculumError([_yaml_problem(error, text, name)]) from None
    try:
        node = loader.get_single_node()
        problem = None if node is None else _size_problem(node, name)
        if problem is not None:
            raise CurriculumError([problem])
        data = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as error:
        raise CurriculumError([_yaml_problem(error, text, name)]) from None
    except RecursionError:  # only without libyaml, which stops at 1000 levels itself
        raise CurriculumError([Problem(name, MISSING, "nests lists or mappings too deeply to read",
                                       "flatten the file")]) from None
    finally:
        loader.dispose()
    problems = [Problem(key, MISSING, f"is given more than once (lines {list_text(lines)}); YAML keeps only "
                        "the last one", "keep a single entry") for key, lines in loader.duplicates.items()]
    return data, problems


SHIPPED_RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes")
"""The folder of the recipes shipped in the package (the repository's `recipes/` links them)."""


def shipped_recipes() -> dict[str, str]:
    """The recipes shipped in the package: name (file name without `.yaml`) -> path, sorted by name."""
    names = sorted(name for name in os.listdir(SHIPPED_RECIPES) if name.endswith(".yaml"))
    return {name.removesuffix(".yaml"): os.path.join(SHIPPED_RECIPES, name) for name in names}


def find_recipe(path: str) -> str:
    """
    `path` when something is there, else the shipped recipe it names (`adaptive-demo` or `adaptive-demo.yaml`, see
    [`shipped_recipes`]), else `path` (reading it then says what is wrong).
    """
    path = os.fspath(path)
    if os.path.lexists(path) or os.sep in path or "/" in path:
        return path
    return shipped_recipes().get(path.removesuffix(".yaml"), path)


def read_yaml(path: str) -> tuple[object, list[Problem]]:
    """
    Read a YAML file within the limits.

    Args:
        path (`str`): The file.

    Returns:
        `tuple[object, list[Problem]]`: Its data (never `None`), and one problem for each duplicated key.

    Raises:
        [`CurriculumError`]: naming the file: missing, not a regular file, larger than [`MAX_BYTES`], not UTF-8,
        empty, or not valid YAML (see [`parse_yaml`]).
    """
    context, shipped = f"recipe {path}", shipped_recipes()
    stem = os.path.splitext(os.path.basename(path))[0]
    fix = (f"use the copy shipped with grpo-curriculum by its name, `{stem}` (e.g. `grpo-curriculum demo --recipe "
           f"{stem}`)" if stem in shipped else "pass the path of a recipe YAML file, or the name of a shipped recipe: "
           f"{', '.join(shipped)} (`grpo-curriculum recipes` lists them)")
    if not os.path.isfile(path):
        rule = ("is a directory, not a recipe file" if os.path.isdir(path) else
                "is not a regular file" if os.path.exists(path) else "does not exist")
        if not os.path.isabs(path) and not os.path.exists(path):
            rule += f" (a relative path starts from the current directory, {os.getcwd()})"
        raise CurriculumError([Problem(path, path, rule, fix)], context)
    with open(path, "rb") as file:
        raw = file.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise CurriculumError([Problem(path, MISSING, f"is larger than {MAX_BYTES} bytes, the most a recipe may hold "
                                       "(the shipped recipes are about 1 KB)", "keep only settings in the recipe")],
                              context)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        rule = (f"is not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}, line {line}): a recipe is "
                "a YAML text file")
        raise CurriculumError([Problem(path, MISSING, rule, "save it as UTF-8 text, or pass the recipe's path")],
                              context) from None
    try:
        data, problems = parse_yaml(text, path)
    except CurriculumError as error:
        raise CurriculumError(error.problems, context) from None
    if data is None:
        raise CurriculumError([Problem(path, "", "is empty: a recipe is a YAML mapping of `key: value` settings",
                                       "start from recipes/demo.yaml")], context)
    return data, problems
