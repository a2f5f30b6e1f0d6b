"""Where the harness finds its configs and keeps its data, cache and results."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def config_dir() -> Path:
    """Transitional: the shipped records folder, or ``HARNESS_CONFIG_DIR`` instead of it."""
    return Path(os.environ.get("HARNESS_CONFIG_DIR") or str(resources.files("harness") / "records"))


def default_data_dir() -> Path:
    """Datasets live here unless ``--data-dir`` says otherwise (env ``HARNESS_DATA_DIR``, default ``data/``)."""
    return Path(os.environ.get("HARNESS_DATA_DIR", "data"))


def default_cache_dir() -> Path:
    """Embeddings, indexes and exported models (env ``HARNESS_CACHE_DIR``, default ``cache/``)."""
    return Path(os.environ.get("HARNESS_CACHE_DIR", "cache"))


def default_results_dir() -> Path:
    """Run files, metrics and provenance (env ``HARNESS_RESULTS_DIR``, default ``results/``)."""
    return Path(os.environ.get("HARNESS_RESULTS_DIR", "results"))
