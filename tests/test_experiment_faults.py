"""Hostile experiment files and ``--set`` values: refused in one line, and never a lost or reused bad file.

- the experiment's ``name`` is one plain folder name under ``experiments/`` (``../../../x`` is refused);
- every step has its own folder (ids unique ignoring case, not the experiment's own file names), also
  after ``--set STEP.id`` / ``STEP.kind``;
- everything is validated before anything is written: a refused run keeps the previous good run's
  ``experiment.yaml`` and ``steps.json`` and every other file byte for byte;
- step outputs are checksummed in ``step.json``; an output that was cut short, edited or removed is
  recomputed with a warning, never reused;
- options from files and ``--set`` go through the same records (ranges) as the command line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT
from fault_snapshot import assert_unchanged, refused_by_cli, snapshot

from harness.cli import main
from harness.core.fileio import file_digest

TREC = REPO_ROOT / "configs" / "examples" / "trec"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder, three levels down ``tmp_path`` so a ``../../../x`` escape would still land in it."""
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    for name in ("data", "cache", "results"):
        (tmp_path / name).mkdir()
        monkeypatch.setenv(f"HARNESS_{name.upper()}_DIR", str(tmp_path / name))
    (work / "trec").mkdir()
    for path in TREC.iterdir():
        (work / "trec" / path.name).write_bytes(path.read_bytes())
    return work


def write_experiment(folder: Path, document: dict, name: str = "x.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def two_steps(**top) -> dict:
    return {
        **top,
        "steps": [
            {
                "kind": "evaluate",
                "id": "a",
                "qrels": "trec/qrels.txt",
                "run": "trec/run_a.txt",
                "metrics": ["map"],
            },
            {
                "kind": "evaluate",
                "id": "b",
                "qrels": "trec/qrels.txt",
                "run": "trec/run_b.txt",
                "metrics": ["map"],
            },
        ],
    }


def statuses(output: Path) -> list[str]:
    return [step["status"] for step in json.loads((output / "steps.json").read_text())["steps"]]


# ------------------------------------------------------------------------------------ name and output


@pytest.mark.parametrize(
    ("in_file", "overrides", "shown"),
    [
        ({"name": "../../../x"}, [], "'../../../x'"),
        ({}, ["--set", "name=../../../x"], "'../../../x'"),
        ({}, ["--set", "name=.."], "'..'"),
        ({"name": "a/b"}, [], "'a/b'"),
        ({"name": "a\\b"}, [], "'a\\\\b'"),
        ({}, ["--set", "name=[a]"], "['a']"),
        ({}, ["--set", "name="], "''"),
    ],
)
def test_a_name_that_is_not_one_folder_is_refused(workdir: Path, capsys, in_file, overrides, shown) -> None:
    experiment = write_experiment(workdir, two_steps(**in_file))
    refused_by_cli(
        capsys,
        ["run", experiment, *overrides],
        f"{experiment}: name {shown} is not a plain folder name",
        "experiments/<name>",
        folders=[workdir.parents[2]],
    )


def test_an_output_that_is_not_a_path_is_refused(workdir: Path, capsys) -> None:
    experiment = write_experiment(workdir, two_steps())
    refused_by_cli(
        capsys,
        ["run", experiment, "--set", "output=[1]"],
        "output [1] is not a folder path",
        folders=[workdir.parents[2]],
    )


def test_an_output_that_is_a_file_is_one_line(workdir: Path, capsys) -> None:
    experiment = write_experiment(workdir, two_steps(output="taken"))
    (workdir / "taken").write_text("keep me\n", encoding="utf-8")
    refused_by_cli(capsys, ["run", experiment], "cannot write", "taken", folders=[workdir.parents[2]])


def test_a_plain_name_with_spaces_still_names_its_folder(workdir: Path, capsys) -> None:
    experiment = write_experiment(workdir, two_steps(name="my run 1", params={"qrels": "trec/qrels.txt"}))
    assert main(["run", str(experiment)]) == 0
    assert statuses(workdir / "experiments" / "my run 1") == ["ran", "ran"]
    assert sorted(path.name for path in (workdir / "experiments").iterdir()) == ["my run 1"]


# ------------------------------------------------------------------------------------------- step ids


STEP_ID_CASES = {
    "repeated in the file": (
        [{"id": "a"}, {"id": "a"}],
        [],
        "steps[2]: id 'a' is repeated (step 'a' has that folder)",
    ),
    "repeated by --set": ([{}, {}], ["--set", "b.id=a"], "steps[2]: id 'a' is repeated"),
    "repeated ignoring case": ([{"id": "Eval"}, {"id": "eval"}], [], "steps[2]: id 'eval' is repeated"),
    "the summary's name": (
        [{"id": "steps.json"}, {}],
        [],
        "id 'steps.json' is the name of the experiment's own file",
    ),
    "the resolved file's name": (
        [{}, {"id": "Experiment.YAML"}],
        [],
        "id 'Experiment.YAML' is the name of the experiment's own file",
    ),
    "not plain by --set": ([{}, {}], ["--set", "a.id=../up"], "steps[1]: id '../up' is not a plain name"),
    "a number by --set": ([{}, {}], ["--set", "a.id=5"], "steps[1]: id 5 is not a plain name"),
    "unknown kind by --set": ([{}, {}], ["--set", "a.kind=nope"], "steps[1]: unknown kind 'nope'"),
    "a kind that is a list": ([{}, {"kind": ["evaluate"]}], [], "steps[2]: unknown kind ['evaluate']"),
    "a kind that lacks the options by --set": ([{}, {}], ["--set", "a.kind=table"], "unknown key 'qrels'"),
}


@pytest.mark.parametrize("case", sorted(STEP_ID_CASES))
def test_every_step_gets_its_own_folder(workdir: Path, capsys, case: str) -> None:
    changes, overrides, needle = STEP_ID_CASES[case]
    document = two_steps()
    for step, change in zip(document["steps"], changes, strict=True):
        step.update(change)
    experiment = write_experiment(workdir, document)
    refused_by_cli(
        capsys, ["run", experiment, *overrides], f"{experiment}: ", needle, folders=[workdir.parents[2]]
    )


# ------------------------------------------------------------------------- a refused run writes nothing


@pytest.fixture
def good_run(workdir: Path) -> tuple[Path, Path]:
    """An experiment that ran once, cleanly: ``(experiment file, its output folder)``."""
    experiment = write_experiment(workdir, two_steps(output="out"))
    assert main(["run", str(experiment)]) == 0
    return experiment, workdir / "out"


REFUSED_SETS = {
    "a missing input": (["--set", "a.qrels=missing.txt"], "missing.txt"),
    "a later step's missing input": (["--set", "b.run=missing.txt"], "missing.txt"),
    "an option out of range": (["--set", "a.ks=[-1]"], "ks"),
    "an unknown option": (["--set", "a.colour=red"], "unknown key 'colour'"),
    "an unknown key": (["--set", "nope=1"], "--set nope"),
    "a bad metric": (["--set", "b.metrics=[nope@10]"], "nope"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_SETS))
def test_a_refused_set_run_keeps_the_previous_good_run(good_run, capsys, case: str) -> None:
    experiment, output = good_run
    overrides, needle = REFUSED_SETS[case]
    records = {name: file_digest(output / name) for name in ("experiment.yaml", "steps.json")}
    refused_by_cli(capsys, ["run", experiment, *overrides], needle, folders=[output.parents[3]])
    assert {name: file_digest(output / name) for name in records} == records


def test_a_refused_first_run_leaves_no_folder_behind(workdir: Path, capsys) -> None:
    experiment = write_experiment(workdir, two_steps(output="fresh/out"))
    (workdir / "fresh").mkdir()
    refused_by_cli(
        capsys, ["run", experiment, "--set", "a.qrels=missing.txt"], "missing.txt", folders=[workdir]
    )
    assert list((workdir / "fresh").iterdir()) == []
    default = write_experiment(workdir, two_steps(), name="y.yaml")
    refused_by_cli(capsys, ["run", default, "--set", "a.run=missing.txt"], "missing.txt", folders=[workdir])
    assert not (workdir / "experiments").exists()


def test_a_step_that_ran_before_a_refusal_is_recorded(good_run, capsys) -> None:
    experiment, output = good_run
    code = main(["run", str(experiment), "--set", "a.metrics=[mrr]", "--set", "b.run=missing.txt"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: ")
    summary = json.loads((output / "steps.json").read_text())
    assert [step["status"] for step in summary["steps"]] == ["ran"]  # step a's folder holds the new output
    assert summary["stopped"]["id"] == "b" and "missing.txt" in summary["stopped"]["error"]
    resolved = yaml.safe_load((output / "experiment.yaml").read_text())
    assert resolved["steps"][0]["metrics"] == ["mrr"]


# -------------------------------------------------------------------------------- checksummed outputs


def test_step_json_records_a_checksum_per_output(good_run) -> None:
    _, output = good_run
    record = json.loads((output / "a" / "step.json").read_text())
    assert record["outputs"] and set(record["checksums"]) == set(record["outputs"])
    for path, checksum in record["checksums"].items():
        assert file_digest(path) == checksum


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:20])


def _edit(path: Path) -> None:  # same length, one byte changed
    data = bytearray(path.read_bytes())
    data[data.index(b"0")] = ord("9")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "line"),
    [
        (_truncate, "warning: step 'a': its output {output} changed since the step wrote it"),
        (_edit, "warning: step 'a': its output {output} changed since the step wrote it"),
        (Path.unlink, "note: step 'a': its output {output} is gone; recomputing"),
    ],
    ids=["truncated", "edited", "removed"],
)
def test_a_damaged_output_is_recomputed_with_a_warning(good_run, capsys, damage, line) -> None:
    experiment, output = good_run
    evaluation = output / "a" / "evaluation.json"
    good = evaluation.read_bytes()
    untouched = file_digest(output / "b" / "evaluation.json")
    damage(evaluation)

    assert main(["run", str(experiment), "--dry-run"]) == 0  # the plan says so, and writes nothing
    out = capsys.readouterr().out
    assert "1. a [evaluate]" in out and "recomputing" not in out and ": runs (" in out.split("2. b")[0]

    assert main(["run", str(experiment)]) == 0
    err = capsys.readouterr().err
    assert line.format(output=Path("out") / "a" / "evaluation.json") in err
    assert evaluation.read_bytes() == good  # recomputed, not reused
    assert statuses(output) == ["ran", "reused"]
    assert file_digest(output / "b" / "evaluation.json") == untouched


@pytest.mark.parametrize(
    ("record", "line"),
    [
        ("[" * 100_000 + "]" * 100_000, "warning: step 'a': {record} is damaged; recomputing"),
        ('{"key": "KEY", "outputs": 5}', "warning: step 'a': {record} is damaged; recomputing"),
        ('{"key": "KEY", "outputs": ["OUTPUT"]}', "note: step 'a': {record} has no output checksums"),
        ('{"key": "KEY", "outputs": ["/dev/zero"], "checksums": {"/dev/zero": "0"}}', "/dev/zero is gone"),
        ('{"key": "KEY", "outputs": ["/"], "checksums": {"/": "0"}}', "its output / is gone"),
    ],
    ids=["nested-deep", "outputs-not-a-list", "no-checksums", "a-device", "the-root-folder"],
)
def test_a_damaged_step_record_is_recomputed_never_trusted(good_run, capsys, record, line) -> None:
    experiment, output = good_run
    step_json = output / "a" / "step.json"
    previous = json.loads(step_json.read_text())
    text = record.replace("KEY", previous["key"]).replace("OUTPUT", previous["outputs"][0])
    step_json.write_text(text, encoding="utf-8")
    started = time.perf_counter()
    assert main(["run", str(experiment)]) == 0
    assert time.perf_counter() - started < 60  # never reads /dev/zero or walks /
    err = capsys.readouterr().err
    assert line.format(record=Path("out") / "a" / "step.json") in err, err
    assert statuses(output) == ["ran", "reused"]
    assert json.loads(step_json.read_text())["checksums"]  # rewritten whole


def test_an_unchanged_run_reuses_every_step_and_changes_no_output(good_run, capsys) -> None:
    experiment, output = good_run
    outputs = snapshot(output / "a", output / "b")
    assert main(["run", str(experiment)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert statuses(output) == ["reused", "reused"]
    assert_unchanged(outputs, output / "a", output / "b")


# -------------------------------------------------------------- options from files = the command line's


def eval_step(**options) -> dict:
    return {"kind": "eval", "dataset": "scifact", "model": "bm25", **options}


def compare_step(**options) -> dict:
    return {
        "kind": "compare",
        "qrels": "trec/qrels.txt",
        "baseline": "trec/run_a.txt",
        "others": ["trec/run_b.txt"],
        **options,
    }


def table_step(**options) -> dict:
    return {"kind": "table", "results_dir": "results", **options}


# (the step in the file, --set overrides, the key the error must name). Eval steps run with --dry-run:
# the records refuse these values at load, before any data is touched.
OPTION_CASES = {
    "seed: -5": (compare_step(seed=-5), [], "seed"),
    "--set compare.seed=-1": (compare_step(), ["--set", "compare.seed=-1"], "seed"),
    "ks: [2**63]": (compare_step(ks=[2**63]), [], "ks"),
    "--set evaluate ks=[0]": (compare_step(), ["--set", "compare.ks=[0]"], "ks"),
    "relevance_level: 1e20 (a float)": (compare_step(relevance_level=1e20), [], "relevance_level"),
    "relevance_level: 1e20 (YAML text)": (
        compare_step(),
        ["--set", "compare.relevance_level=1e20"],
        "relevance_level",
    ),
    "digits: -1": (table_step(digits=-1), [], "digits"),
    "n_resamples: 0": (compare_step(n_resamples=0), [], "n_resamples"),
    "table n_resamples: 0": (table_step(n_resamples=0), [], "n_resamples"),
    "top_k: 2**63": (eval_step(top_k=2**63), [], "top_k"),
    "batch_size: 1e8": (eval_step(batch_size=1e8), [], "batch_size"),
    "--set eval.batch_size=1e8": (eval_step(), ["--set", "eval.batch_size=1e8"], "batch_size"),
    "workers: 0": (eval_step(workers=0), [], "workers"),
    "seed: true": (compare_step(seed=True), [], "seed"),
    "alpha: .nan": (compare_step(), ["--set", "compare.alpha=.nan"], "alpha"),
}


@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_options_from_files_and_set_are_checked_as_on_the_command_line(
    workdir: Path, capsys, case: str
) -> None:
    step, overrides, key = OPTION_CASES[case]
    (workdir / "results").mkdir()
    experiment = write_experiment(workdir, {"steps": [step]})
    dry = ["--dry-run"] if step["kind"] == "eval" else []
    line = refused_by_cli(
        capsys, ["run", experiment, *overrides, *dry], f"{experiment}: ", folders=[workdir.parents[2]]
    )
    assert f"): {key}: " in line, line  # names the step and the key, then what is allowed
