"""One set of ranges for every source of options: the command line, an experiment file, ``--set``, Python.

Every number option of every command is bounded (its declared range, else a C int64 for a whole number and
any finite number otherwise) and typed strictly (``true`` is no number, ``1`` no yes/no, ``2.5`` no whole
number). The first half walks every numeric option of every command just outside and just inside its
range; the second takes the cases the fault audit reported (issue 33) through all four sources and checks
that a refused run is one ``error:`` line naming the option and its range, exit 2, no traceback, and that
no file under results, cache, data, the experiments folder or the inputs changed.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
from fault_snapshot import assert_unchanged, snapshot

import harness
from harness.api.commands import all_commands
from harness.cli import main
from harness.core.options import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    SEED_MAX,
    OptionsError,
    Range,
    cli_spec,
    scalar_type,
    value_range,
)

COMMANDS = all_commands()


# ------------------------------------------------------------------------------ every numeric option


def _required_values(record: Any) -> dict[str, Any]:
    """A value for each required option (the record's checks touch no file, so names suffice)."""
    values: dict[str, Any] = {}
    for name, info in record.model_fields.items():
        if info.is_required():
            values[name] = [f"{name}.txt"] if "list[" in str(info.annotation) else f"{name}.txt"
    return values


def _required_argv(record: Any) -> list[str]:
    """The command line of the required options, in the parser's order."""
    argv: list[str] = []
    for name, info in record.model_fields.items():
        if not info.is_required():
            continue
        spec = cli_spec(info)
        argv += [f"{name}.txt"] if spec.positional else [spec.option_strings(name)[0], f"{name}.txt"]
    return argv


def _numeric_options() -> list[tuple[str, str]]:
    return [
        (command, name)
        for command, entry in sorted(COMMANDS.items())
        for name, info in entry.options.model_fields.items()
        if scalar_type(info) in (int, float)
    ]


def _outside(bounds: Range, integer: bool) -> list[Any]:
    """Values just outside the range, and the wrong types a file or a Python caller could give."""
    if integer:
        low, high = bounds.whole()
        return [low - 1, high + 1, True, 2.5, "1e8"]
    values: list[Any] = [math.inf, -math.inf, math.nan, True, "inf", 10**400]
    values += [bound for bound in (bounds.above, bounds.below) if bound is not None]
    values += [bound - 1 for bound in (bounds.low,) if bound is not None]
    values += [bound * 2 + 1 for bound in (bounds.high,) if bound is not None]
    return values


def _inside(bounds: Range, integer: bool) -> list[Any]:
    """The range's own edges (accepted: the range is not tighter than it says)."""
    if integer:
        low, high = bounds.whole()
        return [low, high, str(high)]
    lower = (
        bounds.low if bounds.low is not None else bounds.above + 1e-9 if bounds.above is not None else -1e300
    )
    upper = (
        bounds.high if bounds.high is not None else bounds.below - 1e-9 if bounds.below is not None else 1e300
    )
    return [lower, upper, (lower + upper) / 2]


NUMERIC = _numeric_options()


def test_every_command_has_number_options_to_check() -> None:
    assert len(NUMERIC) > 60 and ("compare", "seed") in NUMERIC and ("fuse", "weights") in NUMERIC


@pytest.mark.parametrize(("command", "name"), NUMERIC)
def test_every_number_option_refuses_values_outside_its_range_in_one_line(command: str, name: str) -> None:
    record = COMMANDS[command].options
    info = record.model_fields[name]
    integer = scalar_type(info) is int
    bounds = value_range(info)
    for value in _outside(bounds, integer):
        with pytest.raises(OptionsError) as refused:
            record.checked({**_required_values(record), name: value})
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"{name}: "), message
        assert bounds.describe(integer) in message, message
    for value in _inside(bounds, integer):
        accepted = record.checked({**_required_values(record), name: value})
        got = getattr(accepted, name)
        assert (got[0] if isinstance(got, list) else got) == (int(value) if integer else float(value))


@pytest.mark.parametrize(("command", "name"), NUMERIC)
def test_the_command_line_says_the_same_range(
    command: str,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    record = COMMANDS[command].options
    info = record.model_fields[name]
    spec = cli_spec(info)
    if spec.hidden:
        pytest.skip(f"{name} has no command-line flag (files and Python only, checked above)")
    monkeypatch.chdir(tmp_path)
    integer = scalar_type(info) is int
    bounds = value_range(info)
    flag = spec.option_strings(name)[0]
    for value in [v for v in _outside(bounds, integer) if not isinstance(v, bool)]:
        # float("1e400") is inf, as 10**400 is beyond a float.
        text = "1e400" if value == 10**400 else str(value)
        assert main([*command.split(), *_required_argv(record), f"{flag}={text}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
        assert flag in err and bounds.describe(integer) in err, err
    assert list(tmp_path.iterdir()) == []


def test_yes_no_options_take_only_true_or_false() -> None:
    for value in (1, 0, "yes", "false", 2.0):
        with pytest.raises(OptionsError, match=r"^per_query: expected true or false, got "):
            harness.EvaluateOptions.checked({"qrels": "q", "run": "r", "per_query": value})
    assert harness.EvaluateOptions.checked({"qrels": "q", "run": "r", "per_query": True}).per_query is True


def test_text_is_read_as_the_command_line_reads_it() -> None:
    options = harness.CompareOptions.checked(
        {"qrels": "q", "baseline": "a", "others": "b", "seed": "1_000", "alpha": "0.01", "ks": "10"}
    )
    assert (options.seed, options.alpha, options.ks) == (1000, 0.01, [10])


def test_a_number_too_large_to_print_is_named_by_its_size() -> None:
    with pytest.raises(
        OptionsError, match=r"^seed: must be a whole number from 0 to 4,294,967,295, got a 16610-bit"
    ):
        harness.CompareOptions.checked({"qrels": "q", "baseline": "a", "others": "b", "seed": 10**5000})


def test_ranges_read_as_declared() -> None:
    assert Range(low=0, high=SEED_MAX).describe(True) == "a whole number from 0 to 4,294,967,295"
    assert Range().describe(True) == f"a whole number from {INT64_MIN:,} to {INT64_MAX:,}"
    assert Range(above=0, below=1).describe(False) == "between 0 and 1 (exclusive)"
    assert Range(above=0, high=86400).describe(False) == "a number above 0 and at most 86400"
    assert Range().describe(False) == "a finite number"
    assert not Range().contains(math.nan) and not Range().contains(2**63) and Range().contains(2**63 - 1)


# ----------------------------------------------------------------------------- the audit's cases, end to end


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """results/, cache/, data/ (the harness's, by environment), inputs/ with qrels and two runs; cwd there."""
    folders = {name: tmp_path / name for name in ("results", "cache", "data", "inputs", "experiments")}
    for name in ("results", "cache", "data", "inputs"):
        folders[name].mkdir()
        monkeypatch.setenv(f"HARNESS_{name.upper()}_DIR", str(folders[name]))
    monkeypatch.chdir(tmp_path)
    rng = random.Random(3)
    docs = [f"d{n}" for n in range(20)]
    judged = {f"q{n}": rng.sample(docs, 4) for n in range(8)}
    (folders["inputs"] / "qrels.txt").write_text(
        "".join(f"{qid} 0 {doc} {1 + n % 2}\n" for qid, row in judged.items() for n, doc in enumerate(row))
    )
    for run in ("a", "b"):
        lines = [
            f"{qid} Q0 {doc} {rank} {rng.random():.4f} {run}\n"
            for qid in judged
            for rank, doc in enumerate(docs, 1)
        ]
        (folders["inputs"] / f"run_{run}.trec").write_text("".join(lines))
    return folders


STEP_INPUTS = {
    "evaluate": {"qrels": "inputs/qrels.txt", "run": "inputs/run_a.trec"},
    "compare": {"qrels": "inputs/qrels.txt", "baseline": "inputs/run_a.trec", "others": "inputs/run_b.trec"},
    "eval": {"dataset": "scifact", "model": "bm25"},
    "table": {},
}
# (step kind, option, the value as the audit wrote it in YAML, the range the error must name)
AUDIT_CASES = [
    ("compare", "seed", "-5", "a whole number from 0 to 4,294,967,295"),
    ("compare", "seed", "-1", "a whole number from 0 to 4,294,967,295"),
    ("evaluate", "ks", "[9223372036854775808]", f"a whole number from 1 to {INT32_MAX:,}"),
    ("evaluate", "relevance_level", "1e20", f"a whole number from -2,147,483,648 to {INT32_MAX:,}"),
    ("evaluate", "relevance_level", "1.0e+20", f"a whole number from -2,147,483,648 to {INT32_MAX:,}"),
    ("table", "digits", "-1", "a whole number from 1 to 15"),
    ("eval", "top_k", "9223372036854775808", f"a whole number from 1 to {INT32_MAX:,}"),
    ("eval", "batch_size", "1e8", "a whole number from 1 to 1,048,576"),
    ("eval", "batch_size", "100000000", "a whole number from 1 to 1,048,576"),
    ("eval", "workers", "0", "a whole number from 1 to 1,024"),
    ("compare", "n_resamples", "0", "a whole number from 100 to 1,000,000"),
    ("compare", "alpha", ".nan", "between 0 and 1 (exclusive)"),
]
CASE_IDS = [f"{kind}-{name}={text}" for kind, name, text, _ in AUDIT_CASES]


def _experiment(path: Path, kind: str, extra: str = "") -> Path:
    lines = ["steps:", f"  - kind: {kind}"]
    lines += [f"    {key}: {value}" for key, value in STEP_INPUTS[kind].items()]
    path.write_text("\n".join(lines) + ("\n" + extra if extra else "") + "\n", encoding="utf-8")
    return path


def _one_error_line(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and len(err.splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.mark.parametrize(("kind", "name", "text", "allowed"), AUDIT_CASES, ids=CASE_IDS)
def test_an_experiment_file_is_refused_with_the_command_lines_range(
    workspace: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    kind: str,
    name: str,
    text: str,
    allowed: str,
) -> None:
    experiment = _experiment(workspace["inputs"].parent / "e.yaml", kind, f"    {name}: {text}")
    before = snapshot(*workspace.values(), experiment)
    code = main(["run", str(experiment)])
    _one_error_line(code, capsys.readouterr().err, "e.yaml", name, allowed)
    assert_unchanged(before, *workspace.values(), experiment)


@pytest.mark.parametrize(("kind", "name", "text", "allowed"), AUDIT_CASES, ids=CASE_IDS)
def test_a_set_override_is_refused_and_leaves_the_last_good_run(
    workspace: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    kind: str,
    name: str,
    text: str,
    allowed: str,
) -> None:
    experiment = _experiment(workspace["inputs"].parent / "e.yaml", kind)
    # A quick good run first: its experiment.yaml and steps.json must stay.
    if kind in ("evaluate", "compare"):
        assert main(["run", str(experiment)]) == 0
        assert (workspace["experiments"] / "e" / "steps.json").is_file()
    capsys.readouterr()
    before = snapshot(*workspace.values(), experiment)
    code = main(["run", str(experiment), "--set", f"{kind}.{name}={text}"])
    _one_error_line(code, capsys.readouterr().err, name, allowed)
    assert_unchanged(before, *workspace.values(), experiment)


def _cli_text(text: str) -> str:
    return {"[9223372036854775808]": "9223372036854775808", ".nan": "nan"}.get(text, text)


@pytest.mark.parametrize(("kind", "name", "text", "allowed"), AUDIT_CASES, ids=CASE_IDS)
def test_the_command_line_flag_is_refused_the_same_way(
    workspace: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    kind: str,
    name: str,
    text: str,
    allowed: str,
) -> None:
    argv = [kind]
    for key, value in STEP_INPUTS[kind].items():
        spec = cli_spec(COMMANDS[kind].options.model_fields[key])
        argv += [value] if spec.positional else [spec.option_strings(key)[0], value]
    flag = cli_spec(COMMANDS[kind].options.model_fields[name]).option_strings(name)[0]
    before = snapshot(*workspace.values())
    code = main([*argv, f"{flag}={_cli_text(text)}"])
    allowed_on_the_command_line = allowed.replace(" (exclusive)", "")
    _one_error_line(code, capsys.readouterr().err, flag, allowed_on_the_command_line)
    assert_unchanged(before, *workspace.values())


PYTHON_VALUES = {"[9223372036854775808]": [2**63], ".nan": math.nan, "1.0e+20": 1e20}


@pytest.mark.parametrize(("kind", "name", "text", "allowed"), AUDIT_CASES, ids=CASE_IDS)
def test_the_python_api_is_refused_the_same_way(
    workspace: dict[str, Path], kind: str, name: str, text: str, allowed: str
) -> None:
    function = getattr(harness, kind)
    value: Any = PYTHON_VALUES.get(text, text)
    if isinstance(value, str):
        value = float(value) if "e" in value else int(value)
    before = snapshot(*workspace.values())
    with pytest.raises(OptionsError) as refused:
        function(**STEP_INPUTS[kind], **{name: value})
    assert str(refused.value).startswith(f"{name}: ") and allowed in str(refused.value)
    assert "\n" not in str(refused.value)
    assert refused.value.exit_code == 2
    assert_unchanged(before, *workspace.values())


def test_inf_weights_are_refused_before_anything_is_fused(
    workspace: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(*workspace.values())
    runs = ["inputs/run_a.trec", "inputs/run_b.trec"]
    for weights in (["inf", "1"], ["1", "nan"], ["1e400", "1"]):
        code = main(
            ["fuse", *runs, "--method", "interpolation", "--weights", *weights, "-o", "inputs/f.trec"]
        )
        _one_error_line(code, capsys.readouterr().err, "--weights", "a finite number")
    with pytest.raises(OptionsError, match=r"^weights: must be a finite number, got inf"):
        harness.fuse(runs=runs, fuse="interpolation", weights=[math.inf, 1], output="inputs/f.trec")
    assert_unchanged(before, *workspace.values())
