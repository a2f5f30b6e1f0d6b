"""The datasets stage keeps its dependencies one way: no circle, no function-level harness imports."""

from __future__ import annotations

import ast
from pathlib import Path

import harness.datasets

PACKAGE = Path(harness.datasets.__file__).parent
# Each module may import only the modules after it (and harness.core).
ORDER = ["prepare", "download", "verify", "beir", "qrels", "checksums", "registry"]


def _harness_imports(path: Path) -> tuple[set[str], list[str]]:
    """(datasets modules imported at the top level, harness modules imported inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    nested = [
        node.module
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(function)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness")
    ]
    return {name.rsplit(".", 1)[-1] for name in top if name.startswith("harness.datasets.")}, nested


def test_datasets_dependencies_run_one_way():
    assert sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__") == sorted(ORDER)
    for position, name in enumerate(ORDER):
        imported, nested = _harness_imports(PACKAGE / f"{name}.py")
        assert imported <= set(ORDER[position + 1 :]), (name, imported)
        assert nested == [], (name, nested)
