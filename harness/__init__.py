"""BEIR retriever benchmarking harness: exact metrics, cached embeddings, reproducible runs.

Every command is a function of the public API, re-exported here: ``harness.evaluate(...)``,
``harness.eval(...)``, ``harness.compare(...)``, ... (see :mod:`harness.api`). They load on first use, so
importing a stage module (as encoding workers do) stays light.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``harness.X`` is ``harness.api.X`` for every public name of the API."""
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # A submodule not imported yet (``from harness import pipeline``): loading the API for it would
        # import the module that asked, half-initialised.
        return importlib.import_module(f"{__name__}.{name}")
    api = importlib.import_module("harness.api")
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *importlib.import_module("harness.api").__all__])
