"""Hostile YAML and JSON files end in one clear line: the one YAML loader and the one JSON reader.

Every YAML file the harness reads (experiment and UltraRAG files, ``--set`` values, the records and the
user's record overlay) goes through :func:`harness.core.config.read_yaml`: safe types, UTF-8 with a line
naming the file, repeated keys refused with their line, alias expansion and nesting bounded. Every JSON file
goes through :func:`harness.core.fileio.parse_json`: nesting bounded, and NaN/Infinity never read as text
where an answer or an id must be. Each refusal: one ``error:`` line naming the file (and line or key) and
the fix, exit 2, no traceback, and no file changed (:mod:`fault_snapshot`).
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT
from fault_snapshot import assert_unchanged, refused_by_cli, snapshot
from report_fixtures import make_result

from harness.cli import main
from harness.core.config import MAX_YAML_VALUES, RefusedYAML, load_yaml, read_yaml
from harness.core.errors import InputError
from harness.core.fileio import MAX_JSON_DEPTH, parse_json, read_json, read_json_object, read_json_or_none

TREC = REPO_ROOT / "configs" / "examples" / "trec"
DEEP = 100_000  # the audit's nesting depth
FINGERPRINT = {"corpus.jsonl": "0" * 64}


def laughs(levels: int = 9) -> str:
    """A 'billion laughs' block: nine levels of nine aliases, about 9**9 values once expanded."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{n}: &l{n} [{','.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with the example TREC files, and the harness's own folders inside it."""
    monkeypatch.chdir(tmp_path)
    for name in ("data", "cache", "results"):
        (tmp_path / name).mkdir()
        monkeypatch.setenv(f"HARNESS_{name.upper()}_DIR", str(tmp_path / name))
    (tmp_path / "trec").mkdir()
    for path in TREC.iterdir():
        (tmp_path / "trec" / path.name).write_bytes(path.read_bytes())
    return tmp_path


def experiment_text(*step_lines: str, head: str = "") -> str:
    step = ["  - kind: evaluate", "    qrels: trec/qrels.txt", "    run: trec/run_a.txt", *step_lines]
    return head + "steps:\n" + "\n".join(step) + "\n"


# ------------------------------------------------------------------------------------------------ YAML


def test_billion_laughs_experiment_is_refused_in_bounded_time_and_memory(workdir: Path) -> None:
    bomb = workdir / "laughs.yaml"
    bomb.write_text(laughs() + "steps: [{kind: evaluate, qrels: *l8}]\n", encoding="utf-8")
    assert len(bomb.read_bytes()) < 1000  # the audit's ~700-byte file

    def limit_memory() -> None:  # a regression must fail here, not take the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(bomb), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_memory,
        cwd=workdir,
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        # line 6: l5, the first value past the bound (9**6 values)
        f"error: {bomb}:6: aliases expand to more than {MAX_YAML_VALUES:,} values (write the values out)"
    ]
    assert seconds < 60, seconds
    assert not (workdir / "experiments").exists()


def test_billion_laughs_in_a_set_value_is_refused(workdir: Path, capsys) -> None:
    experiment = workdir / "x.yaml"
    experiment.write_text(experiment_text(), encoding="utf-8")
    flow = "[" + ", ".join(line.split(": ", 1)[1] for line in laughs().splitlines()) + "]"
    refused_by_cli(
        capsys,
        ["run", experiment, "--set", f"evaluate.metrics={flow}"],
        "--set evaluate.metrics: aliases expand to more than",
        folders=[workdir],
    )


def test_small_aliases_and_merge_keys_still_load(workdir: Path, capsys) -> None:
    text = (
        "params:\n  metrics: &m [map, mrr]\n"
        "base: &base {kind: evaluate, qrels: trec/qrels.txt}\n"
        "steps:\n  - <<: *base\n    run: trec/run_a.txt\n    metrics: *m\n"
    )
    document = load_yaml(text)
    assert document["steps"] == [
        {"kind": "evaluate", "qrels": "trec/qrels.txt", "run": "trec/run_a.txt", "metrics": ["map", "mrr"]}
    ]
    # A key written beside a merge overrides the merged one, as YAML intends: not a duplicate.
    assert load_yaml("a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  x: 3\n")["b"] == {"x": 3, "y": 2}


def test_shipped_records_load_through_the_one_loader(capsys) -> None:
    # datasets.yaml uses anchors (its templates): aliases within the bound stay allowed.
    records = REPO_ROOT / "harness" / "records"
    files = sorted(records.rglob("*.yaml"))
    assert files
    for path in files:
        read_yaml(path)
    assert main(["data", "list"]) == 0


def _latin1(text: str) -> bytes:
    return text.encode("latin-1")


NOT_UTF8 = {
    "experiment file": ("x.yaml", _latin1("name: caf\xe9\n" + experiment_text()), ["run", "{path}"], 1),
    "UltraRAG file": (
        "eval_trec.yaml",
        _latin1("evaluation:\n  qrels_path: trec/qrels.txt\n  # r\xe9sultats\n  run_path: trec/run_a.txt\n"),
        ["run", "{path}"],
        3,
    ),
    "dataset record overlay": (
        "config/datasets.yaml",
        _latin1("datasets:\n  mine: {description: caf\xe9}\n"),
        ["data", "list"],
        2,
    ),
    "suite record overlay": ("config/suites/s.yaml", _latin1("name: s\xe9\n"), ["reproduce", "s"], 1),
}


@pytest.mark.parametrize("case", sorted(NOT_UTF8))
def test_yaml_that_is_not_utf8_names_the_file_and_line(case, workdir: Path, capsys, monkeypatch) -> None:
    relative, content, argv, line = NOT_UTF8[case]
    path = workdir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(workdir / "config"))
    argv = [arg.format(path=path) for arg in argv]
    refused_by_cli(
        capsys, argv, f"{path}:{line}: not UTF-8 text", "save the file as UTF-8", folders=[workdir]
    )


def test_model_record_overlay_not_utf8_or_with_a_repeated_key(workdir: Path, capsys, monkeypatch) -> None:
    record = workdir / "config" / "models" / "mine.yaml"
    record.parent.mkdir(parents=True)
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(workdir / "config"))
    dataset = workdir / "toy"
    (dataset / "qrels").mkdir(parents=True)
    (dataset / "corpus.jsonl").write_text('{"_id": "d1", "text": "one"}\n', encoding="utf-8")
    (dataset / "queries.jsonl").write_text('{"_id": "q1", "text": "one"}\n', encoding="utf-8")
    (dataset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    argv = ["eval", "--dataset", dataset, "--model", "mine", "--no-progress"]
    record.write_bytes(_latin1("name: mine\ndescription: caf\xe9\n"))
    refused_by_cli(capsys, argv, f"{record}:2: not UTF-8 text", folders=[workdir])
    record.write_text("name: mine\nname: other\n", encoding="utf-8")
    refused_by_cli(capsys, argv, f"{record}:2: duplicate key 'name', first on line 1", folders=[workdir])


DUPLICATES = {
    "top-level name": ("name: a\n" + experiment_text() + "name: b\n", 6, "'name', first on line 1"),
    "a step's option": (
        experiment_text("    metrics: [map]", "    metrics: [mrr]"),
        6,
        "'metrics', first on line 5",
    ),
    "UltraRAG section": (
        "evaluation:\n  qrels_path: trec/qrels.txt\n  run_path: trec/run_a.txt\n  ks: [1]\n  ks: [5]\n",
        5,
        "'ks', first on line 4",
    ),
    "params": ("params:\n  a: 1\n  b: 2\n  a: 3\n" + experiment_text(), 4, "'a', first on line 2"),
}


@pytest.mark.parametrize("case", sorted(DUPLICATES))
def test_a_repeated_key_is_refused_with_its_line(case, workdir: Path, capsys) -> None:
    text, line, needle = DUPLICATES[case]
    path = workdir / "x.yaml"
    path.write_text(text, encoding="utf-8")
    refused_by_cli(
        capsys, ["run", path], f"{path}:{line}: duplicate key {needle}", "keep one of them", folders=[workdir]
    )


def test_a_repeated_key_in_the_dataset_overlay_is_refused(workdir: Path, capsys, monkeypatch) -> None:
    overlay = workdir / "config" / "datasets.yaml"
    overlay.parent.mkdir()
    overlay.write_text("datasets:\n  mine: {}\n  mine: {}\n", encoding="utf-8")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(overlay.parent))
    refused_by_cli(capsys, ["data", "list"], f"{overlay}:3: duplicate key 'mine'", folders=[workdir])


def test_a_repeated_key_in_a_set_value_is_refused(workdir: Path, capsys) -> None:
    path = workdir / "x.yaml"
    path.write_text("params:\n  p: 1\n" + experiment_text(), encoding="utf-8")
    refused_by_cli(
        capsys, ["run", path, "--set", "p={a: 1, a: 2}"], "--set p: duplicate key 'a'", folders=[workdir]
    )


HOSTILE_YAML = {
    "nested 100,000 deep": ("steps: " + "[" * DEEP + "\n", 1, f"nested deeper than {100} levels"),
    "an alias inside itself": ("a: &a [1, *a]\n" + experiment_text(), 1, "an alias refers to the value"),
    "a control character": (
        "name: a\x01b\n" + experiment_text(),
        1,
        "not valid YAML (control character #x0001",
    ),
    "a syntax error": ("steps: [unclosed\n", 2, "not valid YAML"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_hostile_yaml_is_one_line(case, workdir: Path, capsys) -> None:
    text, line, needle = HOSTILE_YAML[case]
    path = workdir / "x.yaml"
    path.write_text(text, encoding="utf-8")
    refused_by_cli(capsys, ["run", path, "--dry-run"], f"{path}:{line}: {needle}", folders=[workdir])


def test_a_utf8_bom_is_fine(workdir: Path, capsys) -> None:
    path = workdir / "x.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + experiment_text().encode("utf-8"))
    assert main(["run", str(path), "--dry-run"]) == 0


def test_load_yaml_refusals_carry_their_line_and_fix() -> None:
    with pytest.raises(RefusedYAML) as raised:
        load_yaml("a: 1\nb:\n  c: 1\n  c: 2\n")
    assert raised.value.problem_mark.line + 1 == 4 and raised.value.fix
    assert load_yaml("a: [1, 2]\n") == {"a": [1, 2]}
    with pytest.raises(yaml.YAMLError):  # unsafe tags stay refused by the safe loader underneath
        load_yaml("a: !!python/object/apply:os.system ['true']\n")


# ------------------------------------------------------------------------------------------------ JSON


def _deep(value: str = "1") -> str:
    return "[" * DEEP + value + "]" * DEEP


PREDICTION_ROWS = {
    "NaN prediction": ('{"id": "1", "golden_answers": ["nan"], "pred_answer": NaN}', "'pred_answer' is NaN"),
    "NaN id": ('{"id": NaN, "golden_answers": ["x"], "pred_answer": "x"}', "'id' is NaN"),
    "Infinity gold": ('{"id": "1", "golden_answers": [Infinity], "pred_answer": "inf"}', "holds Infinity"),
    "-Infinity choice": (
        '{"id": "1", "golden_answers": [0], "choices": [-Infinity], "pred_answer": "x"}',
        "'choice 0' is -Infinity",
    ),
    "1e400 prediction": ('{"id": "1", "golden_answers": ["inf"], "pred_answer": 1e400}', "is Infinity"),
    "nested 100,000 deep": (
        '{"id": "1", "golden_answers": ' + _deep('"x"') + ', "pred_answer": "x"}',
        f"JSON nested deeper than {MAX_JSON_DEPTH} levels",
    ),
    "nested just past the bound": (
        '{"id": "1", "golden_answers": ' + "[" * 300 + '"x"' + "]" * 300 + ', "pred_answer": "x"}',
        f"JSON nested deeper than {MAX_JSON_DEPTH} levels",
    ),
    "a 5000-digit number": (
        '{"id": ' + "9" * 5000 + ', "golden_answers": ["x"], "pred_answer": "x"}',
        "digits",
    ),
}


@pytest.mark.parametrize("case", sorted(PREDICTION_ROWS))
def test_hostile_prediction_rows_are_one_line(case, workdir: Path, capsys) -> None:
    row, needle = PREDICTION_ROWS[case]
    good = '{"id": "0", "golden_answers": ["paris"], "pred_answer": "paris"}'
    path = workdir / "predictions.jsonl"
    path.write_text(good + "\n" + row + "\n", encoding="utf-8")
    line = refused_by_cli(capsys, ["qa-eval", path], f"{path}:2: ", needle, folders=[workdir])
    assert len(line) < 400, line  # one readable line, whatever the file holds
    if "NaN" in case or "Infinity" in case or "1e400" in case:
        assert 'quote them ("NaN")' in line or "gold answers are" in line


RAG_ROWS = {
    "NaN answer": ('{"id": "q1", "question": "q", "answer": NaN, "context_ids": ["a"]}', "'answer' is NaN"),
    "NaN id": ('{"id": NaN, "context_ids": ["a"], "reference_context_ids": ["a"]}', "'id' is NaN"),
    "NaN context id": (
        '{"id": "q1", "context_ids": [NaN], "reference_context_ids": ["nan"]}',
        "'context_ids' is NaN",
    ),
    "Infinity reference id": (
        '{"id": "q1", "context_ids": ["inf"], "reference_context_ids": [Infinity]}',
        "'reference_context_ids' is Infinity",
    ),
    "nested 100,000 deep": ('{"id": "q1", "contexts": ' + _deep() + "}", "JSON nested deeper than"),
}


@pytest.mark.parametrize("case", sorted(RAG_ROWS))
def test_hostile_rag_rows_are_one_line(case, workdir: Path, capsys) -> None:
    row, needle = RAG_ROWS[case]
    good = (
        '{"id": "q0", "question": "q", "answer": "a", "context_ids": ["a"], "reference_context_ids": ["a"]}'
    )
    path = workdir / "rag.jsonl"
    path.write_text(good + "\n" + row + "\n", encoding="utf-8")
    refused_by_cli(
        capsys, ["rag-eval", path, "--metrics", "context_recall_id"], f"{path}:2: ", needle, folders=[workdir]
    )


def test_a_nan_answer_no_longer_matches_a_nan_gold(tmp_path: Path) -> None:
    # The audit's case: both read as the text "nan" gave EM 1.
    from harness.qa.answers.predictions import read_predictions

    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "1", "golden_answers": [NaN], "pred_answer": NaN}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"p\.jsonl:1: 'golden_answers' holds NaN"):
        read_predictions(path)
    path.write_text('{"id": "1", "golden_answers": ["NaN"], "pred_answer": "NaN"}\n', encoding="utf-8")
    assert read_predictions(path).records[0].prediction == "NaN"  # quoted, it is text


def test_metrics_json_nested_deep_is_skipped_with_a_line_naming_it(workdir: Path, capsys) -> None:
    results = workdir / "results"
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(5)}
    run = {qid: {doc: 1.0 for doc in judged} | {"dx": 0.5} for qid, judged in qrels.items()}
    make_result(results, "toy", "good-model", run, qrels, FINGERPRINT)
    broken = make_result(results, "toy", "broken-model", run, qrels, FINGERPRINT)
    (broken / "metrics.json").write_text(_deep(), encoding="utf-8")
    before = snapshot(workdir)
    code = main(["table", str(results), "--metrics", "ndcg@10"])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    assert f"warning: skipped {broken}: {broken / 'metrics.json'}: JSON nested deeper than" in err
    assert_unchanged(before, workdir)


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"n_queries": "many"}, "'n_queries' must be a whole number"),
        ({"n_queries": 1e300}, "'n_queries' must be a whole number"),
        ({"model": ["x"]}, "'model' must be text"),
        ({"settings": [1]}, "'settings' must be a mapping"),
    ],
)
def test_edited_metrics_json_values_are_skipped_not_tracebacks(
    workdir: Path, capsys, payload, needle
) -> None:
    results = workdir / "results"
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(5)}
    run = {qid: {doc: 1.0 for doc in judged} | {"dx": 0.5} for qid, judged in qrels.items()}
    make_result(results, "toy", "good-model", run, qrels, FINGERPRINT)
    broken = make_result(results, "toy", "broken-model", run, qrels, FINGERPRINT)
    metrics = json.loads((broken / "metrics.json").read_text())
    (broken / "metrics.json").write_text(json.dumps(metrics | payload), encoding="utf-8")
    provenance = json.loads((broken / "provenance.json").read_text())
    (broken / "provenance.json").write_text(json.dumps(provenance | {"dataset": "x", "retrieval": 1}))
    before = snapshot(workdir)
    code = main(["table", str(results), "--metrics", "ndcg@10"])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    assert f"warning: skipped {broken}: {broken / 'metrics.json'}: {needle}" in err
    assert_unchanged(before, workdir)


def test_hostile_cache_manifests_are_listed_not_tracebacks(workdir: Path, capsys) -> None:
    cache = workdir / "cache"
    manifests = {
        "embeddings/toy__m__corpus__abcd/manifest.json": '{"num_shards": "x", "dataset": {"a": 1}, "key": [1]}',
        "embeddings/toy__m__queries__beef/manifest.json": '{"num_shards": 100000000000, "complete": true}',
        "bm25/cafe/manifest.json": _deep(),
        "rerank/m__dead/manifest.json": '{"key": NaN, "model": Infinity, "max_length": [1]}',
        "onnx/m__f00d/export.json": "[1]",
    }
    for relative, text in manifests.items():
        (cache / relative).parent.mkdir(parents=True)
        (cache / relative).write_text(text, encoding="utf-8")
    before = snapshot(workdir)
    started = time.perf_counter()
    code = main(["cache", "list"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err, err
    assert time.perf_counter() - started < 30  # never counts to num_shards=1e11
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip() and "entries" not in line}
    assert set(rows) == {"abcd", "beef", "cafe", "dead", "f00d"}
    assert all("partial" in rows[key] for key in ("abcd", "beef", "cafe", "f00d"))  # not trusted as complete
    assert_unchanged(before, workdir)


def test_the_json_reader_bounds_depth_everywhere(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + _deep() + "}", encoding="utf-8")
    for read in (read_json, read_json_object):
        with pytest.raises(InputError, match=rf"deep\.json: JSON nested deeper than {MAX_JSON_DEPTH} levels"):
            read(deep)
    assert read_json_or_none(deep) is None  # caches recompute it
    fine = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(fine, "x")  # the bound itself is allowed
    with pytest.raises(InputError, match=r"x:3: not valid JSON \(Expecting value at column 1\)"):
        parse_json('{\n"a":\n}', "x")
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{\n"a": "caf\xe9"}')
    with pytest.raises(InputError, match=r"latin\.json:2: not UTF-8 text"):
        read_json(latin)


def test_a_model_folder_with_a_deep_modules_json_is_one_error(tmp_path: Path) -> None:
    from harness.models.resolve import _read_json

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "modules.json").write_text(_deep(), encoding="utf-8")
    with pytest.raises(InputError, match=r"modules\.json: JSON nested deeper than"):
        _read_json(folder / "modules.json")


# -------------------------------------------------------------------------------------- one reader each

# Readers in other owners' files that still parse JSON themselves (to switch to harness.core.fileio):
# each entry is a file and how many direct calls it has left. A new direct call anywhere fails here.
JSON_READERS_ELSEWHERE: dict[str, int] = {}
_DIRECT_JSON = re.compile(r"\bjson\.loads?\(")
_DIRECT_YAML = re.compile(r"\byaml\.(safe_)?load(_all)?\(|\byaml\.(Safe|Full|Unsafe)?Loader\b")


def test_every_json_and_yaml_read_goes_through_the_one_reader() -> None:
    # At most the calls listed: a file that switches to the one reader only shrinks the list.
    direct_json, direct_yaml = {}, {}
    for path in sorted((REPO_ROOT / "harness").rglob("*.py")):
        relative = path.relative_to(REPO_ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        if relative != "harness/core/fileio.py" and (count := len(_DIRECT_JSON.findall(text))):
            direct_json[relative] = count
        if relative != "harness/core/config.py" and _DIRECT_YAML.search(text):
            direct_yaml[relative] = True
    assert direct_yaml == {}
    extra = {name: n for name, n in direct_json.items() if n > JSON_READERS_ELSEWHERE.get(name, 0)}
    assert extra == {}, "parse JSON with harness.core.fileio.parse_json / read_json instead"
