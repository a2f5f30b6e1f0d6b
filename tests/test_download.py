"""Downloads: a zip of the shared scifact files, built here and served on 127.0.0.1, and local mirrors."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT

from harness.cli import main
from harness.core.errors import HarnessError
from harness.core.fileio import file_digest
from harness.datasets.beir import load_dataset
from harness.datasets.dataset_registry import get_dataset_record
from harness.datasets.download import DownloadError, fetch_url, install_dataset, safe_extract
from harness.datasets.prepare import prepare_dataset

SCIFACT_FILES = ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/train.tsv"]


class ZipServer:
    """Serves one payload at /scifact.zip; ``mode`` makes it corrupt bytes or cut the first response."""

    def __init__(self, payload: bytes):
        self.payload = payload
        self.mode = "good"  # "good", "corrupt" (one flipped byte), "cut_once" (first reply stops halfway)
        self.requests: list[dict[str, str | None]] = []
        self._cut_done = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                server.requests.append({"path": self.path, "range": self.headers.get("Range")})
                if self.path != "/scifact.zip":
                    self.send_error(404)
                    return
                body = bytearray(server.payload)
                if server.mode == "corrupt":
                    body[len(body) // 2] ^= 0xFF
                start, requested = 0, self.headers.get("Range")
                if requested:
                    start = int(re.fullmatch(r"bytes=(\d+)-", requested).group(1))
                    if start >= len(body):
                        self.send_response(416)
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                rest = bytes(body[start:])
                if server.mode == "cut_once" and not server._cut_done:
                    server._cut_done = True
                    self.wfile.write(rest[: len(rest) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)  # the connection dies mid-transfer
                    return
                self.wfile.write(rest)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(autouse=True)
def _no_mirror_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test` exports HARNESS_BEIR_MIRROR (the shared data); these tests choose their sources themselves."""
    monkeypatch.delenv("HARNESS_BEIR_MIRROR", raising=False)


# Bound for the whole session but never listening: connections are refused, and no other process can
# take the port between the test picking it and connecting to it.
_DEAD_PORT_HOLDER = socket.socket()
_DEAD_PORT_HOLDER.bind(("127.0.0.1", 0))


def _dead_url() -> str:
    """A 127.0.0.1 port with nothing listening."""
    return f"http://127.0.0.1:{_DEAD_PORT_HOLDER.getsockname()[1]}"


@pytest.fixture(scope="module")
def scifact_zip(tmp_path_factory, beir_mirror: Path) -> Path:
    """A BEIR-layout scifact.zip built from the shared (pinned) files."""
    path = tmp_path_factory.mktemp("zips") / "scifact.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        for relative in SCIFACT_FILES:
            bundle.write(beir_mirror / "scifact" / relative, f"scifact/{relative}")
    return path


@pytest.fixture
def server(scifact_zip: Path):
    serving = ZipServer(scifact_zip.read_bytes())
    yield serving
    serving.close()


def _record(url: str, zip_path: Path):
    """The scifact registry entry, pointed at a test URL and the md5 of the test zip."""
    return get_dataset_record("scifact").model_copy(update=dict(url=url, md5=file_digest(zip_path, "md5")))


def _assert_installed(folder: Path) -> None:
    pins = get_dataset_record("scifact").files
    assert {relative: file_digest(folder / relative) for relative in SCIFACT_FILES} == pins
    dataset = load_dataset(folder)
    assert (len(dataset.queries), dataset.num_docs, dataset.num_qrels) == (300, 5183, 339)


def _assert_nothing_installed(data_dir: Path) -> None:
    leftovers = [p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*")] if data_dir.exists() else []
    assert not any(name.startswith(("scifact", ".tmp-")) or name.endswith(".part") for name in leftovers), (
        leftovers
    )


@pytest.fixture
def test_registry(tmp_path: Path, monkeypatch, scifact_zip: Path):
    """A configs/ folder whose scifact entry points at ``url`` with the test zip's md5."""

    def make(url: str) -> Path:
        document = yaml.safe_load(
            (REPO_ROOT / "harness" / "records" / "datasets.yaml").read_text(encoding="utf-8")
        )
        document["datasets"]["scifact"].update(url=f"{url}/scifact.zip", md5=file_digest(scifact_zip, "md5"))
        folder = tmp_path / "configs"
        folder.mkdir(exist_ok=True)
        (folder / "datasets.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
        monkeypatch.setenv("HARNESS_CONFIG_DIR", str(folder))
        return folder

    return make


# --------------------------------------------------------------------------------------------- HTTP


def test_good_download_installs_a_verified_copy(server: ZipServer, scifact_zip: Path, tmp_path: Path):
    data_dir = tmp_path / "data"
    record = _record(f"{server.url}/scifact.zip", scifact_zip)
    folder = install_dataset(record, data_dir, None, backoff=0, progress=False)
    assert folder == data_dir / "scifact"
    _assert_installed(folder)
    assert server.requests == [{"path": "/scifact.zip", "range": None}]
    assert not (data_dir / ".downloads" / "scifact.zip").exists()  # the zip is not kept
    assert not list(data_dir.glob(".tmp-*"))


def test_corrupted_download_is_retried_then_refused_with_nothing_extracted(
    server: ZipServer, scifact_zip: Path, tmp_path: Path
):
    server.mode = "corrupt"
    data_dir = tmp_path / "data"
    record = _record(f"{server.url}/scifact.zip", scifact_zip)
    with pytest.raises(HarnessError) as caught:
        install_dataset(record, data_dir, None, attempts=3, backoff=0, progress=False)
    message = str(caught.value)
    assert f"could not get scifact: {server.url}/scifact.zip: md5 " in message
    assert f"instead of {record.md5} (corrupted) (gave up after 3 attempt(s))" in message
    assert "Nothing was installed" in message and "\n" not in message
    assert len(server.requests) == 3
    _assert_nothing_installed(data_dir)


def test_connection_cut_midway_is_resumed_with_range(server: ZipServer, scifact_zip: Path, tmp_path: Path):
    server.mode = "cut_once"
    data_dir = tmp_path / "data"
    record = _record(f"{server.url}/scifact.zip", scifact_zip)
    folder = install_dataset(record, data_dir, None, backoff=0, progress=False)
    _assert_installed(folder)
    # The second request asks only for what is missing: it resumes from the bytes already on disk.
    assert [request["range"] for request in server.requests][0] is None
    assert len(server.requests) == 2
    resumed_at = int(re.fullmatch(r"bytes=(\d+)-", server.requests[1]["range"]).group(1))
    assert 0 < resumed_at <= len(server.payload) // 2


def test_dead_server_is_a_clear_error(tmp_path: Path):
    url = f"{_dead_url()}/scifact.zip"
    # A refused connection is not transient: one attempt, not two (issue 32).
    with pytest.raises(
        DownloadError, match=r"cannot reach host 127.0.0.1: connection refused; offline, point"
    ):
        fetch_url(url, tmp_path / "scifact.zip", md5=None, attempts=2, backoff=0, progress=False)
    assert not list(tmp_path.iterdir())


def test_cli_download_from_dead_server_says_what_to_do(test_registry, tmp_path: Path, capsys):
    dead = _dead_url()
    test_registry(dead)
    args = [
        "data",
        "download",
        "scifact",
        "--data-dir",
        str(tmp_path / "data"),
        "--retries",
        "1",
        "--timeout",
        "5",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: could not get scifact: {dead}/scifact.zip: cannot reach host 127.0.0.1")
    assert "point --mirror / HARNESS_BEIR_MIRROR at a folder holding scifact.zip or scifact/" in err
    _assert_nothing_installed(tmp_path / "data")


def test_mirror_urls_are_tried_in_order_before_the_official_url(
    server: ZipServer, test_registry, tmp_path: Path, capsys
):
    test_registry(_dead_url())  # the "official" URL is dead: only the mirror can work
    data_dir = tmp_path / "data"
    args = ["data", "download", "scifact", "--data-dir", str(data_dir), "--retries", "1"]
    assert main([*args, "--mirror", _dead_url(), "--mirror", server.url]) == 0
    assert capsys.readouterr().out == f"scifact: ready in {data_dir / 'scifact'}\n"
    assert [request["path"] for request in server.requests] == ["/scifact.zip"]
    _assert_installed(data_dir / "scifact")


def test_hub_fallback_fails_cleanly_when_the_hub_is_unreachable(test_registry, tmp_path: Path):
    configs = test_registry(_dead_url())
    env = dict(os.environ, HARNESS_CONFIG_DIR=str(configs), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.pop("HARNESS_BEIR_MIRROR", None)
    harness = [str(REPO_ROOT / ".venv" / "bin" / "harness"), "data", "download", "scifact", "--retries", "1"]
    base = [*harness, "--data-dir", str(tmp_path / "data"), "--hub"]
    done = subprocess.run(base, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "Traceback" not in done.stderr
    assert "| Hugging Face hub BeIR/scifact: unavailable (" in error_lines[0]

    strict = subprocess.run([*base, "--strict"], env=env, capture_output=True, text=True, timeout=120)
    assert strict.returncode == 2
    assert (
        "Hugging Face hub BeIR/scifact: skipped, hub copies cannot be checked against pins" in strict.stderr
    )
    _assert_nothing_installed(tmp_path / "data")


# ------------------------------------------------------------------------------------------ archives


def test_zip_with_a_parent_directory_member_is_refused(scifact_zip: Path, beir_mirror: Path, tmp_path: Path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    evil = mirror / "scifact.zip"
    with zipfile.ZipFile(evil, "w") as bundle:
        bundle.write(beir_mirror / "scifact" / "queries.jsonl", "scifact/queries.jsonl")
        bundle.writestr("../escaped.txt", "outside")
    record = get_dataset_record("scifact").model_copy(update=dict(url=f"{_dead_url()}/scifact.zip", md5=None))
    data_dir = tmp_path / "data"
    with pytest.raises(
        HarnessError, match=r"member '\.\./escaped\.txt' climbs out with '\.\.'; refusing the archive"
    ):
        install_dataset(record, data_dir, str(mirror), attempts=1, backoff=0, progress=False)
    assert not list(tmp_path.rglob("escaped.txt"))
    _assert_nothing_installed(data_dir)


@pytest.mark.parametrize(
    ("member", "reason"),
    [("/etc/evil", "has an absolute path"), ("scifact/../../evil", "climbs out"), ("link", "symbolic link")],
)
def test_safe_extract_checks_every_member_before_writing(tmp_path: Path, member: str, reason: str):
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("scifact/ok.txt", "fine")
        info = zipfile.ZipInfo(member)
        if member == "link":
            info.external_attr = 0o120777 << 16  # a symlink entry
        bundle.writestr(info, "target")
    with pytest.raises(DownloadError, match=reason):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "scifact" / "ok.txt").exists()


def test_local_zip_mirror_is_md5_checked(scifact_zip: Path, tmp_path: Path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copy(scifact_zip, mirror / "scifact.zip")
    record = _record(f"{_dead_url()}/scifact.zip", scifact_zip)
    folder = install_dataset(record, tmp_path / "data", str(mirror), attempts=1, backoff=0, progress=False)
    _assert_installed(folder)
    assert (mirror / "scifact.zip").is_file()  # a mirror's zip is never touched

    wrong = record.model_copy(update=dict(md5="0" * 32))
    with pytest.raises(HarnessError, match=r"local zip .*scifact.zip: md5 is not the published 0{32}"):
        install_dataset(wrong, tmp_path / "other", str(mirror), attempts=1, backoff=0, progress=False)
    _assert_nothing_installed(tmp_path / "other")


# ------------------------------------------------------------------------------------ local folders


def test_mirror_folder_download_then_verify_end_to_end(beir_mirror: Path, tmp_path: Path):
    """HARNESS_BEIR_MIRROR=../shared/data/beir harness data download scifact; harness data verify scifact."""
    env = dict(os.environ, HARNESS_BEIR_MIRROR=str(beir_mirror), HARNESS_DATA_DIR=str(tmp_path / "data"))
    env.pop("HARNESS_CONFIG_DIR", None)
    harness = str(REPO_ROOT / ".venv" / "bin" / "harness")
    download = subprocess.run(
        [harness, "data", "download", "scifact"], env=env, capture_output=True, text=True
    )
    assert download.returncode == 0, download.stderr
    assert download.stdout == f"scifact: ready in {tmp_path / 'data' / 'scifact'}\n"

    verify = subprocess.run([harness, "data", "verify", "scifact"], env=env, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    out = verify.stdout
    for relative in SCIFACT_FILES:
        assert re.search(rf"^  {re.escape(relative)}\s+sha256 ok$", out, flags=re.M), relative
    assert re.search(r"^  docs\s+5,183  \(expected 5,183\) ok$", out, flags=re.M)
    assert re.search(r"^  queries\s+300  \(expected 300\) ok$", out, flags=re.M)
    assert re.search(r"^  qrels\s+339  \(expected 339\) ok$", out, flags=re.M)
    assert out.endswith("scifact: OK\n")


def test_verify_fails_on_a_tampered_copy(beir_mirror: Path, tmp_path: Path, capsys):
    data_dir = tmp_path / "data"
    folder = prepare_dataset("scifact", data_dir, mirror=str(beir_mirror))
    tampered = folder / "qrels" / "test.tsv"
    content = tampered.read_bytes()
    tampered.write_bytes(content.replace(b"\t1\r\n", b"\t2\r\n", 1))
    assert main(["data", "verify", "scifact", "--data-dir", str(data_dir)]) == 2
    captured = capsys.readouterr()
    assert re.search(
        r"^  qrels/test.tsv\s+sha256 MISMATCH: [0-9a-f]{64} \(pinned 0864bb98", captured.out, flags=re.M
    )
    assert captured.err == "error: verification failed: scifact: qrels/test.tsv mismatch\n"
    assert (
        file_digest(beir_mirror / "scifact" / "qrels" / "test.tsv")
        == get_dataset_record("scifact").files["qrels/test.tsv"]
    )


def test_mirror_folder_failing_its_pins_is_refused(beir_mirror: Path, tmp_path: Path):
    mirror = tmp_path / "mirror"
    shutil.copytree(beir_mirror / "scifact", mirror / "scifact", ignore=shutil.ignore_patterns(".*"))
    with open(mirror / "scifact" / "queries.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"_id": "extra", "text": "not in the official file"}\n')
    record = get_dataset_record("scifact").model_copy(update=dict(url=f"{_dead_url()}/scifact.zip"))
    data_dir = tmp_path / "data"
    with pytest.raises(HarnessError) as caught:
        install_dataset(record, data_dir, str(mirror), attempts=1, backoff=0, progress=False)
    message = str(caught.value)
    assert f"local folder {mirror / 'scifact'}: queries.jsonl sha256 " in message
    assert "is not the pinned 8ff84a7c903f722981cd8d595c022660140c51867b27608a6d4910db86080313" in message
    _assert_nothing_installed(data_dir)


def test_incomplete_mirror_folder_is_refused(beir_mirror: Path, tmp_path: Path):
    # The shared nfcorpus has no corpus and unofficial queries: it must not be installed as nfcorpus.
    record = get_dataset_record("nfcorpus").model_copy(update=dict(url=f"{_dead_url()}/nfcorpus.zip"))
    with pytest.raises(HarnessError) as caught:
        install_dataset(record, tmp_path / "data", str(beir_mirror), attempts=1, backoff=0, progress=False)
    message = str(caught.value)
    assert f"local folder {beir_mirror / 'nfcorpus'}: corpus.jsonl missing; queries.jsonl sha256" in message
    assert not (tmp_path / "data" / "nfcorpus").exists()


def test_prepare_dataset_is_a_no_op_when_present_and_verified(beir_mirror: Path, tmp_path: Path, monkeypatch):
    data_dir = tmp_path / "data"
    folder = prepare_dataset("scifact", data_dir, mirror=str(beir_mirror))

    import harness.datasets.download as download

    def no_network(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(download, "fetch_url", no_network)
    monkeypatch.setattr(download, "_copy_tree", no_network)
    assert prepare_dataset("scifact", data_dir, mirror="") == folder
    assert prepare_dataset(str(folder)) == folder  # an existing folder is used as is
    with pytest.raises(
        HarnessError, match=r"'scifcat' is neither a known dataset nor a folder; did you mean scifact"
    ):
        prepare_dataset("scifcat", data_dir)


def test_a_damaged_copy_is_reported_and_force_replaces_it(beir_mirror: Path, tmp_path: Path):
    data_dir = tmp_path / "data"
    folder = prepare_dataset("scifact", data_dir, mirror=str(beir_mirror))
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(
        HarnessError, match=r"exists but fails verification \(corpus.jsonl missing\).*--force"
    ):
        prepare_dataset("scifact", data_dir, mirror=str(beir_mirror))
    record = get_dataset_record("scifact")
    install_dataset(record, data_dir, str(beir_mirror), force=True, progress=False)
    _assert_installed(folder)


def test_cqadupstack_forum_comes_from_its_subfolder(tmp_path: Path):
    # A mirror holding the unpacked cqadupstack/ tree serves each forum from cqadupstack/<forum>/.
    forum = tmp_path / "mirror" / "cqadupstack" / "android"
    (forum / "qrels").mkdir(parents=True)
    (forum / "corpus.jsonl").write_text('{"_id": "1", "title": "t", "text": "x"}\n', encoding="utf-8")
    (forum / "queries.jsonl").write_text('{"_id": "9", "text": "q"}\n', encoding="utf-8")
    (forum / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n9\t1\t1\n", encoding="utf-8")
    record = get_dataset_record("cqadupstack/android").model_copy(
        update=dict(url=f"{_dead_url()}/cqadupstack.zip")
    )
    folder = install_dataset(record, tmp_path / "data", str(tmp_path / "mirror"), attempts=1, progress=False)
    assert folder == tmp_path / "data" / "cqadupstack" / "android"
    dataset = load_dataset(folder)
    assert dataset.name == "cqadupstack/android" and dataset.qrels == {"9": {"1": 1}}


def test_md5_of_the_test_zip_is_not_the_official_one(scifact_zip: Path):
    # Guards the tests above: they must override the md5, the rebuilt zip is not byte-identical.
    assert hashlib.md5(scifact_zip.read_bytes()).hexdigest() != get_dataset_record("scifact").md5


def test_mirror_files_are_copied_never_linked(tmp_path: Path):
    mirror = tmp_path / "mirror" / "toy"
    (mirror / "qrels").mkdir(parents=True)
    (mirror / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n', encoding="utf-8")
    (mirror / "queries.jsonl").write_text('{"_id": "q1", "text": "q"}\n', encoding="utf-8")
    (mirror / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    (mirror / "queries.jsonl").chmod(0o444)  # read-only files were once hard-linked
    before = {path.name: path.read_bytes() for path in mirror.rglob("*") if path.is_file()}
    record = get_dataset_record("scifact").model_copy(
        update=dict(name="toy", archive_dir="toy", files={}, url=f"{_dead_url()}/toy.zip")
    )
    folder = install_dataset(record, tmp_path / "data", str(tmp_path / "mirror"), attempts=1, progress=False)
    for name in ("queries.jsonl", "corpus.jsonl"):
        installed = folder / name
        assert installed.stat().st_ino != (mirror / name).stat().st_ino
        assert installed.stat().st_nlink == 1
        installed.chmod(0o644)
        installed.write_text('{"_id": "edited", "text": "y"}\n', encoding="utf-8")  # edit in place
    assert {path.name: path.read_bytes() for path in mirror.rglob("*") if path.is_file()} == before


def test_hub_copy_is_exported_as_a_beir_folder_and_checked_by_counts(
    beir_mirror: Path, tmp_path: Path, monkeypatch, capsys
):
    # The hub is unreachable here: stand in for datasets.load_dataset with Arrow tables built from the
    # shared scifact files, laid out like BeIR/scifact and BeIR/scifact-qrels.
    import datasets

    from harness.datasets.beir import load_queries
    from harness.datasets.qrels import read_qrels

    corpus = [doc._asdict() for doc in load_dataset(beir_mirror / "scifact").iter_documents()]
    queries = load_queries(beir_mirror / "scifact" / "queries.jsonl")
    tables = {
        "corpus": datasets.Dataset.from_dict(
            {
                "_id": [d["id"] for d in corpus],
                "title": [d["title"] for d in corpus],
                "text": [d["text"] for d in corpus],
            }
        ),
        "queries": datasets.Dataset.from_dict(
            {"_id": list(queries), "title": [""] * len(queries), "text": list(queries.values())}
        ),
    }
    splits = {}
    for split in ("test", "train"):
        judged = read_qrels(beir_mirror / "scifact" / "qrels" / f"{split}.tsv").qrels
        rows = [(q, d, s) for q, docs in judged.items() for d, s in docs.items()]
        splits[split] = datasets.Dataset.from_dict(
            {
                "query-id": [r[0] for r in rows],
                "corpus-id": [r[1] for r in rows],
                "score": [r[2] for r in rows],
            }
        )

    def fake_load_dataset(path, config=None, split=None):
        if path == "BeIR/scifact-qrels":
            return datasets.DatasetDict(splits)
        assert path == "BeIR/scifact" and config == split
        return tables[config]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    record = get_dataset_record("scifact").model_copy(update=dict(url=f"{_dead_url()}/scifact.zip"))
    data_dir = tmp_path / "data"
    folder = install_dataset(record, data_dir, None, use_hub=True, attempts=1, progress=False)
    dataset = load_dataset(folder)
    assert (len(dataset.queries), dataset.num_docs, dataset.num_qrels) == (300, 5183, 339)
    assert dataset.qrels == load_dataset(beir_mirror / "scifact").qrels

    # Re-serialised files cannot match the zip's pins; verify says so and still checks the counts.
    assert main(["data", "verify", "scifact", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert "from the Hugging Face hub copy BeIR/scifact: re-serialised" in out
    assert re.search(r"^  corpus.jsonl\s+no published pin$", out, flags=re.M)
    assert out.endswith("scifact: OK\n")

    # A hub copy whose counts are off is refused.
    splits["test"] = splits["test"].select(range(300))
    with pytest.raises(
        HarnessError,
        match=r"Hugging Face hub BeIR/scifact: test split: queries 266 != 300; test split: qrels 300 != 339",
    ):
        install_dataset(record, tmp_path / "other", None, use_hub=True, attempts=1, progress=False)
    _assert_nothing_installed(tmp_path / "other")


def test_forums_sharing_one_zip_download_it_once(tmp_path: Path):
    archive = tmp_path / "cqadupstack.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for forum in ("android", "english"):
            bundle.writestr(f"cqadupstack/{forum}/corpus.jsonl", f'{{"_id": "{forum}-1", "text": "x"}}\n')
            bundle.writestr(f"cqadupstack/{forum}/queries.jsonl", '{"_id": "q", "text": "y"}\n')
            bundle.writestr(
                f"cqadupstack/{forum}/qrels/test.tsv", f"query-id\tcorpus-id\tscore\nq\t{forum}-1\t1\n"
            )
    serving = ZipServer(archive.read_bytes())
    try:
        data_dir = tmp_path / "data"
        for forum, keep in (("android", True), ("english", False)):
            record = get_dataset_record(f"cqadupstack/{forum}").model_copy(
                update=dict(url=f"{serving.url}/scifact.zip", md5=file_digest(archive, "md5"))
            )
            folder = install_dataset(record, data_dir, None, keep_archive=keep, progress=False)
            assert load_dataset(folder).qrels == {"q": {f"{forum}-1": 1}}
        assert len(serving.requests) == 1
        assert not list((data_dir / ".downloads").iterdir())
    finally:
        serving.close()
