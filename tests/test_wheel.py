"""The installable wheel: built from the tracked files, installed in a fresh venv, run away from the repo.

It must carry its records (dataset registry, model records) and reproduce MTEB's BM25 scifact numbers
with nothing from the checkout on the path and no mirror configured.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO_ROOT


def _run(command: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, f"{command}\n{completed.stdout}\n{completed.stderr}"
    return completed


def _copy_tracked_files(destination: Path) -> Path:
    """The repository as git knows it (no venv, caches or results), so the wheel holds only shipped files."""
    names = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO_ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, names):
        source = REPO_ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def _clean_env(tmp: Path) -> dict[str, str]:
    """No checkout on the path, no mirror, no user records, no network; data and cache in ``tmp``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "HARNESS_BEIR_MIRROR", "HARNESS_CONFIG_DIR", "VIRTUAL_ENV")
    }
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HARNESS_DATA_DIR=str(tmp / "data"),
        HARNESS_CACHE_DIR=str(tmp / "cache"),
        OMP_NUM_THREADS="1",
    )
    return env


@pytest.mark.slow
def test_wheel_installs_and_reproduces_bm25_outside_the_repo(tmp_path: Path, shared_dir: Path):
    env = _clean_env(tmp_path)
    copy = _copy_tracked_files(tmp_path / "src")
    dist = tmp_path / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(copy),
        ],
        cwd=tmp_path,
        env=env,
    )
    (wheel,) = dist.glob("*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=tmp_path,
            env=env,
        ).stdout.strip()
    )
    # Dependencies come from the test venv (appended after the new venv's own packages): no download.
    (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path, env=env)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    origin = _run([str(python), "-c", "import harness; print(harness.__file__)"], cwd=elsewhere, env=env)
    assert Path(origin.stdout.strip()).is_relative_to(venv), origin.stdout
    assert not Path(origin.stdout.strip()).is_relative_to(REPO_ROOT)

    harness = str(venv / "bin" / "harness")
    listing = _run([harness, "data", "list"], cwd=elsewhere, env=env).stdout
    assert re.search(r"^scifact\b", listing, re.MULTILINE), listing

    # A copy, so nothing the harness may write beside a dataset lands in the shared folder.
    dataset = shutil.copytree(shared_dir / "data" / "beir" / "scifact", tmp_path / "scifact")
    command = [
        harness,
        "eval",
        "--dataset",
        str(dataset),
        "--model",
        "bm25",
        "--results-dir",
        str(tmp_path / "results"),
    ]
    out = _run(command, cwd=elsewhere, env=env).stdout
    row = next(re.split(r"\s{2,}", line) for line in out.splitlines() if line.startswith("scifact"))
    # MTEB's published BM25 (bm25s) scifact numbers: nDCG@10 0.68736, Recall@100 0.91267; Judged@10 between.
    assert row[1:6] == ["bm25", "bm25s", "0.6874", "0.09", "0.9127"], out
