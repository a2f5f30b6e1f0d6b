"""Every command is one options record; its parser is generated from it, and each default is written once.

The source is read with ``ast``: an option's default literal (``1000`` for ``top_k``, ``"Flat"`` for
``index``) bound to the option's name a second time anywhere in the package (a class field, a keyword
argument, a function's default, ``.get("top_k", 1000)``, a dict entry, an argparse ``default=``) is a
copy that can drift from the record, and fails here.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from harness.api import COMMANDS, Command, CommandGroup
from harness.api.commands import all_commands
from harness.cli import build_parser
from harness.core.options import OptionsRecord, field_defaults

TRIVIAL = (None, True, False, 0, 1, "")


def _commands() -> dict[str, Command]:
    return all_commands(COMMANDS)


def _defaults() -> set[tuple[str, object]]:
    """(option name, default literal) of every command's options whose default is worth counting."""
    pairs = set()
    for command in _commands().values():
        for name, value in field_defaults(command.options).items():
            if isinstance(value, int | float | str) and not isinstance(value, bool) and value not in TRIVIAL:
                pairs.add((name, value))
    return pairs


def _literal(node: ast.AST | None) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        return -node.operand.value
    return _NOT_LITERAL


_NOT_LITERAL = object()


def _first_argument(call: ast.AST) -> object:
    if isinstance(call, ast.Call) and call.args:
        return _literal(call.args[0])
    return _literal(call)


def _bindings(tree: ast.AST) -> list[tuple[str, object]]:
    """Every (name, literal) the source binds: fields, keywords, defaults, .get, dict entries, add_argument."""
    found: list[tuple[str, object]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found.append((node.target.id, _first_argument(node.value)))
        elif isinstance(node, ast.keyword) and node.arg:
            found.append((node.arg, _literal(node.value)))
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            for arg, default in zip(
                positional[len(positional) - len(node.defaults) :], node.defaults, strict=True
            ):
                found.append((arg.arg, _literal(default)))
            for arg, default in zip(node.kwonlyargs, node.kw_defaults, strict=True):
                found.append((arg.arg, _literal(default)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found += _call_bindings(node)
        elif isinstance(node, ast.Dict):
            found += [
                (key.value, _literal(value))
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            ]
    return found


def _call_bindings(node: ast.Call) -> list[tuple[str, object]]:
    name = node.func.attr
    if name == "get" and len(node.args) == 2 and isinstance(node.args[0], ast.Constant):
        return [(str(node.args[0].value), _literal(node.args[1]))]
    if name == "add_argument" and node.args and isinstance(node.args[0], ast.Constant):
        flag = str(node.args[0].value).lstrip("-").replace("-", "_")
        return [(flag, _literal(keyword.value)) for keyword in node.keywords if keyword.arg == "default"]
    return []


def test_every_command_is_a_record_with_a_generated_parser() -> None:
    assert all(isinstance(entry, Command | CommandGroup) for entry in COMMANDS)
    assert all(issubclass(command.options, OptionsRecord) for command in _commands().values())
    listed = {action.dest for action in build_parser()._actions if action.dest == "command"}
    assert listed == {"command"}
    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(top.choices) == [entry.name for entry in COMMANDS]  # nothing registered another way


def test_each_option_default_is_written_once() -> None:
    wanted = _defaults()
    assert ("top_k", 1000) in wanted and ("index", "Flat") in wanted and ("batch_size", 128) in wanted
    counts: Counter[tuple[str, object]] = Counter()
    places: dict[tuple[str, object], list[str]] = {}
    for path in sorted((REPO_ROOT / "harness").rglob("*.py")):
        for binding in _bindings(ast.parse(path.read_text(encoding="utf-8"))):
            if binding in wanted:
                counts[binding] += 1
                places.setdefault(binding, []).append(str(path.relative_to(REPO_ROOT)))
    repeated = {f"{name}={value!r}": places[(name, value)] for (name, value), n in counts.items() if n > 1}
    assert repeated == {}


def test_the_check_finds_a_second_literal(tmp_path: Path) -> None:
    """The analysis itself: a field, a keyword, a default, a .get and an argparse default are all seen."""
    source = (
        "class A:\n    top_k: int = 1000\n"
        "f(top_k=1000)\n"
        "def g(top_k=1000): ...\n"
        "d.get('top_k', 1000)\n"
        "p.add_argument('--top-k', type=int, default=1000)\n"
        "x = {'top_k': 1000}\n"
    )
    assert _bindings(ast.parse(source)).count(("top_k", 1000)) == 6


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for part in name.split():
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[part]
    return parser


@pytest.mark.parametrize("name", sorted(_commands()))
def test_the_parser_has_exactly_the_records_options_and_defaults(name: str) -> None:
    command = _commands()[name]
    parser = _subparser(name)
    dests = {action.dest for action in parser._actions} - {"help"}
    shown = {
        field
        for field, info in command.options.model_fields.items()
        if not (info.json_schema_extra or {}).get("cli").hidden
    }
    assert dests == shown
    for action in parser._actions:
        if action.dest in shown and not action.required and action.option_strings:
            assert action.default == field_defaults(command.options)[action.dest], (name, action.dest)


def _written_paths() -> list[tuple[str, str]]:
    """(command, option) of every option naming a file or folder the command writes."""
    return [
        (command_name, name)
        for command_name, command in sorted(_commands().items())
        for name in command.options.model_fields
        if name == "output" or name.endswith("save_path")
    ]


def test_every_option_a_command_writes_to_is_guarded() -> None:
    """An output is declared ``role="output"`` so the record refuses one naming an input or a result."""
    from harness.core.options import cli_spec

    written = _written_paths()
    assert ("evaluate", "output") in written and ("evaluate", "ultrarag_save_path") in written
    unguarded = [
        f"{command}.{name}"
        for command, name in written
        if cli_spec(_commands()[command].options.model_fields[name]).role != "output"
    ]
    assert unguarded == []
