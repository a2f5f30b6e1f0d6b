"""Every shell command shown in README.md and docs/*.md runs as shown.

Where the docs show commands (the convention every page follows):

- only fenced blocks tagged ```bash, ```sh or ```console hold commands (```text, ```yaml, ```json and bare
  fences are shown output or file contents);
- in a ```console block, a line starting with ``$ `` is a command, and the lines after it, up to the next
  ``$ `` line or the block's end, are what it prints on standard output (notes and warnings go to standard
  error and are not shown);
- in a ```bash or ```sh block, every line that is not blank and does not start with ``#`` is a command;
- in both, `` # ...`` after a command is a comment, and a line ending in ``\\`` continues on the next one;
- a command followed directly by a line ``# error: ...`` is shown failing: it must be refused with exactly
  that line.

The fast tests check every command without running it: a ``harness`` command line (also spelled
``.venv/bin/harness`` or ``python -m harness``) must parse with the real command-line parser into its options
record; a ``make`` command must name targets and variables the Makefile has; a ``pip install -e ".[...]"``
must name extras pyproject.toml declares; any other program must be one the docs name on purpose
(``EXTERNAL_PROGRAMS``). The slow test runs the cheap commands of ``RUN_FOR_REAL`` in a temporary folder, in
the order the README shows them, and checks that each prints exactly what the README shows.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from harness.api import COMMANDS, Command
from harness.cli import build_parser
from harness.core.options import record_from_namespace

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```(\w*)\s*$")  # indented too (a block inside a list item)
SHELL_BLOCKS = {"bash", "sh", "console"}
# Programs shown for the reader's benefit that the harness does not ship (LLM servers, Ray's own CLI, the
# venv module, MTEB read back through python -c): named here on purpose, so a new kind of command is noticed.
EXTERNAL_PROGRAMS = {"python", "python3", "vllm", "ollama", "llama-server", "ray", "source", "."}
# Values for the shell variables a command uses (a SLURM array task's index and count).
EXAMPLE_VARIABLES = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8"}
HARNESS_SPELLINGS = (
    ("harness",),
    (".venv/bin/harness",),
    ("python", "-m", "harness"),
    ("python3", "-m", "harness"),
)
# Run for real by the slow test, in this order: cheap (BM25 on scifact, the small example files, the runs
# the earlier commands wrote), and together they show every use case's commands on real data.
RUN_FOR_REAL = (
    "harness eval --dataset scifact --model bm25",
    "harness eval --dataset scifact --model bm25 bm25-lucene",
    "harness table results --metrics ndcg@10",
    "harness evaluate configs/examples/trec/qrels.txt configs/examples/trec/run_a.txt --metrics ndcg@10 recall@100 map",
    "harness compare configs/examples/trec/qrels.txt configs/examples/trec/run_a.txt configs/examples/trec/run_b.txt --metrics ndcg@10 map",
    "harness fuse results/scifact/bm25/run.trec results/scifact/bm25-lucene/run.trec --method rrf --output fused.trec",
    "harness evaluate data/scifact/qrels/test.tsv fused.trec --metrics ndcg@10 recall@100",
    "harness qa-eval configs/examples/answers.jsonl --metrics em,f1",
    "harness rag-eval configs/examples/rag_example.jsonl --metrics ids",
    "harness report results --output report.html",
)


@dataclass
class ShownCommand:
    """One command as a page shows it: where, its text, and what the page says it prints or refuses with."""

    page: str
    line: int
    text: str
    printed: list[str] | None = None  # console blocks only
    error: str | None = None
    argv: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _commands_of(path: Path) -> list[ShownCommand]:
    shown: list[ShownCommand] = []
    block: str | None = None
    pending = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            block = None if block is not None else fence.group(1)
            continue
        if block not in SHELL_BLOCKS:
            continue
        if pending:
            shown[-1].text += " " + line.strip().rstrip("\\").strip()
            pending = line if line.rstrip().endswith("\\") else ""
            continue
        stripped = line.strip()
        is_command = (
            stripped.startswith("$ ")
            if block == "console"
            else bool(stripped) and not stripped.startswith("#")
        )
        if is_command:
            text = stripped[2:] if block == "console" else stripped
            shown.append(
                ShownCommand(path.name, number, text.rstrip("\\").strip(), [] if block == "console" else None)
            )
            pending = line if line.rstrip().endswith("\\") else ""
        elif shown and stripped.startswith("# error: ") and shown[-1].line == number - 1:
            shown[-1].error = stripped[2:]
        elif block == "console" and shown and shown[-1].printed is not None:
            shown[-1].printed.append(line)
    for command in shown:
        command.argv = _argv(command.text)
    return shown


def _argv(text: str) -> list[str]:
    words = shlex.split(text, comments=True)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # VAR=value before the program
        words.pop(0)
    return [re.sub(r"\$(\w+)", lambda m: EXAMPLE_VARIABLES[m.group(1)], word) for word in words]


SHOWN = [command for page in PAGES for command in _commands_of(page)]


def _harness_args(argv: list[str]) -> list[str] | None:
    for spelling in HARNESS_SPELLINGS:
        if tuple(argv[: len(spelling)]) == spelling:
            return argv[len(spelling) :]
    return None


def _parse(arguments: list[str]) -> None:
    """Parse as the command line does and build the command's options record (its checks too); run nothing."""
    args = build_parser().parse_args(arguments)
    entry = next(entry for entry in COMMANDS if entry.name == args.command)
    if not isinstance(entry, Command):
        if getattr(args, "action", None) is None:
            return  # a group shown alone (`harness data`) prints its help
        entry = next(command for command in entry.commands if command.name == args.action)
    record_from_namespace(entry.options, args)


def _check_harness(command: ShownCommand, arguments: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    if command.error is None:
        _parse(arguments)
        return
    try:
        _parse(arguments)
    except SystemExit:
        assert capsys.readouterr().err.strip() == command.error, command.where
    else:
        raise AssertionError(f"{command.where}: shown failing with {command.error!r}, but it parses")


def _makefile() -> tuple[set[str], set[str]]:
    text = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z][\w-]*):(?!=)", text, re.M))
    variables = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*[?:]?=", text, re.M))
    return targets, variables


def _check_make(argv: list[str]) -> None:
    targets, variables = _makefile()
    for word in argv[1:]:
        if "=" in word:
            assert word.split("=", 1)[0] in variables, f"the Makefile has no variable {word.split('=', 1)[0]}"
        else:
            assert word in targets, f"the Makefile has no target {word}"


def _check_pip(argv: list[str]) -> None:
    assert argv[1] == "install", argv
    # The extras table of pyproject.toml, read by pattern: tomllib is not in Python 3.10's standard library.
    table = (
        (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[project.optional-dependencies]")[1]
    )
    declared = set(re.findall(r"^([\w-]+)\s*=", table.split("\n[")[0], re.M))
    for word in argv[2:]:
        extras = re.fullmatch(r"\.\[([\w,-]+)\]", word)
        if extras:
            missing = set(extras.group(1).split(",")) - set(declared)
            assert not missing, f"pyproject.toml declares no extra {sorted(missing)}"


def test_the_pages_show_commands_of_every_kind() -> None:
    kinds = {command.argv[0] for command in SHOWN}
    assert {"harness", "make"} <= kinds
    assert len(SHOWN) > 50
    assert set(RUN_FOR_REAL) <= {command.text for command in SHOWN if command.printed is not None}


@pytest.mark.parametrize("command", SHOWN, ids=[command.where for command in SHOWN])
def test_a_shown_command_parses(command: ShownCommand, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = _harness_args(command.argv)
    if arguments is not None:
        _check_harness(command, arguments, capsys)
    elif command.argv[0] == "make":
        _check_make(command.argv)
    elif command.argv[0].endswith("pip"):
        _check_pip(command.argv)
    else:
        assert command.argv[0] in EXTERNAL_PROGRAMS, f"{command.where}: unknown program {command.argv[0]}"


def test_a_mistyped_command_is_caught(capsys: pytest.CaptureFixture[str]) -> None:
    # The checks above must be able to fail: a wrong option, target, variable and extra are each refused.
    with pytest.raises(SystemExit):
        _parse(["eval", "--dataset", "scifact", "--top-kk", "5"])
    with pytest.raises(SystemExit):
        _parse(["evaluate", "q", "r", "--ks", "0"])
    with pytest.raises(AssertionError):  # shown failing, but it parses
        _check_harness(ShownCommand("x", 1, "", error="error: x"), ["cache", "list"], capsys)
    with pytest.raises(AssertionError):
        _check_make(["make", "evaluate"])
    with pytest.raises(AssertionError):
        _check_make(["make", "eval", "MODLE=bm25"])
    with pytest.raises(AssertionError):
        _check_pip(["pip", "install", "-e", ".[bm25,no-such-extra]"])


def test_the_extractor_follows_the_convention(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n# a comment\nharness evaluate q.tsv \\\n  r.trec   # why\n"
        "harness data download x --timeout -1\n# error: the line\n```\n"
        "```text\nharness not-a-command\n```\n"
        "```console\n$ harness cache list\nKEY  KIND\n$ make table\n```\n",
        encoding="utf-8",
    )
    shown = _commands_of(page)
    assert [(c.argv, c.printed, c.error) for c in shown] == [
        (["harness", "evaluate", "q.tsv", "r.trec"], None, None),
        (["harness", "data", "download", "x", "--timeout", "-1"], None, "error: the line"),
        (["harness", "cache", "list"], ["KEY  KIND"], None),
        (["make", "table"], [], None),
    ]


def _normalised(lines: list[str]) -> list[str]:
    # The eval table's last column is wall time ("6.3", or "0.5 (reused)"), which no two runs share.
    return [re.sub(r"(\s)\d+\.\d( \(reused\))?$", r"\1<seconds>\2", line.rstrip()) for line in lines]


@pytest.mark.slow
def test_the_cheap_commands_print_what_the_readme_shows(tmp_path: Path, beir_mirror: Path) -> None:
    shown = {c.text: c for c in SHOWN if c.page == "README.md" and c.printed is not None}
    (tmp_path / "configs").symlink_to(REPO_ROOT / "configs")
    env = {key: value for key, value in os.environ.items() if not key.startswith("HARNESS_")}
    env.update(HARNESS_BEIR_MIRROR=str(beir_mirror), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for text in RUN_FOR_REAL:
        command = shown[text]
        done = subprocess.run(
            [sys.executable, "-m", "harness", *_harness_args(command.argv)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{command.where}: {done.stderr[-2000:]}"
        printed = done.stdout.splitlines()
        assert _normalised(printed) == _normalised(command.printed), (
            f"{command.where}: `{text}` now prints\n" + "\n".join(printed)
        )
