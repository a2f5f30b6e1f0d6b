"""``harness data list | info | download | verify | subset | fidelity``: the BEIR datasets of the registry,
their local copies, and reduced subsets of them with how well each predicts its full dataset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandGroup, CommandResult
from harness.api.shared_options import qrels_duplicates_option
from harness.core.errors import HarnessError
from harness.core.options import INT32_MAX, MAX_RETRIES, MAX_TIMEOUT, SEED_MAX, OptionsRecord, folder, option
from harness.core.paths import default_data_dir, default_results_dir
from harness.core.text_table import text_table
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import (
    DatasetRecord,
    dataset_registry,
    expand_dataset_names,
    get_dataset_record,
)
from harness.datasets.download import DEFAULT_ATTEMPTS, DEFAULT_TIMEOUT, install_datasets
from harness.datasets.prepare import DEFAULT_SPLIT, env_mirror, open_dataset
from harness.datasets.subset import (
    SUBSET_POOL_DEPTH,
    SUBSET_QUERIES,
    SUBSET_SEED,
    SubsetPool,
    SubsetRecipe,
    default_subset_folder,
    derived_name,
    judged_documents,
    read_recipe,
    sample_query_ids,
    source_of,
    verified_recipe,
    write_subset,
)
from harness.datasets.verify import FileCheck, VerifyResult, installed_source, verify_named
from harness.evaluation.metrics import HEADLINE_METRICS
from harness.pipeline import EvalOptions
from harness.reproduction.subset_pool import check_pool_retrievers, pool_documents, retriever_slug
from harness.results.subset_fidelity import SubsetFidelity, SystemsOnBoth, results_on_both, subset_fidelity

Echo = Callable[[str], Any] | None


# ------------------------------------------------------------------------------ shared options


def data_dir_option() -> Any:
    """``--data-dir DIR``: where the datasets live (None: env HARNESS_DATA_DIR, else ./data)."""
    return option(
        None,
        parse=folder,
        help="folder holding the datasets (env HARNESS_DATA_DIR, default: data/ in the working directory)",
    )


def names_option(help: str) -> Any:
    """``NAME..``: one or more dataset names; a group name (``cqadupstack``) stands for its members."""
    return option(positional=True, nargs="+", metavar="NAME", help=help)


def _data_dir(data_dir: Path | None) -> Path:
    return data_dir if data_dir is not None else default_data_dir()


def zip_size(num_bytes: int | None) -> str:
    """A download size in decimal units as servers state them (``1.2 MB``); ``?`` when unknown."""
    if not num_bytes:
        return "?"
    size = float(num_bytes)
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _count(value: int | None) -> str:
    return f"{value:,}" if value is not None else "?"


# ---------------------------------------------------------------------------------------- list


class DataListOptions(OptionsRecord):
    """``harness data list``: every dataset of the registry."""

    data_dir: Path | None = data_dir_option()


@dataclass
class DataListResult(CommandResult):
    """Every registry dataset with its reported split, expected sizes, pins and whether it is local."""

    datasets: list[DatasetRecord]
    local: list[bool]
    data_dir: Path

    def payload(self) -> dict[str, Any]:
        return {
            "data_dir": str(self.data_dir),
            "datasets": [
                {
                    "name": record.name,
                    "split": record.eval_split,
                    "counts": record.counts.get(record.eval_split, {}),
                    "zip_bytes": record.bytes,
                    "pins": len(record.files),
                    "local": here,
                }
                for record, here in zip(self.datasets, self.local, strict=True)
            ],
        }

    def render(self) -> str:
        rows: list[tuple[str, ...]] = [("NAME", "SPLIT", "DOCS", "QUERIES", "QRELS", "ZIP", "PINS", "LOCAL")]
        for record, here in zip(self.datasets, self.local, strict=True):
            counts = record.counts.get(record.eval_split, {})
            rows.append(
                (
                    record.name,
                    record.eval_split,
                    _count(counts.get("docs")),
                    _count(counts.get("queries")),
                    _count(counts.get("qrels")),
                    zip_size(record.bytes),
                    str(len(record.files)),
                    "yes" if here else "-",
                )
            )
        return "\n".join([*text_table(rows, right=(2, 3, 4, 5, 6)), "", f"data folder: {self.data_dir}"])


def data_list(options: DataListOptions | None = None, /, **values: Any) -> DataListResult:
    """List every dataset the registry knows (shipped ``datasets.yaml`` plus ``HARNESS_CONFIG_DIR``'s).

    E.g. ``data_list(data_dir="data")``; ``result.datasets`` holds the registry records, ``result.local``
    whether each has a folder under the data folder.
    """
    options = DataListOptions.coerce(options, values)
    data_dir = _data_dir(options.data_dir)
    records = list(dataset_registry().values())
    local = [(data_dir / record.archive_dir).is_dir() for record in records]
    return DataListResult(datasets=records, local=local, data_dir=data_dir)


# ---------------------------------------------------------------------------------------- info


class DataInfoOptions(OptionsRecord):
    """``harness data info NAME``: one dataset's registry entry."""

    data_dir: Path | None = data_dir_option()
    name: str = option(positional=True, help="dataset name, e.g. scifact or cqadupstack/android")


@dataclass
class DataInfoResult(CommandResult):
    """One dataset's registry entry and its local folder (None: not downloaded)."""

    record: DatasetRecord
    folder: Path | None

    def payload(self) -> dict[str, Any]:
        return {
            **self.record.model_dump(mode="json"),
            "local_copy": str(self.folder) if self.folder else None,
        }

    def render(self) -> str:
        record = self.record
        lines = [
            f"{record.name}: {record.title}",
            f"  url:                {record.url or '-'}",
            f"  zip md5:            {record.md5 or '-'}",
            f"  zip sha256:         {record.sha256 or '-'}",
            f"  zip size:           {zip_size(record.bytes)}"
            + (f" ({record.bytes:,} bytes)" if record.bytes else ""),
            f"  folder in zip:      {record.archive_dir}/",
            f"  splits:             {', '.join(record.splits)} (papers report {record.eval_split})",
            f"  drop identical ids: {'yes' if record.drop_identical_ids else 'no'}",
            f"  hub copies:         {record.hf_corpus or '-'}, {record.hf_qrels or '-'}",
            "  hub (MTEB layout):  "
            + (f"{record.hub}@{record.hub_revision} ({record.hub_layout} layout)" if record.hub else "-"),
            f"  local copy:         {self.folder or 'not downloaded'}",
            "  expected counts:",
        ]
        lines += [
            f"    {split:<6} {_count(counts.get('docs'))} docs, {_count(counts.get('queries'))} queries, "
            f"{_count(counts.get('qrels'))} qrels"
            for split, counts in record.counts.items()
        ]
        lines.append("  sha256 pins:" if record.files else "  sha256 pins:        none published")
        lines += [f"    {relative:<16} {digest}" for relative, digest in record.files.items()]
        return "\n".join(lines)


def data_info(options: DataInfoOptions | None = None, /, **values: Any) -> DataInfoResult:
    """Everything the registry knows about one dataset: URL, checksums, splits, counts, sha256 pins.

    E.g. ``data_info(name="scifact").record.counts["test"]``; an unknown name raises ``HarnessError``
    naming close matches.
    """
    options = DataInfoOptions.coerce(options, values)
    record = get_dataset_record(options.name)
    local = _data_dir(options.data_dir) / record.archive_dir
    return DataInfoResult(record=record, folder=local if local.is_dir() else None)


# ------------------------------------------------------------------------------------ download


class DataDownloadOptions(OptionsRecord):
    """``harness data download NAME..``: fetch datasets into the data folder, checked against their pins."""

    data_dir: Path | None = data_dir_option()
    names: list[str] = names_option("dataset names; 'cqadupstack' means all 12 forums")
    mirror: list[str] | None = option(
        None,
        action="append",
        help="URL prefix or local folder holding <name>.zip or unpacked <name>/ (repeatable, tried first; "
        "env HARNESS_BEIR_MIRROR, comma-separated)",
    )
    strict: bool = option(
        False, action="store_true", help="also require every pinned file and refuse unpinnable hub copies"
    )
    force: bool = option(
        False, action="store_true", help="replace an existing copy (only once the new one verified)"
    )
    hub: bool = option(
        False,
        action="store_true",
        help="fall back to the Hugging Face hub copies (BeIR/<name>), not pin-checked",
    )
    retries: int = option(
        DEFAULT_ATTEMPTS,
        low=1,
        high=MAX_RETRIES,
        help=f"attempts per URL, resuming with HTTP Range (default {DEFAULT_ATTEMPTS})",
    )
    timeout: float = option(
        DEFAULT_TIMEOUT,
        above=0,
        high=MAX_TIMEOUT,
        help=f"seconds without data before retrying (default {DEFAULT_TIMEOUT:g})",
    )


@dataclass
class DataDownloadResult(CommandResult):
    """The folder of each dataset now in place, and why the others failed (then ``exit_code`` is 2)."""

    ready: dict[str, Path] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    echoed: bool = False  # the lines were shown through ``echo`` as each dataset became ready

    def payload(self) -> dict[str, Any]:
        return {"ready": {name: str(path) for name, path in self.ready.items()}, "failures": self.failures}

    def render(self) -> str:
        """One ``NAME: ready in FOLDER`` line per dataset (empty when ``echo`` showed them already)."""
        return "" if self.echoed else "\n".join(_ready_line(name, path) for name, path in self.ready.items())


def _ready_line(name: str, path: Path) -> str:
    return f"{name}: ready in {path}"


def data_download(
    options: DataDownloadOptions | None = None, /, *, echo: Echo = None, **values: Any
) -> DataDownloadResult:
    """Download datasets into ``DATA_DIR/<name>/``; a copy already there and verified is kept as is.

    Sources are tried in order: each ``mirror`` (default: env HARNESS_BEIR_MIRROR), the official URL,
    then with ``hub`` the Hugging Face copy. Zips are checked against the published md5, files against
    their sha256 pins, before anything is put in place. E.g. ``data_download(names=["scifact"])``.
    One dataset that cannot be installed raises ``HarnessError``; of several, the others are still
    installed and ``result.failures`` says why each failed one did. ``echo`` (e.g. ``print``) is called
    with each ``ready`` line as it happens.
    """
    options = DataDownloadOptions.coerce(options, values)
    records = [get_dataset_record(name) for name in expand_dataset_names(options.names)]
    result = DataDownloadResult(echoed=echo is not None)
    installed = install_datasets(
        records,
        _data_dir(options.data_dir),
        options.mirror if options.mirror is not None else env_mirror(),
        strict=options.strict,
        force=options.force,
        use_hub=options.hub,
        attempts=options.retries,
        timeout=options.timeout,
    )
    for record, outcome in installed:
        if isinstance(outcome, HarnessError):
            result.failures.append(str(outcome))
            continue
        result.ready[record.name] = outcome
        result.paths.append(outcome)
        if echo is not None:
            echo(_ready_line(record.name, outcome))
    if result.failures:
        failed = " || ".join(result.failures)
        result.messages.append(f"error: {len(result.failures)} of {len(records)} datasets failed: {failed}")
        result.exit_code = 2
    return result


# -------------------------------------------------------------------------------------- verify


class DataVerifyOptions(OptionsRecord):
    """``harness data verify NAME..``: check local copies against their pins and expected counts."""

    data_dir: Path | None = data_dir_option()
    names: list[str] = names_option("dataset names ('cqadupstack' means its 12 forums) or folders")
    split: str | None = option(None, help="split to count (default: the split papers report)")
    strict: bool = option(
        False, action="store_true", help="qrels rows naming missing queries or documents are errors"
    )
    qrels_duplicates: str = qrels_duplicates_option()


@dataclass
class DataVerifyResult(CommandResult):
    """Each dataset's file and count checks; ``exit_code`` 2 when any failed."""

    results: list[VerifyResult] = field(default_factory=list)
    echoed: bool = False  # each dataset's lines were shown through ``echo`` once it was checked

    @property
    def failed(self) -> list[str]:
        """``NAME: what failed`` per failed dataset (empty: all verified)."""
        return [f"{result.name}: {', '.join(result.failures)}" for result in self.results if result.failures]

    def payload(self) -> dict[str, Any]:
        return {"datasets": [_verify_json(result) for result in self.results]}

    def render(self) -> str:
        """Each dataset's checks and verdict (empty when ``echo`` showed them already)."""
        return (
            "" if self.echoed else "\n".join(line for result in self.results for line in verify_lines(result))
        )


def data_verify(
    options: DataVerifyOptions | None = None, /, *, echo: Echo = None, **values: Any
) -> DataVerifyResult:
    """Check local dataset copies: each file's sha256 against its pin, the split's counts against the registry.

    A name is a registry dataset under the data folder (``cqadupstack`` means its forums) or a folder
    path. E.g. ``data_verify(names=["scifact"]).failed``; ``result.results`` holds each dataset's checks
    and ``exit_code`` is 2 when any mismatched. ``echo`` (e.g. ``print``) gets each dataset's lines as
    soon as it is checked. A name neither registered nor a folder raises ``HarnessError``.
    """
    options = DataVerifyOptions.coerce(options, values)
    data_dir = _data_dir(options.data_dir)
    result = DataVerifyResult(echoed=echo is not None)
    checksums = ChecksumStore()  # shared, so the forums of one group hash each file once
    for name in expand_dataset_names(options.names):
        checked = verify_named(
            name,
            data_dir,
            split=options.split,
            strict=options.strict,
            qrels_duplicates=options.qrels_duplicates,
            checksums=checksums,
        )
        result.results.append(checked)
        if echo is not None:
            for line in verify_lines(checked):
                echo(line)
    if result.failed:
        result.messages.append(f"error: verification failed: {'; '.join(result.failed)}")
        result.exit_code = 2
    return result


def verify_lines(result: VerifyResult) -> list[str]:
    """One dataset's printed checks: its files, its counts, loader notes, then ``NAME: OK`` or ``FAILED``."""
    lines = [f"{result.name} ({result.root}, split {result.split})"]
    source = installed_source(result.root)
    if source.get("kind") == "hub":
        lines.append(
            f"  from the Hugging Face hub copy {source.get('location')}: re-serialised, the zip's pins do not apply"
        )
    statuses = [[check.relative, _file_status(check)] for check in result.files]
    lines += [f"  {line}" for line in text_table(statuses, last_unpadded=True)]
    for count in result.counts:
        expected = f"expected {count.expected:,}" if count.expected is not None else "no expected count"
        verdict = ("ok" if count.ok else "MISMATCH") if count.expected is not None else ""
        lines.append(f"  {count.what:<8} {count.actual:>10,}  ({expected}) {verdict}".rstrip())
    lines += [f"  note: {problem}" for problem in result.report.problems()]
    lines.append(f"{result.name}: {'FAILED' if result.failures else 'OK'}")
    return lines


def _file_status(check: FileCheck) -> str:
    return {
        "ok": "sha256 ok",
        "mismatch": f"sha256 MISMATCH: {check.actual} (pinned {check.expected})",
        "missing": "pinned but not present",
        "unpinned": "no published pin",
    }[check.status]


def _verify_json(result: VerifyResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "root": str(result.root),
        "split": result.split,
        "files": [vars(check) for check in result.files],
        "counts": [{**vars(count), "ok": count.ok} for count in result.counts],
        "problems": list(result.report.problems()),
        "failures": result.failures,
    }


# -------------------------------------------------------------------------------------- subset


class _Subset(OptionsRecord):
    dataset: str = option(positional=True, metavar="DATASET", help="registry name, BEIR folder or hf: spec")
    queries: int = option(
        SUBSET_QUERIES,
        flags=("--queries", "-n"),
        low=1,
        high=INT32_MAX,
        metavar="N",
        help="judged queries to sample (default: %(default)s, as NanoBEIR)",
    )
    seed: int = option(
        SUBSET_SEED, low=0, high=SEED_MAX, help="seed of the query sample (default: %(default)s)"
    )
    pool_from: list[str] = option(
        default_factory=list,
        nargs="+",
        metavar="MODEL",
        help="retrievers whose top --pool-depth per sampled query join the judged documents (each run "
        "through the pipeline on the full dataset, stored results reused), e.g. bm25 minilm",
    )
    pool_depth: int = option(
        SUBSET_POOL_DEPTH, low=1, high=INT32_MAX, metavar="K", help="documents pooled per query and retriever"
    )
    output: Path | None = option(
        None,
        parse=folder,
        role="output",
        metavar="DIR",
        help="folder to write the subset into (default: DATA_DIR/subsets/<subset name>); an existing one "
        "is reused only when it holds this very subset",
    )


class DataSubsetOptions(EvalOptions, _Subset):
    """``harness data subset DATASET``: N sampled queries, their judged documents and a pool, as a BEIR folder.

    The pipeline's options (:class:`~harness.pipeline.EvalOptions`: ``split``, folders, ``batch_size``...)
    are those the pool retrievers run with; ``split`` is also the split the queries are drawn from.
    """


@dataclass
class DataSubsetResult(CommandResult):
    """The subset's folder and recipe; ``reused`` when the folder already held this very subset."""

    folder: Path
    recipe: SubsetRecipe
    reused: bool
    judged_docs: int

    def payload(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "reused": self.reused,
            "recipe": self.recipe.model_dump(mode="json"),
        }

    def render(self) -> str:
        recipe, source = self.recipe, self.recipe.source
        counts = recipe.counts
        pooled = ", ".join(f"{r.label} top-{recipe.pool.depth}: {r.docs:,}" for r in recipe.pool.retrievers)
        return "\n".join(
            [
                f"{recipe.name}: {counts.get('queries', 0):,} of {source.queries:,} queries of {source.name} "
                f"(split {recipe.split}, seed {recipe.seed}), {counts.get('docs', 0):,} of {source.docs:,} "
                f"documents, {counts.get('qrels', 0):,} qrels rows",
                f"  documents judged for the sampled queries: {self.judged_docs:,}"
                + (f"; pooled: {pooled}" if pooled else "; no pool"),
                f"  {'reused' if self.reused else 'written'}: {self.folder}",
                f"  evaluate on it: harness eval --dataset {self.folder} --model MODEL"
                + (f" --split {recipe.split}" if recipe.split != DEFAULT_SPLIT else ""),
            ]
        )


def data_subset(options: DataSubsetOptions | None = None, /, **values: Any) -> DataSubsetResult:
    """Build a reduced copy of a dataset that stands in for it: ``queries`` judged queries of ``split``
    sampled with ``seed``, the corpus cut to their judged documents plus the top ``pool_depth`` of each
    ``pool_from`` retriever (run through the pipeline on the full dataset, stored results reused).

    Written as a BEIR folder with its recipe ``subset.json`` (source name and checksums, seed, pool
    results' identities, sampled ids, the subset's own sha256s); named ``scifact~q50-s13-bm25@100`` so
    its results never pass for the full dataset's. E.g. ``data_subset(dataset="scifact", pool_from=["bm25"])``.
    Refused in one line: more queries than the split has, a split the dataset lacks, an unknown
    retriever, an output folder that holds anything but this very subset.
    """
    options = DataSubsetOptions.coerce(options, values)
    notes = check_pool_retrievers(options.dataset, options.pool_from, options)
    dataset = open_dataset(options.dataset, options.data_settings())
    query_ids = sample_query_ids(dataset, options.queries, options.seed)
    split = dataset.split if dataset.split != _reported_split(dataset) else None
    name = derived_name(
        dataset.name,
        queries=options.queries,
        seed=options.seed,
        pool=[retriever_slug(spec, options) for spec in options.pool_from],
        depth=options.pool_depth,
        split=split,
    )
    dest = options.output or default_subset_folder(options.data_dir, name)
    earlier = _earlier_subset(dest, name)
    pool = pool_documents(options.dataset, options.pool_from, options.pool_depth, query_ids, options)
    recipe = SubsetRecipe(
        name=name,
        source=source_of(dataset, options.dataset),
        split=dataset.split,
        seed=options.seed,
        queries=options.queries,
        pool=SubsetPool(depth=options.pool_depth, retrievers=pool.retrievers),
        query_ids=query_ids,
    )
    judged = judged_documents(dataset, query_ids)
    if earlier is not None:
        if earlier.core() != recipe.core():
            raise HarnessError(
                f"{dest} holds another subset, {earlier.name}: its {_first_difference(earlier, recipe)} "
                "differs; give another --output or remove that folder"
            )
        result = DataSubsetResult(folder=dest, recipe=earlier, reused=True, judged_docs=len(judged))
    else:
        written = write_subset(dataset, recipe, judged | pool.documents, dest)
        result = DataSubsetResult(folder=dest, recipe=written, reused=False, judged_docs=len(judged))
        result.paths.append(dest)
    result.messages += [f"note: {note}" for note in [*notes, *pool.notes]]
    return result


def _reported_split(dataset: Any) -> str:
    record = dataset_registry().get(dataset.name)
    return record.eval_split if record is not None else DEFAULT_SPLIT


def _earlier_subset(dest: Path, name: str) -> SubsetRecipe | None:
    """The intact subset already in ``dest`` (None: nothing there); any other content is refused."""
    if not dest.exists():
        return None
    if dest.is_dir() and not any(dest.iterdir()):
        return None  # an empty folder holds nothing to keep: the subset takes its place
    recipe = verified_recipe(dest) if dest.is_dir() else None
    if recipe is None:
        what = "changed since it was built" if read_recipe(dest) is not None else "not a subset"
        raise HarnessError(
            f"output folder {dest} exists and is {what}; give another --output for {name} (nothing is "
            "overwritten)"
        )
    return recipe


def _first_difference(earlier: SubsetRecipe, recipe: SubsetRecipe) -> str:
    """What tells two recipes apart, the name (which follows from the rest) last: ``seed (1 there, 2 now)``."""
    old, new = earlier.core(), recipe.core()
    for key in sorted(new, key=lambda key: key == "name"):
        if old.get(key) != new[key]:
            scalar = isinstance(new[key], (str, int)) and isinstance(old.get(key), (str, int))
            return f"{key} ({old.get(key)} there, {new[key]} now)" if scalar else key
    return "its recipe"


# ------------------------------------------------------------------------------------ fidelity


class DataFidelityOptions(OptionsRecord):
    """``harness data fidelity SUBSET``: how well a subset predicts its full dataset, from stored results."""

    subset: str = option(
        positional=True, metavar="SUBSET", help="a subset folder, or its name under DATA_DIR/subsets"
    )
    results_dir: Path | None = option(
        None,
        parse=folder,
        role="input",
        help="folder holding the results (default: env HARNESS_RESULTS_DIR or results/)",
    )
    metric: str = option(HEADLINE_METRICS[0], metavar="NAME", help="metric compared (default: %(default)s)")
    data_dir: Path | None = data_dir_option()


@dataclass
class DataFidelityResult(CommandResult):
    """The fidelity of one subset over the systems with results on it and on its full dataset."""

    recipe: SubsetRecipe
    metric: str
    fidelity: SubsetFidelity
    systems: SystemsOnBoth

    def payload(self) -> dict[str, Any]:
        fidelity = self.fidelity
        flip = fidelity.largest_flip
        return {
            "subset": self.recipe.name,
            "full": self.recipe.source.name,
            "metric": self.metric,
            "systems": len(fidelity.systems),
            "kendall_tau_b": fidelity.tau,
            "p_value": fidelity.p_value,
            "tau_meaningful": fidelity.tau_meaningful,
            "largest_flip": vars(flip) if flip else None,
            "flips": len(fidelity.flips),
            "mean_bias": fidelity.mean_bias,
            "per_system": {
                name: {"subset": fidelity.subset[name], "full": fidelity.full[name], "bias": bias}
                for name, bias in fidelity.bias.items()
            },
        }

    def render(self) -> str:
        fidelity, recipe = self.fidelity, self.recipe
        rows: list[tuple[str, ...]] = [("SYSTEM", "SUBSET", "FULL", "BIAS")]
        rows += [
            (name, f"{fidelity.subset[name]:.4f}", f"{fidelity.full[name]:.4f}", f"{bias:+.4f}")
            for name, bias in fidelity.bias.items()
        ]
        count = len(fidelity.systems)
        lines = [
            f"{recipe.name} ({recipe.counts.get('queries', len(recipe.query_ids))} queries) predicting "
            f"{recipe.source.name} ({recipe.source.queries} queries), {self.metric}, {count} systems",
            *text_table(rows, right=(1, 2, 3)),
            "",
            _tau_line(fidelity),
            _flip_line(fidelity),
            f"metric bias (subset - full): mean {fidelity.mean_bias:+.4f}",
        ]
        return "\n".join(lines)


def _tau_line(fidelity: SubsetFidelity) -> str:
    count = len(fidelity.systems)
    if fidelity.tau is None:
        return f"Kendall tau-b: undefined over {count} system(s) (needs two systems with different scores)"
    line = f"Kendall tau-b: {fidelity.tau:.3f} (p={fidelity.p_value:.3g}) over {count} systems"
    return line if fidelity.tau_meaningful else f"{line}: not meaningful with fewer than 3 systems"


def _flip_line(fidelity: SubsetFidelity) -> str:
    flip = fidelity.largest_flip
    if flip is None:
        return "largest rank flip: none (the subset orders no pair against the full dataset)"
    return (
        f"largest rank flip: {flip.worse} above {flip.better} on the subset (by {-flip.subset_difference:.4f}), "
        f"below it on the full dataset by {flip.full_difference:.4f} ({len(fidelity.flips)} flipped pair(s))"
    )


def data_fidelity(options: DataFidelityOptions | None = None, /, **values: Any) -> DataFidelityResult:
    """How well a subset predicts its full dataset, from the results stored for both.

    Every system (a result key: model and settings) with a result on the subset (recognised by its files'
    checksums) and on the full dataset (its name and the checksums the recipe recorded) counts: Kendall's
    tau-b between the two orders, the largest rank flip, the bias of ``metric`` (subset - full). E.g.
    ``data_fidelity(subset="data/subsets/scifact~q50-s13-bm25@100").fidelity.tau``.
    """
    options = DataFidelityOptions.coerce(options, values)
    folder_path = _subset_folder(options.subset, _data_dir(options.data_dir))
    recipe = read_recipe(folder_path)
    if recipe is None:
        raise HarnessError(
            f"{folder_path} has no subset.json: not a subset (`harness data subset` builds one)"
        )
    results_dir = options.results_dir or default_results_dir()
    systems = results_on_both(results_dir, recipe, options.metric)
    if not systems.full:
        raise HarnessError(
            f"no system has {options.metric} on both {recipe.name} and {recipe.source.name} in {results_dir}; "
            f"evaluate models on both (harness eval --dataset {folder_path} --dataset {recipe.source.spec} "
            "--model M..)"
        )
    fidelity = subset_fidelity(*systems.scores(options.metric))
    result = DataFidelityResult(recipe=recipe, metric=options.metric, fidelity=fidelity, systems=systems)
    if not fidelity.tau_meaningful:
        result.messages.append(
            f"warning: {len(fidelity.systems)} system(s) on both: Kendall tau is not meaningful below 3"
        )
    if systems.only_one_side:
        result.messages.append(
            f"note: with a result on one side only, left out: {', '.join(systems.only_one_side)}"
        )
    if systems.lacking_metric:
        result.messages.append(
            f"note: without {options.metric}, left out: {', '.join(systems.lacking_metric)}"
        )
    return result


def _subset_folder(subset: str, data_dir: Path) -> Path:
    path = Path(subset)
    if path.is_dir():
        return path
    named = default_subset_folder(data_dir, subset)
    if named.is_dir():
        return named
    raise HarnessError(
        f"no subset {subset!r}: neither a folder nor {named} (`harness data subset` builds one)"
    )


DATA = CommandGroup(
    "data",
    help="list, download and verify BEIR datasets; build subsets and measure their fidelity",
    description="The BEIR datasets of the registry (harness/records/datasets.yaml + HARNESS_CONFIG_DIR): list "
    "them, show one, download them (mirrors first, checked against md5 and sha256 pins) and verify local "
    "copies; build reduced subsets that stand in for a dataset, and measure how well each predicts it.",
    title="data commands",
    commands=(
        Command(
            "list",
            DataListOptions,
            data_list,
            help="every known dataset with its reported split and sizes",
            description="",
        ),
        Command(
            "info",
            DataInfoOptions,
            data_info,
            help="everything the registry knows about one dataset",
            description="",
        ),
        Command(
            "download",
            DataDownloadOptions,
            data_download,
            help="download datasets into the data folder (no-op when already there and verified)",
            description="Fetch datasets into DATA_DIR/<name>/. Sources are tried in order: each --mirror, "
            "then the official URL, then (with --hub) the Hugging Face copy. Zips are checked against the "
            "published md5, files against their sha256 pins, before anything is put in place.",
            echo=True,
        ),
        Command(
            "verify",
            DataVerifyOptions,
            data_verify,
            help="check local copies against the sha256 pins and the expected counts",
            description="For each dataset (a registry name under the data folder, or a folder path): the "
            "checksum status of each file, then documents, judged queries and qrels rows of the split "
            "compared with the registry. Exits non-zero on any mismatch or bad line.",
            echo=True,
        ),
        Command(
            "subset",
            DataSubsetOptions,
            data_subset,
            help="a reduced dataset: N sampled queries, their judged documents and a retrievers' pool",
            description="Sample N judged queries of a dataset with a seed, cut the corpus to their judged "
            "documents plus the top-k of each --pool-from retriever (run on the full dataset, stored results "
            "reused), and write it as a BEIR folder with its recipe subset.json (source checksums, seed, pool "
            "identities, sampled ids, its own sha256s). Its name (scifact~q50-s13-bm25@100) keeps its "
            "results apart from the full dataset's; an identical request reuses the folder.",
        ),
        Command(
            "fidelity",
            DataFidelityOptions,
            data_fidelity,
            help="how well a subset predicts its full dataset (Kendall tau, largest rank flip, bias)",
            description="From the results stored for both: every system evaluated on the subset and on its "
            "full dataset, Kendall tau-b between the two orders (not meaningful below 3 systems), the largest "
            "rank flip (the flipped pair with the biggest full-dataset difference) and the metric bias "
            "(subset - full), per system and on average.",
        ),
    ),
)

COMMANDS = (DATA,)
