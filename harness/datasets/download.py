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
import socket
import stat
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, urlsplit

from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, file_digest
from harness.core.staging import clean_stale, make_staging
from harness.datasets.beir import load_dataset
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import CORPUS_FILE, QRELS_DIR, QUERIES_FILE, SOURCE_FILE, DatasetRecord
from harness.datasets.hub_layout import (
    README_FILE,
    HubReading,
    config_files,
    convert_to_beir,
    is_hub_layout,
    local_configs,
    plan_files,
)
from harness.datasets.verify import check_pins, verify_dataset

log = logging.getLogger(__name__)

DOWNLOADS_DIR = ".downloads"  # inside the data directory: zips and resumable .part files
CHUNK_SIZE = 1 << 20  # reading local files
NETWORK_CHUNK_SIZE = 1 << 16  # small, so a cut connection loses little of what was received
DEFAULT_ATTEMPTS = 3  # per URL, each resuming where the last one stopped
DEFAULT_TIMEOUT = 30.0  # seconds without data before an attempt is given up
HF_ENDPOINT_ENV = "HF_ENDPOINT"  # as huggingface_hub reads it: a mirror of the hub's HTTP API
DEFAULT_HUB_ENDPOINT = "https://huggingface.co"
MAX_LISTING_PAGES = 1000  # the hub pages a tree listing; a bound against a server that never stops
OFFLINE_FIX = (
    "offline, point --mirror / HARNESS_BEIR_MIRROR at a local copy, or --dataset at a local folder "
    "(a hub dataset's folder as the hub lays it out), or HF_ENDPOINT at a reachable hub mirror"
)


class DownloadError(HarnessError):
    """A source could not deliver a good copy (the next source may still work)."""

    def __init__(self, where: str | Path, problem: str):
        super().__init__(f"{where}: {problem}")
        self.problem = problem


class HostUnreachable(DownloadError):
    """The host does not resolve or refuses connections: retrying cannot help, so nothing is retried."""


# Host names that did not resolve in this process: later downloads (the next dataset, model pair...)
# fail at once instead of waiting for the resolver again. Refused connections are not remembered:
# a server may start listening later.
_UNRESOLVED_HOSTS: set[str] = set()


def _unreachable_reason(error: BaseException) -> str | None:
    """'name does not resolve' / 'connection refused' when that is what ``error`` wraps, else None."""
    from urllib3.exceptions import NameResolutionError

    pending: list[BaseException] = [error]
    seen: set[int] = set()
    while pending and len(seen) < 50:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, socket.gaierror | NameResolutionError):
            return "name does not resolve"
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        inner = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        pending.extend(item for item in inner if isinstance(item, BaseException))
    return None


def _refuse_unreachable(url: str, error: BaseException | None = None) -> None:
    """Raise ``HostUnreachable`` naming the host and the offline fix when ``url``'s host cannot be reached."""
    host = urlsplit(url).hostname or url
    reason = "name does not resolve (earlier in this run)" if host in _UNRESOLVED_HOSTS else None
    if reason is None and error is not None:
        reason = _unreachable_reason(error)
        if reason == "name does not resolve":
            _UNRESOLVED_HOSTS.add(host)
    if reason is not None:
        raise HostUnreachable(url, f"cannot reach host {host}: {reason}; {OFFLINE_FIX}")


# ----------------------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Source:
    """One place a dataset may come from."""

    # "url" (a zip over HTTP), "zip" (a local zip), "folder" (an unpacked copy), "hub" (the hub, its
    # HTTP API for a record with `hub`, else the `datasets` library), "hub-folder" (a local hub-layout copy)
    kind: str
    location: str

    def describe(self) -> str:
        labels = {
            "url": "",
            "zip": "local zip ",
            "folder": "local folder ",
            "hub": "Hugging Face hub ",
            "hub-folder": "local hub copy ",
        }
        return f"{labels[self.kind]}{self.location}"


def parse_mirrors(mirror: str | list[str] | None) -> list[str]:
    """Mirror entries from ``--mirror`` values or ``HARNESS_BEIR_MIRROR`` (comma-separated)."""
    if not mirror:
        return []
    values = [mirror] if isinstance(mirror, str) else list(mirror)
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _mirror_sources(record: DatasetRecord, folder: Path) -> list[Source]:
    """What a local mirror folder offers for ``record``: an unpacked BEIR copy, the zip, a hub-layout copy."""
    sources: list[Source] = []
    unpacked = folder / record.archive_dir
    if record.hub:  # a copy as the hub lays it out: <mirror>/<owner>/<name>/ or <mirror>/<record folder>/
        for candidate in (folder / record.hub, unpacked):
            if candidate.is_dir() and is_hub_layout(candidate):
                sources.append(Source("hub-folder", str(candidate)))
                break
    if unpacked.is_dir() and not any(source.location == str(unpacked) for source in sources):
        sources.append(Source("folder", str(unpacked)))
    if record.url and (folder / record.archive_name).is_file():
        sources.append(Source("zip", str(folder / record.archive_name)))
    return sources


def plan_sources(
    record: DatasetRecord, mirrors: list[str], *, use_hub: bool = False
) -> tuple[list[Source], list[str]]:
    """Sources to try in order, and notes on mirrors that offer nothing for this dataset."""
    sources: list[Source] = []
    notes: list[str] = []
    for mirror in mirrors:
        if mirror.startswith(("http://", "https://")):
            if record.url:
                sources.append(Source("url", f"{mirror.rstrip('/')}/{record.archive_name}"))
            continue
        folder = Path(mirror.removeprefix("file://")).expanduser()
        offered = _mirror_sources(record, folder)
        sources += offered
        if not offered:
            wanted = [f"{record.archive_dir}/"] + ([record.archive_name] if record.url else [])
            wanted += [f"{record.hub}/"] if record.hub else []
            notes.append(f"mirror {folder} has none of {', '.join(wanted)}")
    if record.url:
        sources.append(Source("url", record.url))
    if record.hub:  # pinned by revision and checked file by file, so always worth trying
        sources.append(Source("hub", f"{record.hub}@{record.hub_revision}"))
    elif use_hub:
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
    _refuse_unreachable(url)
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
                _refuse_unreachable(url, error)  # DNS failure, refused: no retry can help
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


# ----------------------------------------------------------------------------- hub (MTEB layout)


def hub_endpoint() -> str:
    """The hub's HTTP endpoint: ``HF_ENDPOINT`` (a mirror) or https://huggingface.co."""
    return (os.environ.get(HF_ENDPOINT_ENV) or DEFAULT_HUB_ENDPOINT).rstrip("/")


@dataclass(frozen=True)
class HubFile:
    """One file of a hub dataset repo as its tree listing describes it."""

    path: str
    size: int
    sha256: str | None  # the LFS object id (data files); None for files kept in git
    git_oid: str | None  # the git blob sha1 (every file)


def _hub_get(session, url: str, what: str, *, timeout: float, attempts: int, backoff: float):
    """GET ``url`` with retries for transient failures (timeouts, resets, 5xx, 429); a 4xx is one line."""
    import requests

    last_problem = "no attempt made"
    for attempt in range(1, attempts + 1):
        if attempt > 1 and backoff:
            time.sleep(backoff * 2 ** (attempt - 2))
        try:
            response = session.get(url, timeout=timeout)
        except (requests.ConnectionError, requests.Timeout) as error:
            _refuse_unreachable(url, error)
            last_problem = _short_reason(error)
            continue
        if response.status_code < 400:
            return response
        last_problem = f"HTTP {response.status_code} {response.reason}"
        if response.status_code in (401, 403, 404):
            code = response.headers.get("X-Error-Code", "")
            raise DownloadError(what, _hub_refusal(code, response.status_code))
        if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
            break
    raise DownloadError(what, f"{last_problem} (gave up after {attempt} attempt(s))")


def _hub_refusal(code: str, status: int) -> str:
    if code == "RevisionNotFound":
        return "this revision does not exist; pin a commit sha listed on the dataset's page (Files, History)"
    if code in ("RepoNotFound", "GatedRepo") or status in (401, 403):
        return f"the dataset does not exist or is private/gated (HTTP {status}); check the repo id"
    return f"not found (HTTP {status}); check the repo id and the revision"


def list_hub_files(
    repo: str, revision: str, *, endpoint: str, timeout: float, attempts: int, backoff: float
) -> dict[str, HubFile]:
    """Every file of ``repo`` at ``revision`` from the hub's tree API (following its pages)."""
    import requests

    what = f"hub dataset {repo}@{revision}"
    url: str | None = f"{endpoint}/api/datasets/{repo}/tree/{quote(revision, safe='')}?recursive=true"
    files: dict[str, HubFile] = {}
    with requests.Session() as session:
        for _ in range(MAX_LISTING_PAGES):
            if url is None:
                break
            response = _hub_get(session, url, what, timeout=timeout, attempts=attempts, backoff=backoff)
            try:
                entries = response.json()
            except ValueError:
                raise DownloadError(what, f"{url} did not answer JSON (not a hub API endpoint?)") from None
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict) and entry.get("type") == "file" and "path" in entry:
                    lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
                    files[entry["path"]] = HubFile(
                        entry["path"], int(entry.get("size") or 0), lfs.get("oid"), entry.get("oid")
                    )
            url = response.links.get("next", {}).get("url")
    if not files:
        raise DownloadError(what, "the repo lists no files at this revision")
    return files


def _git_blob_sha1(path: Path) -> str:
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_SIZE), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _checked_sha256(path: Path, relative: str, pins: dict[str, str], listed: HubFile | None) -> str:
    """The file's sha256 after checking it against its registry pin and what the hub listed for it."""
    sha256 = file_digest(path, "sha256")
    expected = pins.get(relative) or (listed.sha256 if listed else None)
    if expected and sha256 != expected:
        path.unlink(missing_ok=True)
        raise DownloadError(
            relative, f"{relative}: sha256 {sha256} is not the expected {expected} (corrupted or changed)"
        )
    if listed and not listed.sha256 and listed.git_oid and _git_blob_sha1(path) != listed.git_oid:
        path.unlink(missing_ok=True)
        raise DownloadError(
            relative, f"{relative}: git blob id is not the listed {listed.git_oid} (corrupted)"
        )
    return sha256


def fetch_hub_dataset(
    record: DatasetRecord,
    reading: HubReading,
    raw: Path,
    *,
    endpoint: str,
    attempts: int,
    timeout: float,
    backoff: float,
    progress: bool,
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Download the files one split of ``record``'s hub dataset needs into ``raw`` (as the repo lays them
    out), each checked; return the plan (role -> repo paths) and each file's sha256."""
    assert record.hub and record.hub_revision
    repo, revision = record.hub, record.hub_revision
    listing = list_hub_files(
        repo, revision, endpoint=endpoint, timeout=timeout, attempts=attempts, backoff=backoff
    )
    base = f"{endpoint}/datasets/{repo}/resolve/{quote(revision, safe='')}"
    sha256s: dict[str, str] = {}

    def fetch(relative: str) -> Path:
        target = raw / relative
        fetch_url(
            f"{base}/{quote(relative)}",
            target,
            md5=None,
            attempts=attempts,
            timeout=timeout,
            backoff=backoff,
            progress=progress,
        )
        sha256s[relative] = _checked_sha256(target, relative, record.hub_files, listing.get(relative))
        return target

    readme = fetch(README_FILE).read_text(encoding="utf-8") if README_FILE in listing else None
    plan = plan_files(config_files(sorted(listing), readme), reading, f"hub dataset {repo}@{revision}")
    for relative in sorted({path for paths in plan.values() for path in paths}):
        fetch(relative)
    return plan, sha256s


def _hub_copy_from_folder(record: DatasetRecord, reading: HubReading, folder: Path) -> tuple[dict, dict]:
    """The plan and checked sha256s of a local copy of ``record``'s hub dataset (a mirror folder)."""
    plan = plan_files(local_configs(folder), reading, str(folder))
    sha256s = {
        relative: _checked_sha256(folder / relative, relative, record.hub_files, None)
        for relative in sorted({path for paths in plan.values() for path in paths})
    }
    return plan, sha256s


def _materialise_hub(
    source: Source,
    record: DatasetRecord,
    staging: Path,
    *,
    split: str | None,
    attempts: int,
    timeout: float,
    backoff: float,
    progress: bool,
) -> tuple[Path, dict[str, Any]]:
    """Convert ``record``'s hub dataset (downloaded, or a local mirror folder) into a BEIR folder in staging."""
    reading = HubReading.from_record(record, split)
    if source.kind == "hub-folder":
        root = Path(source.location)
        plan, sha256s = _hub_copy_from_folder(record, reading, root)
    else:
        root = staging / "raw"
        plan, sha256s = fetch_hub_dataset(
            record,
            reading,
            root,
            endpoint=hub_endpoint(),
            attempts=attempts,
            timeout=timeout,
            backoff=backoff,
            progress=progress,
        )
    target = staging / "hub"
    counts = convert_to_beir(root, plan, reading, target)
    provenance = {
        "repo": record.hub,
        "revision": record.hub_revision,
        "files": sha256s,
        "counts": vars(counts),
    }
    return target, provenance


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
        if strict and source.kind == "hub" and not record.hub:
            failures.append(
                f"{source.describe()}: skipped, hub copies cannot be checked against pins (--strict)"
            )
            continue
        staging = make_staging(data_dir, f"{STAGING_PREFIX}{record.name.replace('/', '-')}-")
        try:
            log.info("%s: trying %s", record.name, source.describe())
            provenance: dict[str, Any] = {"kind": source.kind, "location": source.location}
            if source.kind in ("hub", "hub-folder") and record.hub:
                candidate, hub_facts = _materialise_hub(
                    source,
                    record,
                    staging,
                    split=None,
                    attempts=attempts,
                    timeout=timeout,
                    backoff=backoff,
                    progress=progress,
                )
                # Both are re-serialised hub data: kind "hub" tells the pin checks the zip's pins do not apply.
                provenance = {"kind": "hub", "location": source.location, **hub_facts}
            else:
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
            atomic_write_json(candidate / SOURCE_FILE, provenance)
            # A staging copy about to move: its hashes are not remembered under a path about to vanish.
            checksums = ChecksumStore(persist=False)
            problems = _check_candidate(candidate, record, strict=strict, checksums=checksums)
            if source.kind in ("hub", "hub-folder") and not problems:
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
    offline = [
        record.archive_name,
        f"{record.archive_dir}/",
        f"{record.hub}/ (as the hub lays it out)" if record.hub else "",
    ]
    raise HarnessError(
        f"could not get {record.name}: {' | '.join(failures)}. Nothing was installed; check the network, or "
        f"point --mirror / HARNESS_BEIR_MIRROR at a folder holding {' or '.join(item for item in offline if item)}"
    )
