"""What produced a result: library versions, hardware, device and the wall time of each stage."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from importlib import metadata
from typing import Any

from harness import __version__

# Libraries whose version can move a number; each present one is recorded with every result.
VERSIONED_PACKAGES = (
    "torch",
    "transformers",
    "sentence-transformers",
    "faiss-cpu",
    "faiss-gpu-cu12",
    "numpy",
    "pytrec-eval-terrier",
    "datasets",
    "bm25s",
    "PyStemmer",
    "onnxruntime",
    "ray",
)


class StageTimer:
    """Wall time of each named stage, for provenance and the console table."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 4)


def library_versions() -> dict[str, str]:
    """The harness, Python and every installed package of ``VERSIONED_PACKAGES``."""
    versions = {"harness": __version__, "python": platform.python_version()}
    for package in VERSIONED_PACKAGES:
        with suppress(metadata.PackageNotFoundError):
            versions[package] = metadata.version(package)
    return versions


def hardware_info() -> dict[str, Any]:
    """CPU, memory and (when torch is loaded) GPUs and torch's thread count."""
    hardware: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
    }
    with suppress(ValueError, OSError, AttributeError):
        hardware["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    if "torch" in sys.modules:  # never import torch just to describe it (BM25 runs do not load it)
        import torch

        if torch.cuda.is_available():
            hardware["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        hardware["torch_threads"] = torch.get_num_threads()
    return hardware


def environment_info(device: str | None) -> dict[str, Any]:
    """Library versions and hardware, recorded with every result."""
    return {"versions": library_versions(), "device": device, "hardware": hardware_info()}
