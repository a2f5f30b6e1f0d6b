"""Bad options, unwritable outputs, FAISS parameters and resampling limits end in one clear line.

Every refusal is checked the same way: exactly one ``error:`` line on stderr naming the option or path
(and the fix), exit code 2, no traceback, and every file already written byte-identical afterwards.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.core.errors import HarnessError, OutputError
from harness.core.fileio import atomic_write, atomic_write_json
from harness.evaluation.comparison import SignificanceSettings
from harness.evaluation.significance import bootstrap_interval, paired_test
from harness.retrieval.dense import parse_index_spec

REPO_ROOT = Path(__file__).resolve().parents[1]
WORDS = [
    "gene",
    "cell",
    "mouse",
    "protein",
    "study",
    "brain",
    "cancer",
    "virus",
    "drug",
    "heart",
    "blood",
    "liver",
    "tumor",
    "model",
]


# --- helpers -------------------------------------------------------------------------------------------


def tree_digest(*roots: Path) -> dict[str, str]:
    """sha256 of every file under ``roots`` (what must not change when a command is refused)."""
    digests = {}
    for root in roots:
        for path in sorted(Path(root).rglob("*")) if Path(root).exists() else []:
            if path.is_file():
                digests[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def assert_refused(capsys: pytest.CaptureFixture[str], code: int, *needles: str, exit_code: int = 2) -> str:
    """One ``error:`` line holding every needle, the exit code, and no traceback; returns the line."""
    err = capsys.readouterr().err
    assert code == exit_code, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def make_beir(folder: Path, n_docs: int = 60, n_queries: int = 12, seed: int = 0) -> Path:
    """A small BEIR folder of generated documents, every query judged."""
    rng = random.Random(seed)
    (folder / "qrels").mkdir(parents=True)
    docs = [
        {"_id": f"d{i}", "title": rng.choice(WORDS), "text": " ".join(rng.choices(WORDS, k=8))}
        for i in range(n_docs)
    ]
    queries = [{"_id": f"q{i}", "text": " ".join(rng.choices(WORDS, k=3))} for i in range(n_queries)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    rows = "".join(f"q{i}\td{rng.randrange(n_docs)}\t1\n" for i in range(n_queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return folder


def eval_args(dataset: Path, model: str | Path, cache: Path, results: Path, *extra: str) -> list[str]:
    return [
        "eval", "--dataset", str(dataset), "--model", str(model), "--cache-dir", str(cache),
        "--results-dir", str(results), "--no-progress", *extra,
    ]  # fmt: skip


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """Qrels, two runs, two QA prediction files and an (empty) results folder, all inside ``tmp_path``."""
    rng = random.Random(1)
    qrels = tmp_path / "qrels.tsv"
    # Every document judged (d{i} relevant to q{i}, the rest 0) so no Judged@10 warning joins the one line.
    qrels.write_text(
        "".join(f"q{i} 0 d{j} {int(i == j)}\n" for i in range(20) for j in range(30)), encoding="utf-8"
    )
    runs = {}
    for name in ("a", "b"):
        lines = [
            f"q{i} Q0 d{doc} {rank + 1} {20 - rank} {name}\n"
            for i in range(20)
            for rank, doc in enumerate(rng.sample(range(30), 10))
        ]
        runs[name] = tmp_path / f"run_{name}.trec"
        runs[name].write_text("".join(lines), encoding="utf-8")
    qa = {}
    for name, answer in (("a", "paris"), ("b", "london")):
        rows = [
            {"id": i, "question": "capital?", "golden_answers": ["paris"], "pred_answer": answer}
            for i in range(5)
        ]
        qa[name] = tmp_path / f"qa_{name}.jsonl"
        qa[name].write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (tmp_path / "results").mkdir()
    (tmp_path / "existing.txt").write_text("keep me\n", encoding="utf-8")
    (tmp_path / "folder").mkdir()
    return {
        "root": tmp_path,
        "qrels": qrels,
        "run_a": runs["a"],
        "run_b": runs["b"],
        "qa_a": qa["a"],
        "qa_b": qa["b"],
    }


# --- numeric options: checked at parse time against their real range -----------------------------------

BAD_OPTIONS = [
    ("compare", ["--seed", "-5"], "--seed"),
    ("compare", ["--ks", "9223372036854775808"], "--ks"),
    ("compare", ["--n-resamples", "1"], "--n-resamples"),
    ("compare", ["--n-resamples", "100000000000"], "--n-resamples"),
    ("compare", ["--alpha", "nan"], "--alpha"),
    ("evaluate", ["--ks", "0"], "--ks"),
    ("evaluate", ["--relevance-level", "99999999999"], "--relevance-level"),
    ("qa-compare", ["--seed", "-5"], "--seed"),
    ("qa-compare", ["--n-resamples", "1"], "--n-resamples"),
    ("data-download", ["--timeout", "-1"], "--timeout"),
    ("data-download", ["--timeout", "inf"], "--timeout"),
    ("data-download", ["--retries", "0"], "--retries"),
    ("table", ["--digits", "99"], "--digits"),
    ("eval", ["--workers", "0"], "--workers"),
    ("eval", ["--batch-size", "-3"], "--batch-size"),
    ("eval", ["--top-k", "9223372036854775808"], "--top-k"),
    ("eval", ["--relevance-level", "x"], "--relevance-level"),
]


def _command(kind: str, inputs: dict[str, Path], extra: list[str]) -> list[str]:
    root = inputs["root"]
    output = ["--output", str(root / "out.json")]
    return {
        "compare": ["compare", str(inputs["qrels"]), str(inputs["run_a"]), str(inputs["run_b"]), *output],
        "evaluate": ["evaluate", str(inputs["qrels"]), str(inputs["run_a"]), *output],
        "qa-compare": ["qa-compare", str(inputs["qa_a"]), str(inputs["qa_b"]), *output],
        "data-download": ["data", "download", "scifact", "--data-dir", str(root / "data")],
        "table": ["table", str(root / "results"), "--output", str(root / "table.md")],
        "eval": eval_args(root / "nowhere", "bm25", root / "cache", root / "results"),
    }[kind] + extra


@pytest.mark.parametrize(
    ("kind", "extra", "option"), BAD_OPTIONS, ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_out_of_range_numbers_are_refused_at_parse_time(inputs, capsys, kind, extra, option) -> None:
    before = tree_digest(inputs["root"])
    line = assert_refused(capsys, main(_command(kind, inputs, extra)), option, extra[1])
    assert "must be" in line or "expected" in line  # the range to use
    assert tree_digest(inputs["root"]) == before


def test_too_few_resamples_for_alpha_is_refused(inputs, capsys) -> None:
    args = _command("compare", inputs, ["--alpha", "0.001", "--n-resamples", "1000"])
    assert_refused(capsys, main(args), "--n-resamples", "--alpha", "2,000")
    assert not (inputs["root"] / "out.json").exists()


# --- significance: bounded memory, same numbers --------------------------------------------------------


def test_paired_test_values_unchanged_by_chunked_bootstrap() -> None:
    """Values printed by the release before the chunked bootstrap, on the same fixed input."""
    rng = np.random.default_rng(2024)
    a = rng.random(300)
    b = np.clip(a + rng.normal(0.02, 0.1, 300), 0, 1)
    expected = {
        ("permutation", 1000, 42): (0.001998001998001998, -0.027983733238689402, -0.010041233641543938),
        ("permutation", 25000, 7): (0.0007999680012799488, -0.028096591259306542, -0.009706031638457369),
        ("ttest", 1000, 42): (0.0008063288201437093, -0.027983733238689402, -0.010041233641543938),
    }
    for (test, n, seed), values in expected.items():
        result = paired_test(a, b, test=test, n_resamples=n, seed=seed, confidence=0.9)
        assert (result.p_value, result.ci_low, result.ci_high) == values
    assert bootstrap_interval(rng.random(12), n_resamples=500_000, seed=3) == (
        0.3300337480898475,
        0.6617197401323167,
    )


@pytest.mark.parametrize(("size", "resamples"), [(12, 400_000), (20_000, 3000)])
def test_chunked_bootstrap_equals_scipy_bootstrap(size: int, resamples: int) -> None:
    from scipy import stats

    values = np.random.default_rng(size).random(size)
    batch = max(1, (1 << 22) // size)
    theirs = stats.bootstrap(
        (values,),
        np.mean,
        n_resamples=resamples,
        method="percentile",
        batch=batch,
        rng=np.random.default_rng(9),
    ).confidence_interval
    assert bootstrap_interval(values, n_resamples=resamples, seed=9) == (theirs.low, theirs.high)


def test_bootstrap_memory_is_one_chunk_plus_a_few_floats_per_resample() -> None:
    values = np.random.default_rng(0).random(30)
    peaks = {}
    for resamples in (100_000, 1_000_000):
        tracemalloc.start()
        bootstrap_interval(values, n_resamples=resamples, seed=1)
        peaks[resamples] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # One chunk (4M draws and values, 64 MB) plus the means and the quantile's sorted copy of them.
    assert peaks[1_000_000] < 100e6
    assert peaks[1_000_000] - peaks[100_000] < 40 * 900_000


def test_resample_limits_hold_below_the_cli() -> None:
    with pytest.raises(HarnessError, match="n_resamples must be from 100"):
        paired_test(np.ones(3), np.zeros(3), n_resamples=10**11)
    with pytest.raises(HarnessError, match="--n-resamples must be from 100"):
        SignificanceSettings(n_resamples=1).validate()


# --- outputs: one error path for every OS error -------------------------------------------------------

OUTPUT_COMMANDS = {
    "evaluate": lambda i: ["evaluate", str(i["qrels"]), str(i["run_a"]), "-o"],
    "compare": lambda i: ["compare", str(i["qrels"]), str(i["run_a"]), str(i["run_b"]), "--output"],
    "qa-eval": lambda i: ["qa-eval", str(i["qa_a"]), "--output"],
    "qa-compare": lambda i: ["qa-compare", str(i["qa_a"]), str(i["qa_b"]), "--output"],
    "table": lambda i: ["table", str(i["root"] / "results"), "--output"],
    "report": lambda i: ["report", str(i["root"] / "results"), "--output"],
}
BAD_TARGETS = {
    "a folder": ("folder", "it is a folder"),
    "a missing tree": ("missing/x/y.json", "folder {root}/missing does not exist"),
    "a file as folder": ("existing.txt/y.json", "is a file, not a folder"),
}


@pytest.mark.parametrize("target", BAD_TARGETS)
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_unwritable_output_is_refused_before_any_work(inputs, capsys, command, target) -> None:
    relative, problem = BAD_TARGETS[target]
    path, problem = inputs["root"] / relative, problem.format(root=inputs["root"])
    before = tree_digest(inputs["root"])
    code = main([*OUTPUT_COMMANDS[command](inputs), str(path)])
    assert_refused(capsys, code, str(path), problem)
    assert tree_digest(inputs["root"]) == before
    assert not (inputs["root"] / "missing").exists()  # no folder created on the way


def test_png_table_into_an_existing_file_is_refused(inputs, capsys) -> None:
    target = inputs["root"] / "existing.txt"
    before = tree_digest(inputs["root"])
    code = main(["table", str(inputs["root"] / "results"), "--format", "png", "--output", str(target)])
    assert_refused(capsys, code, str(target), "is a file, not a folder")
    assert tree_digest(inputs["root"]) == before


def _without_dac_override() -> list[str]:
    """A command prefix running as root without the right to ignore file permissions."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop CAP_DAC_OVERRIDE (file permissions bind root otherwise)")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]


def test_permission_denied_names_the_path(inputs) -> None:
    locked = inputs["root"] / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    target = locked / "metrics.json"
    command = [*_without_dac_override(), sys.executable, "-m", "harness", "evaluate"]
    command += [str(inputs["qrels"]), str(inputs["run_a"]), "-o", str(target)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: cannot write {target}: permission denied;"), line
    assert list(locked.iterdir()) == []


def test_atomic_write_turns_os_errors_into_one_output_error(tmp_path: Path) -> None:
    target = tmp_path / "kept.json"
    atomic_write_json(target, {"v": 1})
    before = target.read_bytes()
    expected = f"cannot write {target}: no space left on the device; free some space"
    with pytest.raises(OutputError, match=expected), atomic_write(target) as handle:
        handle.write("partial")
        raise OSError(28, "No space left on device")
    assert target.read_bytes() == before and sorted(tmp_path.iterdir()) == [target]  # no temporary left
    with pytest.raises(OutputError, match=f"folder {tmp_path / 'no'} does not exist"):
        atomic_write_json(tmp_path / "no" / "such" / "file.json", {}, parents=False)
    assert not (tmp_path / "no").exists()
    atomic_write_json(tmp_path / "new" / "file.json", {}, parents=False)  # its own folder, as mkdir would
    assert (tmp_path / "new" / "file.json").read_text() == "{}\n"


# --- FAISS parameters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("HNSW0", "M must be from 2"),  # FAISS: SIGABRT
        ("HNSW1", "M must be from 2"),  # FAISS: SIGSEGV
        ("IVF16,PQ8x0", "bits per code"),  # FAISS: SIGFPE
        ("IVF0,Flat", "number of lists"),
        ("HNSW32,efSearch=0", "efSearch must be from 1"),  # FAISS: silently nDCG 0
        ("HNSW32,efSearch=2147483648", "efSearch must be from 1"),  # overflows FAISS's int
        ("IVF16,Flat,nprobe=0", "nprobe must be from 1"),
        ("IVF16,Flat,nprobe=99999999999", "nprobe must be from 1"),
        ("HNSW32,nprobe=4", "nprobe applies to IVF"),
    ],
)
def test_faiss_parameters_checked_before_faiss_sees_them(tmp_path, capsys, tiny_st_dir, spec, needle) -> None:
    dataset = make_beir(tmp_path / "set")
    args = eval_args(dataset, tiny_st_dir, tmp_path / "cache", tmp_path / "results", "--index", spec)
    assert_refused(capsys, main(args), "--index", spec, needle)
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()  # refused before work
    with pytest.raises(HarnessError, match=needle):
        parse_index_spec(spec)


def test_faiss_build_problems_are_one_line(tmp_path, capsys, tiny_st_dir) -> None:
    dataset = make_beir(tmp_path / "set")
    cache, results = tmp_path / "cache", tmp_path / "results"
    assert main(eval_args(dataset, tiny_st_dir, cache, results, "--index", "HNSW8")) == 0
    capsys.readouterr()
    before = tree_digest(cache, results)

    code = main(eval_args(dataset, tiny_st_dir, cache, results, "--index", "IVF1024,Flat"))
    assert_refused(capsys, code, "IVF1024,Flat", "1,024 lists need at least 1,024 documents", "has 60")
    code = main(eval_args(dataset, tiny_st_dir, cache, results, "--index", "IVF4,Flat,nprobe=9"))
    assert_refused(capsys, code, "nprobe=9 exceeds the index's 4 lists")
    assert {k: v for k, v in tree_digest(cache, results).items() if k in before} == before

    (saved,) = cache.rglob("index-HNSW8*")
    saved.write_bytes(saved.read_bytes()[:100])  # truncated from outside
    code = main(eval_args(dataset, tiny_st_dir, cache, results, "--index", "HNSW8", "--force"))
    assert_refused(capsys, code, str(saved), "unreadable FAISS index", "rerun to rebuild")
    assert tree_digest(results) == {k: v for k, v in before.items() if k.startswith(str(results))}
    saved.unlink()
    assert main(eval_args(dataset, tiny_st_dir, cache, results, "--index", "HNSW8", "--force")) == 0


# --- options that change nothing ---------------------------------------------------------------------


def test_options_a_lexical_model_ignores_are_reported(tmp_path, capsys) -> None:
    dataset = make_beir(tmp_path / "set")
    args = eval_args(dataset, "bm25", tmp_path / "cache", tmp_path / "results", "--batch-size", "8")
    assert main([*args, "--precision", "fp16"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: --batch-size --precision have no effect with bm25 (a lexical model: no encoder, no FAISS index); ignored"
    ]
    assert main(eval_args(dataset, "bm25", tmp_path / "cache", tmp_path / "results")) == 0
    assert "note:" not in capsys.readouterr().err


# --- a full disk ---------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MB tmpfs the test mounts (and unmounts), with a helper filling it up to ``keep`` free bytes."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, keep: int) -> Path:
    """Occupy the file system but ``keep`` bytes."""
    filler = mount / "filler"
    stats = os.statvfs(mount)
    filler.write_bytes(b"\0" * max(0, stats.f_bavail * stats.f_frsize - keep))
    return filler


def _shards(cache: Path) -> dict[str, str]:
    """Embedding shard files (path inside the cache) -> sha256."""
    digests = tree_digest(cache)
    return {
        str(Path(path).relative_to(cache)): digest for path, digest in digests.items() if "/shard-" in path
    }


def test_disk_full_is_one_line_and_resumes_cleanly(tmp_path, capsys, small_disk, tiny_st_dir) -> None:
    dataset = make_beir(tmp_path / "set", n_docs=120)
    options = ("--shard-size", "10", "--workers", "1")
    reference = tmp_path / "reference"
    assert main(eval_args(dataset, tiny_st_dir, reference / "cache", reference / "results", *options)) == 0
    capsys.readouterr()

    # The cache on a disk that fills up part-way through encoding.
    cache, results = small_disk / "cache", tmp_path / "results"
    filler = fill(small_disk, keep=48 * 1024)
    code = main(eval_args(dataset, tiny_st_dir, cache, results, *options))
    line = assert_refused(capsys, code, str(cache), "no space left on the device", "space there")
    assert not results.exists()
    written = _shards(cache)
    assert 0 < len(written) < 24  # some shards finished before the disk filled; each one whole
    assert not [p for p in small_disk.rglob("*.tmp")], "a temporary file was left behind"

    # The results on a full disk (the cache now fits elsewhere): nothing half-written either.
    full_results = small_disk / "results"
    code = main(eval_args(dataset, tiny_st_dir, reference / "cache", full_results, *options))
    assert_refused(capsys, code, str(full_results), "no space left on the device")
    assert not list(full_results.rglob("metrics.json"))

    # Space freed: the same command resumes, keeps the finished shards and equals the reference.
    filler.unlink()
    assert main(eval_args(dataset, tiny_st_dir, cache, results, *options)) == 0
    after = _shards(cache)
    assert {name: after[name] for name in written} == written and len(after) > len(written)
    (ours,) = results.rglob("metrics.json")
    (theirs,) = (reference / "results").rglob("metrics.json")
    assert json.loads(ours.read_text())["metrics"] == json.loads(theirs.read_text())["metrics"]
    assert math.isfinite(json.loads(ours.read_text())["metrics"]["ndcg@10"]), line


# --- interrupts, folder options and the CLI's last-resort OSError line --------------------------------


def test_interrupt_while_writing_keeps_the_previous_file(inputs, capsys, monkeypatch) -> None:
    target = inputs["root"] / "metrics.json"
    assert main(["evaluate", str(inputs["qrels"]), str(inputs["run_a"]), "-o", str(target)]) == 0
    capsys.readouterr()
    before = tree_digest(inputs["root"])

    def interrupted_dump(payload, handle, **kwargs):
        handle.write('{"half": ')
        raise KeyboardInterrupt

    monkeypatch.setattr("harness.core.fileio.json.dump", interrupted_dump)
    code = main(["evaluate", str(inputs["qrels"]), str(inputs["run_b"]), "-o", str(target)])
    assert_refused(capsys, code, "interrupted", "rerun", exit_code=130)
    assert tree_digest(inputs["root"]) == before  # the old file whole, no temporary left


@pytest.mark.parametrize("option", ["--results-dir", "--cache-dir", "--data-dir"])
def test_a_file_given_as_a_folder_option_is_refused(inputs, capsys, option) -> None:
    blocker = inputs["root"] / "existing.txt"
    before = tree_digest(inputs["root"])
    code = main(
        [
            *eval_args(inputs["root"] / "set", "bm25", inputs["root"] / "c", inputs["root"] / "r"),
            option,
            str(blocker),
        ]
    )
    assert_refused(capsys, code, option, str(blocker), "is a file, not a folder")
    assert tree_digest(inputs["root"]) == before


def test_os_error_below_the_writers_is_one_line(tmp_path, capsys, tiny_st_dir) -> None:
    """A file where the cache's embeddings folder goes: the store's own mkdir fails, the CLI names it."""
    dataset = make_beir(tmp_path / "set")
    cache, results = tmp_path / "cache", tmp_path / "results"
    cache.mkdir()
    (cache / "embeddings").write_text("not a folder\n", encoding="utf-8")
    before = tree_digest(tmp_path)
    code = main(eval_args(dataset, tiny_st_dir, cache, results, "--workers", "1"))
    assert_refused(
        capsys, code, str(cache / "embeddings"), "part of the path is a file", "move that file away"
    )
    assert {path: digest for path, digest in tree_digest(tmp_path).items() if path in before} == before
    assert not results.exists()


class _Vectors:
    """A ShardSource of random vectors kept in ``directory`` (what the FAISS index is saved beside)."""

    def __init__(self, directory: Path, count: int = 2000, dim: int = 32) -> None:
        self.vectors = np.random.default_rng(0).standard_normal((count, dim)).astype(np.float32)
        self.directory, self.num_docs, self.dim = directory, count, dim
        directory.mkdir(parents=True, exist_ok=True)

    def shards(self):
        yield [f"d{i}" for i in range(self.num_docs)], self.vectors


def test_faiss_index_on_a_full_disk_is_one_output_error(small_disk) -> None:
    from harness.retrieval.dense import build_or_load_index

    source = _Vectors(small_disk / "entry")
    filler = fill(small_disk, keep=8 * 1024)
    with pytest.raises(OutputError, match=f"cannot write {source.directory}/index-HNSW16.*no space left"):
        build_or_load_index(parse_index_spec("HNSW16"), source)
    assert list(source.directory.iterdir()) == []  # no temporary, no half index
    filler.unlink()
    index = build_or_load_index(parse_index_spec("HNSW16"), source)
    assert build_or_load_index(parse_index_spec("HNSW16"), source).ntotal == index.ntotal == 2000


def test_a_reader_that_stops_reading_is_not_an_error(inputs) -> None:
    """`harness evaluate ... | head -1`: the closed pipe ends the output quietly, exit 0, no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line is written
    command = [sys.executable, "-m", "harness", "evaluate", str(inputs["qrels"]), str(inputs["run_a"])]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    try:
        done = subprocess.run(
            command, stdout=write_end, stderr=subprocess.PIPE, text=True, env=env, timeout=120
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr
