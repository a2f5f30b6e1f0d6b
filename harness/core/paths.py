"""Where the harness finds its configs and keeps its data, cache and results."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def config_dir() -> Path:
    """The ``configs/`` folder (override with ``HARNESS_CONFIG_DIR``)."""
    return Path(os.environ.get("HARNESS_CONFIG_DIR", REPO_ROOT / "configs"))


def default_data_dir() -> Path:
    """Datasets live here unless ``--data-dir`` says otherwise (env ``HARNESS_DATA_DIR``, default ``data/``)."""
    return Path(os.environ.get("HARNESS_DATA_DIR", "data"))


def default_cache_dir() -> Path:
    """Embeddings, indexes and exported models (env ``HARNESS_CACHE_DIR``, default ``cache/``)."""
    return Path(os.environ.get("HARNESS_CACHE_DIR", "cache"))


def default_results_dir() -> Path:
    """Run files, metrics and provenance (env ``HARNESS_RESULTS_DIR``, default ``results/``)."""
    return Path(os.environ.get("HARNESS_RESULTS_DIR", "results"))
