"""The ``harness`` command: a thin argparse layer over the stage modules.

Each sub-command lives in its own module under ``harness.cli`` exposing
``register(subparsers)``, which adds its parser(s) and sets ``func`` to a
callable taking the parsed arguments and returning an exit code. Heavy
imports (torch, faiss) happen inside those callables so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import NoReturn

from harness import __version__
from harness.core.errors import HarnessError
from harness.core.fileio import os_error_line

# Order here is the order ``harness --help`` lists the commands in.
COMMAND_MODULES: list[str] = [
    "harness.cli.data_cmd",
    "harness.cli.eval_cmd",
    "harness.cli.encode_cmd",
    "harness.cli.evaluate_cmd",
    "harness.cli.fuse_cmd",
    "harness.cli.qa_cmd",
    "harness.cli.rag_cmd",
    "harness.cli.cache_cmd",
    "harness.cli.report_cmd",
    "harness.cli.diff_cmd",
    "harness.cli.run_cmd",
]


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
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


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
