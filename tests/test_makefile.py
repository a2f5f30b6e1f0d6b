"""`make eval` installs only what evaluating needs (no apt, no browser); `make test` still gets the system packages."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _dry_run(target: str, venv: Path) -> str:
    """What ``make -n TARGET`` would run for a fresh virtualenv at ``venv`` (nothing is installed; make still
    runs the recipe lines that call $(MAKE), whose own commands it only prints, and those touch a stamp in
    ``venv``)."""
    venv.mkdir(exist_ok=True)
    if shutil.which("make") is None:
        pytest.fail("`make` is needed for the Makefile tests (apt-get install make)")
    completed = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(REPO), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_make_eval_installs_the_evaluation_extras_and_no_system_packages(tmp_path: Path) -> None:
    plan = _dry_run("eval", tmp_path / "venv")
    assert 'pip install --quiet -e ".[bm25,onnx]"' in plan
    assert "torch==" in plan  # the CPU wheel pinned first, as for the full install
    assert "apt-get" not in plan and "chromium" not in plan and "dev," not in plan
    assert "harness eval --dataset scifact" in plan


def test_make_test_installs_everything_and_the_system_packages(tmp_path: Path) -> None:
    plan = _dry_run("test", tmp_path / "venv")
    assert 'pip install --quiet -e ".[dev,bm25,qa,onnx,ray,train,multivector,sparse]"' in plan
    assert "apt-get" in plan and "chromium" in plan
    assert 'pytest -m "slow or not slow"' in plan


def test_a_full_install_serves_make_eval_without_reinstalling(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # newer than pyproject.toml: the full install is current
    plan = _dry_run("eval", venv)
    assert "pip install" not in plan and (venv / ".installed-eval").is_file()
