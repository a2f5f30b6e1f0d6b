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
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show debug lines, and the libraries' own info and debug lines, each with its logger's name",
    )
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


_PREFIXES = {logging.DEBUG: "debug", logging.INFO: "note", logging.WARNING: "warning", logging.ERROR: "error"}


class LogLineFormatter(logging.Formatter):
    """``note: ...`` / ``warning: ...`` lines, as the commands' own messages read; the logger's name only
    when ``with_names`` (--verbose), where it tells which library spoke."""

    def __init__(self, *, with_names: bool) -> None:
        super().__init__("%(message)s")
        self.with_names = with_names

    def format(self, record: logging.LogRecord) -> str:
        prefix = _PREFIXES.get(record.levelno) or ("error" if record.levelno > logging.ERROR else "debug")
        name = f"{record.name}: " if self.with_names else ""
        return f"{prefix}: {name}{super().format(record)}"


class ProgressBarLogHandler(logging.Handler):
    """Writes each log line with ``tqdm.write``: a running progress bar is cleared, the line printed above
    it and the bar redrawn, instead of the line being written through the bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # as logging.StreamHandler: a failing log line must not stop the command
            self.handleError(record)


def _ours_or_loud(record: logging.LogRecord) -> bool:
    """Without --verbose: the harness's notes, and only warnings and errors of the libraries (bm25s sets
    its own logger to DEBUG, transformers and faiss log at INFO)."""
    return record.levelno >= logging.WARNING or record.name == "harness" or record.name.startswith("harness.")


def configure_logging(*, verbose: bool) -> None:
    """Log lines through the progress bars, prefixed as the commands' messages; debug lines and the
    libraries' info only with ``verbose``. As ``logging.basicConfig``: a program that set up logging itself
    (an application embedding the CLI, pytest) keeps its handlers."""
    logging.getLogger("harness").setLevel(logging.DEBUG if verbose else logging.INFO)
    root = logging.getLogger()
    ours = [handler for handler in root.handlers if isinstance(handler, ProgressBarLogHandler)]
    if len(ours) != len(root.handlers):
        return
    for handler in ours:  # an earlier main() in this process: replaced, so --verbose applies now
        root.removeHandler(handler)
    handler = ProgressBarLogHandler()
    handler.setFormatter(LogLineFormatter(with_names=verbose))
    if not verbose:
        handler.addFilter(_ours_or_loud)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # --help, --version, or a wrong option already reported
        return exit_request.code if isinstance(exit_request.code, int) else 2
    configure_logging(verbose=args.verbose)
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
