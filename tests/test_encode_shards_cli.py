"""``harness encode --shard I/N`` + ``--merge`` (SLURM job arrays) fill the same cache entry as one run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scale_fixtures import HEADLINE, SHARD_SIZE, corpus_entry, corpus_vectors, scifact_folder

from harness.cli import main
from harness.encoding.embedding_cache import shard_paths
from harness.results.result_store import load_result

DOC_IDS = [f"d{i}" for i in range(11)]


@pytest.fixture
def small_set(tmp_path: Path) -> Path:
    folder = tmp_path / "small"
    (folder / "qrels").mkdir(parents=True)
    rows = [
        {"_id": doc_id, "title": "Gene", "text": f"gene study {doc_id} in mouse models"} for doc_id in DOC_IDS
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "gene study"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n")
    return folder


def _encode(folder: Path | str, model: Path, cache: Path, shard_size: int, *extra: str) -> int:
    return main(
        [
            "encode",
            "--dataset",
            str(folder),
            "--model",
            str(model),
            "--cache-dir",
            str(cache),
            "--shard-size",
            str(shard_size),
            "--no-progress",
            *extra,
        ]
    )


def _entry_dir(cache: Path) -> Path:
    (directory,) = (cache / "embeddings").glob("*__corpus__*")
    return directory


def _shard_files(cache: Path) -> dict[str, int]:
    """Corpus shard file name -> modification time (ns)."""
    return {path.name: path.stat().st_mtime_ns for path in sorted(_entry_dir(cache).glob("shard-*"))}


def test_a_slice_writes_only_its_shards_and_merge_names_the_missing(
    small_set: Path, tiny_st_dir: Path, tmp_path: Path, capsys
) -> None:
    cache = tmp_path / "cache"
    assert _encode(small_set, tiny_st_dir, cache, 3, "--merge") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "4 of 4 shards" in err[0] and "(0, 1, 2, 3)" in err[0], err

    assert _encode(small_set, tiny_st_dir, cache, 3, "--shard", "1/2") == 0
    assert "encoded 2 of its 2 shards" in capsys.readouterr().out
    directory = _entry_dir(cache)
    assert sorted(_shard_files(cache)) == [
        "shard-00001.json",
        "shard-00001.npy",
        "shard-00003.json",
        "shard-00003.npy",
    ]
    assert json.loads(shard_paths(directory, 1)[1].read_text())["ids"] == DOC_IDS[3:6]
    assert json.loads(shard_paths(directory, 3)[1].read_text())["ids"] == DOC_IDS[9:]
    assert not (directory / "manifest.json").exists()  # slices write shards only; merge writes the manifest

    assert _encode(small_set, tiny_st_dir, cache, 3, "--merge") == 2
    err = capsys.readouterr().err
    assert "2 of 4 shards" in err and "(0, 2)" in err


@pytest.mark.parametrize("bad", ["2/2", "a/2", "1", "-1/2"])
def test_bad_slices_are_refused_by_the_parser(
    bad: str, small_set: Path, tiny_st_dir: Path, tmp_path, capsys
) -> None:
    assert _encode(small_set, tiny_st_dir, tmp_path / "cache", 3, f"--shard={bad}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and err[0].startswith("error: harness encode: argument --shard") and "I/N" in err[0]
    ), err


def test_lexical_models_have_nothing_to_encode(small_set: Path, tmp_path: Path, capsys) -> None:
    assert _encode(small_set, Path("bm25"), tmp_path / "cache", 3, "--shard", "0/2") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "BM25" in err[0] and err[0].startswith("error: ")


@pytest.mark.slow
def test_two_slices_and_a_merge_equal_one_run_and_eval_reuses_them(
    tmp_path: Path, beir_mirror: Path, tiny_st_dir: Path, scifact_reference, capsys
) -> None:
    reference, reference_root = scifact_reference
    folder = scifact_folder(beir_mirror)
    cache = tmp_path / "cache"
    assert _encode(folder, tiny_st_dir, cache, SHARD_SIZE, "--shard", "0/2") == 0
    assert sorted(name for name in _shard_files(cache) if name.endswith(".npy")) == [
        f"shard-{index:05d}.npy" for index in (0, 2, 4, 6)
    ]
    assert _encode(folder, tiny_st_dir, cache, SHARD_SIZE, "--shard", "1/2") == 0
    first_pass = _shard_files(cache)
    assert len(first_pass) == 16

    # A task rerun (SLURM requeue) finds its shards done and rewrites nothing.
    assert _encode(folder, tiny_st_dir, cache, SHARD_SIZE, "--shard", "1/2") == 0
    assert "encoded 0 of its 4 shards (4 already done)" in capsys.readouterr().out
    assert _shard_files(cache) == first_pass

    assert _encode(folder, tiny_st_dir, cache, SHARD_SIZE, "--merge") == 0
    assert "merged 8 shards" in capsys.readouterr().out
    manifest = json.loads((_entry_dir(cache) / "manifest.json").read_text())
    assert (
        manifest["complete"]
        and manifest["finished_shards"] == list(range(8))
        and manifest["num_docs"] == 5183
    )

    ids, vectors = corpus_vectors(cache)
    reference_ids, reference_vectors = corpus_vectors(reference_root / "cache")
    assert ids == reference_ids
    np.testing.assert_allclose(vectors, reference_vectors, rtol=0, atol=1e-6)
    assert corpus_entry(cache).key == corpus_entry(reference_root / "cache").key

    # `harness eval` with the same options finds the entry complete: no shard is written again.
    results = tmp_path / "results"
    code = main(
        [
            "eval",
            "--dataset",
            folder,
            "--model",
            str(tiny_st_dir),
            "--cache-dir",
            str(cache),
            "--results-dir",
            str(results),
            "--shard-size",
            str(SHARD_SIZE),
            "--top-k",
            "100",
            "--metrics",
            *HEADLINE,
            "--no-progress",
        ]
    )
    assert code == 0
    assert _shard_files(cache) == first_pass
    (result_folder,) = (results / "scifact").iterdir()
    result = load_result(result_folder)
    assert {metric: result.metrics[metric] for metric in HEADLINE} == {
        metric: reference.metrics[metric] for metric in HEADLINE
    }
    assert result.per_query == reference.per_query
