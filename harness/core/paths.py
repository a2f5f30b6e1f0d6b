"""Where the harness keeps its data, cache and results (records: harness.core.config)."""

from __future__ import annotations

import os
from pathlib import Path

CHECKSUMS_DIR = "checksums"


def default_data_dir() -> Path:
    """Datasets live here unless ``--data-dir`` says otherwise (env ``HARNESS_DATA_DIR``, default ``data/``)."""
    return Path(os.environ.get("HARNESS_DATA_DIR", "data"))


def default_cache_dir() -> Path:
    """Embeddings, indexes and exported models (env ``HARNESS_CACHE_DIR``, default ``cache/``)."""
    return Path(os.environ.get("HARNESS_CACHE_DIR", "cache"))


def default_results_dir() -> Path:
    """Run files, metrics and provenance (env ``HARNESS_RESULTS_DIR``, default ``results/``)."""
    return Path(os.environ.get("HARNESS_RESULTS_DIR", "results"))


def checksums_dir(cache_dir: str | Path | None = None) -> Path:
    """Remembered checksums and scans of dataset files: ``<cache>/checksums/``, one file per dataset folder.

    They live in the harness's own cache, never beside the data: a dataset folder (a user's own, a shared
    read-only mirror) is only ever read.
    """
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / CHECKSUMS_DIR
