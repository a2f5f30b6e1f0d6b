"""The orders other tools give documents of equal score: what trec_eval's docid rule is replaced by.

trec_eval (and every harness stage) ranks by score descending, then docid descending. Two tools emulated by
:mod:`harness.evaluation.tool_protocols` rank ties otherwise:

* sentence-transformers' ``InformationRetrievalEvaluator`` sorts its hits by ``(-score, corpus_id)``:
  docid *ascending* (:func:`docid_ascending_order`);
* ranx sorts each query of a ``Run`` with numba's ``np.argsort`` of the negated scores, whose default is
  numba's quicksort (``numba/misc/quicksort.py``): not stable, so tied documents come out in an order set by
  the partitioning of the run's file order (:func:`ranx_order`). ``Run.make_comparable`` sorts the sorted
  run once more, which moves ties again.

Only the ties differ: each order is score descending first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# numba's quicksort switches to insertion sort below this many items (SMALL_QUICKSORT).
_SMALL_QUICKSORT = 15


def docid_ascending_order(docids: Sequence[str], scores: np.ndarray) -> list[int]:
    """Positions in the order ``sorted(hits, key=lambda hit: (-hit.score, hit.corpus_id))`` gives."""
    values = scores.tolist()
    return sorted(range(len(docids)), key=lambda i: (-values[i], docids[i]))


def _insertion_sort(keys: list[float], order: list[int], low: int, high: int) -> None:
    """numba's ``insertion_sort`` of ``order[low:high + 1]`` by ``keys`` (inclusive bounds)."""
    for i in range(low + 1, high + 1):
        item = order[i]
        value = keys[item]
        j = i
        while j > low and value < keys[order[j - 1]]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = item


def _partition(keys: list[float], order: list[int], low: int, high: int) -> int:
    """numba's ``partition``: median of three as pivot, stashed at ``high`` while Hoare's scan runs."""
    mid = (low + high) >> 1
    if keys[order[mid]] < keys[order[low]]:
        order[low], order[mid] = order[mid], order[low]
    if keys[order[high]] < keys[order[mid]]:
        order[high], order[mid] = order[mid], order[high]
    if keys[order[mid]] < keys[order[low]]:
        order[low], order[mid] = order[mid], order[low]
    pivot = keys[order[mid]]
    order[high], order[mid] = order[mid], order[high]
    i, j = low, high - 1
    while True:
        while i < high and keys[order[i]] < pivot:
            i += 1
        while j >= low and pivot < keys[order[j]]:
            j -= 1
        if i >= j:
            break
        order[i], order[j] = order[j], order[i]
        i += 1
        j -= 1
    order[i], order[high] = order[high], order[i]
    return i


def numba_quicksort_argsort(keys: list[float]) -> list[int]:
    """The permutation numba's ``np.argsort(keys)`` (kind ``quicksort``) returns, for keys without NaN.

    A transcription of ``run_quicksort1`` with ``is_argsort=True``: partitions of at least
    ``_SMALL_QUICKSORT`` items are split, the larger half pushed on the stack, the rest insertion-sorted.
    """
    order = list(range(len(keys)))
    if len(keys) < 2:
        return order
    stack = [(0, len(keys) - 1)]
    while stack:
        low, high = stack.pop()
        while high - low >= _SMALL_QUICKSORT:
            i = _partition(keys, order, low, high)
            if high - i > i - low:
                if high > i:
                    stack.append((i + 1, high))
                high = i - 1
            else:
                if i > low:
                    stack.append((low, i - 1))
                low = i + 1
        _insertion_sort(keys, order, low, high)
    return order


def ranx_order(scores: np.ndarray, sorts: int = 1) -> list[int]:
    """Positions (of the run's file order) in the order ranx ranks them after ``sorts`` passes of its
    ``sort_dict_by_value`` (``argsort`` of ``-score``); a query without ties has the one score order."""
    values = scores.tolist()
    if len(set(values)) == len(values):
        return np.argsort(-scores, kind="stable").tolist()
    order = list(range(len(values)))
    for _ in range(sorts):
        permutation = numba_quicksort_argsort([-values[i] for i in order])
        order = [order[i] for i in permutation]
    return order
