"""The judge client against a misbehaving server on 127.0.0.1, and a judge key kept out of every file.

A raw socket server answers each request by the next behaviour of its plan (an HTML page with status
200, a reply dripped a byte at a time, 429 with ``Retry-After``, a reset, a short read, 50 MB...), then
as a working judge. It serves at most ``MAX_REQUESTS`` requests, each connection is bounded in time, and it
stops with the test. Each refused case is one ``error:`` line (or one ``HarnessError``), exit 2, no
traceback, nothing cached, and every file under the inputs, the cache and the outputs unchanged.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import http.client
import json
import re
import socket
import socketserver
import struct
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from fault_snapshot import assert_unchanged, snapshot
from test_qa_cli import assert_one_line_error, run_cli, write_jsonl

from harness.api import rag_eval
from harness.core.errors import HarnessError
from harness.qa.rag import judge_client
from harness.qa.rag.judge_client import (
    MAX_REPLY_BYTES,
    MAX_RETRY_AFTER,
    READ_CHUNK,
    STATEMENTS,
    JudgeClient,
    JudgeSettings,
    retry_after_seconds,
)

MAX_REQUESTS = 40
CONNECTION_SECONDS = 15.0  # no server thread outlives this
SECRET_KEY = "sk-TEST-9f8e7d6c5b4a39281706"
PASSWORD = "pw-TEST-0a1b2c3d4e5f"
QUESTION = {"question": "q", "answer": "a"}
ROW = {"id": "q1", "question": "Q1?", "answer": "answer one", "contexts": ["c1"], "ground_truth": "t1"}


# ------------------------------------------------------------------------------------------ the server


@dataclass
class Request:
    headers: dict[str, str]
    body: dict


def judge_answer(body: dict) -> str:
    """What a working judge answers: one statement, supported."""
    task = re.search(r"task (\w+), v\d+", body["messages"][0]["content"]).group(1)
    if task == "statements":
        return json.dumps({"statements": ["s1"]})
    return json.dumps({"verdicts": [{"statement": "s1", "reason": "r", "verdict": 1}]})


def completion(text: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()


def send(sock: socket.socket, status: int = 200, body: bytes = b"", **headers: str) -> None:
    head = {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}
    lines = "".join(f"{name.replace('_', '-')}: {value}\r\n" for name, value in head.items())
    sock.sendall(f"HTTP/1.1 {status} Status\r\n{lines}Connection: close\r\n\r\n".encode() + body)


Behaviour = Callable[[socket.socket, Request, "FaultServer"], None]


def answer(sock: socket.socket, request: Request, server: FaultServer) -> None:
    send(sock, body=completion(judge_answer(request.body)))


def body_of(payload: bytes, content_type: str = "application/json") -> Behaviour:
    return lambda sock, request, server: send(sock, body=payload, Content_Type=content_type)


def status(code: int, **headers: str) -> Behaviour:
    return lambda sock, request, server: send(sock, code, b"{}", **headers)


def reset(sock: socket.socket, request: Request, server: FaultServer) -> None:
    """Abort the connection: an RST, as a crashed or restarted server sends."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def hang_up(sock: socket.socket, request: Request, server: FaultServer) -> None:
    sock.close()  # no status line at all


def short(sock: socket.socket, request: Request, server: FaultServer) -> None:
    """Announce the whole completion, send a third of it and close."""
    payload = completion(judge_answer(request.body))
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    sock.sendall(head.encode() + payload[: len(payload) // 3])


def drip(where: str) -> Behaviour:
    """A byte every 0.1 s, in the headers or in the body: each read is quick, the reply never ends."""

    def behave(sock: socket.socket, request: Request, server: FaultServer) -> None:
        payload = completion(judge_answer(request.body))
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(payload) + 1000}\r\nConnection: close\r\n\r\n"
        slow = head.encode() + payload + b" " * 1000
        start = 0 if where == "headers" else len(head) + len(payload)
        sock.sendall(slow[:start])
        for byte in slow[start:]:
            if server.stopping.is_set():
                return
            sock.sendall(bytes([byte]))
            time.sleep(0.1)

    return behave


def flood(*, announce: bool) -> Behaviour:
    """A 50 MB reply (Content-Length announced or not), sent in 1 MB blocks while the client reads."""
    size = 50 * 1024 * 1024

    def behave(sock: socket.socket, request: Request, server: FaultServer) -> None:
        length = f"Content-Length: {size}\r\n" if announce else ""
        sock.sendall(f"HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n".encode())
        block = b"x" * (1024 * 1024)
        for _ in range(size // len(block)):
            if server.stopping.is_set():
                return
            sock.sendall(block)
            server.body_bytes_sent += len(block)

    return behave


@dataclass
class FaultServer:
    """Answers request N by ``plan[N]``, then as a working judge; records every request."""

    plan: list[Behaviour]
    then: Behaviour = answer
    requests: list[Request] = field(default_factory=list)
    body_bytes_sent: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)

    def handle(self, sock: socket.socket) -> None:
        sock.settimeout(CONNECTION_SECONDS)
        reader = sock.makefile("rb")
        request_line = reader.readline()
        if not request_line:
            return
        headers = {}
        while (line := reader.readline().strip()) and len(headers) < 100:
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = json.loads(reader.read(int(headers.get("content-length", 0))))
        self.requests.append(Request(headers, body))
        number = len(self.requests)
        if number > MAX_REQUESTS:
            send(sock, 503, b"{}")
            return
        behaviour = self.plan[number - 1] if number <= len(self.plan) else self.then
        with contextlib.suppress(OSError):  # the client gave up (its timeout, a cap): nothing to answer
            behaviour(sock, self.requests[-1], self)


@contextlib.contextmanager
def fault_server(*plan: Behaviour, then: Behaviour = answer) -> Iterator[tuple[str, FaultServer]]:
    script = FaultServer(list(plan), then)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            script.handle(self.request)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        script.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def make_client(base_url: str, cache: Path, slept: list[float], **settings) -> JudgeClient:
    options = {"timeout": 5.0, "backoff": 0.25, "retries": 2, **settings}
    return JudgeClient(
        JudgeSettings(base_url=base_url, model="scripted", **options), cache, sleep=slept.append
    )


def cached_files(cache: Path) -> list[Path]:
    return sorted(path for path in cache.rglob("*") if path.is_file())


# ------------------------------------------------------------------------ replies that are no answer

NOT_COMPLETIONS = {
    "html page": (b"<html><body>Proxy error: upstream unavailable</body></html>", "text/html"),
    "error object": (b'{"error": {"message": "quota exceeded"}}', "application/json"),
    "empty body": (b"", "application/json"),
    "json list": (b"[1, 2, 3]", "application/json"),
    "choices without message": (b'{"choices": [{"text": "x"}]}', "application/json"),
    "not utf-8": (b'{"choices": "\xff\xfe"}', "application/json"),
    "nested 100,000 deep": (b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json"),
}


@pytest.mark.parametrize("case", sorted(NOT_COMPLETIONS))
def test_a_200_that_is_not_a_chat_completion_is_retried_never_cached(case: str, tmp_path: Path) -> None:
    payload, content_type = NOT_COMPLETIONS[case]
    slept: list[float] = []
    with fault_server(body_of(payload, content_type)) as (base_url, server):
        client = make_client(base_url, tmp_path / "cache", slept)
        assert client.ask(STATEMENTS, QUESTION) == ["s1"]  # the retry got a real completion
    assert len(server.requests) == 2 and slept == [0.25]
    (entry,) = cached_files(tmp_path / "cache")
    assert json.loads(entry.read_text())["reply"] == json.dumps({"statements": ["s1"]})


@pytest.mark.parametrize("case", sorted(NOT_COMPLETIONS))
def test_a_server_that_only_sends_pages_is_one_error(case: str, tmp_path: Path) -> None:
    payload, content_type = NOT_COMPLETIONS[case]
    with fault_server(then=body_of(payload, content_type)) as (base_url, server):
        client = make_client(base_url, tmp_path / "cache", [])
        with pytest.raises(HarnessError, match="not a chat completion") as raised:
            client.ask(STATEMENTS, QUESTION)
    assert "--judge-base-url" in str(raised.value) and "\n" not in str(raised.value)
    assert len(server.requests) == 3
    assert cached_files(tmp_path / "cache") == []


def test_a_deeply_nested_answer_is_malformed_not_a_crash(tmp_path: Path) -> None:
    deep = '{"statements": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with fault_server(then=body_of(completion(deep))) as (base_url, _):
        client = make_client(base_url, tmp_path / "cache", [])
        assert client.ask(STATEMENTS, QUESTION) is None
    assert client.stats()["malformed_replies"] == 1


# ------------------------------------------------------------------------------------------ timing


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_dripped_reply_is_bounded_by_the_timeout(where: str, tmp_path: Path) -> None:
    with fault_server(then=drip(where)) as (base_url, server):
        client = make_client(base_url, tmp_path / "cache", [], timeout=1.0, retries=1)
        started = time.monotonic()
        with pytest.raises(HarnessError, match=r"failed 2 times \(last: no complete reply within 1 s\)"):
            client.ask(STATEMENTS, QUESTION)
        seconds = time.monotonic() - started
    # Two attempts of 1 s each (the backoff is the fake sleep): not the 100 s the drip would take.
    assert 1.9 <= seconds < 3.0, seconds
    assert len(server.requests) == 2 and client.stats()["timeouts"] == 2
    assert cached_files(tmp_path / "cache") == []


def test_retry_after_in_seconds_is_waited_for(tmp_path: Path) -> None:
    slept: list[float] = []
    with fault_server(status(429, Retry_After="7"), status(503, Retry_After="0")) as (base_url, server):
        client = make_client(base_url, tmp_path / "cache", slept)
        assert client.ask(STATEMENTS, QUESTION) == ["s1"]
    assert slept == [7.0, 0.0] and len(server.requests) == 3  # the server's waits, not the backoff


def test_retry_after_as_an_http_date_is_waited_for(tmp_path: Path) -> None:
    slept: list[float] = []
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    with fault_server(status(503, Retry_After=when)) as (base_url, _):
        client = make_client(base_url, tmp_path / "cache", slept)
        assert client.ask(STATEMENTS, QUESTION) == ["s1"]
    (wait,) = slept
    assert 28 <= wait <= 31


def test_retry_after_beyond_the_cap_is_one_error(tmp_path: Path) -> None:
    with fault_server(then=status(429, Retry_After="3600")) as (base_url, server):
        client = make_client(base_url, tmp_path / "cache", [])
        with pytest.raises(HarnessError, match=f"retry after 3600 s.*longer than the {MAX_RETRY_AFTER:g} s"):
            client.ask(STATEMENTS, QUESTION)
    assert len(server.requests) == 1 and cached_files(tmp_path / "cache") == []


def test_retry_after_forms() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds("120", now) == 120.0
    assert retry_after_seconds(email.utils.formatdate(now + 45, usegmt=True), now) == pytest.approx(45)
    assert retry_after_seconds(email.utils.formatdate(now - 45, usegmt=True), now) == 0.0  # a past date
    assert retry_after_seconds("soon", now) is None and retry_after_seconds(None, now) is None
    assert retry_after_seconds("-5", now) is None


# -------------------------------------------------------------------------------- broken connections


@pytest.mark.parametrize("fault", [reset, hang_up, short], ids=["reset", "no status line", "short read"])
def test_a_broken_connection_is_retried(fault: Behaviour, tmp_path: Path) -> None:
    slept: list[float] = []
    with fault_server(fault) as (base_url, server):
        client = make_client(base_url, tmp_path / "cache", slept)
        assert client.ask(STATEMENTS, QUESTION) == ["s1"]
    assert len(server.requests) == 2 and client.stats()["retries"] == 1 and slept == [0.25]
    (entry,) = cached_files(tmp_path / "cache")
    assert json.loads(entry.read_text())["reply"] == json.dumps({"statements": ["s1"]})  # the whole reply


def test_a_connection_that_keeps_breaking_is_one_error(tmp_path: Path) -> None:
    with fault_server(then=reset) as (base_url, server):
        client = make_client(base_url, tmp_path / "cache", [])
        with pytest.raises(HarnessError, match=r"failed 3 times \(last: the connection broke"):
            client.ask(STATEMENTS, QUESTION)
    assert len(server.requests) == 3 and cached_files(tmp_path / "cache") == []


# ------------------------------------------------------------------------------------------ size cap


@pytest.mark.parametrize("announce", [True, False], ids=["announced", "unannounced"])
def test_a_50_mb_reply_is_refused_without_reading_it(
    announce: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = {"bytes": 0}
    original = http.client.HTTPResponse.read1

    def counted(self, n=-1):
        chunk = original(self, n)
        read["bytes"] += len(chunk)
        return chunk

    monkeypatch.setattr(http.client.HTTPResponse, "read1", counted)
    with fault_server(then=flood(announce=announce)) as (base_url, server):
        client = make_client(base_url, tmp_path / "cache", [])
        tracemalloc.start()
        try:
            with pytest.raises(HarnessError, match=f"over the {MAX_REPLY_BYTES:,}-byte cap") as raised:
                client.ask(STATEMENTS, QUESTION)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert "\n" not in str(raised.value) and len(server.requests) == 1  # refused, not retried
    assert read["bytes"] == 0 if announce else read["bytes"] <= MAX_REPLY_BYTES + READ_CHUNK
    assert peak < 3 * MAX_REPLY_BYTES, peak  # not the 50 MB
    assert server.body_bytes_sent < 50 * 1024 * 1024  # the client hung up before taking it all
    assert cached_files(tmp_path / "cache") == []


# ------------------------------------------------------------------------------------------- secrets


def test_credentials_in_the_base_url_are_sent_but_never_shown(tmp_path: Path) -> None:
    with fault_server(status(401)) as (base_url, server):
        with_credentials = base_url.replace("http://", f"http://judge-user:{PASSWORD}@")
        settings = JudgeSettings(base_url=with_credentials, model="scripted", timeout=5.0, backoff=0.0)
        client = JudgeClient(settings, tmp_path / "cache", sleep=lambda s: None)
        with pytest.raises(HarnessError, match="HTTP 401") as raised:
            client.ask(STATEMENTS, QUESTION)
        assert client.ask(STATEMENTS, QUESTION) == ["s1"]
    expected = "Basic " + base64.b64encode(f"judge-user:{PASSWORD}".encode()).decode()
    assert [request.headers.get("authorization") for request in server.requests] == [expected] * 2
    shown = [str(raised.value), repr(settings), json.dumps(settings.describe()), settings.endpoint]
    shown += [path.read_text() for path in cached_files(tmp_path / "cache")]
    assert all(PASSWORD not in text and "judge-user" not in text for text in shown)
    assert "http://***@127.0.0.1:" in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        f"ftp://user:{PASSWORD}@127.0.0.1/v1",
        f"http://user:{PASSWORD}@127.0.0.1:port/v1",
        f"user:{PASSWORD}@x",
    ],
)
def test_a_bad_base_url_with_credentials_is_refused_without_them(url: str) -> None:
    with pytest.raises(HarnessError, match="not an http") as raised:
        JudgeSettings(base_url=url, model="m").validate()
    assert PASSWORD not in str(raised.value) and "***@" in str(raised.value)


def test_a_key_is_sent_as_a_bearer_and_never_described(tmp_path: Path) -> None:
    with fault_server() as (base_url, server):
        settings = JudgeSettings(base_url=base_url, model="scripted", api_key=SECRET_KEY)
        client = JudgeClient(settings, tmp_path / "cache")
        client.ask(STATEMENTS, QUESTION)
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert settings.describe()["api_key"] == "set" and SECRET_KEY not in repr(settings)
    assert all(SECRET_KEY not in path.read_text() for path in cached_files(tmp_path / "cache"))


# --------------------------------------------------------------------------------------------- cache


def _damage_by_editing(entry: Path) -> None:
    payload = json.loads(entry.read_text())
    entry.write_text(json.dumps({**payload, "reply": json.dumps({"statements": ["edited"]})}))


def _damage_by_truncating(entry: Path) -> None:
    entry.write_bytes(entry.read_bytes()[:40])


def _damage_by_nesting(entry: Path) -> None:
    entry.write_text("[" * 100_000 + "]" * 100_000)


def _damage_by_dropping_the_checksum(entry: Path) -> None:  # as an entry of an older harness
    payload = json.loads(entry.read_text())
    entry.write_text(json.dumps({key: value for key, value in payload.items() if key != "sha256"}))


def _damage_by_swapping_inputs(entry: Path) -> None:  # another entry's reply and checksum under this name
    payload = json.loads(entry.read_text())
    entry.write_text(json.dumps({**payload, "key_inputs": {**payload["key_inputs"], "repeat": 9}}))


@pytest.mark.parametrize(
    "damage",
    [
        _damage_by_editing,
        _damage_by_truncating,
        _damage_by_nesting,
        _damage_by_dropping_the_checksum,
        _damage_by_swapping_inputs,
    ],
)
def test_a_damaged_cache_entry_is_asked_again_with_a_warning(damage, tmp_path: Path) -> None:
    warnings: list[str] = []
    with fault_server() as (base_url, server):
        settings = JudgeSettings(base_url=base_url, model="scripted")
        first = JudgeClient(settings, tmp_path / "cache", warn=warnings.append)
        assert first.ask(STATEMENTS, QUESTION) == ["s1"]
        (entry,) = cached_files(tmp_path / "cache")
        good = entry.read_bytes()
        again = JudgeClient(settings, tmp_path / "cache", warn=warnings.append)
        assert again.ask(STATEMENTS, QUESTION) == ["s1"] and again.stats()["cache_hits"] == 1  # intact: used
        damage(entry)
        third = JudgeClient(settings, tmp_path / "cache", warn=warnings.append)
        assert third.ask(STATEMENTS, QUESTION) == ["s1"]  # never the edited ["edited"]
    assert len(server.requests) == 2
    assert third.stats()["damaged_cache_entries"] == 1 and third.stats()["cache_hits"] == 0
    (warning,) = warnings
    assert str(entry) in warning and "asking the judge again" in warning
    assert entry.read_bytes() == good  # rewritten whole, with its checksum


# ----------------------------------------------------------------------------------- the command line


@pytest.fixture()
def inputs(tmp_path: Path) -> dict[str, Path]:
    folders = {name: tmp_path / name for name in ("data", "cache", "out")}
    for folder in folders.values():
        folder.mkdir()
    folders["rows"] = write_jsonl(folders["data"] / "rag.jsonl", [ROW])
    return folders


def rag_argv(base_url: str, folders: dict[str, Path], *extra: str) -> list[str]:
    return [
        "rag-eval",
        str(folders["rows"]),
        "--metrics",
        "faithfulness",
        "--judge",
        "--judge-base-url",
        base_url,
        "--judge-model",
        "scripted",
        "--judge-backoff",
        "0",
        "--cache-dir",
        str(folders["cache"]),
        "--output",
        str(folders["out"] / "report.json"),
        *extra,
    ]


CLI_FAULTS = {
    "html page": ([], body_of(b"<html>proxy</html>", "text/html"), "not a chat completion"),
    "json nested 100,000 deep": (
        [],
        body_of(NOT_COMPLETIONS["nested 100,000 deep"][0]),
        "not a chat completion",
    ),
    "dripped body": (["--judge-timeout", "1"], drip("body"), "no complete reply within 1 s"),
    "50 MB reply": ([], flood(announce=False), "-byte cap"),
    "refusal": ([], status(403), "HTTP 403"),
    "retry-after too long": ([], status(503, Retry_After="86400"), "Retry-After"),
    "resets": ([], reset, "the connection broke"),
}


@pytest.mark.parametrize("case", sorted(CLI_FAULTS))
def test_each_judge_fault_is_one_error_line_and_changes_no_file(
    case: str, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    extra, behaviour, fragment = CLI_FAULTS[case]
    before = snapshot(inputs["data"], inputs["cache"], inputs["out"])
    with fault_server(then=behaviour) as (base_url, _):
        started = time.monotonic()
        code, _, err = run_cli(rag_argv(base_url, inputs, "--judge-retries", "1", *extra), capsys)
    assert_one_line_error(code, err, fragment, "127.0.0.1")
    assert time.monotonic() - started < 10
    assert_unchanged(before, inputs["data"], inputs["cache"], inputs["out"])


def test_a_damaged_cache_entry_is_one_warning_on_the_command_line(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with fault_server() as (base_url, server):
        code, _, err = run_cli(rag_argv(base_url, inputs), capsys)
        assert code == 0, err
        entries = cached_files(inputs["cache"] / "judge")
        assert len(entries) == 2 and len(server.requests) == 2  # statements, verdicts
        _damage_by_editing(entries[0])
        code, out, err = run_cli(rag_argv(base_url, inputs), capsys)
    assert code == 0, err
    (warning,) = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert f"judge cache entry {entries[0]}" in warning and len(server.requests) == 3
    report = json.loads((inputs["out"] / "report.json").read_text())
    assert report["judge_calls"]["damaged_cache_entries"] == 1 and report["judge_calls"]["cache_hits"] == 1
    assert "1 damaged cache entries asked again" in out


def test_the_command_line_never_echoes_url_credentials(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with fault_server(status(401)) as (base_url, _):
        with_credentials = base_url.replace("http://", f"http://judge-user:{PASSWORD}@")
        code, out, err = run_cli(rag_argv(with_credentials, inputs), capsys)
        assert_one_line_error(code, err, "HTTP 401", "***@127.0.0.1")
        code, out2, err2 = run_cli(rag_argv(with_credentials, inputs), capsys)  # the server lets it in now
    assert code == 0, err2
    report = inputs["out"] / "report.json"
    assert "***@127.0.0.1" in json.loads(report.read_text())["settings"]["judge"]["endpoint"]
    assert "***@127.0.0.1" in out2
    assert_nowhere(PASSWORD, out + err + out2 + err2, inputs["out"], inputs["cache"])


def test_a_key_on_the_command_line_is_refused_without_echoing_it(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--judge-api-key", SECRET_KEY], [f"--judge-api-key={SECRET_KEY}"]):
        code, out, err = run_cli(["rag-eval", "rows.jsonl", *argv], capsys)
        assert_one_line_error(code, err, "--judge-api-key", "HARNESS_JUDGE_API_KEY", "--judge-api-key-env")
        assert SECRET_KEY not in out + err


@pytest.mark.parametrize("given", [SECRET_KEY, "HF_TOKEN_LIKE_abc123", "x" * 70])
def test_a_key_given_as_the_variable_name_is_refused_without_echoing_it(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["rag-eval", "rows.jsonl", "--judge-api-key-env", given], capsys)
    assert_one_line_error(code, err, "--judge-api-key-env", "NAME of an environment variable")
    assert given not in out + err


def test_the_key_comes_from_the_variable_named(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_JUDGE_KEY", SECRET_KEY)
    monkeypatch.setenv("HARNESS_JUDGE_API_KEY", "sk-the-default-variable")
    with fault_server() as (base_url, server):
        code, out, err = run_cli(rag_argv(base_url, inputs, "--judge-api-key-env", "MY_JUDGE_KEY"), capsys)
        assert code == 0, err
        assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {SECRET_KEY}"}
        monkeypatch.delenv("MY_JUDGE_KEY")
        before = snapshot(inputs["data"], inputs["cache"], inputs["out"])
        code, _, err = run_cli(rag_argv(base_url, inputs, "--judge-api-key-env", "MY_JUDGE_KEY"), capsys)
    assert_one_line_error(code, err, "MY_JUDGE_KEY", "not set")
    assert_unchanged(before, inputs["data"], inputs["cache"], inputs["out"])
    assert_nowhere(SECRET_KEY, out + err, inputs["out"], inputs["cache"])


def test_the_python_api_refuses_a_key_without_echoing_it(inputs: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="judge_api_key") as raised:
        rag_eval(data=inputs["rows"], judge=True, judge_api_key=SECRET_KEY)
    assert SECRET_KEY not in str(raised.value)


# ----------------------------------------------------------------------------------- experiment files


def assert_nowhere(secret: str, printed: str, *folders: Path) -> None:
    """``secret`` in no printed line and in no file under ``folders``."""
    assert secret not in printed
    for folder in folders:
        for path in folder.rglob("*"):
            assert not path.is_file() or secret.encode() not in path.read_bytes(), path


def experiment(path: Path, folders: dict[str, Path], base_url: str, **step_options) -> Path:
    step = {
        "kind": "rag-eval",
        "id": "rag",
        "data": str(folders["rows"]),
        "metrics": ["faithfulness"],
        "judge": True,
        "judge_base_url": base_url,
        "judge_model": "scripted",
        "cache_dir": str(folders["cache"]),
        **step_options,
    }
    document = {"output": str(folders["out"] / "experiment"), "steps": [step]}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "how",
    ["in the file", "by --set", "by --set, dry run", "in the file, dry run", "spelt judge-api-key"],
)
def test_a_key_in_an_experiment_is_refused_and_never_written(
    how: str, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    in_file = {"judge_api_key": SECRET_KEY} if "in the file" in how else {}
    if how == "spelt judge-api-key":
        in_file = {"judge-api-key": SECRET_KEY}
    source = experiment(tmp_path / "x.yaml", inputs, "http://127.0.0.1:9/v1", **in_file)
    argv = ["run", str(source)]
    if "--set" in how:
        argv += ["--set", f"rag.judge_api_key={SECRET_KEY}"]
    if "dry run" in how:
        argv.append("--dry-run")
    before = snapshot(inputs["data"], inputs["cache"], inputs["out"], source)
    code, out, err = run_cli(argv, capsys)
    assert_one_line_error(code, err, "judge_api_key", "HARNESS_JUDGE_API_KEY", "judge_api_key_env")
    assert_unchanged(before, inputs["data"], inputs["cache"], inputs["out"], source)
    assert_nowhere(SECRET_KEY, out + err, inputs["out"], inputs["cache"])


def test_an_experiment_names_the_keys_variable_and_writes_neither_key_nor_password(
    inputs: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_JUDGE_KEY", SECRET_KEY)
    with fault_server() as (base_url, server):
        with_credentials = base_url.replace("http://", f"http://judge-user:{PASSWORD}@")
        source = experiment(tmp_path / "x.yaml", inputs, with_credentials, judge_api_key_env="MY_JUDGE_KEY")
        code, planned, err = run_cli(["run", str(source), "--dry-run"], capsys)
        assert code == 0, err
        code, out, err = run_cli(["run", str(source)], capsys)
        assert code == 0, err
    assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {SECRET_KEY}"}
    resolved = yaml.safe_load((inputs["out"] / "experiment" / "experiment.yaml").read_text())
    (step,) = resolved["steps"]
    assert step["judge_api_key_env"] == "MY_JUDGE_KEY" and "judge_api_key" not in step
    assert step["judge_base_url"].startswith("http://***@127.0.0.1:")
    assert "judge_base_url: http://***@127.0.0.1:" in planned
    for secret in (SECRET_KEY, PASSWORD):
        assert_nowhere(secret, planned + out + err, inputs["out"], inputs["cache"])


def test_a_cache_entry_larger_than_any_reply_is_not_read(tmp_path: Path, monkeypatch) -> None:
    warnings: list[str] = []
    with fault_server() as (base_url, server):
        settings = JudgeSettings(base_url=base_url, model="scripted", max_reply_bytes=1000)
        assert JudgeClient(settings, tmp_path / "cache").ask(STATEMENTS, QUESTION) == ["s1"]
        (entry,) = cached_files(tmp_path / "cache")
        entry.write_bytes(entry.read_bytes() + b" " * 100_000)  # still valid JSON, but no entry is that big
        monkeypatch.setattr(judge_client, "read_json_object", lambda path: pytest.fail("read a huge entry"))
        client = JudgeClient(settings, tmp_path / "cache", warn=warnings.append)
        assert client.ask(STATEMENTS, QUESTION) == ["s1"]
    assert len(server.requests) == 2 and client.stats()["damaged_cache_entries"] == 1
    (warning,) = warnings
    assert "larger than any reply" in warning


JUDGE_VALUES = [
    ("judge_timeout", "0"),
    ("judge_timeout", "-1"),
    ("judge_timeout", "nan"),
    ("judge_timeout", "inf"),
    ("judge_retries", "-1"),
    ("judge_retries", "1000"),
    ("judge_backoff", "-0.5"),
    ("judge_rps", "0"),
    ("judge_temperature", "3"),
]


@pytest.mark.parametrize(("name", "value"), JUDGE_VALUES)
def test_judge_settings_out_of_range_are_refused_alike_from_flags_and_files(
    name: str, value: str, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flag = "--" + name.replace("_", "-")
    code, _, err = run_cli(["rag-eval", str(inputs["rows"]), flag, value], capsys)
    assert_one_line_error(code, err, flag)
    source = experiment(tmp_path / "x.yaml", inputs, "http://127.0.0.1:9/v1")
    yaml_value = {"nan": ".nan", "inf": ".inf"}.get(value, value)
    before = snapshot(inputs["data"], inputs["cache"], inputs["out"], source)
    code, _, err = run_cli(["run", str(source), "--set", f"rag.{name}={yaml_value}"], capsys)
    assert_one_line_error(code, err, name)
    assert_unchanged(before, inputs["data"], inputs["cache"], inputs["out"], source)
