"""Getting a BEIR dataset onto disk: mirrors, resumable HTTP downloads, safe extraction, pin checks.

Sources are tried in order: each mirror (a URL prefix, or a local folder holding ``<name>.zip`` or an
unpacked ``<name>/``), then the official URL, then (only when asked) the Hugging Face hub copy. Whatever
the source, files land in a temporary folder inside the data directory, are checked against the
registry's sha256 pins, and only then renamed into place: a failure never leaves half a dataset.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json
from harness.core.staging import clean_stale, make_staging
from harness.datasets.beir import load_dataset
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import CORPUS_FILE, QRELS_DIR, QUERIES_FILE, SOURCE_FILE, DatasetRecord
from harness.datasets.verify import check_pins, verify_dataset

log = logging.getLogger(__name__)

DOWNLOADS_DIR = ".downloads"  # inside the data directory: zips and resumable .part files
CHUNK_SIZE = 1 << 20  # reading local files
NETWORK_CHUNK_SIZE = 1 << 16  # small, so a cut connection loses little of what was received
DEFAULT_ATTEMPTS = 3  # per URL, each resuming where the last one stopped
DEFAULT_TIMEOUT = 30.0  # seconds without data before an attempt is given up


class DownloadError(HarnessError):
    """A source could not deliver a good copy (the next source may still work)."""

    def __init__(self, where: str | Path, problem: str):
        super().__init__(f"{where}: {problem}")
        self.problem = problem


# ----------------------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Source:
    """One place a dataset may come from."""

    kind: str  # "url" (a zip over HTTP), "zip" (a local zip), "folder" (an unpacked copy), "hub"
    location: str

    def describe(self) -> str:
        labels = {"url": "", "zip": "local zip ", "folder": "local folder ", "hub": "Hugging Face hub "}
        return f"{labels[self.kind]}{self.location}"


def parse_mirrors(mirror: str | list[str] | None) -> list[str]:
    """Mirror entries from ``--mirror`` values or ``HARNESS_BEIR_MIRROR`` (comma-separated)."""
    if not mirror:
        return []
    values = [mirror] if isinstance(mirror, str) else list(mirror)
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def plan_sources(
    record: DatasetRecord, mirrors: list[str], *, use_hub: bool = False
) -> tuple[list[Source], list[str]]:
    """Sources to try in order, and notes on mirrors that offer nothing for this dataset."""
    sources: list[Source] = []
    notes: list[str] = []
    for mirror in mirrors:
        if mirror.startswith(("http://", "https://")):
            sources.append(Source("url", f"{mirror.rstrip('/')}/{record.archive_name}"))
            continue
        folder = Path(mirror.removeprefix("file://")).expanduser()
        unpacked, archive = folder / record.archive_dir, folder / record.archive_name
        if unpacked.is_dir():
            sources.append(Source("folder", str(unpacked)))
        if archive.is_file():
            sources.append(Source("zip", str(archive)))
        if not unpacked.is_dir() and not archive.is_file():
            notes.append(f"mirror {folder} has neither {record.archive_name} nor {record.archive_dir}/")
    sources.append(Source("url", record.url))
    if use_hub:
        if record.hf_corpus and record.hf_qrels:
            sources.append(Source("hub", record.hf_corpus))
        else:
            notes.append(f"no Hugging Face hub copy is registered for {record.name}")
    return sources, notes


# ------------------------------------------------------------------------------------------- HTTP


def _md5_of(path: Path) -> Any:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_SIZE), b""):
            digest.update(chunk)
    return digest


def _stream_into(session, url: str, part: Path, timeout: float, progress: bool) -> Any:
    """Append the rest of ``url`` to ``part`` (HTTP Range from its current size); return the md5 so far."""
    import requests
    from tqdm import tqdm

    offset = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    with session.get(url, stream=True, timeout=timeout, headers=headers) as response:
        if offset and response.status_code == 416:  # nothing left to send: the part is complete
            return _md5_of(part)
        if response.status_code >= 400:
            raise requests.HTTPError(f"HTTP {response.status_code} {response.reason}", response=response)
        resumed = offset and response.status_code == 206
        if resumed and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
            part.unlink()  # the server sent another range than asked: start afresh next attempt
            raise requests.ConnectionError(f"server answered range {response.headers.get('Content-Range')}")
        if offset and not resumed:
            log.info("%s ignored the Range request; starting over", url)
            offset = 0
        digest = _md5_of(part) if resumed else hashlib.md5()
        remaining = int(response.headers.get("Content-Length", 0)) or None
        received = 0
        with (
            open(part, "ab" if resumed else "wb") as handle,
            tqdm(
                total=(offset + remaining) if remaining else None,
                initial=offset,
                unit="B",
                unit_scale=True,
                desc=PurePosixPath(url).name,
                disable=None if progress else True,
                leave=False,
            ) as bar,
        ):
            for chunk in response.iter_content(NETWORK_CHUNK_SIZE):
                handle.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                bar.update(len(chunk))
        if remaining is not None and received < remaining:
            raise requests.ConnectionError(f"connection closed after {offset + received:,} bytes")
    return digest


def fetch_url(
    url: str,
    dest: Path,
    *,
    md5: str | None,
    attempts: int = DEFAULT_ATTEMPTS,
    timeout: float = DEFAULT_TIMEOUT,
    backoff: float = 2.0,
    progress: bool = True,
) -> Path:
    """Download ``url`` to ``dest``: streamed, md5-checked on the fly, resumed with Range, renamed at the end.

    A cut connection resumes from the ``.part`` file on the next attempt (also across runs); a wrong
    md5 discards the part and starts over; ``attempts`` failures in a row raise ``DownloadError``.
    """
    import requests

    if dest.is_file() and (md5 is None or _md5_of(dest).hexdigest() == md5):
        return dest  # kept from an earlier call (forums sharing the cqadupstack zip)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    last_problem = "no attempt made"
    with requests.Session() as session:
        for attempt in range(1, attempts + 1):
            if attempt > 1 and backoff:
                time.sleep(backoff * 2 ** (attempt - 2))
            try:
                digest = _stream_into(session, url, part, timeout, progress)
            except requests.HTTPError as error:
                status = error.response.status_code if error.response is not None else None
                last_problem = str(error)
                if status is not None and 400 <= status < 500 and status not in (408, 429):
                    break  # not found / forbidden: retrying will not help
                continue
            except (
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
            ) as error:
                last_problem = _short_reason(error)
                log.info("%s: attempt %d/%d failed (%s)", url, attempt, attempts, last_problem)
                continue
            if md5 and digest.hexdigest() != md5:
                last_problem = f"md5 {digest.hexdigest()} instead of {md5} (corrupted)"
                log.info("%s: attempt %d/%d: %s; discarding", url, attempt, attempts, last_problem)
                part.unlink(missing_ok=True)
                continue
            os.replace(part, dest)
            return dest
    raise DownloadError(url, f"{last_problem} (gave up after {attempt} attempt(s))")


_INCOMPLETE_READ = re.compile(r"IncompleteRead\((\d+) bytes read(?:, (\d+) more expected)?\)")


def _short_reason(error: Exception) -> str:
    """The innermost readable cause of a requests error, e.g. 'Connection refused'."""
    text = str(error)
    dropped = _INCOMPLETE_READ.search(text)
    if dropped:  # http.client's IncompleteRead, wrapped twice by urllib3 and requests
        expected = f", {int(dropped[2]):,} more expected" if dropped[2] else ""
        return f"connection dropped mid-transfer ({int(dropped[1]):,} bytes of a chunk read{expected})"
    for marker in ("] ", "Errno"):
        if marker in text:
            text = text.rsplit(marker, 1)[-1]
    return text.strip(" ')\"(") or type(error).__name__


# ---------------------------------------------------------------------------------------- archives


def _unsafe_member_reason(member: zipfile.ZipInfo, target: Path) -> str | None:
    name = member.filename
    mode = member.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or (pure.parts and ":" in pure.parts[0]):
        return "has an absolute path"
    if ".." in pure.parts:
        return "climbs out with '..'"
    resolved = (target / pure).resolve()
    if resolved != target and target not in resolved.parents:
        return "lands outside the target folder"
    return None


def safe_extract(archive: Path, target: Path, only_under: str | None = None) -> list[str]:
    """Extract ``archive`` (members under ``only_under/`` if given) into ``target``; return member names.

    Every member is checked before anything is written: one that would escape ``target`` (absolute
    path, ``..``, symlink) refuses the whole archive.
    """
    target = target.resolve()
    prefix = f"{only_under.strip('/')}/" if only_under else ""
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = bundle.infolist()
            for member in members:
                reason = _unsafe_member_reason(member, target)
                if reason:
                    raise DownloadError(archive, f"member {member.filename!r} {reason}; refusing the archive")
            chosen = [member for member in members if member.filename.startswith(prefix)]
            for member in chosen:
                bundle.extract(member, target)
    except zipfile.BadZipFile as error:
        raise DownloadError(archive, f"not a valid zip ({error})") from None
    return [member.filename for member in chosen]


# ------------------------------------------------------------------------------------------- hub


def export_hub_copy(record: DatasetRecord, target: Path) -> None:
    """Write the Hugging Face hub copy (``BeIR/<name>``, ``BeIR/<name>-qrels``) as a BEIR folder.

    The ``datasets`` library keeps the copy as memory-mapped Arrow, so rows stream to disk whatever the
    corpus size. The files are re-serialised, so they cannot match the zip's pins.
    """
    try:
        import datasets

        corpus = datasets.load_dataset(record.hf_corpus, "corpus", split="corpus")
        queries = datasets.load_dataset(record.hf_corpus, "queries", split="queries")
        qrels = datasets.load_dataset(record.hf_qrels)
    except (
        Exception
    ) as error:  # the library raises many types (ConnectionError, HfHubHTTPError, ValueError...)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DownloadError(f"Hugging Face hub {record.hf_corpus}", f"unavailable ({reason})") from None
    target.mkdir(parents=True, exist_ok=True)
    for filename, rows in ((CORPUS_FILE, corpus), (QUERIES_FILE, queries)):
        with open(target / filename, "w", encoding="utf-8") as handle:
            for row in rows:
                entry = {"_id": str(row["_id"]), "title": row.get("title") or "", "text": row["text"]}
                handle.write(json.dumps(entry) + "\n")
    (target / QRELS_DIR).mkdir(exist_ok=True)
    for split, rows in qrels.items():
        with open(target / QRELS_DIR / f"{split}.tsv", "w", encoding="utf-8") as handle:
            handle.write("query-id\tcorpus-id\tscore\n")
            for row in rows:
                handle.write(f"{row['query-id']}\t{row['corpus-id']}\t{int(row['score'])}\n")


# ------------------------------------------------------------------------------------ installation


def _copy_tree(source: Path, target: Path) -> None:
    """Copy every visible file of ``source`` into ``target``.

    Always a copy, never a hard link: an edit of the installed copy must never reach the mirror.
    """
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)


def _check_candidate(
    folder: Path, record: DatasetRecord, *, strict: bool, checksums: ChecksumStore | None = None
) -> list[str]:
    """Why ``folder`` is unusable as ``record``: a required file missing, a pin mismatch (strict: any
    pinned file missing). Empty when it is fine."""
    problems = []
    for relative in record.required_files:
        if not (folder / relative).is_file() and not (folder / f"{relative}.gz").is_file():
            problems.append(f"{relative} missing")
    for check in check_pins(folder, record, checksums):
        if check.status == "mismatch":
            problems.append(f"{check.relative} sha256 {check.actual} is not the pinned {check.expected}")
        elif strict and check.status == "missing" and f"{check.relative} missing" not in problems:
            problems.append(f"pinned {check.relative} missing (--strict)")
    return problems


def _count_problems(folder: Path, record: DatasetRecord, checksums: ChecksumStore) -> list[str]:
    """Counts of the reported split that differ from the registry (the check for unpinnable copies)."""
    try:
        result = verify_dataset(
            load_dataset(folder, record.eval_split, name=record.name, checksums=checksums)
        )
    except HarnessError as error:
        return [str(error)]
    return [f"{record.eval_split} split: {failure}" for failure in result.failures]


def _materialise(
    source: Source,
    record: DatasetRecord,
    staging: Path,
    downloads: Path,
    *,
    attempts: int,
    timeout: float,
    backoff: float,
    progress: bool,
) -> Path:
    """Bring ``source`` into ``staging``; return the folder there that holds the dataset files."""
    if source.kind == "folder":
        _copy_tree(Path(source.location), staging / "copy")
        return staging / "copy"
    if source.kind == "hub":
        export_hub_copy(record, staging / "hub")
        return staging / "hub"
    if source.kind == "zip":
        archive = Path(source.location)
        if record.md5 and _md5_of(archive).hexdigest() != record.md5:
            raise DownloadError(
                archive, f"md5 is not the published {record.md5} (corrupted or another version)"
            )
    else:
        archive = fetch_url(
            source.location,
            downloads / record.archive_name,
            md5=record.md5,
            attempts=attempts,
            timeout=timeout,
            backoff=backoff,
            progress=progress,
        )
    members = safe_extract(archive, staging / "zip", only_under=record.archive_dir)
    if not members:
        raise DownloadError(archive, f"no {record.archive_dir}/ folder inside")
    return staging / "zip" / record.archive_dir


STAGING_PREFIX = ".tmp-"  # staging folders in the data directory: .tmp-<name>-<owner tag><random>


@contextlib.contextmanager
def _install_lock(data_dir: Path, name: str) -> Iterator[None]:
    """Hold the data directory's lock for ``name``: one process downloads, the others wait and reuse it.

    An advisory lock (``flock``); where the file system ignores it, the rename below still keeps
    whichever complete copy arrived first.
    """
    import fcntl

    lock_path = data_dir / f".install-{name.replace('/', '-')}.lock"
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _existing_copy(dest: Path, record: DatasetRecord, strict: bool) -> Path:
    """``dest`` when it holds a good copy of ``record``; an error saying what to do otherwise."""
    if not dest.is_dir():
        raise HarnessError(f"{dest} exists but is a file, not a dataset folder; move it away and rerun")
    problems = _check_candidate(dest, record, strict=strict)
    if problems:
        raise HarnessError(
            f"{dest} exists but fails verification ({'; '.join(problems)}); "
            f"delete it or rerun `harness data download {record.name} --force`"
        )
    return dest


def _move_into_place(
    candidate: Path, dest: Path, data_dir: Path, record: DatasetRecord, *, strict: bool, force: bool
) -> Path:
    """Rename the verified ``candidate`` to ``dest`` without ever deleting a copy someone may be reading.

    Without ``force`` a copy that appeared meanwhile (another process) is kept and used. With
    ``force`` the old copy is first renamed aside (open files stay readable) and freed afterwards.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    retired = None
    if force and dest.exists():  # aside in the data directory, where a killed run's leftovers are freed
        retired = make_staging(data_dir, f"{STAGING_PREFIX}{record.name.replace('/', '-')}-old-")
        os.replace(dest, retired / "copy")
    try:
        os.rename(candidate, dest)  # fails when dest exists (a non-empty folder): never replaces it
    except OSError:
        if dest.exists():
            log.info("%s: another process installed it meanwhile; using its copy", record.name)
            return _existing_copy(dest, record, strict)
        raise HarnessError(f"could not move the verified copy of {record.name} to {dest}") from None
    finally:
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
    return dest


def install_dataset(
    record: DatasetRecord,
    data_dir: Path,
    mirror: str | list[str] | None = None,
    *,
    strict: bool = False,
    force: bool = False,
    use_hub: bool = False,
    keep_archive: bool = False,
    attempts: int = DEFAULT_ATTEMPTS,
    timeout: float = DEFAULT_TIMEOUT,
    backoff: float = 2.0,
    progress: bool = True,
) -> Path:
    """``data_dir/<name>`` holding a verified copy of ``record``; downloads only when it is not there yet.

    Safe to call from several processes at once: one installs, the others find its copy. A copy in
    place is never removed except by ``force``, and then only after the new one is verified.
    """
    dest = data_dir / record.archive_dir
    clean_stale(data_dir, f"{STAGING_PREFIX}*")  # staging folders of killed installs
    if dest.exists() and not force:
        return _existing_copy(dest, record, strict)
    if data_dir.exists() and not data_dir.is_dir():
        raise HarnessError(f"data directory {data_dir} is a file; point --data-dir at a folder")
    data_dir.mkdir(parents=True, exist_ok=True)
    with _install_lock(data_dir, record.name):
        if dest.exists() and not force:  # installed by another process while this one waited
            return _existing_copy(dest, record, strict)
        return _install_unlocked(
            record,
            data_dir,
            dest,
            mirror,
            strict=strict,
            force=force,
            use_hub=use_hub,
            keep_archive=keep_archive,
            attempts=attempts,
            timeout=timeout,
            backoff=backoff,
            progress=progress,
        )


def install_datasets(
    records: list[DatasetRecord], data_dir: Path, mirror: str | list[str] | None = None, **settings: Any
) -> Iterator[tuple[DatasetRecord, Path | HarnessError]]:
    """Install each of ``records`` in turn (``settings`` as :func:`install_dataset` takes them).

    Yields each record with its folder, or with its error so the others are still installed; a single
    record's error is raised. Forums sharing one zip (cqadupstack) reuse it; it is deleted after the last.
    """
    for index, record in enumerate(records):
        shared_later = any(other.url == record.url for other in records[index + 1 :])
        outcome: Path | HarnessError
        try:
            outcome = install_dataset(record, data_dir, mirror, keep_archive=shared_later, **settings)
        except HarnessError as error:
            if len(records) == 1:
                raise
            outcome = error
        yield record, outcome


def _install_unlocked(
    record: DatasetRecord,
    data_dir: Path,
    dest: Path,
    mirror: str | list[str] | None,
    *,
    strict: bool,
    force: bool,
    use_hub: bool,
    keep_archive: bool,
    attempts: int,
    timeout: float,
    backoff: float,
    progress: bool,
) -> Path:
    sources, failures = plan_sources(record, parse_mirrors(mirror), use_hub=use_hub)
    downloads = data_dir / DOWNLOADS_DIR
    for source in sources:
        if strict and source.kind == "hub":
            failures.append(
                f"{source.describe()}: skipped, hub copies cannot be checked against pins (--strict)"
            )
            continue
        staging = make_staging(data_dir, f"{STAGING_PREFIX}{record.name.replace('/', '-')}-")
        try:
            log.info("%s: trying %s", record.name, source.describe())
            candidate = _materialise(
                source,
                record,
                staging,
                downloads,
                attempts=attempts,
                timeout=timeout,
                backoff=backoff,
                progress=progress,
            )
            # Provenance, and what tells later checks that a hub copy is re-serialised (pins do not apply).
            atomic_write_json(candidate / SOURCE_FILE, {"kind": source.kind, "location": source.location})
            # A staging copy about to move: its hashes are not remembered under a path about to vanish.
            checksums = ChecksumStore(persist=False)
            problems = _check_candidate(candidate, record, strict=strict, checksums=checksums)
            if source.kind == "hub" and not problems:
                problems = _count_problems(candidate, record, checksums)
            if problems:
                raise DownloadError(source.describe(), "; ".join(problems))
            installed = _move_into_place(candidate, dest, data_dir, record, strict=strict, force=force)
            log.info("%s: installed in %s from %s", record.name, dest, source.describe())
            return installed
        except DownloadError as error:
            failures.append(f"{source.describe()}: {error.problem}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if source.kind == "url" and not keep_archive:  # a .part kept for resuming stays
                (downloads / record.archive_name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        downloads.rmdir()  # only if empty: a .part kept for resuming stays
    raise HarnessError(
        f"could not get {record.name}: {' | '.join(failures)}. Nothing was installed; check the network, or "
        f"point --mirror / HARNESS_BEIR_MIRROR at a folder holding {record.archive_name} or {record.archive_dir}/"
    )
