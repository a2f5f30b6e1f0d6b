"""Log lines print above the progress bars as ``note:`` / ``warning:`` lines; no library chatter by default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A child process, as the CLI runs: configure, start a progress bar, log from ours and from the libraries.
SCRIPT = """
import logging, sys, time
from harness.cli import configure_logging
configure_logging(verbose={verbose})
import bm25s  # sets its own logger to DEBUG on import
from tqdm import tqdm
bar = tqdm(total=4, desc="encoding", file=sys.stderr, mininterval=0)
bar.update(1)
logging.getLogger("harness.encoding").info("cached 3 shards")
logging.getLogger("bm25s").debug("tokenizing corpus")
logging.getLogger("transformers.modeling_utils").info("loading weights")
logging.getLogger("faiss").warning("index is not trained")
logging.getLogger("harness.pipeline").debug("pair started")
bar.update(3)
bar.close()
"""


def _stderr(verbose: bool) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(verbose=verbose)], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stderr


def _visible_lines(stream: str) -> list[str]:
    """What a terminal shows: each line as left by its last carriage return (a bar redraws with \\r)."""
    return [line.split("\r")[-1] for line in stream.split("\n")]


def test_default_shows_our_notes_and_library_warnings_above_the_bar() -> None:
    err = _stderr(verbose=False)
    lines = _visible_lines(err)
    # Each log line is a line of its own: the bar was cleared before it, not written through.
    assert "note: cached 3 shards" in lines and "warning: index is not trained" in lines
    for leaked in (
        "tokenizing corpus",
        "loading weights",
        "pair started",
        "DEBUG",
        "INFO",
        "harness.encoding",
    ):
        assert leaked not in err
    assert any("encoding" in line and "4/4" in line for line in lines)  # the bar itself still draws


def test_verbose_adds_debug_and_the_libraries_lines_with_their_names() -> None:
    lines = _visible_lines(_stderr(verbose=True))
    assert "debug: bm25s: tokenizing corpus" in lines
    assert "note: transformers.modeling_utils: loading weights" in lines
    assert "debug: harness.pipeline: pair started" in lines
    assert "note: harness.encoding: cached 3 shards" in lines


def test_a_command_logs_in_the_house_style(tmp_path: Path) -> None:
    qrels, run = tmp_path / "qrels.tsv", tmp_path / "run.trec"
    qrels.write_text("q1 0 d1 1\n")
    run.write_text("q1 Q0 x1 1 2.0 t\nq1 Q0 x2 2 1.0 t\n")  # no document judged: the evaluator warns
    command = "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    completed = subprocess.run(
        [sys.executable, "-c", command, "evaluate", str(qrels), str(run), "--metrics", "ndcg@10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    warnings = [line for line in completed.stderr.splitlines() if "none of the run's documents" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: none of the run's documents is judged")
    assert "WARNING" not in completed.stderr and "harness.evaluation" not in completed.stderr
