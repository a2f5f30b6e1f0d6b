"""Options records: each command's options declared once, read from a command line or from a file.

A command's options are one pydantic record (:class:`OptionsRecord`, unknown keys are errors). Each
field is declared with :func:`option`: its type and default (the annotation and the default), its help
text, its flags, its choices and its range. From that one declaration come

* the command's argparse parser (:func:`add_options`): flags, help, metavar, choices, and a parse
  function that checks the range with the one-line message the command line has always given;
* the checks an experiment step's or a Python caller's values get (:meth:`OptionsRecord` validators):
  the same choices and range, so ``top_k: 0`` in a file is refused as ``--top-k 0`` is.

Range and choices live in the option's :class:`CliSpec`, not in pydantic constraints, so that a list's
elements (``--ks 10 100``) are checked as single values are and both sources say the same thing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

from harness.core.errors import OutputError
from harness.core.fileio import check_output_file

# The real range of numeric options. Cut-offs, depths and grades end up in C ints (FAISS, trec_eval), so
# they stay within 32 bits.
INT32_MAX = 2**31 - 1
SEED_MAX = 2**32 - 1  # numpy seeds are non-negative; 32 bits as in every seeded tool
MAX_BATCH_SIZE = 1 << 20
MAX_WORKERS = 1024
MAX_DIGITS = 15  # a float64 holds 15-17 significant digits
MAX_RETRIES = 100
MAX_TIMEOUT = 24 * 3600.0

_UNSET: Any = object()


# ------------------------------------------------------------------------------ argparse value types


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """argparse type: a whole number from ``low`` to ``high``; the error names the range."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low:,} to {high:,}, got {text!r}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low:,} to {high:,}, got {text}")
        return value

    parse.__name__ = "whole number"
    return parse


def number_above(low: float, high: float) -> Callable[[str], float]:
    """argparse type: a finite number greater than ``low`` and at most ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number above {low:g} up to {high:g}, got {text!r}") from None
        if not low < value <= high:  # NaN fails both comparisons
            raise argparse.ArgumentTypeError(f"must be above {low:g} and at most {high:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def probability(text: str) -> float:
    """argparse type: a number strictly between 0 and 1 (a significance level)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def output_file(text: str) -> Path:
    """argparse type: a file to write; refused now if it is a folder or its folder does not exist."""
    try:
        return check_output_file(Path(text))
    except OutputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def folder(text: str) -> Path:
    """argparse type: a folder the command reads or fills (it may not exist yet); a file there is refused."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a file, not a folder; give a folder path")
    return path


class DeprecatedAlias(argparse.Action):
    """An old option spelling kept for one release: stores into the new option, with one note on stderr."""

    def __init__(self, option_strings, dest, *, new: str, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"note: {option_string} is deprecated, use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


# ------------------------------------------------------------------------------------- declaration


@dataclass(frozen=True)
class Range:
    """A numeric option's range: ``low``/``high`` inclusive, ``above``/``below`` exclusive."""

    low: float | None = None
    high: float | None = None
    above: float | None = None
    below: float | None = None

    def parser(self, integer: bool) -> Callable[[str], Any]:
        """The argparse type that checks this range with the command line's message."""
        if integer:
            return whole_number(int(self.low), int(self.high))
        if self.above == 0 and self.below == 1:
            return probability
        return number_above(self.above, self.high)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is outside the range, or None."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None  # the type check has its own message
        if self.low is not None and self.high is not None and not self.low <= value <= self.high:
            return f"must be from {self.low:,} to {self.high:,}, got {value}"
        if self.above is not None and not value > self.above:
            return f"must be above {self.above:g}, got {value}"
        if self.below is not None and not value < self.below:
            return f"must be below {self.below:g}, got {value}"
        if self.high is not None and self.low is None and not value <= self.high:
            return f"must be at most {self.high:g}, got {value}"
        return None


@dataclass(frozen=True)
class CliSpec:
    """How one option looks on the command line (everything argparse needs besides its default)."""

    help: str | None = None
    flags: tuple[str, ...] = ()  # empty: ``--name-with-dashes``; positional options have none
    positional: bool = False
    metavar: str | None = None
    nargs: str | int | None = None
    choices: tuple[Any, ...] | None = None
    range: Range | None = None
    parse: Callable[[str], Any] | None = None  # argparse type; derived from ``range`` when not given
    action: str | None = None  # "store_true", "append", "store_const"
    const: Any = None
    negative: str | None = None  # store_const False under this flag, exclusive with the option
    deprecated: tuple[str, ...] = ()  # old spellings: still accepted, with a note, not listed in --help
    group: tuple[str, str | None] | None = None  # (title, description) of an argument group
    exclusive: str | None = None  # options naming the same group here are mutually exclusive
    hidden: bool = False  # accepted from files and Python only (no command-line flag)

    def option_strings(self, name: str) -> list[str]:
        return list(self.flags) or [f"--{name.replace('_', '-')}"]


def option(
    default: Any = _UNSET,
    *,
    default_factory: Callable[[], Any] | None = None,
    help: str | None = None,
    flags: Sequence[str] = (),
    positional: bool = False,
    metavar: str | None = None,
    nargs: str | int | None = None,
    choices: Sequence[Any] | None = None,
    low: float | None = None,
    high: float | None = None,
    above: float | None = None,
    below: float | None = None,
    parse: Callable[[str], Any] | None = None,
    action: str | None = None,
    const: Any = None,
    negative: str | None = None,
    deprecated: Sequence[str] = (),
    group: tuple[str, str | None] | None = None,
    exclusive: str | None = None,
    hidden: bool = False,
) -> Any:
    """One option of a command: a pydantic field carrying its :class:`CliSpec`. No default: required."""
    bounds = (low, high, above, below)
    spec = CliSpec(
        help=help,
        flags=tuple(flags),
        positional=positional,
        metavar=metavar,
        nargs=nargs,
        choices=tuple(choices) if choices is not None else None,
        range=Range(*bounds) if any(bound is not None for bound in bounds) else None,
        parse=parse,
        action=action,
        const=const,
        negative=negative,
        deprecated=tuple(deprecated),
        group=group,
        exclusive=exclusive,
        hidden=hidden,
    )
    extra = {"cli": spec}
    if default_factory is not None:
        return Field(default_factory=default_factory, description=help, json_schema_extra=extra)
    if default is _UNSET:
        return Field(description=help, json_schema_extra=extra)
    return Field(default, description=help, json_schema_extra=extra)


def cli_spec(info: FieldInfo) -> CliSpec:
    """The command-line spec of a field (a plain field without one: a default ``--name`` option)."""
    extra = info.json_schema_extra
    spec = extra.get("cli") if isinstance(extra, dict) else None
    return spec if isinstance(spec, CliSpec) else CliSpec(help=info.description)


class OptionsRecord(BaseModel):
    """Base of every command's options: unknown keys are errors; choices and ranges are checked.

    ``top-k`` (the option as typed on the command line) is accepted for ``top_k`` in files.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    @model_validator(mode="before")
    @classmethod
    def _as_typed_on_the_command_line(cls, data: Any) -> Any:
        """``top-k`` is ``top_k``; one name where the option takes several (``dataset: scifact``) is a list."""
        if not isinstance(data, dict):
            return data
        values = {str(key).replace("-", "_"): value for key, value in data.items()}
        for name, value in values.items():
            info = cls.model_fields.get(name)
            if info is not None and isinstance(value, str | int | float | Path) and "list[" in str(info.annotation):
                values[name] = [value]
        return values

    @classmethod
    def coerce(cls, options: OptionsRecord | None, values: dict[str, Any]) -> Any:
        """The record a public function was called with: given whole, or built from keyword options."""
        if options is not None and values:
            raise TypeError(f"give a {cls.__name__} or keyword options, not both")
        if options is None:
            return cls.model_validate(values)
        if not isinstance(options, cls):
            raise TypeError(f"expected {cls.__name__}, got {type(options).__name__}")
        return options

    @model_validator(mode="after")
    def _within_choices_and_range(self) -> OptionsRecord:
        for name, info in type(self).model_fields.items():
            problem = _problem(cli_spec(info), getattr(self, name))
            if problem:
                raise ValueError(f"{name}: {problem}")
        return self

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Each record's docstring lists its options, so ``help()`` on it says what it takes."""
        super().__pydantic_init_subclass__(**kwargs)
        cls.__doc__ = f"{(cls.__doc__ or cls.__name__).rstrip()}\n\n{options_doc(cls)}"

    def replace(self, **changes: Any) -> OptionsRecord:
        """A copy with ``changes``, checked as the original was."""
        return type(self).model_validate({**self.model_dump(), **changes})


def options_doc(record: type[OptionsRecord]) -> str:
    """``Options:`` then one line per field: its name, type, default and help (``%(default)s`` filled)."""
    lines = ["Options:"]
    for name, info in record.model_fields.items():
        spec = cli_spec(info)
        default = "required" if info.is_required() else f"default {_default(info)!r}"
        described = (spec.help or "").replace("%(default)s", str(_default(info)))
        flag = "" if spec.hidden or spec.positional else f" [{spec.option_strings(name)[0]}]"
        lines.append(f"    {name} ({_type_name(info)}, {default}){flag}: {described}".rstrip(": "))
    return "\n".join(lines)


def _type_name(info: FieldInfo) -> str:
    return str(info.annotation).replace("typing.", "").replace("pathlib.", "").replace("<class '", "").replace("'>", "")


def _problem(spec: CliSpec, value: Any) -> str | None:
    values = value if isinstance(value, list | tuple) else [value]
    for item in values:
        if item is None:
            continue
        if spec.choices is not None and item not in spec.choices:
            return f"{item!r} is not one of {', '.join(map(str, spec.choices))}"
        if spec.range is not None and (problem := spec.range.problem(item)):
            return problem
    return None


# ------------------------------------------------------------------------------------ the parser


def _default(info: FieldInfo) -> Any:
    if info.default_factory is not None:
        return info.default_factory()
    return None if info.is_required() else info.default


def _is_integer(info: FieldInfo) -> bool:
    return "int" in str(info.annotation) and "float" not in str(info.annotation)


def add_options(parser: argparse.ArgumentParser, record: type[OptionsRecord]) -> None:
    """Add every command-line option of ``record`` to ``parser``, in declaration order."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    exclusives: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for name, info in record.model_fields.items():
        spec = cli_spec(info)
        if spec.hidden:
            continue
        target: Any = parser
        if spec.group is not None:
            if spec.group[0] not in groups:
                groups[spec.group[0]] = parser.add_argument_group(*spec.group)
            target = groups[spec.group[0]]
        if spec.exclusive is not None:
            if spec.exclusive not in exclusives:
                exclusives[spec.exclusive] = target.add_mutually_exclusive_group()
            target = exclusives[spec.exclusive]
        _add_one(target, name, info, spec)


def _add_one(target: Any, name: str, info: FieldInfo, spec: CliSpec) -> None:
    kwargs: dict[str, Any] = {"help": spec.help}
    if spec.metavar is not None:
        kwargs["metavar"] = spec.metavar
    if spec.action in ("store_true", "store_const"):
        kwargs["action"] = spec.action
        if spec.action == "store_const":
            kwargs["const"] = spec.const
    else:
        kwargs["nargs"] = spec.nargs
        kwargs["choices"] = spec.choices
        parse = spec.parse or (spec.range.parser(_is_integer(info)) if spec.range else None)
        if parse is not None:
            kwargs["type"] = parse
        if spec.action:
            kwargs["action"] = spec.action
    kwargs = {key: value for key, value in kwargs.items() if value is not None}
    if spec.positional:
        target.add_argument(name, **kwargs)
        return
    default = _default(info)
    if spec.action == "store_true" and not default:
        default = False
    if spec.negative:
        exclusive = target.add_mutually_exclusive_group()
        exclusive.add_argument(*spec.option_strings(name), dest=name, default=default, **kwargs)
        exclusive.add_argument(spec.negative, dest=name, action="store_const", const=not spec.const)
        return
    if info.is_required() and spec.action is None:
        kwargs["required"] = True
    target.add_argument(*spec.option_strings(name), dest=name, default=default, **kwargs)
    for old in spec.deprecated:
        new = spec.option_strings(name)[0]
        extra = {key: kwargs[key] for key in ("choices", "type", "nargs") if key in kwargs}
        target.add_argument(old, dest=name, action=DeprecatedAlias, new=new, help=argparse.SUPPRESS, **extra)


def record_from_namespace(record: type[OptionsRecord], namespace: argparse.Namespace) -> OptionsRecord:
    """The record a parsed command line describes (its values were checked by the parser already)."""
    values = vars(namespace)
    return record.model_validate({name: values[name] for name in record.model_fields if name in values})


def field_defaults(record: type[OptionsRecord]) -> dict[str, Any]:
    """Every optional field's default, as a Python caller gets it."""
    return {name: _default(info) for name, info in record.model_fields.items() if not info.is_required()}
