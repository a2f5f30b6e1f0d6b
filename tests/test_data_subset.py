"""``harness data subset`` and ``harness data fidelity``: what a subset holds (judged documents plus the
pool, nothing else), its recipe and checksums, reuse of an identical request, refusals in one line, and
(slow) a real scifact subset with three BM25 systems evaluated on it and on the full dataset."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from scipy.stats import kendalltau

from harness.api.data_commands import data_fidelity, data_subset
from harness.cli import main
from harness.core.errors import HarnessError
from harness.datasets.beir import load_dataset
from harness.datasets.prepare import DataSettings, open_dataset
from harness.datasets.qrels import read_qrels
from harness.datasets.subset import SUBSET_FILE, derived_name, read_recipe
from harness.pipeline import EvalOptions, run_eval
from harness.results.result_store import result_dir

WORDS = ["apple", "banana", "cherry", "grape", "lemon", "mango", "olive", "peach", "pear", "plum"]


def _tiny_dataset(root: Path) -> Path:
    """Twenty documents, eight queries, graded qrels (0 included) for test and one query for train."""
    (root / "qrels").mkdir(parents=True)
    docs = [
        {
            "_id": f"d{i:02d}",
            "title": WORDS[i % 10],
            "text": f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} fruit {i}",
        }
        for i in range(20)
    ]
    queries = [{"_id": f"q{i}", "text": f"{WORDS[i]} {WORDS[(i + 1) % 10]}"} for i in range(8)]
    queries.append({"_id": "q-unjudged", "text": "nothing judged"})
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    rows = ["query-id\tcorpus-id\tscore"]
    rows += [f"q{i}\td{(i * 7) % 20:02d}\t{1 + i % 2}" for i in range(8)]
    rows += [f"q{i}\td{(i * 7 + 1) % 20:02d}\t0" for i in range(0, 8, 2)]
    (root / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td05\t1\n", encoding="utf-8")
    return root


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("data", "results", "cache"):
        (tmp_path / name).mkdir()
        monkeypatch.setenv(f"HARNESS_{name.upper()}_DIR", str(tmp_path / name))
    return tmp_path


@pytest.fixture()
def tiny(workdir: Path) -> Path:
    return _tiny_dataset(workdir / "tiny")


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["_id"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _top(run_path: Path, query_id: str, depth: int) -> set[str]:
    """The run's top ``depth`` for a query by trec_eval's rule (score desc, then docno desc), read by hand."""
    rows = [line.split() for line in run_path.read_text().splitlines() if line and not line.startswith("#")]
    ranked = sorted(((float(r[4]), r[2]) for r in rows if r[0] == query_id), reverse=True)
    return {docno for _, docno in ranked[:depth]}


def test_the_subset_holds_judged_and_pooled_documents_and_nothing_else(tiny: Path, workdir: Path):
    result = data_subset(
        dataset=str(tiny), queries=3, seed=7, pool_from=["bm25"], pool_depth=2, no_progress=True
    )
    recipe, folder = result.recipe, result.folder
    source = load_dataset(tiny)
    assert len(recipe.query_ids) == 3 and set(recipe.query_ids) <= set(source.queries)
    assert "q-unjudged" not in recipe.query_ids  # only judged queries are drawn
    assert _ids(folder / "queries.jsonl") == recipe.query_ids

    judged = {doc for qid in recipe.query_ids for doc in source.qrels[qid]}
    full_run = result_dir(workdir / "results", source.name, "bm25") / "run.trec"
    pooled = {doc for qid in recipe.query_ids for doc in _top(full_run, qid, 2)}
    assert pooled - judged, "the pool must add documents beyond the judged ones"
    assert set(_ids(folder / "corpus.jsonl")) == judged | pooled
    # the corpus keeps the source's lines, byte for byte, in its order
    source_lines = (tiny / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    assert (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines() == [
        line for line in source_lines if json.loads(line)["_id"] in judged | pooled
    ]
    qrels = read_qrels(folder / "qrels" / "test.tsv", layout="beir").qrels
    assert qrels == {qid: source.qrels[qid] for qid in recipe.query_ids}  # grade 0 rows kept too
    assert recipe.counts == {
        "docs": len(judged | pooled),
        "queries": 3,
        "qrels": sum(map(len, qrels.values())),
    }


def test_the_recipe_records_source_checksums_pool_identity_and_its_own_sha256s(tiny: Path, workdir: Path):
    result = data_subset(
        dataset=str(tiny), queries=4, seed=13, pool_from=["bm25"], pool_depth=3, no_progress=True
    )
    recipe = read_recipe(result.folder)
    assert recipe == result.recipe
    source = load_dataset(tiny)
    assert recipe.source.name == source.name and recipe.source.fingerprint == source.fingerprint()
    assert (recipe.seed, recipe.queries, recipe.split, recipe.pool.depth) == (13, 4, "test", 3)
    assert recipe.name == derived_name(source.name, queries=4, seed=13, pool=["bm25"], depth=3, split=None)
    assert recipe.name == f"{source.name}~q4-s13-bm25@3"
    [pooled] = recipe.pool.retrievers
    assert (pooled.spec, pooled.result_key, pooled.label) == ("bm25", "bm25", "bm25")
    stored = run_eval(str(tiny), "bm25", EvalOptions(no_progress=True))
    assert stored.reused  # the pool's run is the user's stored result, found again here
    assert (
        pooled.config_sha256
        == hashlib.sha256(
            json.dumps(stored.provenance["config"], sort_keys=True, ensure_ascii=False).encode()
        ).hexdigest()
    )
    for relative, digest in recipe.files.items():
        assert hashlib.sha256((result.folder / relative).read_bytes()).hexdigest() == digest
    assert sorted(recipe.files) == ["corpus.jsonl", "qrels/test.tsv", "queries.jsonl"]
    # the same seed draws the same queries; the subset's results go under its own, derived name
    loaded = load_dataset(result.folder)
    assert loaded.name.startswith(recipe.name) and loaded.name != source.name
    assert loaded.fingerprint() == recipe.files
    # Opened as the pipeline opens it, the subset is known by its exact derived name, and a result on it
    # records what it was derived from.
    assert open_dataset(str(result.folder), DataSettings()).name == recipe.name
    on_subset = run_eval(str(result.folder), "bm25", EvalOptions(no_progress=True))
    assert on_subset.dataset == recipe.name
    assert on_subset.provenance["dataset"]["derived_from"]["subset"] == recipe.name


def test_an_identical_request_reuses_the_folder_and_another_is_refused(tiny: Path, workdir: Path):
    first = data_subset(
        dataset=str(tiny), queries=3, seed=1, pool_from=["bm25"], pool_depth=2, no_progress=True
    )
    written = {path: path.stat().st_mtime_ns for path in first.folder.rglob("*") if path.is_file()}
    again = data_subset(
        dataset=str(tiny), queries=3, seed=1, pool_from=["bm25"], pool_depth=2, no_progress=True
    )
    assert again.reused and not first.reused and again.folder == first.folder
    assert again.recipe == first.recipe
    assert {path: path.stat().st_mtime_ns for path in first.folder.rglob("*") if path.is_file()} == written

    with pytest.raises(HarnessError, match=r"holds another subset, .*: its seed \(1 there, 2 now\) differs"):
        data_subset(
            dataset=str(tiny), queries=3, seed=2, output=first.folder, pool_from=["bm25"], pool_depth=2
        )
    # a subset whose files were edited is not reused, nor overwritten
    (first.folder / "queries.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(HarnessError, match="changed since it was built"):
        data_subset(dataset=str(tiny), queries=3, seed=1, pool_from=["bm25"], pool_depth=2)


def test_a_user_folder_is_never_overwritten(tiny: Path, workdir: Path):
    mine = workdir / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(HarnessError, match=r"exists and is not a subset"):
        data_subset(dataset=str(tiny), queries=2, output=mine)
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]
    empty = workdir / "empty"
    empty.mkdir()  # an empty folder holds nothing to keep: the subset goes there
    assert data_subset(dataset=str(tiny), queries=2, output=empty).folder == empty
    assert read_recipe(empty).queries == 2


def test_without_a_pool_the_corpus_is_the_judged_documents(tiny: Path):
    result = data_subset(dataset=str(tiny), queries=8, seed=3)
    source = load_dataset(tiny)
    assert sorted(result.recipe.query_ids) == sorted(source.queries)  # all of them
    assert set(_ids(result.folder / "corpus.jsonl")) == {
        d for judged in source.qrels.values() for d in judged
    }
    assert result.recipe.name.endswith("~q8-s3") and result.recipe.pool.retrievers == []


def test_another_split_is_named_in_the_subset(tiny: Path):
    result = data_subset(dataset=str(tiny), queries=1, split="train")
    assert result.recipe.split == "train" and result.recipe.name.endswith("~train-q1-s13")
    assert (result.folder / "qrels" / "train.tsv").read_text().splitlines()[1:] == ["q1\td05\t1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "9"], "--queries 9 is more than .* 8 judged queries in split 'test'; ask for at most 8"),
        (["--split", "dev"], "no qrels for split 'dev'"),
        (["-n", "2", "--pool-from", "no-such-retriever-xyz"], "no-such-retriever-xyz"),
        (["-n", "2", "--pool-from", "bm25", "bm25"], "names a retriever twice"),
        (["-n", "2", "--split", "dev"], "no qrels for split 'dev'"),
    ],
)
def test_bad_input_is_one_line(tiny: Path, workdir: Path, capsys, args: list[str], message: str):
    assert main(["data", "subset", str(tiny), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert re.search(message, err), err
    assert not (workdir / "data" / "subsets").exists()


def test_fidelity_needs_results_on_both(tiny: Path, workdir: Path, capsys):
    result = data_subset(dataset=str(tiny), queries=4, pool_from=["bm25"], pool_depth=2, no_progress=True)
    assert main(["data", "fidelity", str(result.folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no system has ndcg@10 on both") and err.count("\n") == 1, err
    # with one system on both: the numbers, and a warning that tau says nothing
    run_eval(str(result.folder), "bm25", EvalOptions(no_progress=True))
    fidelity = data_fidelity(subset=str(result.folder))
    assert fidelity.fidelity.systems == ["bm25"] and fidelity.fidelity.tau is None
    assert any("not meaningful" in message for message in fidelity.messages)
    assert main(["data", "fidelity", "no-such-subset"]) == 2
    assert "no subset 'no-such-subset'" in capsys.readouterr().err


BM25_VARIANT = """name: bm25-k09
kind: bm25
title_join: "\\n"
params: {method: lucene, k1: 0.9, b: 0.4, stemmer: english, stopwords: en, lower: true, token_pattern: words}
"""


@pytest.mark.slow
def test_a_scifact_subset_and_its_fidelity_over_three_bm25_systems(
    beir_mirror: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    monkeypatch.setenv("HARNESS_BEIR_MIRROR", str(beir_mirror))
    config = workdir / "config"
    (config / "models").mkdir(parents=True)
    (config / "models" / "bm25-k09.yaml").write_text(BM25_VARIANT, encoding="utf-8")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(config))

    argv = [
        "data",
        "subset",
        "scifact",
        "-n",
        "50",
        "--seed",
        "13",
        "--pool-from",
        "bm25",
        "--pool-depth",
        "100",
    ]
    assert main([*argv, "--no-progress"]) == 0
    out = capsys.readouterr().out
    folder = workdir / "data" / "subsets" / "scifact~q50-s13-bm25@100"
    assert f"written: {folder}" in out
    recipe = read_recipe(folder)
    assert recipe.name == "scifact~q50-s13-bm25@100" and len(recipe.query_ids) == 50
    scifact = load_dataset(workdir / "data" / "scifact")
    assert recipe.source.fingerprint == scifact.fingerprint() and recipe.source.name == "scifact"
    judged = {doc for qid in recipe.query_ids for doc in scifact.qrels[qid]}
    pooled = {
        doc for qid in recipe.query_ids for doc in _top(workdir / "results/scifact/bm25/run.trec", qid, 100)
    }
    corpus = set(_ids(folder / "corpus.jsonl"))
    # every judged document (of those scifact's corpus has), every pooled one, and nothing else
    assert corpus == (judged | pooled) & set(_ids(workdir / "data/scifact/corpus.jsonl"))
    assert judged - pooled and pooled - judged  # both parts contribute
    for relative, digest in recipe.files.items():
        assert hashlib.sha256((folder / relative).read_bytes()).hexdigest() == digest

    assert main([*argv, "--no-progress"]) == 0  # identical: reused
    assert f"reused: {folder}" in capsys.readouterr().out

    systems = ["bm25", "bm25-lucene", "bm25-k09"]
    assert main(["eval", "--dataset", str(folder), "scifact", "--model", *systems, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["data", "fidelity", recipe.name, "--metric", "ndcg@10"]) == 0
    out = capsys.readouterr().out
    result = data_fidelity(subset=recipe.name)
    fidelity = result.fidelity
    assert sorted(fidelity.systems) == sorted(systems)
    # each number is the stored result's, and tau is scipy's over the two lists
    full = {s: run_eval("scifact", s, EvalOptions(no_progress=True)).metrics["ndcg@10"] for s in systems}
    sub = {s: run_eval(str(folder), s, EvalOptions(no_progress=True)).metrics["ndcg@10"] for s in systems}
    assert fidelity.full == pytest.approx(full) and fidelity.subset == pytest.approx(sub)
    expected = kendalltau([full[s] for s in systems], [sub[s] for s in systems], variant="b").statistic
    assert fidelity.tau == pytest.approx(expected)
    assert fidelity.mean_bias == pytest.approx(sum(sub[s] - full[s] for s in systems) / 3)
    assert f"Kendall tau-b: {fidelity.tau:.3f}" in out and "3 systems" in out
    assert "largest rank flip: " in out
    # the subset's results never went under scifact's name
    subset_results = [r for r in (workdir / "results").iterdir() if r.name.startswith(recipe.name)]
    assert len(subset_results) == 1 and subset_results[0].name != "scifact"
    assert (folder / SUBSET_FILE).is_file()


@pytest.mark.slow
def test_fidelity_over_three_systems_on_a_tiny_dataset(tiny: Path, workdir: Path, monkeypatch, capsys):
    config = workdir / "config"
    (config / "models").mkdir(parents=True)
    (config / "models" / "bm25-k09.yaml").write_text(BM25_VARIANT, encoding="utf-8")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(config))
    result = data_subset(
        dataset=str(tiny), queries=6, seed=2, pool_from=["bm25"], pool_depth=3, no_progress=True
    )
    systems = ["bm25", "bm25-lucene", "bm25-k09"]
    full, sub = {}, {}
    for system in systems:
        full[system] = run_eval(str(tiny), system, EvalOptions(no_progress=True)).metrics["ndcg@10"]
        sub[system] = run_eval(str(result.folder), system, EvalOptions(no_progress=True)).metrics["ndcg@10"]
    # a result on one side only (another top-k) is named, not counted
    run_eval(str(tiny), "bm25", EvalOptions(no_progress=True, top_k=5))
    fidelity = data_fidelity(subset=str(result.folder), metric="ndcg@10")
    assert fidelity.fidelity.full == pytest.approx(full) and fidelity.fidelity.subset == pytest.approx(sub)
    names = sorted(full)
    expected = kendalltau([full[n] for n in names], [sub[n] for n in names], variant="b").statistic
    assert fidelity.fidelity.full == pytest.approx(full) and fidelity.fidelity.subset == pytest.approx(sub)
    assert fidelity.fidelity.tau == pytest.approx(expected)  # defined: the tiny data separates two of them
    assert any("bm25@top_k=5" in message for message in fidelity.messages)
    payload = fidelity.to_json()
    assert payload["systems"] == 3 and payload["full"] == result.recipe.source.name
    assert payload["per_system"]["bm25"]["bias"] == pytest.approx(sub["bm25"] - full["bm25"])
    json.dumps(payload)  # serialisable as it is
    assert main(["data", "fidelity", str(result.folder), "--metric", "ndcg@10"]) == 0
    out = capsys.readouterr().out
    assert "3 systems" in out and "metric bias (subset - full): mean" in out


@pytest.mark.slow
def test_a_dense_retriever_pools_too(tiny: Path, workdir: Path, tiny_st_dir: Path):
    result = data_subset(
        dataset=str(tiny), queries=2, seed=4, pool_from=[str(tiny_st_dir)], pool_depth=3, no_progress=True
    )
    [pooled] = result.recipe.pool.retrievers
    stored = run_eval(str(tiny), str(tiny_st_dir), EvalOptions(no_progress=True))
    assert stored.reused and pooled.result_key == stored.model_slug
    judged = {doc for qid in result.recipe.query_ids for doc in load_dataset(tiny).qrels[qid]}
    top = {doc for qid in result.recipe.query_ids for doc in _top(stored.run_path, qid, 3)}
    assert set(_ids(result.folder / "corpus.jsonl")) == judged | top
    assert result.recipe.name.endswith(f"-{stored.model_slug}@3")


def test_excluded_ids_of_the_sampled_queries_come_along(tiny: Path):
    (tiny / "excluded_ids").mkdir()
    rows = [{"query-id": f"q{i}", "corpus-ids": [f"d{(i + 5) % 20:02d}"]} for i in range(8)]
    (tiny / "excluded_ids" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = data_subset(dataset=str(tiny), queries=3, seed=9)
    written = [
        json.loads(line) for line in (result.folder / "excluded_ids" / "test.jsonl").read_text().splitlines()
    ]
    assert [row["query-id"] for row in written] == result.recipe.query_ids
    assert load_dataset(result.folder).excluded_ids == {
        qid: ids for qid, ids in load_dataset(tiny).excluded_ids.items() if qid in result.recipe.query_ids
    }
    assert "excluded_ids/test.jsonl" in result.recipe.files
