"""The ``harness`` command: a thin argparse layer over the public API (:mod:`harness.api`).

Every command's parser is generated from its options record; running it builds the record from the
command line, calls the command's public function and prints what the result renders (standard output)
and its messages (standard error). The exit code is the result's.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, NoReturn

from harness import __version__
from harness.api import COMMANDS, Command, CommandGroup
from harness.core.errors import HarnessError
from harness.core.fileio import os_error_line
from harness.core.options import add_options, record_from_namespace


class OneLineErrorParser(argparse.ArgumentParser):
    """Wrong options get one ``error:`` line naming the command and pointing at its ``--help``.

    Sub-command parsers are created with the parent's class, so every command behaves the same.
    """

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="harness",
        description="Benchmark retrievers on BEIR: data, encoding, FAISS search, trec_eval-exact metrics, "
        "significance tests and reports.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for entry in COMMANDS:
        if isinstance(entry, Command):
            _add_command(subparsers, entry)
        else:
            _add_group(subparsers, entry)
    return parser


def _add_command(subparsers: argparse._SubParsersAction, command: Command) -> None:
    parser = subparsers.add_parser(command.name, help=command.help, description=command.description)
    add_options(parser, command.options)
    parser.set_defaults(func=lambda args: _run(command, args))


def _add_group(subparsers: argparse._SubParsersAction, group: CommandGroup) -> None:
    parser = subparsers.add_parser(group.name, help=group.help, description=group.description)
    actions = parser.add_subparsers(title=group.title, dest="action", metavar="ACTION")
    # A group that needs its action (``harness cache``) refuses to run without one; the others show help.
    actions.required = group.required
    for command in group.commands:
        _add_command(actions, command)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _run(command: Command, args: argparse.Namespace) -> int:
    """Build the record from the command line, call the command, print its result."""
    options = record_from_namespace(command.options, args)
    streams: dict[str, Any] = {"echo": print} if command.echo else {}
    if command.notify:
        streams["notify"] = _to_stderr
    result = command.function(options, **streams)
    text = result.render()
    if text:
        print(text)
    for message in result.messages:
        print(message, file=sys.stderr)
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # --help, --version, or a wrong option already reported
        return exit_request.code if isinstance(exit_request.code, int) else 2
    # Libraries (faiss, transformers) log chatter at INFO; show theirs from WARNING, ours from INFO.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("harness").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:  # the reader of stdout (`| head`) has gone: not an error of ours
        # Python would complain again flushing stdout at exit; point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:  # e.g. a full disk under a library's own writer: still one line, no traceback
        print(f"error: {os_error_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; finished shards and files are kept, rerun to resume", file=sys.stderr)
        return 130
