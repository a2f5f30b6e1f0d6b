"""The scripts use only the public API: ``harness`` / ``harness.api`` (the commands) and
``harness.api.building_blocks`` (the stages' public pieces), so a stage can be reorganised without
breaking a benchmark. Read from the source with ``ast`` (nothing is imported), imports inside functions
included.
"""

from __future__ import annotations

import ast
import inspect
import io
import tokenize
from pathlib import Path

from conftest import REPO_ROOT

import harness.api.building_blocks as building_blocks

PUBLIC_MODULES = ("harness", "harness.api", "harness.api.building_blocks")
SCRIPTS = sorted((REPO_ROOT / "scripts").glob("*.py"))


def _is_module(name: str) -> bool:
    """Whether ``harness.x.y`` names a module or package of the source tree (not a name inside one)."""
    path = REPO_ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def private_imports(source: str) -> list[str]:
    """``line: module`` for every import of a harness module outside ``PUBLIC_MODULES``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            # ``from harness import datasets`` loads the module harness.datasets.
            modules = [node.module]
            modules += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if _is_module(f"{node.module}.{alias.name}")
            ]
        else:
            continue
        found += [
            f"{node.lineno}: {module}"
            for module in modules
            if module.split(".")[0] == "harness" and module not in PUBLIC_MODULES
        ]
    return found


def test_the_scripts_import_only_the_public_api():
    assert SCRIPTS, "no scripts found"
    offenders = {
        path.name: imports
        for path in SCRIPTS
        if (imports := private_imports(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "scripts import harness modules other than " + ", ".join(PUBLIC_MODULES)


def test_the_check_sees_what_it_looks_for():
    source = """
import harness
import harness.api.building_blocks as blocks
from harness.api.building_blocks import score_run
from harness import eval, datasets
import harness.pipeline
def measure():
    from harness.retrieval.dense import search_exact
    from harness.api import run_file_commands
"""
    assert private_imports(source) == [
        "5: harness.datasets",
        "6: harness.pipeline",
        "8: harness.retrieval.dense",
        "9: harness.api.run_file_commands",
    ]


def _commented_imports() -> dict[str, bool]:
    """Each name ``building_blocks`` imports -> whether its import line carries a ``#`` comment."""
    source = inspect.getsource(building_blocks)
    comment_lines = {
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    names: dict[str, bool] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                # The comment sits on the name's own line, or on the statement's when it is one line.
                names[alias.asname or alias.name] = alias.lineno in comment_lines
    return names


def test_building_blocks_exports_public_documented_stage_objects():
    exported = building_blocks.__all__
    assert len(exported) == len(set(exported)), "a name is listed twice in __all__"
    assert [name for name in exported if name.startswith("_")] == [], "private names re-exported"
    imported = _commented_imports()
    assert sorted(imported) == sorted(exported), "every name imported is exported, and only those"
    assert [name for name, commented in imported.items() if not commented] == [], (
        "each building block says what it is in a one-line comment"
    )
    for name in exported:
        value = getattr(building_blocks, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            # Re-exported as the stage defines it: no wrapper written in building_blocks itself.
            assert value.__module__.startswith("harness."), name
            assert value.__module__ != building_blocks.__name__, f"{name} is a wrapper, not a stage's object"
        else:  # a stage's constant, documented by its comment
            assert isinstance(value, int | float | str | tuple | frozenset | dict), name


def test_building_blocks_is_documented_where_it_lives():
    assert building_blocks.__doc__ and "score_run" in building_blocks.__doc__
    assert Path(building_blocks.__file__).parent.name == "api"
