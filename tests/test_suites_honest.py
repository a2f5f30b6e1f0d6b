"""Suites mean what they say: every model a suite names exists, every number is checked against its
source (or shown as unverified), nothing-reproduced is not a pass, and reports show no absolute paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT
from test_reproduce import MIXED, StoredRuns, options, results_dir, write_suite  # noqa: F401

from harness.cli import main
from harness.core.errors import HarnessError
from harness.core.fileio import read_json
from harness.models.model_registry import find_record
from harness.reproduction.references import load_references
from harness.reproduction.suites import (
    MISS,
    OK,
    SKIPPED,
    format_markdown,
    format_text,
    load_suite,
    run_suite,
    select_conditions,
)
from harness.retrieval.systems import find_system

SHIPPED_SUITES = sorted((REPO_ROOT / "harness" / "records" / "suites").glob("*.y*ml"))
RECORDS = REPO_ROOT / "harness" / "records"


@pytest.mark.parametrize("path", SHIPPED_SUITES, ids=lambda path: path.stem)
def test_every_shipped_suite_names_existing_models_and_published_cells(path):
    # Loading resolves every reference cell (a condition without one is an error naming the suite).
    suite = load_suite(str(path))
    assert suite.conditions, path
    for condition in suite.conditions:
        where = f"{path.name}: {condition.model} on {condition.dataset}"
        assert condition.expected and condition.source, where
        if condition.skip:
            # A published cell the harness cannot run (no record for DeepCT, SPARTA...; licensed data):
            # it must say why.
            assert len(condition.skip) > 20, where
            continue
        assert find_record(condition.model) or find_system(condition.model), f"{where}: no such model"


def test_pyserini_bm25_runs_only_what_bm25s_can_reproduce():
    suite = load_suite("pyserini-bm25")
    assert {condition.model for condition in suite.conditions} == {"bm25-flat"}
    assert find_record("bm25-flat").name == "bm25-lucene"
    assert "multifield" in suite.description  # says what it leaves out, and why
    assert len(suite.conditions) == 7


def _shared_copy(shared_dir: Path, file: str) -> Path | None:
    """``results/ORG__MODEL/REVISION/TASK.json`` -> its flat copy in ../shared/reference/mteb-results
    (``ORG__MODEL_REVISION_TASK.json``; SOURCES.md there shortens bm25s's revision 0_1_10 to 0_1)."""
    folder = shared_dir / "reference" / "mteb-results"
    _, model, revision, task = Path(file).parts
    exact = folder / f"{model}_{revision}_{task}"
    if exact.is_file():
        return exact
    found = sorted(folder.glob(f"{model}_*_{task}"))
    return found[0] if len(found) == 1 else None


def test_verified_mteb_numbers_equal_their_result_files(shared_dir):
    checked = 0
    for reference in load_references():
        file = reference.entry.file
        if reference.source.id != "mteb-results" or not file:
            continue
        copy = _shared_copy(shared_dir, file)
        if copy is None:
            continue
        payload = read_json(copy)
        scores = payload["scores"]["test"][0]
        for metric, value in reference.metrics.items():
            name = metric.replace("@", "_at_")
            assert value == scores[name], f"{reference.describe()}: {metric} {value} != {scores[name]}"
        assert reference.entry.mteb_version in (None, payload["mteb_version"]), reference.describe()
        assert reference.verified, f"{reference.describe()} equals its file: mark it verified"
        checked += 1
    assert checked >= 10  # all-MiniLM-L6-v2 and bm25s cells of the shared copy


def test_offline_smoke_compares_against_a_verified_cited_file(capsys):
    smoke = load_suite("offline-smoke")
    (condition,) = smoke.conditions
    assert condition.verified and "(unverified)" not in condition.source
    assert "SciFact.json@f4cc6c8" in condition.source and "mteb 1.12.75" in condition.source


def test_every_shipped_reference_is_verified_or_says_why_not():
    for reference in load_references():
        assert reference.verified or reference.note, reference.describe()


INTERNAL_WORDS = re.compile(r"\b(brief|briefs|issue|issues|session|sessions|lead|helper|helpers)\b", re.I)


def test_records_have_no_project_internal_wording():
    found = []
    for path in sorted(RECORDS.rglob("*.y*ml")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if INTERNAL_WORDS.search(line):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------------- nothing reproduced


SKIPPED_ONLY = [{"model": "facebook/contriever", "dataset": "scifact", "reference": "pyserini-2cr"}]


def test_a_run_with_no_ok_and_no_miss_is_nothing_reproduced(results_dir, tmp_path):  # noqa: F811
    suite = load_suite(str(write_suite(tmp_path / "unreachable.yaml", SKIPPED_ONLY)))
    report = run_suite(suite, options(results_dir), run_eval=StoredRuns(results_dir))
    assert (report.count(OK), report.count(MISS), report.count(SKIPPED)) == (0, 0, 2)
    assert report.nothing_reproduced and report.exit_code == 1
    assert "suite unreachable: NOTHING REPRODUCED (0 OK, 0 MISS, 2 SKIPPED)" in format_text(report)
    allowed = run_suite(suite, options(results_dir), run_eval=StoredRuns(results_dir), allow_skipped=True)
    assert allowed.exit_code == 0 and "accepted by --allow-skipped" in format_text(allowed)


def test_allow_skipped_also_overrides_fail_on_skip_but_never_a_miss(results_dir, tmp_path):  # noqa: F811
    strict = load_suite(str(write_suite(tmp_path / "strict.yaml", [MIXED[0], MIXED[2]], fail_on_skip=True)))
    runs = StoredRuns(results_dir)
    assert run_suite(strict, options(results_dir), run_eval=runs).exit_code == 1
    assert run_suite(strict, options(results_dir), run_eval=runs, allow_skipped=True).exit_code == 0
    mixed = load_suite(str(write_suite(tmp_path / "mixed.yaml", MIXED)))
    assert run_suite(mixed, options(results_dir), run_eval=runs, allow_skipped=True).exit_code == 1


def test_cli_exits_1_when_nothing_was_reproduced_unless_allowed(
    results_dir,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    import harness.pipeline

    monkeypatch.setattr(harness.pipeline, "run_eval", StoredRuns(results_dir))
    suite = str(write_suite(tmp_path / "none.yaml", SKIPPED_ONLY))
    out_dir = str(tmp_path / "out")
    assert main(["reproduce", suite, "--results-dir", out_dir]) == 1
    assert "NOTHING REPRODUCED" in capsys.readouterr().out
    assert main(["reproduce", suite, "--results-dir", out_dir, "--allow-skipped"]) == 0
    assert "accepted by --allow-skipped" in capsys.readouterr().out


# ----------------------------------------------------------------------------- subsets and --list


def test_models_and_datasets_keep_a_subset_of_the_conditions():
    suite = load_suite("contriever")
    both = select_conditions(suite, ["contriever"], ["scifact", "quora"])
    assert [(c.model, c.dataset) for c in both.conditions] == [
        ("facebook/contriever", "scifact"),
        ("facebook/contriever", "quora"),
    ]
    by_dataset = select_conditions(suite, None, ["nfcorpus"])
    assert {c.model for c in by_dataset.conditions} == {
        "facebook/contriever",
        "facebook/contriever-msmarco",
    }
    assert select_conditions(suite) is suite
    with pytest.raises(HarnessError, match=r"no condition for dataset 'msmarco'.*its datasets: arguana"):
        select_conditions(suite, None, ["msmarco"])
    with pytest.raises(HarnessError, match=r"no condition for model 'bm25'.*its models: facebook/contriever"):
        select_conditions(suite, ["bm25"], None)


def test_cli_runs_only_the_selected_cells(results_dir, tmp_path, monkeypatch, capsys):  # noqa: F811
    import harness.pipeline

    runs = StoredRuns(results_dir)
    monkeypatch.setattr(harness.pipeline, "run_eval", runs)
    suite = str(write_suite(tmp_path / "subset.yaml", MIXED))
    code = main(["reproduce", suite, "--models", "finetuned-model", "--results-dir", str(tmp_path / "o")])
    assert code == 0 and [model for _, model, _ in runs.calls] == ["finetuned-model"]
    assert "suite subset: passed (2 OK, 0 MISS, 0 SKIPPED)" in capsys.readouterr().out


def test_list_shows_every_suite_with_description_and_counts(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[2:] if line.strip()}
    for path in SHIPPED_SUITES:
        assert path.stem in rows, path
    smoke = load_suite("offline-smoke")
    assert rows["offline-smoke"] == ["1", "2"] and smoke.description.split()[0] in out
    assert rows["pyserini-bm25"] == ["7", "14"]


def test_no_suite_and_no_list_is_one_error_line(capsys):
    assert main(["reproduce"]) == 2
    err = capsys.readouterr().err
    assert "name a suite" in err and "--list" in err and err.count("\n") == 1


# ------------------------------------------------------------------------- what the report shows


def test_markdown_holds_no_absolute_path(results_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suites").mkdir()
    suite = load_suite(str(write_suite(tmp_path / "suites" / "rel.yaml", MIXED)))
    text = format_markdown(run_suite(suite, options(results_dir), run_eval=StoredRuns(results_dir)))
    assert "Suite file: `suites/rel.yaml`" in text and str(tmp_path) not in text
    shipped = format_markdown(
        run_suite(load_suite("offline-smoke"), options(results_dir), run_eval=StoredRuns(results_dir))
    )
    assert "Suite file: `harness/records/suites/offline-smoke.yaml`" in shipped
    assert str(REPO_ROOT) not in shipped


def test_mteb_folder_references_are_shown_relative(results_dir, tmp_path, shared_dir, monkeypatch):  # noqa: F811
    monkeypatch.chdir(shared_dir / "reference")
    suite = load_suite("offline-smoke", shared_dir / "reference" / "mteb-results")
    assert suite.conditions[0].source.startswith("mteb-results: mteb-results/sentence-transformers__")
    report = run_suite(suite, options(results_dir), run_eval=StoredRuns(results_dir))
    assert str(shared_dir) not in format_markdown(report)


def test_an_unverified_number_is_shown_as_such(results_dir, tmp_path, monkeypatch):  # noqa: F811
    user = tmp_path / "user"
    user.mkdir()
    entry = {
        "model": "finetuned-model",
        "dataset": "scifact",
        "source": "mine",
        "preferred": True,
        "verified": False,
        "note": "copied from a slide",
        "metrics": {"ndcg@10": 1.0},
    }
    source = {"title": "talk", "url": "https://example.org/talk", "conditions": {"split": "test"}}
    (user / "references.yaml").write_text(yaml.safe_dump({"sources": {"mine": source}, "entries": [entry]}))
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(user))
    suite = load_suite(
        str(write_suite(tmp_path / "slide.yaml", [{"model": "finetuned-model", "dataset": "scifact"}]))
    )
    report = run_suite(suite, options(results_dir), run_eval=StoredRuns(results_dir))
    assert [check.status for check in report.checks] == [OK]
    text, markdown = format_text(report), format_markdown(report)
    assert "| OK | mine: https://example.org/talk (unverified) |" in markdown
    assert (
        "compared against an unverified number" in text
        and "compared against an unverified number" in markdown
    )


def test_recorded_model_settings_are_schema_checked(tmp_path):
    references = tmp_path / "references.yaml"
    source = {"url": "https://example.org", "models": {"bm25": {"stated_by": "a paper", "k_1": 1.2}}}
    references.write_text(yaml.safe_dump({"sources": {"s": source}}))
    with pytest.raises(HarnessError, match=r"unknown key 'sources.s.models.bm25.k_1'"):
        load_references(references)
    source["models"]["bm25"] = {"params": {"k1": 1.2}}
    references.write_text(yaml.safe_dump({"sources": {"s": source}}))
    with pytest.raises(HarnessError, match=r"stated_by"):
        load_references(references)
