"""``--no-progress`` hides the libraries' own bars (transformers' weight loading, huggingface_hub's downloads)
too, and gives each library's setting back afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_no_progress_hides_the_libraries_own_bars_and_gives_their_setting_back() -> None:
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as transformers_logging

    from harness.encoding.loaded_model import library_progress_bars

    def bars() -> tuple[bool, bool]:
        return transformers_logging.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled()

    assert bars() == (True, True)
    with pytest.raises(RuntimeError), library_progress_bars(shown=False):
        assert bars() == (False, False)
        raise RuntimeError("inside")
    assert bars() == (True, True)
    with library_progress_bars(shown=True):
        assert bars() == (True, True)


def test_eval_with_no_progress_runs_the_model_with_the_libraries_bars_off(
    tiny_st_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers.utils import logging as transformers_logging

    from harness import pipeline

    folder = tmp_path / "set"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "dna"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "dna"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    seen: list[bool] = []
    dense_run = pipeline.dense_run

    def spying(request, timer):
        seen.append(transformers_logging.is_progress_bar_enabled())
        return dense_run(request, timer)

    monkeypatch.setattr(pipeline, "dense_run", spying)
    for no_progress in (True, False):
        options = pipeline.EvalOptions(
            no_progress=no_progress,
            runtime="torch",
            force=True,
            cache_dir=tmp_path / "c",
            results_dir=tmp_path / "r",
        )
        pipeline.run_eval(str(folder), str(tiny_st_dir), options)
    assert seen == [False, True] and transformers_logging.is_progress_bar_enabled()
