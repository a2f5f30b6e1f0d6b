"""Options records: each command's options declared once, read from a command line or from a file.

A command's options are one pydantic record (:class:`OptionsRecord`, unknown keys are errors). Each
field is declared with :func:`option`: its type and default (the annotation and the default), its help
text, its flags, its choices, its range and its role. From that one declaration come

* the command's argparse parser (:func:`add_options`): flags, help, metavar, choices, and a parse
  function that checks the range with the one-line message the command line has always given;
* the checks an experiment step's, a ``--set``'s or a Python caller's values get (:class:`OptionsRecord`
  validators): the same types, choices and range, so ``top_k: 0`` in a file is refused as ``--top-k 0`` is.

Every number has a range, declared or not: a whole number without one is held to 64 bits (what the C
code below takes at most), a number without one must be finite. Types are strict: ``true`` is not a
number, ``1`` is not a yes/no, ``2.5`` is not a whole number; text is read as the command line reads it.

A path option is an ``input`` or an ``output`` (``role``): a record whose output names one of its inputs,
a harness result, or a file inside one is refused when it is built (:mod:`harness.core.output_guard`),
before the command computes anything.

Range and choices live in the option's :class:`CliSpec`, not in pydantic constraints, so that a list's
elements (``--ks 10 100``) are checked as single values are and both sources say the same thing.
"""

from __future__ import annotations

import argparse
import math
import sys
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo

from harness.core.errors import HarnessError, OutputError
from harness.core.fileio import check_output_file
from harness.core.output_guard import check_outputs

# The real range of numeric options. Cut-offs, depths and grades end up in C ints (FAISS, trec_eval), so
# they stay within 32 bits; a whole number with no declared range stays within a C int64.
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
SEED_MAX = 2**32 - 1  # numpy seeds are non-negative; 32 bits as in every seeded tool
MAX_BATCH_SIZE = 1 << 20
MAX_WORKERS = 1024
MAX_DIGITS = 15  # a float64 holds 15-17 significant digits
MAX_RETRIES = 100
MAX_TIMEOUT = 24 * 3600.0
ROLES = ("input", "output")

_UNSET: Any = object()


class OptionsError(HarnessError, ValueError):
    """Options that cannot be used: one line naming the option, what it must be and what it got.

    Also a ``ValueError``, as the pydantic error it replaces was.
    """


class FieldProblem(ValueError):
    """Raised inside a record's validators: the field at fault and the problem (without the name)."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


# ------------------------------------------------------------------------------ argparse value types


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


def shown(value: Any, width: int = 60) -> str:
    """A value as an error line shows it: text quoted, a huge whole number by its size, long ones cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"{'-' if value < 0 else ''}a {value.bit_length()}-bit number"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= width else f"{text[: width - 3]}..."


@dataclass(frozen=True)
class Range:
    """A numeric option's range: ``low``/``high`` inclusive, ``above``/``below`` exclusive.

    A number is always finite; a whole number with no bound on a side is held to int64 on that side.
    """

    low: float | None = None
    high: float | None = None
    above: float | None = None
    below: float | None = None

    def whole(self) -> tuple[int, int]:
        """The inclusive bounds of a whole number in this range."""
        low, high = INT64_MIN, INT64_MAX
        if self.low is not None or self.above is not None:
            low = int(self.low) if self.low is not None else math.floor(self.above) + 1
        if self.high is not None or self.below is not None:
            high = int(self.high) if self.high is not None else math.ceil(self.below) - 1
        return low, high

    def describe(self, integer: bool) -> str:
        """What a value must be, as the error lines say it: ``a whole number from 1 to 2,147,483,647``."""
        if integer:
            low, high = self.whole()
            return f"a whole number from {low:,} to {high:,}"
        if (self.above, self.below, self.low, self.high) == (0, 1, None, None):
            return "between 0 and 1 (exclusive)"
        lower = f"at least {self.low:g}" if self.low is not None else None
        lower = f"above {self.above:g}" if self.above is not None else lower
        upper = f"at most {self.high:g}" if self.high is not None else None
        upper = f"below {self.below:g}" if self.below is not None else upper
        bounds = " and ".join(bound for bound in (lower, upper) if bound)
        return f"a number {bounds}" if bounds else "a finite number"

    def contains(self, value: float) -> bool:
        if isinstance(value, int):
            low, high = self.whole()
            return low <= value <= high
        return (
            math.isfinite(value)
            and (self.low is None or value >= self.low)
            and (self.high is None or value <= self.high)
            and (self.above is None or value > self.above)
            and (self.below is None or value < self.below)
        )

    def problem(self, value: Any, integer: bool) -> str | None:
        """Why ``value`` is outside the range, or None (a value of another type: the type check says so)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return None if self.contains(value) else f"must be {self.describe(integer)}, got {shown(value)}"

    def read(self, text: str, integer: bool) -> int | float:
        """``text`` as the number the command line reads; ``ValueError`` naming the range otherwise."""
        try:
            return int(text.strip().replace("_", "")) if integer else float(text)
        except ValueError:
            raise ValueError(f"expected {self.describe(integer)}, got {shown(text)}") from None

    def parser(self, integer: bool) -> Callable[[str], Any]:
        """The argparse type that reads and checks a value of this range, with the messages above."""

        def parse(text: str) -> int | float:
            try:
                value = self.read(text, integer)
            except ValueError as error:
                raise argparse.ArgumentTypeError(str(error)) from None
            if not self.contains(value):
                raise argparse.ArgumentTypeError(f"must be {self.describe(integer)}, got {text}")
            return value

        parse.__name__ = "whole number" if integer else "number"
        return parse


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
    role: str | None = None  # "input" (a path it reads) or "output" (one it writes): see output_guard

    def option_strings(self, name: str) -> list[str]:
        return list(self.flags) or [f"--{name.replace('_', '-')}"]

    def label(self, name: str) -> str:
        """How the user names the option: its flag, its metavar (positional) or its key (hidden)."""
        if self.positional:
            return self.metavar or name.upper()
        return name if self.hidden else self.option_strings(name)[0]


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
    role: str | None = None,
) -> Any:
    """One option of a command: a pydantic field carrying its :class:`CliSpec`. No default: required.

    ``role``: ``"input"`` for a path the command reads, ``"output"`` for one it writes (an option read by
    :func:`output_file` is one); an output is refused when it names an input, a harness result or a file
    inside one (:mod:`harness.core.output_guard`).
    """
    if role not in (None, *ROLES):
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if role is None and parse is output_file:
        role = "output"
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
        role=role,
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


def element_type(info: FieldInfo) -> Any:
    """The one type a field holds (alone, in a list, or None), e.g. ``int`` for ``list[int] | None``."""
    annotation = info.annotation
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = typing.get_args(annotation) if union else (annotation,)
    kinds = set()
    for member in members:
        if member is type(None):
            continue
        if typing.get_origin(member) is list and typing.get_args(member):
            member = typing.get_args(member)[0]
        kinds.add(member)
    return kinds.pop() if len(kinds) == 1 else None


def scalar_type(info: FieldInfo) -> type | None:
    """``int``, ``float`` or ``bool`` when the field holds one of them (or a list of them, or None)."""
    kind = element_type(info)
    return kind if kind in (int, float, bool) else None


def value_range(info: FieldInfo) -> Range | None:
    """The range a numeric field's values are held to: the declared one, else int64 / any finite number."""
    if scalar_type(info) not in (int, float):
        return None
    return cli_spec(info).range or Range()


def _strict(name: str, kind: type, bounds: Range | None, value: Any) -> Any:
    """One value of a numeric or yes/no field as given (a file, ``--set``, Python): typed strictly.

    ``true`` is not a number, ``1`` not a yes/no, ``2.5`` not a whole number; text is read as the command
    line reads it (``"100"`` is 100). Other shapes (a list where one value goes) are left to pydantic.
    """
    if value is None:
        return value
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise FieldProblem(name, f"expected true or false, got {shown(value)}")
    assert bounds is not None
    integer = kind is int
    expected = f"expected {bounds.describe(integer)}, got {shown(value)}"
    if isinstance(value, bool) or (integer and isinstance(value, float)):
        raise FieldProblem(name, expected)
    if isinstance(value, str):
        try:
            value = bounds.read(value, integer)
        except ValueError as error:
            raise FieldProblem(name, str(error)) from None
    if integer or not isinstance(value, int | float):
        return value
    try:
        return float(value)
    except OverflowError:  # a whole number beyond float64
        raise FieldProblem(name, f"must be {bounds.describe(integer)}, got {shown(value)}") from None


class OptionsRecord(BaseModel):
    """Base of every command's options: unknown keys are errors; types, choices, ranges and outputs checked.

    ``top-k`` (the option as typed on the command line) is accepted for ``top_k`` in files. Built by
    :meth:`coerce`, :meth:`replace` or :func:`record_from_namespace`, a record's problem is one
    :class:`OptionsError` line naming the option.
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
            if info is None:
                continue
            if isinstance(value, str | int | float | Path) and "list[" in str(info.annotation):
                values[name] = value = [value]
            kind = scalar_type(info)
            if kind is not None:
                bounds = value_range(info)
                if isinstance(value, list | tuple):
                    values[name] = [_strict(name, kind, bounds, item) for item in value]
                else:
                    values[name] = _strict(name, kind, bounds, value)
        return values

    @classmethod
    def coerce(cls, options: OptionsRecord | None, values: dict[str, Any]) -> Any:
        """The record a public function was called with: given whole, or built from keyword options."""
        if options is not None and values:
            raise TypeError(f"give a {cls.__name__} or keyword options, not both")
        if options is None:
            return cls.checked(values)
        if not isinstance(options, cls):
            raise TypeError(f"expected {cls.__name__}, got {type(options).__name__}")
        return options

    @classmethod
    def checked(cls, values: dict[str, Any], *, flags: bool = False) -> Any:
        """The record of ``values``; a problem is one :class:`OptionsError` naming the option.

        ``flags``: name options as the command line spells them (``--top-k``) rather than as keys.
        """
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise options_error(cls, error, flags=flags) from None

    @model_validator(mode="after")
    def _within_choices_and_range(self) -> OptionsRecord:
        for name, info in type(self).model_fields.items():
            problem = _problem(
                cli_spec(info), value_range(info), scalar_type(info) is int, getattr(self, name)
            )
            if problem:
                raise FieldProblem(name, problem)
        return self

    @model_validator(mode="after")
    def _outputs_spare_inputs_and_results(self) -> OptionsRecord:
        """An output naming an input, a harness result or a file inside one is refused here, before any work.

        The inputs are the options marked ``role="input"`` and every other path option: a command reads
        the paths it is given, so an unmarked input is still spared.
        """
        outputs: dict[str, Any] = {}
        inputs: dict[str, Any] = {}
        for name, info in type(self).model_fields.items():
            spec = cli_spec(info)
            if spec.role == "output":
                outputs[spec.label(name)] = getattr(self, name)
            elif spec.role == "input" or element_type(info) is Path:
                inputs[spec.label(name)] = getattr(self, name)
        if outputs:
            try:
                check_outputs(outputs, inputs)
            except OutputError as error:
                raise ValueError(str(error)) from None
        return self

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Each record's docstring lists its options, so ``help()`` on it says what it takes."""
        super().__pydantic_init_subclass__(**kwargs)
        cls.__doc__ = f"{(cls.__doc__ or cls.__name__).rstrip()}\n\n{options_doc(cls)}"

    def replace(self, **changes: Any) -> OptionsRecord:
        """A copy with ``changes``, checked as the original was."""
        return type(self).checked({**self.model_dump(), **changes})


def options_error(
    record: type[OptionsRecord], error: ValidationError, *, flags: bool = False
) -> OptionsError:
    """A record's first problem as one line: ``seed: must be a whole number from 0 to ..., got -5``.

    A misspelt key is both unknown and missing under its right name: the unknown one is named.
    """
    problems = error.errors()
    problem = next((p for p in problems if p["type"] == "extra_forbidden"), problems[0])
    cause = (problem.get("ctx") or {}).get("error")
    if isinstance(cause, FieldProblem):
        name, text = cause.name, cause.problem
    else:
        location = [str(part) for part in problem["loc"]]
        name = location[0] if location else ""
        text = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            text = "unknown option (check its spelling)"
        elif problem["type"] == "missing":
            text = "missing (it is required)"
        elif len(location) > 1:
            text = f"item {'.'.join(location[1:])}: {text}"
    info = record.model_fields.get(name)
    label = cli_spec(info).label(name) if flags and info is not None else name
    return OptionsError(f"{label}: {text}" if label else text)


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
    return (
        str(info.annotation)
        .replace("typing.", "")
        .replace("pathlib.", "")
        .replace("<class '", "")
        .replace("'>", "")
    )


def _problem(spec: CliSpec, bounds: Range | None, integer: bool, value: Any) -> str | None:
    values = value if isinstance(value, list | tuple) else [value]
    for item in values:
        if item is None:
            continue
        if spec.choices is not None and item not in spec.choices:
            return f"{item!r} is not one of {', '.join(map(str, spec.choices))}"
        if bounds is not None and (problem := bounds.problem(item, integer)):
            return problem
    return None


# ------------------------------------------------------------------------------------ the parser


def _default(info: FieldInfo) -> Any:
    if info.default_factory is not None:
        return info.default_factory()
    return None if info.is_required() else info.default


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
        parse = _parser(spec, info)
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


def _parser(spec: CliSpec, info: FieldInfo) -> Callable[[str], Any] | None:
    """The argparse type of an option: its own, or for a number the reader of its range (``int`` too)."""
    bounds = value_range(info)
    if bounds is not None and spec.parse in (None, int, float):
        return bounds.parser(scalar_type(info) is int)
    return spec.parse


def record_from_namespace(record: type[OptionsRecord], namespace: argparse.Namespace) -> OptionsRecord:
    """The record a parsed command line describes; a problem the parser could not see names the flag."""
    values = vars(namespace)
    return record.checked({name: values[name] for name in record.model_fields if name in values}, flags=True)


def field_defaults(record: type[OptionsRecord]) -> dict[str, Any]:
    """Every optional field's default, as a Python caller gets it."""
    return {name: _default(info) for name, info in record.model_fields.items() if not info.is_required()}
