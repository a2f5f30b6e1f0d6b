"""Shared fixtures: where the real BEIR data lives (``../shared`` beside the checkout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.paths import REPO_ROOT


def _shared_dir() -> Path:
    return Path(os.environ.get("HARNESS_SHARED_DIR", REPO_ROOT.parent / "shared")).resolve()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = _shared_dir()
    # A missing shared folder is a broken checkout, not a reason to skip: fail loudly.
    assert (path / "data" / "beir" / "scifact" / "corpus.jsonl").is_file(), f"shared data not found at {path}"
    return path


@pytest.fixture(scope="session")
def beir_mirror(shared_dir: Path) -> Path:
    """The complete datasets, laid out as an offline mirror."""
    return shared_dir / "data" / "beir"


@pytest.fixture(scope="session")
def beir_partial(shared_dir: Path) -> Path:
    """Datasets with queries and qrels but no corpus."""
    return shared_dir / "data" / "beir-partial"
