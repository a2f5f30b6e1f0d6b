"""A slow, readable trec_eval written straight from its definitions, for differential tests.

Independent of pytrec_eval and of ``harness.evaluation``: it reads the qrels and run *text* the
way trec_eval 10 does (get_qrels.c, get_trec_results.c), ranks each query by score descending
then docno descending (form_res_rels.c), gives every retrieved document trec_eval's level
(its grade; -1 when not in the qrels; -2 when judged with a negative grade) and computes each
measure loop by loop as the m_*.c files do. Only numpy is used, to round scores to C floats
for the trec_eval 9 mode.
"""

from __future__ import annotations

import math
import re

import numpy as np

NONPOOL, UNJUDGED = -1, -2
MIN_GEO_MEAN = 0.00001
C_SPACE = re.compile(r"[ \t\n\v\f\r]+")


def fields_of(line: str) -> list[str]:
    return [field for field in C_SPACE.split(line) if field]


def is_comment(line: str) -> bool:
    return line.lstrip(" \t\n\v\f\r").startswith("#")


def atol(text: str) -> int:
    """C's atol: optional sign, then as many digits as there are."""
    match = re.match(r"[+-]?[0-9]*", text.lstrip(" \t\n\v\f\r"))
    digits = match.group(0)
    return int(digits) if digits.strip("+-") else 0


def strtod(text: str) -> float:
    """C's strtod on a whole token: decimal, hexadecimal (0x1.8p3) or inf/infinity."""
    body = text.lstrip("+-")
    if body[:2].lower() == "0x":
        mantissa = body if "p" in body.lower() else body + "p0"
        value = float.fromhex(mantissa)
        return -value if text.startswith("-") else value
    return float(text)


def read_qrels_text(text: str) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        if not line.strip() or is_comment(line):
            continue
        qid, _iteration, docno, rel = fields_of(line)
        qrels.setdefault(qid, {})[docno] = atol(rel)
    return qrels


def read_run_text(text: str) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if not line.strip() or is_comment(line):
            continue
        qid, _q0, docno, _rank, sim = fields_of(line)[:5]
        run.setdefault(qid, {})[docno] = strtod(sim)
    return run


def as_c_float(value: float) -> float:
    """The value a C ``float`` holds after ``sim = atof(...)`` in trec_eval 9."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def ranking(docs: dict[str, float], float32: bool) -> list[str]:
    """Docnos by sim descending, ties by docno descending (strcmp; Python compares code points,
    which orders UTF-8 bytes the same way)."""
    sims = {docno: as_c_float(sim) if float32 else sim for docno, sim in docs.items()}
    by_docno = sorted(sims, reverse=True)
    return sorted(by_docno, key=lambda docno: sims[docno], reverse=True)  # stable: ties keep docno order


def levels_of(ranked: list[str], judged: dict[str, int]) -> list[int]:
    levels = []
    for docno in ranked:
        if docno not in judged:
            levels.append(NONPOOL)
        elif judged[docno] < 0:
            levels.append(UNJUDGED)
        else:
            levels.append(judged[docno])
    return levels


def num_rel(judged: dict[str, int], level: int) -> int:
    """rel_levels counts only grades >= 0; R sums the levels at or above the relevance level."""
    return sum(1 for grade in judged.values() if grade >= 0 and grade >= level)


def measure(name: str, levels: list[int], judged: dict[str, int], level: int) -> float:
    """One measure of one query; ``name`` is a harness metric name (family[@k])."""
    family, _, cutoff = name.partition("@")
    k = int(cutoff) if cutoff else None
    R = num_rel(judged, level)
    num_ret = len(levels)

    def rel_in_top(depth: int) -> int:
        count = 0
        for i in range(min(depth, num_ret)):
            if levels[i] >= level:
                count += 1
        return count

    def average_precision(depth: int) -> float:
        rel_so_far, total = 0, 0.0
        for i in range(min(depth, num_ret)):
            if levels[i] >= level:
                rel_so_far += 1
                total += rel_so_far / (i + 1)
        if rel_so_far == 0:
            return 0.0
        return total / R if R else math.inf  # C divides by 0.0

    def dcg(gains: list[int], depth: int) -> float:
        total = 0.0
        for i in range(min(depth, len(gains))):
            if gains[i] > 0:
                total += gains[i] / math.log2(i + 2)
        return total

    if family == "p":
        return rel_in_top(k) / k
    if family == "recall":
        return rel_in_top(k) / R if R else 0.0
    if family == "r_cap":
        return rel_in_top(k) / min(k, R) if R else 0.0
    if family == "success":
        return 1.0 if rel_in_top(k) else 0.0
    if family == "map":
        if k is None:
            return average_precision(num_ret)
        return average_precision(k) if R else 0.0
    if family == "gmap":
        return math.log(max(average_precision(num_ret), MIN_GEO_MEAN))
    if family == "mrr":
        for i in range(num_ret):
            if levels[i] >= level:
                return 1.0 / (i + 1) if k is None or i < k else 0.0
        return 0.0
    if family == "rprec":
        depth = min(num_ret, R)
        return rel_in_top(depth) / R if depth else 0.0
    if family == "bpref":
        num_nonrel = sum(1 for grade in judged.values() if 0 <= grade < level)
        nonrel_so_far, total = 0, 0.0
        for value in levels:
            if value in (NONPOOL, UNJUDGED):
                continue
            if 0 <= value < level:
                nonrel_so_far += 1
            elif nonrel_so_far > 0:
                total += 1.0 - min(nonrel_so_far, R) / min(num_nonrel, R)
            else:
                total += 1.0
        return total / R if R else total
    if family in ("dcg", "ndcg"):
        depth = k if k is not None else num_ret
        value = dcg(levels, depth)
        if family == "dcg":
            return value
        ideal_gains = sorted((grade for grade in judged.values() if grade > 0), reverse=True)
        ideal = dcg(ideal_gains, k if k is not None else len(ideal_gains))
        return value / ideal if ideal > 0 else 0.0
    raise ValueError(f"the reference has no measure {name}")


def evaluate(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    names: list[str],
    *,
    level: int = 1,
    complete: bool = False,
    float32: bool = False,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(aggregate, per-query) values as trec_eval prints them with ``-q`` (and ``-c``)."""
    per_query: dict[str, dict[str, float]] = {}
    for qid in sorted(qrels):
        judged = qrels[qid]
        if qid in run and run[qid]:
            levels = levels_of(ranking(run[qid], float32), judged)
            per_query[qid] = {name: measure(name, levels, judged, level) for name in names}
        elif complete:
            per_query[qid] = {name: math.log(MIN_GEO_MEAN) if name == "gmap" else 0.0 for name in names}
    aggregate = {}
    for name in names:
        values = [values[name] for values in per_query.values()]
        mean = math.fsum(values) / len(values) if values else 0.0
        aggregate[name] = math.exp(mean) if name == "gmap" else mean
    return aggregate, per_query
