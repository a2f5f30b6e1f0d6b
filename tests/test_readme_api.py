"""The Python API examples run as shown: each ```python block of the README's "Python API" section and of
docs/python-api.md, run from the repository root in a fresh interpreter, prints exactly the ```text block
that follows it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

import harness
import harness.api

SECTION = re.compile(r"^## Python API\n(.*?)^## ", re.S | re.M)
EXAMPLE = re.compile(r"```python\n(.*?)```\s*\n\s*prints\s*\n\s*```text\n(.*?)```", re.S)


def _examples() -> list[tuple[str, str]]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = SECTION.search(text)
    assert section, "README.md has no '## Python API' section"
    page = (REPO_ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    return EXAMPLE.findall(section.group(1)) + EXAMPLE.findall(page)


def _marks(code: str) -> list[pytest.MarkDecorator]:
    # An example that runs the pipeline on a real dataset belongs with the slow end-to-end tests.
    return [pytest.mark.slow] if "harness.eval(" in code else []


EXAMPLES = [
    pytest.param(code, printed, marks=_marks(code), id=f"example{n}")
    for n, (code, printed) in enumerate(_examples(), 1)
]


def test_the_section_has_the_four_examples_the_issue_asks_for() -> None:
    code = "".join(block for block, _ in _examples())
    for call in ("harness.evaluate(", "harness.eval(", "harness.compare(", "harness.qa_eval("):
        assert call in code


@pytest.mark.parametrize(("code", "printed"), EXAMPLES)
def test_an_example_prints_what_the_readme_says(
    code: str, printed: str, tmp_path: Path, beir_mirror: Path
) -> None:
    env = {
        **os.environ,
        "HARNESS_BEIR_MIRROR": str(beir_mirror),
        "HARNESS_DATA_DIR": str(tmp_path / "data"),
        "HARNESS_CACHE_DIR": str(tmp_path / "cache"),
        "HARNESS_RESULTS_DIR": str(tmp_path / "results"),
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == printed


def test_every_public_function_and_record_says_what_it_does() -> None:
    for name in harness.api.__all__:
        value = getattr(harness.api, name)
        if callable(value):
            assert (value.__doc__ or "").strip(), f"harness.api.{name} has no docstring"
            assert getattr(harness, name) is value  # re-exported from harness
    for command in harness.api.COMMANDS:
        for entry in getattr(command, "commands", (command,)):
            assert "Options:" in entry.function.__doc__, entry.name
            undocumented = [
                field for field, info in entry.options.model_fields.items() if not info.description
            ]
            assert undocumented == [] or all(
                entry.options.model_fields[field].json_schema_extra["cli"].positional
                for field in undocumented
            ), (entry.name, undocumented)
