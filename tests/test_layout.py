"""The shape of the package: stages depend downward only, no import circles, a thin CLI.

Read from the source with ``ast`` (nothing is imported), so a new module is checked the day it lands.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "harness"

# The data flow, bottom to top: a module may import its own layer and the layers below it, never above.
LAYERS = [
    "core",
    "provenance",
    "datasets",
    "models",
    "encoding",
    "retrieval",
    "evaluation",
    "results",
    "qa",
    "pipeline",
    "reproduction",  # runs the pipeline for a suite
    "reports",  # shows results beside the published references
    "experiments",  # runs an experiment file's steps, each handed to it as a command of the api
    "api",  # the public functions and options records of every command
    "cli",
]
# Modules every command shares; any other cli module is a command and imports no other command.
CLI_SHARED = {"harness.cli", "harness.cli.common"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The harness modules an import statement loads (``from harness.a import b`` may load ``harness.a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "harness"]
    if node.level or not node.module or node.module.split(".")[0] != "harness":
        return []
    names = [node.module]
    names += [
        f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in MODULES
    ]
    return names


def _imports(path: Path) -> tuple[set[str], list[int]]:
    """``(harness modules imported at module level, line numbers of imports inside functions)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[str] = set()
    nested: list[int] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue  # annotations only: never executed
            if isinstance(child, ast.Import | ast.ImportFrom) and (names := _imported(child)):
                if in_function:
                    nested.append(child.lineno)
                else:
                    top.update(name for name in names if name in MODULES)
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, inside)

    visit(tree, False)
    return top, nested


GRAPH = {name: _imports(path)[0] for name, path in MODULES.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_belongs_to_a_layer():
    unplaced = [
        name for name in MODULES if name != "harness" and name != "harness.__main__" and _layer(name) is None
    ]
    assert unplaced == [], f"modules outside the known stages (add them to LAYERS): {unplaced}"


def test_no_function_level_imports_of_harness_modules():
    # Function-level imports only delay heavy third-party libraries; harness modules import at the top.
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line}" for path in MODULES.values() for line in _imports(path)[1]
    ]
    assert offenders == []


def test_stages_only_import_downward():
    upward = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if _layer(module) is not None and _layer(target) is not None and _layer(target) > _layer(module)
    ]
    assert upward == []


def test_no_import_circles():
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles: list[list[str]] = []

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH.get(module, ())):
            if target == module or target.startswith(f"{module}."):
                continue  # a package importing its own submodule is not a circle
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target] if target in path else [module, target])
            elif state.get(target) is None:
                walk(target, [*path, target])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            walk(module, [module])
    assert cycles == []


def test_no_command_imports_another_command():
    commands = {name for name in MODULES if name.startswith("harness.cli.") and name not in CLI_SHARED}
    crossing = [
        f"{command} -> {target}"
        for command in sorted(commands)
        for target in sorted(GRAPH[command])
        if target in commands and target != command
    ]
    assert crossing == []


def test_the_checks_see_what_they_look_for(tmp_path):
    """The analysis itself: a nested import, an upward import and a circle are all found."""
    source = "import os\nfrom harness.core import errors\n\ndef late():\n    from harness.cli import main\n"
    path = tmp_path / "example.py"
    path.write_text(source, encoding="utf-8")
    top, nested = _imports(path)
    assert top == {"harness.core", "harness.core.errors"} and nested == [5]
    assert _layer("harness.cli.common") > _layer("harness.pipeline") > _layer("harness.core.fileio")


def test_a_module_that_imports_a_stage_from_the_package_loads_first():
    """``from harness import pipeline`` in a module imported before anything else must not load the API
    (the package's lazy re-exports) and with it the importing module, half-initialised."""
    importers = sorted(
        path.relative_to(REPO_ROOT).with_suffix("").as_posix().replace("/", ".")
        for path in (REPO_ROOT / "harness").rglob("*.py")
        if re.search(r"^from harness import (?!__version__)", path.read_text(encoding="utf-8"), re.M)
    )
    assert importers, "the check needs a module that does it"
    for module in importers:
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, cwd=REPO_ROOT
        )
        assert done.returncode == 0, f"{module}: {done.stderr.strip().splitlines()[-1]}"
