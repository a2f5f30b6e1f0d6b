"""Memory and time of the bootstrap interval: the chunked one (harness) vs ``scipy.stats.bootstrap``.

For each number of resamples, both compute the 95% percentile interval of the mean of the same 300
per-query values with the same seed and batch size, each in its own subprocess so peak resident
memory (ru_maxrss) is per run; the printed intervals must be equal. The harness keeps one chunk of
draws plus one float per resample; scipy also keeps every chunk's statistics in a list and copies
them. ``--n-resamples`` is capped at 1,000,000, so the harness column is the bound.

Run by hand (not a test): ``.venv/bin/python scripts/bench_significance.py [--resamples 10000 1000000]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np
from scipy import stats  # imported before the baseline: only the resampling is measured

from harness.api.building_blocks import RESAMPLE_BATCH_ELEMENTS, bootstrap_interval


def child(which: str, resamples: int) -> None:
    """One interval in this (fresh) process; prints its seconds, extra peak memory and bounds as JSON."""
    values = np.random.default_rng(0).random(300)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    if which == "harness":
        low, high = bootstrap_interval(values, n_resamples=resamples, seed=1)
    else:  # the harness's chunk size, so both draw the same resamples
        batch = RESAMPLE_BATCH_ELEMENTS // len(values)
        ci = stats.bootstrap(
            (values,),
            np.mean,
            n_resamples=resamples,
            method="percentile",
            batch=batch,
            rng=np.random.default_rng(1),
        ).confidence_interval
        low, high = float(ci.low), float(ci.high)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "extra_mb": (peak - baseline) / 1024, "interval": [low, high]}))


def measure(which: str, resamples: int) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", which, str(resamples)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--child", nargs=2, metavar=("WHICH", "RESAMPLES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    print(
        f"{'resamples':>10}  {'harness MB':>10}  {'scipy MB':>9}  {'harness s':>9}  {'scipy s':>8}  same interval"
    )
    for resamples in args.resamples:
        ours, theirs = measure("harness", resamples), measure("scipy", resamples)
        print(
            f"{resamples:>10,}  {ours['extra_mb']:>10.1f}  {theirs['extra_mb']:>9.1f}  "
            f"{ours['seconds']:>9.2f}  {theirs['seconds']:>8.2f}  {ours['interval'] == theirs['interval']}"
        )


if __name__ == "__main__":
    main()
