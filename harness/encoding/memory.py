"""Giving memory back between the steps of a run, and reading the process's peak resident memory.

Building an ONNX graph, fusing it and timing runtimes against each other allocate far more than the
encoding after them needs (MiniLM: the fusion alone briefly holds several copies of the 90 MB graph).
Python frees those objects, but cyclic garbage waits for the collector, and glibc keeps freed heap
pages (in one arena per thread) rather than returning them to the OS: without ``malloc_trim`` a first
run stays as large as its largest step for the rest of its life.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where there is none (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)


def trim_heap() -> None:
    """Return the heap pages that are free to the OS (glibc only; a few milliseconds)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def give_memory_back() -> None:
    """Collect cyclic garbage, then return the heap pages that are free to the OS (glibc only)."""
    gc.collect()
    trim_heap()


def resident_mib() -> float | None:
    """The process's resident memory now, in MiB (None where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_resident_mib() -> float | None:
    """The process's peak resident memory so far, in MiB (None where ``resource`` is missing: Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux
