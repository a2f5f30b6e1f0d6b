"""ir_metadata headers: what made a run file, written at its top as ``#`` comment lines and read back.

The layout is ir_metadata v0.1 (https://www.ir-metadata.org): the YAML document starts at a line
``# ir_metadata.start`` and ends at ``# ir_metadata.end``, each YAML line prefixed by ``# ``, with the PRIMAD
sections the harness knows: ``platform`` (hardware, operating system, libraries), ``implementation``
(command, language, commit), ``method`` (the retrieval steps, the tie rule ``score desc, docno desc``, the
model) and ``data`` (the test collection and its sha256 checksums). ``resources`` follows the 0.2-beta
proposal (TIREx tracker: ``runtime`` wallclock, user and system time; ``ram`` used by the process).

trec_eval 10 skips a run line whose first non-blank character is ``#`` (get_trec_results.c), and so does
every harness reader, so a run with a header scores exactly as the same run without it. A parquet run
carries the same YAML in its schema metadata (key ``ir_metadata``); ranx's JSON has no place for one.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import struct
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from harness import __version__
from harness.core.config import load_yaml
from harness.core.errors import InputError
from harness.core.fileio import iter_lines, parse_json
from harness.datasets.qrels import PARQUET, TEXT, file_container, irds_dataset_id
from harness.provenance import environment_info

Header = dict[str, Any]

START = "# ir_metadata.start"
END = "# ir_metadata.end"
SCHEMA_VERSION = 0.1
TIE_RULE = "score desc, docno desc"  # trec_eval's: every harness ranking follows it
PARQUET_KEY = b"ir_metadata"  # the parquet schema metadata key holding the YAML
PACKAGE = "beir-harness"
_GIT_SECONDS = 5


# ------------------------------------------------------------------------------ writing and reading


def header_text(header: Mapping[str, Any]) -> str:
    """The header as YAML (keys in the order given, never folded)."""
    return yaml.safe_dump(
        dict(header), sort_keys=False, allow_unicode=True, default_flow_style=False, width=1 << 20
    )


def header_lines(header: Mapping[str, Any]) -> list[str]:
    """The header as run-file lines: the start line, ``# `` before each YAML line, the end line."""
    body = [f"# {line}" if line else "#" for line in header_text(header).splitlines()]
    return [START, *body, END]


def parse_header(lines: Iterable[tuple[int, str]], path: str | Path) -> Header | None:
    """The header at the top of ``(line number, line)`` pairs, None when the first line does not start one."""
    body: list[str] = []
    started = False
    number = 0
    for number, line in lines:
        text = line.rstrip()
        if not started:
            if text != START:
                return None
            started = True
            continue
        if text == END:
            return _parsed_yaml("\n".join(body), path, number)
        if not text.startswith("#"):
            break
        body.append(text[2:] if text.startswith("# ") else text[1:])
    raise InputError(path, number, f"the ir_metadata header has no `{END}` line before the run lines")


def _parsed_yaml(text: str, path: str | Path, end_line: int) -> Header:
    try:
        header = load_yaml(text)  # the one YAML loader: duplicate keys and alias bombs refused
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = 2 + mark.line if mark is not None else end_line  # the body starts on line 2
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(path, line, f"the ir_metadata header is not valid YAML ({problem})") from None
    if not isinstance(header, dict):
        raise InputError(path, 2, "the ir_metadata header is not a YAML mapping of sections")
    return header


def read_run_header(path: str | os.PathLike) -> Header | None:
    """The ir_metadata header of a run file (TREC text, ``.gz`` too, or parquet), None when it has none.

    A header that starts but does not end, or is not YAML, is an ``InputError`` naming the line.
    """
    if irds_dataset_id(path) is not None:
        return None
    path = Path(path)
    container = file_container(path, "run")
    if container == TEXT:
        return parse_header(iter_lines(path), path)
    if container == PARQUET:
        import pyarrow.parquet as pq

        metadata = pq.read_schema(path).metadata or {}
        text = metadata.get(PARQUET_KEY)
        return None if text is None else _parsed_yaml(text.decode("utf-8"), path, 1)
    return None  # ranx JSON has no place for a header


# ------------------------------------------------------------------------------ building


def run_header(
    *,
    tag: str,
    name: str | None,
    steps: Sequence[Mapping[str, Any]],
    data: Mapping[str, Any] | None = None,
    command: Sequence[str] | None = None,
    environment: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
    method: Mapping[str, Any] | None = None,
) -> Header:
    """A run's ir_metadata: ``steps`` are the ``method.retrieval`` stages in order (each a mapping with a
    ``name``, its ``method`` and parameters; a later stage names earlier ones in ``reranks`` /
    ``ensembles`` / ``interpolates``); ``method`` adds method-wide settings; ``environment`` is
    :func:`harness.provenance.environment_info`'s record (measured now when not given). Empty values are
    left out.
    """
    header = {
        "schema-version": SCHEMA_VERSION,
        "tag": tag,
        "method": {
            "name": name,
            "automatic": True,
            "score ties": TIE_RULE,
            **(method or {}),
            "retrieval": list(steps),
        },
        "data": data,
        "implementation": implementation_section(command),
        "platform": platform_section(environment),
        "resources": resources,
    }
    # Plain YAML types only (lists, text, numbers): a round trip through JSON, anything else as its text.
    return _pruned(parse_json(json.dumps(header, default=str), "the ir_metadata header"))


def header_from_provenance(provenance: Mapping[str, Any], *, tag: str) -> Header:
    """The header of a result's run file from its provenance record (what ``harness eval`` knows)."""
    config = provenance.get("config") or {}
    model = provenance.get("model") or {}
    timings = provenance.get("timings") or {}
    retrieval = config.get("retrieval") or {}
    return run_header(
        tag=tag,
        name=model.get("spec"),
        steps=_provenance_steps(config, provenance.get("retrieval") or {}),
        method={
            "top k": retrieval.get("top_k"),
            "identical ids": None
            if retrieval.get("drop_identical_ids") is None
            else ("dropped" if retrieval["drop_identical_ids"] else "kept"),
        },
        data=dataset_section(provenance.get("dataset") or {}),
        command=provenance.get("command"),
        environment=provenance.get("environment"),
        resources=resources_section(
            wallclock_seconds=timings.get("total"),
            stop_time=provenance.get("created_at"),
            # Timings also hold flags (bm25_cache_hit: 0 or 1), which are not durations.
            stages={
                name: seconds for name, seconds in timings.items() if name != "total" and "_hit" not in name
            },
        ),
    )


def model_step(model_config: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """One retrieval stage from a model's recorded config (spec, identity, settings, libraries)."""
    identity = model_config.get("identity") or {}
    settings = model_config.get("settings") or {}
    kind = settings.get("kind") or identity.get("kind")
    encoding = {key: value for key, value in settings.items() if key not in ("kind", "params")}
    libraries = model_config.get("libraries") or {}
    return {
        "name": model_config.get("spec"),
        "method": kind,
        "model": identity.get("model_id"),
        "params": identity.get("params") or settings.get("params"),
        "encoding": encoding if kind != "bm25" else None,  # BM25 reads no prefix, pooling or length
        "libraries": [f"{library}=={version}" for library, version in libraries.items()],
        **extra,
    }


def _provenance_steps(config: Mapping[str, Any], run: Mapping[str, Any]) -> list[dict[str, Any]]:
    index = (config.get("retrieval") or {}).get("index")
    where = {"runtime": run.get("label"), "device": run.get("device"), "index": index}
    system = config.get("system")
    if not system:
        return [model_step(config.get("model") or {}, **where)]
    steps = [model_step(member, index=index) for member in system.get("members") or []]
    names = [step["name"] for step in steps]
    fusion = system.get("fusion")
    if fusion:
        joins = "interpolates" if fusion.get("method") == "interpolation" else "ensembles"
        steps.append({"name": "fusion", "method": fusion.get("method"), "params": fusion, joins: names})
    rerank = system.get("rerank")
    if rerank:
        steps.append(
            {"name": "rerank", "method": "cross-encoder", "params": rerank, "reranks": steps[-1]["name"]}
        )
    steps[-1].update(runtime=run.get("label"), device=run.get("device"))
    return steps


def dataset_section(dataset: Mapping[str, Any]) -> dict[str, Any] | None:
    """``data`` from a result's dataset record: the test collection, its split, sizes and checksums."""
    if not dataset.get("name"):
        return None
    counts = dataset.get("counts") or {}
    fingerprint = dataset.get("fingerprint") or {}
    return {
        "test collection": {
            "name": dataset.get("name"),
            "split": dataset.get("split"),
            "documents": counts.get("docs"),
            "queries": counts.get("queries"),
            "judgments": counts.get("qrels"),
            "checksums": {relative: f"sha256:{digest}" for relative, digest in fingerprint.items()},
        }
    }


def resources_section(
    *,
    wallclock_seconds: float | None = None,
    stop_time: str | None = None,
    stages: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """0.2-beta ``resources``: wallclock (and each stage's), the process's CPU time and peak memory so far."""
    runtime: dict[str, Any] = {"stop time": stop_time}
    if wallclock_seconds is not None:
        runtime["wallclock"] = _milliseconds(wallclock_seconds)
    section: dict[str, Any] = {"runtime": runtime}
    with suppress(ImportError):  # the resource module is Unix-only
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        runtime["user"] = _milliseconds(usage.ru_utime)
        runtime["system"] = _milliseconds(usage.ru_stime)
        peak_kib = usage.ru_maxrss // 1024 if sys.platform == "darwin" else usage.ru_maxrss  # macOS: bytes
        section["ram"] = {"used process": {"max": f"{peak_kib // 1024} MB"}}
    if stages:
        runtime["stages"] = {name: _milliseconds(seconds) for name, seconds in stages.items()}
    return section


def _milliseconds(seconds: float) -> str:
    return f"{round(seconds * 1000)} ms"


def platform_section(environment: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``platform``: CPU, RAM, GPUs, kernel, distribution, Python, the library versions that move numbers."""
    environment = environment or environment_info(None)
    versions = dict(environment.get("versions") or {})
    hardware = environment.get("hardware") or {}
    harness_version = versions.pop("harness", __version__)
    python = versions.pop("python", platform.python_version())
    memory = hardware.get("memory_gib")
    return {
        "hardware": {
            "cpu": {
                "model": _cpu_model() or hardware.get("processor"),
                "architecture": hardware.get("machine") or platform.machine(),
                "operation mode": f"{struct.calcsize('P') * 8}-bit",
                "number of cores": hardware.get("cpu_count") or os.cpu_count(),
            },
            "ram": f"{memory} GiB" if memory is not None else None,
            "gpu": {"models": hardware["gpus"]} if hardware.get("gpus") else None,
        },
        "operating system": {
            "kernel": f"{platform.system()} {platform.release()}",
            "distribution": _distribution(),
        },
        "software": {
            "python": python,
            "libraries": {"python": [f"{name}=={version}" for name, version in versions.items()]},
            "retrieval toolkit": [f"{PACKAGE}=={harness_version}"],
        },
    }


def implementation_section(command: Sequence[str] | None) -> dict[str, Any]:
    """``implementation``: the command that made the run, the language, and the source commit when known."""
    commit, uncommitted = source_commit()
    return {
        "executable": {"cmd": command_line(command)} if command else None,
        "source": {
            "lang": ["python"],
            "package": f"{PACKAGE}=={__version__}",
            "commit": commit,
            "uncommitted changes": uncommitted if commit else None,
        },
    }


def command_line(argv: Sequence[str]) -> str:
    """``argv`` as a shell line, the harness's own entry point shown as ``harness``."""
    argv = [str(arg) for arg in argv]
    if argv and Path(argv[0]).name in ("harness", "__main__.py"):
        argv = ["harness", *argv[1:]]
    return shlex.join(argv)


@lru_cache(maxsize=1)
def source_commit() -> tuple[str | None, bool]:
    """``(commit, uncommitted changes)`` of the harness's own git checkout; ``(None, False)`` for an installed
    copy or without git. Only a checkout holding the package and its pyproject.toml counts (not a virtualenv
    that happens to sit inside some repository)."""
    root = Path(__file__).resolve().parents[2]
    if not ((root / "pyproject.toml").is_file() and (root / ".git").exists()):
        return None, False
    try:
        commit = _git(root, "rev-parse", "HEAD")
        changes = _git(root, "status", "--porcelain", "--untracked-files=no", "--", "harness")
    except (OSError, subprocess.SubprocessError):
        return None, False
    return commit or None, bool(changes)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=_GIT_SECONDS, check=True
    )
    return done.stdout.strip()


def _cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else None."""
    with suppress(OSError, UnicodeDecodeError), open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    return None


def _distribution() -> str | None:
    with suppress(OSError, AttributeError):
        return platform.freedesktop_os_release().get("PRETTY_NAME")
    return platform.platform() or None


def _pruned(value: Any) -> Any:
    """``value`` without None, empty mappings and empty lists, at every depth."""
    if isinstance(value, dict):
        kept = {key: _pruned(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (None, {}, [])}
    if isinstance(value, list):
        return [_pruned(item) for item in value if item is not None]
    return value
