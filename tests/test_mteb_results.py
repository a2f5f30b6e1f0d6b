"""MTEB results both ways: a results folder read as reference cells, a harness result written as MTEB's files.

Checked on MTEB's own published files (``../shared/reference/mteb-results``: all-MiniLM-L6-v2 and the
bm25s baseline on seven BEIR tasks) and with mteb installed (its ``TaskResult`` and ``ResultCache`` load
what ``harness export --format mteb`` writes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from fault_snapshot import refused_by_cli
from report_fixtures import make_result, real_fingerprint, real_qrels, synthetic_run

from harness.api import diff, export, reproduce, table
from harness.cli import main
from harness.core.errors import HarnessError
from harness.datasets.dataset_registry import dataset_registry
from harness.datasets.mteb_tasks import harness_metric, load_mteb_tasks, mteb_metric
from harness.evaluation.metrics import PIPELINE_KS
from harness.reproduction.mteb_results import read_mteb_results
from harness.reproduction.reference_diff import reference_protocol
from harness.reproduction.references import MTEB_SOURCE, read_references
from harness.results.result_store import load_result

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_REVISION = "8b3219a92973c328a8e22fadcfa821b5dc75636a"
TASKS = ("ArguAna", "FiQA2018", "NFCorpus", "QuoraRetrieval", "SCIDOCS", "SciFact", "TRECCOVID")
# The families MTEB's files and a default `harness eval` share, at the cut-offs both compute.
SHARED_METRICS = [f"{family}@{k}" for family in ("ndcg", "recall", "p", "map", "mrr") for k in PIPELINE_KS]
# Equal at the precision MTEB prints: half a unit of its 5th decimal.
PRINTED = 0.000005


@pytest.fixture(scope="session")
def mteb_files(shared_dir: Path) -> Path:
    folder = shared_dir / "reference" / "mteb-results"
    assert len(list(folder.glob("*.json"))) == 14, "the shared MTEB result files are missing"
    return folder


def _published(mteb_files: Path, prefix: str, task: str) -> dict:
    return json.loads(next(mteb_files.glob(f"{prefix}*_{task}.json")).read_text())


def _cells(references) -> dict[tuple[str, str], dict[str, float]]:
    return {(ref.model, ref.dataset): ref.metrics for ref in references}


def task_file(path: Path, task: str, scores: dict, *, split: str = "test", **fields) -> Path:
    """An mteb 1.11+ task result holding ``scores`` for ``split``."""
    payload = {
        "dataset_revision": fields.pop("dataset_revision", "rev-1"),
        "task_name": task,
        "mteb_version": fields.pop("mteb_version", "1.12.75"),
        "scores": {split: [{"hf_subset": "default", "languages": ["eng-Latn"], "main_score": 0.0, **scores}]},
        "evaluation_time": 1.0,
        **fields,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


# ------------------------------------------------------------------------------------- the table


def test_the_mapping_names_mteb_tasks_their_splits_and_harness_datasets():
    import mteb

    tasks = load_mteb_tasks()
    registry = dataset_registry()
    for dataset, record in tasks.datasets.items():
        metadata = mteb.get_task(record.task).metadata
        assert dataset in registry, dataset
        assert record.split in metadata.eval_splits, (dataset, metadata.eval_splits)
        assert metadata.main_score == record.main_score, record.task
        assert record.ignore_identical_ids == mteb.get_task(record.task).ignore_identical_ids, record.task
        assert tasks.dataset_of(record.task) == dataset
    assert tasks.datasets["msmarco"].split == "dev"
    assert tasks.groups["cqadupstack"].members == sorted(
        name for name in registry if name.startswith("cqadupstack/")
    )
    assert {tasks.task_of(name).task for name in ("scifact", "fiqa", "webis-touche2020", "quora")} == {
        "SciFact",
        "FiQA2018",
        "Touche2020",
        "QuoraRetrieval",
    }


@pytest.mark.parametrize(
    ("key", "metric"),
    [
        ("ndcg_at_10", "ndcg@10"),
        ("NDCG@10", "ndcg@10"),
        ("precision_at_5", "p@5"),
        ("P@5", "p@5"),
        ("Recall@100", "recall@100"),
        ("map_at_1000", "map@1000"),
        ("MRR@10", "mrr@10"),
        ("hit_rate_at_10", "success@10"),
        ("nauc_ndcg_at_10_diff1", None),
        ("main_score", None),
    ],
)
def test_metric_names_both_ways(key, metric):
    assert harness_metric(key) == metric
    if metric is not None and "_at_" in key:
        assert mteb_metric(metric) == key


# ------------------------------------------------------------------------------------ import


def test_mtebs_published_files_become_cells_with_their_provenance(mteb_files):
    read = read_references(mteb_files)
    assert read.notes == []
    cells = {(ref.model, ref.dataset): ref for ref in read.references}
    datasets = {"arguana", "fiqa", "nfcorpus", "quora", "scidocs", "scifact", "trec-covid"}
    assert set(cells) == {(model, name) for model in (MINILM, "bm25") for name in datasets}
    for (model, dataset), ref in cells.items():
        prefix = "sentence-transformers__" if model == MINILM else "mteb__"
        published = _published(mteb_files, prefix, load_mteb_tasks().task_of(dataset).task)
        assert ref.source.id == MTEB_SOURCE and ref.split == "test" and ref.preferred
        assert ref.entry.mteb_version == published["mteb_version"]
        assert ref.entry.dataset_revision == published["dataset_revision"]
        assert ref.metrics["ndcg@10"] == published["scores"]["test"][0]["ndcg_at_10"]
        assert ref.metrics["p@1000"] == published["scores"]["test"][0]["precision_at_1000"]
        assert len(ref.metrics) == 35  # 5 families x 7 cut-offs; nAUC and the rest are not ranking metrics
        assert f"mteb {published['mteb_version']}" in ref.describe()
        assert published["dataset_revision"] in ref.describe()
    assert cells[(MINILM, "scifact")].entry.model_revision == MINILM_REVISION


def _repository(mteb_files: Path, root: Path, *, meta: bool) -> Path:
    """The shared flat files laid out as the results repository: results/<org>__<model>/<revision>/<Task>.json."""
    for path in mteb_files.glob("*.json"):
        task = json.loads(path.read_text())["task_name"]
        model, revision = (
            ("sentence-transformers__all-MiniLM-L6-v2", MINILM_REVISION)
            if path.name.startswith("sentence")
            else ("mteb__baseline-bm25s", "0_1_10")
        )
        target = root / "results" / model / revision / f"{task}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
        if meta:
            name = model.replace("__", "/")
            (target.parent / "model_meta.json").write_text(json.dumps({"name": name, "revision": revision}))
    return root


@pytest.mark.parametrize("meta", [True, False])
def test_every_level_of_the_repository_layout_gives_the_same_cells(mteb_files, tmp_path, meta):
    flat = _cells(read_references(mteb_files).references)
    root = _repository(mteb_files, tmp_path, meta=meta)
    results = root / "results"
    minilm = results / "sentence-transformers__all-MiniLM-L6-v2"
    assert _cells(read_references(root).references) == flat  # a clone of the repository
    assert _cells(read_references(results).references) == flat
    only_minilm = {key: value for key, value in flat.items() if key[0] == MINILM}
    assert _cells(read_references(minilm).references) == only_minilm  # one model's folder
    assert _cells(read_references(minilm / MINILM_REVISION).references) == only_minilm  # one revision


def test_older_keys_and_the_pre_1_11_layout_read_as_the_same_metrics(tmp_path):
    folder = tmp_path / "acme__old-model" / "r1"
    folder.mkdir(parents=True)
    (folder / "SciFact.json").write_text(
        json.dumps(
            {
                "mteb_dataset_name": "SciFact",
                "mteb_version": "1.0.0",
                "dataset_revision": "old-rev",
                "test": {"NDCG@10": 0.5, "MAP@10": 0.4, "Recall@100": 0.9, "P@1": 0.3, "MRR@10": 0.2},
            }
        )
    )
    task_file(folder / "NFCorpus.json", "NFCorpus", {"NDCG@10": 0.1, "ndcg_at_10": 0.25, "Recall@100": 0.7})
    cells = {(ref.model, ref.dataset): ref for ref in read_references(tmp_path).references}
    old = cells[("acme/old-model", "scifact")]
    assert old.metrics == {"ndcg@10": 0.5, "map@10": 0.4, "recall@100": 0.9, "p@1": 0.3, "mrr@10": 0.2}
    assert old.entry.mteb_version == "1.0.0" and old.entry.dataset_revision == "old-rev"
    # Both spellings in one file: mteb 2's key wins.
    assert cells[("acme/old-model", "nfcorpus")].metrics == {"ndcg@10": 0.25, "recall@100": 0.7}


def test_msmarco_is_read_from_its_dev_split(tmp_path):
    folder = tmp_path / "acme__m" / "r1"
    path = task_file(folder / "MSMARCO.json", "MSMARCO", {"ndcg_at_10": 0.4}, split="dev")
    payload = json.loads(path.read_text())
    payload["scores"]["test"] = [
        {"hf_subset": "default", "languages": [], "main_score": 0.9, "ndcg_at_10": 0.9}
    ]
    path.write_text(json.dumps(payload))
    (ref,) = read_references(tmp_path).references
    assert (ref.dataset, ref.split, ref.metrics) == ("msmarco", "dev", {"ndcg@10": 0.4})


def test_cqadupstack_is_the_mean_of_its_twelve_tasks_as_beir_reports_it(tmp_path):
    tasks = load_mteb_tasks()
    members = tasks.groups["cqadupstack"].members
    folder = tmp_path / "acme__m" / "r1"
    for number, member in enumerate(members):
        task = tasks.task_of(member).task
        task_file(folder / f"{task}.json", task, {"ndcg_at_10": number / 100, "recall_at_100": 0.5})
    read = read_mteb_results(tmp_path)
    cells = {cell.dataset: cell for cell in read.cells}
    assert set(cells) == {*members, "cqadupstack"}
    assert cells["cqadupstack"].metrics == pytest.approx(
        {"ndcg@10": sum(range(12)) / 100 / 12, "recall@100": 0.5}
    )
    assert cells["cqadupstack/gis"].metrics["ndcg@10"] == members.index("cqadupstack/gis") / 100
    # One forum missing: no mean, and a note says so.
    (folder / "CQADupstackTexRetrieval.json").unlink()
    read = read_mteb_results(tmp_path)
    assert "cqadupstack" not in {cell.dataset for cell in read.cells}
    assert read.notes == ["acme/m (r1): 11 of the 12 tasks of cqadupstack; no mean is formed"]


def test_a_task_with_no_beir_equivalent_is_one_note_line(mteb_files, tmp_path, capsys):
    root = _repository(mteb_files, tmp_path / "repo", meta=True)
    revision = root / "results" / "sentence-transformers__all-MiniLM-L6-v2" / MINILM_REVISION
    task_file(revision / "STS12.json", "STS12", {"cosine_spearman": 0.7})
    task_file(revision / "Banking77Classification.json", "Banking77Classification", {"accuracy": 0.8})
    results = tmp_path / "results"
    qrels = real_qrels(mteb_files.parents[1] / "data" / "beir", "scifact")
    fingerprint = real_fingerprint(mteb_files.parents[1] / "data" / "beir", "scifact")
    make_result(results, "scifact", MINILM, synthetic_run(qrels), qrels, fingerprint)
    assert main(["table", str(results), "--references", str(root), "--metrics", "ndcg@10"]) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if "no BEIR equivalent" in line]
    assert notes == [
        f"note: {root}: MTEB task(s) with no BEIR equivalent left out: Banking77Classification, STS12"
    ]
    assert "| scifact | **1.0000** | 0.6451 |" in captured.out
    assert f"{MINILM} ({MTEB_SOURCE})" in captured.out


def test_two_revisions_of_a_model_keep_both_and_prefer_the_pinned_one(tmp_path):
    model = tmp_path / "sentence-transformers__all-MiniLM-L6-v2"
    task_file(model / "0000-older" / "SciFact.json", "SciFact", {"ndcg_at_10": 0.6})
    task_file(model / MINILM_REVISION / "SciFact.json", "SciFact", {"ndcg_at_10": 0.64508})
    references = read_references(model).references
    assert sorted(ref.entry.model_revision for ref in references) == ["0000-older", MINILM_REVISION]
    (preferred,) = [ref for ref in references if ref.preferred]
    assert preferred.entry.model_revision == MINILM_REVISION and preferred.metrics["ndcg@10"] == 0.64508


# ------------------------------------------------------------------------- bad folders: one line


@pytest.fixture
def a_result(beir_mirror: Path, tmp_path: Path) -> Path:
    qrels = real_qrels(beir_mirror, "scifact")
    return make_result(
        tmp_path / "results",
        "scifact",
        MINILM,
        synthetic_run(qrels),
        qrels,
        real_fingerprint(beir_mirror, "scifact"),
    )


def _bad_folders(root: Path) -> dict[str, tuple[Path, list[str]]]:
    empty = root / "empty"
    empty.mkdir(parents=True)
    unnamed = root / "unnamed"
    task_file(unnamed / "scifact-run.json", "SciFact", {"ndcg_at_10": 0.5})
    no_task = root / "no-task" / "acme__m" / "r1"
    no_task.mkdir(parents=True)
    (no_task / "SciFact.json").write_text(json.dumps({"scores": {}}))
    unmapped = root / "unmapped"
    task_file(unmapped / "acme__m" / "r1" / "STS12.json", "STS12", {"cosine_spearman": 0.7})
    return {
        "no task file": (empty, ["not an MTEB results folder", "no task file"]),
        "neither flat nor beside model_meta.json": (
            unnamed,
            ["scifact-run.json", "<org>__<model>_<revision>_<Task>.json", "model_meta.json"],
        ),
        "not a task result": (no_task, ["SciFact.json", "'task_name'"]),
        "no BEIR task": (unmapped, ["no MTEB task with a BEIR equivalent", "STS12"]),
    }


@pytest.mark.parametrize(
    "case", ["no task file", "neither flat nor beside model_meta.json", "not a task result", "no BEIR task"]
)
def test_a_folder_not_in_the_mteb_layout_is_one_line_naming_what_is_missing(a_result, tmp_path, capsys, case):
    folder, needles = _bad_folders(tmp_path / "bad")[case]
    for argv in (
        ["diff", a_result, "ref:mteb-results", "--references", folder],
        ["table", tmp_path / "results", "--references", folder],
        ["reproduce", "offline-smoke", "--references", folder, "--results-dir", tmp_path / "out"],
    ):
        refused_by_cli(capsys, argv, *needles, folders=[tmp_path])


# ------------------------------------------------------------- diff and table against imported cells


def test_diff_against_an_imported_cell_names_its_file_and_provenance(a_result, mteb_files):
    report = diff(a=a_result, b="ref:mteb-results", references=mteb_files).report
    published = _published(mteb_files, "sentence-transformers__", "SciFact")
    assert "SciFact.json" in report.b and f"mteb {published['mteb_version']}" in report.b
    assert published["dataset_revision"] in report.b
    # The rule is the task's (mteb's ignore_identical_ids), not the source's conditional wording.
    rules = {
        ref.dataset: reference_protocol(ref)["identical-id rule (drop hits whose id is the query's)"]
        for ref in read_references(mteb_files).references
        if ref.model == MINILM
    }
    assert rules == {name: name in ("arguana", "fiqa", "quora") for name in rules}
    metrics = {name: b for name, _, b in report.metrics}
    assert metrics["ndcg@10"] == published["scores"]["test"][0]["ndcg_at_10"]


def test_table_shows_the_published_column_beside_the_chosen_model_only(a_result, mteb_files, tmp_path):
    results = tmp_path / "results"
    qrels = real_qrels(mteb_files.parents[1] / "data" / "beir", "scifact")
    fingerprint = real_fingerprint(mteb_files.parents[1] / "data" / "beir", "scifact")
    make_result(results, "scifact", "other-model", synthetic_run(qrels), qrels, fingerprint)
    shown = table(results_dir=results, references=mteb_files, metrics=["ndcg@10"], models=["minilm"])
    (ndcg,) = shown.tableset.tables
    assert [ndcg.labels[slug] for slug in ndcg.columns] == [MINILM, f"{MINILM} ({MTEB_SOURCE})"]
    assert ndcg.rows[0].cells[ndcg.columns[1]].value == 0.64508


# --------------------------------------------------------------------- our scifact against MTEB's


def _equal_cells_suite(tmp_path: Path, models: list[str]) -> Path:
    suite = tmp_path / "mteb-scifact.yaml"
    conditions = [
        {"model": model, "dataset": "scifact", "reference": "mteb-results", "metrics": SHARED_METRICS}
        for model in models
    ]
    suite.write_text(yaml.safe_dump({"name": "mteb-scifact", "tolerance": PRINTED, "conditions": conditions}))
    return suite


@pytest.fixture(scope="module")
def bm25_scifact(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path, shared_dir: Path):
    """``harness reproduce`` of the bm25s baseline on scifact against MTEB's files, run once."""
    root = tmp_path_factory.mktemp("bm25-scifact")
    result = reproduce(
        suite=str(_equal_cells_suite(root, ["bm25"])),
        references=shared_dir / "reference" / "mteb-results",
        results_dir=root / "results",
        data_dir=root / "data",
        cache_dir=root / "cache",
        mirror=str(beir_mirror),
        no_progress=True,
    )
    return result


def test_bm25_on_scifact_equals_every_shared_mteb_cell(bm25_scifact):
    report = bm25_scifact.report
    assert [check.status for check in report.checks] == ["OK"] * len(SHARED_METRICS)
    assert {check.metric for check in report.checks} == set(SHARED_METRICS)
    assert all(abs(check.diff) <= PRINTED for check in report.checks)
    assert "mteb 1.20.0" in report.checks[0].condition.source


@pytest.mark.slow
def test_our_scifact_results_equal_the_60_known_mteb_cells(e2e_workdir, beir_mirror, shared_dir, tmp_path):
    """MiniLM and the bm25s baseline: every metric both compute, 2 x 30 cells, equal at MTEB's 5 decimals."""
    result = reproduce(
        suite=str(_equal_cells_suite(tmp_path, [MINILM, "bm25"])),
        references=shared_dir / "reference" / "mteb-results",
        results_dir=e2e_workdir / "results",
        data_dir=e2e_workdir / "data",
        cache_dir=e2e_workdir / "cache",
        mirror=str(beir_mirror),
        no_progress=True,
    )
    statuses = [check.status for check in result.report.checks]
    assert statuses == ["OK"] * 60, result.render()
    assert result.exit_code == 0


# ------------------------------------------------------------------------------------ export


def test_export_writes_what_mtebs_task_result_loads_with_mtebs_own_score(bm25_scifact, mteb_files, tmp_path):
    from mteb.results import TaskResult

    (ours,) = bm25_scifact.results
    written = export(results=ours.directory, format="mteb", output=tmp_path / "mteb").paths
    folder = tmp_path / "mteb" / "bm25" / "no_revision_available"
    assert sorted(written) == sorted(
        [folder / "SciFact.json", folder / "model_meta.json", folder / "run_settings.jsonl"]
    )
    loaded = TaskResult.from_disk(folder / "SciFact.json")
    published = _published(mteb_files, "mteb__", "SciFact")["scores"]["test"][0]
    # What mteb reports for this ranking: MTEB's own file for the same bm25s configuration says the same.
    assert loaded.get_score() == round(ours.metrics["ndcg@10"], 5) == published["main_score"]
    scores = loaded.scores["test"][0]
    for metric in SHARED_METRICS:
        assert scores[mteb_metric(metric)] == pytest.approx(published[mteb_metric(metric)], abs=1e-6), metric
    assert loaded.task_name == "SciFact" and loaded.dataset_revision.startswith("sha256:")
    settings = [json.loads(line) for line in (folder / "run_settings.jsonl").read_text().splitlines()]
    assert settings == [
        {
            "task": "SciFact",
            "splits": ["test"],
            "version": {**settings[0]["version"], "beir-harness": ours.provenance["harness_version"]},
            "encode_kwargs": {"batch_size": ours.provenance["options"]["batch_size"]},
            "subsets": ["default"],
        }
    ]


def test_mtebs_result_cache_loads_the_exported_folder_and_it_imports_back(bm25_scifact, tmp_path):
    import mteb

    (ours,) = bm25_scifact.results
    export(results=ours.directory, format="mteb", output=tmp_path / "cache" / "results")
    cache = mteb.ResultCache(cache_path=tmp_path / "cache")
    loaded = cache.load_results(
        models=["bm25"], tasks=["SciFact"], include_remote=False, validate_and_filter=True
    )
    (model,) = loaded.model_results
    assert (model.model_name, model.model_revision) == ("bm25", "no_revision_available")
    assert [(task.task_name, task.get_score()) for task in model.task_results] == [
        ("SciFact", round(ours.metrics["ndcg@10"], 5))
    ]
    (back,) = read_references(tmp_path / "cache").references
    assert (back.model, back.dataset) == ("bm25", "scifact")
    assert {m: back.metrics[m] for m in SHARED_METRICS} == pytest.approx(
        {m: ours.metrics[m] for m in SHARED_METRICS}, abs=PRINTED
    )


def test_a_dataset_with_no_mteb_task_is_refused_and_nothing_is_written(beir_mirror, tmp_path, capsys):
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    make_result(tmp_path / "results", "scifact", "model-a", synthetic_run(qrels), qrels, fingerprint)
    make_result(tmp_path / "results", "my-corpus", "model-a", synthetic_run(qrels), qrels, fingerprint)
    refused_by_cli(
        capsys,
        ["export", tmp_path / "results", "--format", "mteb", "--output", tmp_path / "out"],
        "dataset 'my-corpus' has no MTEB task",
        "mteb_tasks.yaml",
        folders=[tmp_path],
    )
    (tmp_path / "no-results").mkdir()
    with pytest.raises(HarnessError, match="no harness result in"):
        export(results=tmp_path / "no-results", format="mteb", output=tmp_path / "x")


def test_a_suite_condition_may_name_an_mteb_folder_beside_it(a_result, mteb_files, tmp_path, monkeypatch):
    import harness.pipeline

    folder = tmp_path / "suites" / "mteb"
    folder.mkdir(parents=True)
    for path in mteb_files.glob("sentence-transformers__*.json"):
        shutil.copy(path, folder / path.name)
    task_file(folder / f"sentence-transformers__all-MiniLM-L6-v2_{MINILM_REVISION}_STS12.json", "STS12", {})
    suite = tmp_path / "suites" / "minilm.yaml"
    condition = {"model": "minilm", "dataset": "scifact", "reference": "mteb", "metrics": ["ndcg@10"]}
    suite.write_text(yaml.safe_dump({"conditions": [condition]}))
    monkeypatch.setattr(harness.pipeline, "run_eval", lambda dataset, model, options: load_result(a_result))
    result = reproduce(suite=str(suite), results_dir=tmp_path / "out")
    (check,) = result.report.checks
    assert (check.expected, check.status) == (0.64508, "MISS")  # the synthetic run is ideal: 1.0
    assert "SciFact.json (mteb 1.12.75" in check.condition.source
    assert result.messages == [f"note: {folder}: MTEB task(s) with no BEIR equivalent left out: STS12"]
