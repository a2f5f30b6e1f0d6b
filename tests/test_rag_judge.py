"""The judge path against a local OpenAI-compatible server on 127.0.0.1 that replies from a script.

The server answers claims (statements), verdicts, one malformed reply and one reply slower than the
client's timeout; it serves at most ``MAX_REQUESTS`` requests and stops with the test.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_qa_cli import assert_one_line_error, run_cli, write_jsonl

from harness.core.errors import HarnessError
from harness.qa.rag.judge_client import STATEMENTS, JudgeClient, JudgeSettings

MAX_REQUESTS = 60
SLOW_SECONDS = 1.5
TIMEOUT = "0.5"

ROWS = [
    {"id": "q1", "question": "Q1?", "answer": "answer one", "contexts": ["c1a", "c1b"], "ground_truth": "t1"},
    {"id": "q2", "question": "Q2?", "answer": "answer two", "contexts": ["c2"], "ground_truth": "t2"},
    {"id": "q3", "question": "Q3?", "answer": "answer three", "contexts": ["c3"], "ground_truth": "t3"},
]
# Claims per answer, and the verdicts per (answer, repeat): repeat r is sent as seed r * 1000.
CLAIMS = {"answer one": ["one-a", "one-b", "one-c"], "answer three": ["three-a", "three-b"]}
VERDICTS = {("one", 0): [1, 0, 1], ("one", 1): [1, 0, 0], ("three", 0): [1, 1], ("three", 1): [0, 1]}
# What the scripted verdicts imply: q1 2/3, q2 undefined (malformed claims), q3 1.
EXPECTED = {"q1": 2 / 3, "q2": None, "q3": 1.0}


class ScriptedJudge:
    """Replies by task (named in the system message), answer and seed; counts every request."""

    def __init__(self) -> None:
        self.requests = 0  # set by the server
        self.slowed: set[str] = set()
        self.lock = threading.Lock()

    def reply(self, body: dict) -> tuple[str, float]:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        task = re.search(r"task (\w+), v\d+", system).group(1)
        repeat = body["seed"] // 1000
        if task == "statements":
            answer = user.rsplit("answer:\n", 1)[1].strip()
            if answer == "answer two":
                return "I cannot help with that.", 0.0  # malformed: no JSON
            delay = 0.0
            with self.lock:
                if answer == "answer three" and answer not in self.slowed:
                    self.slowed.add(answer)
                    delay = SLOW_SECONDS  # the first ask times out; the retry is answered
            return json.dumps({"statements": CLAIMS[answer]}), delay
        if task == "verdicts":
            which = "one" if "one-a" in user else "three"
            flags = VERDICTS[(which, repeat)]
            return json.dumps(
                {"verdicts": [{"statement": "s", "reason": "r", "verdict": f} for f in flags]}
            ), 0.0
        raise AssertionError(f"unexpected task {task}")


@contextlib.contextmanager
def serving(script) -> Iterator[str]:
    """A chat-completions server on 127.0.0.1 answering from ``script.reply(body) -> (text, delay[, status])``."""
    lock = threading.Lock()
    counter = {"requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            with lock:
                counter["requests"] += 1
                over = counter["requests"] > MAX_REQUESTS
            script.requests = counter["requests"]
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert self.path == "/v1/chat/completions" and body["model"] == "scripted"
            text, delay, *status = ("", 0.0) if over else script.reply(body)
            time.sleep(delay)
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
            try:
                self.send_response(503 if over else (status[0] if status else 200))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout): nothing to answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture()
def judge_server() -> Iterator[tuple[str, ScriptedJudge]]:
    script = ScriptedJudge()
    with serving(script) as base_url:
        yield base_url, script


def judge_args(base_url: str, cache: Path, *extra: str) -> list[str]:
    return [
        "--metrics",
        "faithfulness",
        "--judge",
        "--judge-base-url",
        base_url,
        "--judge-model",
        "scripted",
        "--judge-timeout",
        TIMEOUT,
        "--judge-backoff",
        "0.05",
        "--cache-dir",
        str(cache),
        "--per-question",
        *extra,
    ]


def test_faithfulness_from_scripted_verdicts_then_cached(judge_server, tmp_path, capsys) -> None:
    base_url, script = judge_server
    data = write_jsonl(tmp_path / "rag.jsonl", ROWS)
    out = tmp_path / "report.json"
    code, stdout, err = run_cli(
        ["rag-eval", str(data), *judge_args(base_url, tmp_path / "cache", "--output", str(out))], capsys
    )
    assert code == 0, err
    report = json.loads(out.read_text())
    scores = {row["id"]: row["faithfulness"] for row in report["per_question"]}
    assert scores == pytest.approx(EXPECTED)
    aggregate = report["aggregate"]["faithfulness"]
    assert aggregate["mean"] == pytest.approx((2 / 3 + 1) / 2)
    assert aggregate["questions"] == 2 and aggregate["undefined"] == 1
    assert aggregate["undefined_reasons"] == {"malformed judge reply": 1}
    calls = report["judge_calls"]
    # q1: claims + verdicts; q2: claims (malformed); q3: claims timed out once, retried, + verdicts.
    assert calls["requests"] == 6 == script.requests
    assert calls["timeouts"] == 1 and calls["retries"] == 1
    assert calls["malformed_replies"] == 1 and calls["malformed_by_prompt"] == {"statements": 1}
    judge = report["settings"]["judge"]
    assert judge["model"] == "scripted" and judge["endpoint"] == base_url + "/chat/completions"
    assert judge["prompt_versions"]["statements"] >= 1 and judge["api_key"] == "none"
    assert "1 malformed replies" in stdout

    # The same run again: every reply comes from the cache, no request reaches the server.
    again = tmp_path / "again.json"
    code, stdout, err = run_cli(
        ["rag-eval", str(data), *judge_args(base_url, tmp_path / "cache", "--output", str(again))], capsys
    )
    assert code == 0, err
    assert script.requests == 6
    second = json.loads(again.read_text())
    assert second["judge_calls"]["requests"] == 0 and second["judge_calls"]["cache_hits"] == 5
    assert second["aggregate"] == report["aggregate"]


def test_repeats_give_mean_and_spread(judge_server, tmp_path, capsys) -> None:
    base_url, _ = judge_server
    data = write_jsonl(tmp_path / "rag.jsonl", [ROWS[0], ROWS[2]])
    out = tmp_path / "report.json"
    argv = [
        "rag-eval",
        str(data),
        *judge_args(base_url, tmp_path / "cache", "--judge-repeats", "2", "--output", str(out)),
    ]
    code, stdout, err = run_cli(argv, capsys)
    assert code == 0, err
    report = json.loads(out.read_text())
    q1, q3 = report["per_question"]
    # q1: repeat 0 says 2/3, repeat 1 says 1/3; q3: 1 then 1/2.
    assert q1["faithfulness"] == pytest.approx(0.5)
    assert q1["judge_repeats"]["faithfulness"]["values"] == pytest.approx([2 / 3, 1 / 3])
    assert q1["judge_repeats"]["faithfulness"]["std"] == pytest.approx(
        (1 / 18) ** 0.5
    )  # sample sd of 2/3, 1/3
    assert q3["faithfulness"] == pytest.approx(0.75)
    summary = report["judge_repeats"]["faithfulness"]
    assert summary["per_repeat_means"] == pytest.approx([(2 / 3 + 1) / 2, (1 / 3 + 1 / 2) / 2])
    assert summary["mean"] == pytest.approx(report["aggregate"]["faithfulness"]["mean"])
    assert summary["std"] == pytest.approx(abs(5 / 6 - 5 / 12) / 2**0.5)
    assert report["settings"]["judge"]["temperature"] == 0.3 and report["settings"]["judge"]["repeats"] == 2
    assert "repeat spread" in stdout


def test_unreachable_judge_is_one_line_and_writes_nothing(tmp_path, capsys) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = write_jsonl(tmp_path / "rag.jsonl", ROWS)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    argv = ["rag-eval", str(data), *judge_args(f"http://127.0.0.1:{port}/v1", tmp_path / "cache")]
    code, _, err = run_cli([*argv, "--output", str(out_dir / "report.json")], capsys)
    assert_one_line_error(code, err, "judge unreachable", f"127.0.0.1:{port}", "--judge-base-url")
    assert list(out_dir.iterdir()) == []  # no report, no temporary file
    assert not list((tmp_path / "cache").rglob("*.json"))  # no half-written cache entry either


def test_judge_replies_are_a_cache_kind(judge_server, tmp_path, capsys) -> None:
    base_url, _ = judge_server
    data = write_jsonl(tmp_path / "rag.jsonl", [ROWS[0]])
    cache = tmp_path / "cache"
    code, _, err = run_cli(["rag-eval", str(data), *judge_args(base_url, cache)], capsys)
    assert code == 0, err
    code, out, _ = run_cli(["cache", "list", "--cache-dir", str(cache), "--kind", "judge", "--json"], capsys)
    (entry,) = json.loads(out)
    assert entry["model"] == "scripted" and entry["details"] == {"replies": 2}  # claims + verdicts
    assert run_cli(["cache", "clear", "--all", "--kind", "judge", "--cache-dir", str(cache)], capsys)[0] == 0
    assert not (cache / "judge" / "scripted").exists()


class Busy:
    """``status`` for the first ``failures`` requests, then claims."""

    def __init__(self, failures: int, status: int = 503) -> None:
        self.failures, self.status, self.calls, self.requests = failures, status, 0, 0

    def reply(self, body: dict) -> tuple[str, float, int]:
        self.calls += 1
        if self.calls <= self.failures:
            return "", 0.0, self.status
        return json.dumps({"statements": ["x"]}), 0.0, 200


def _client(base_url: str, cache: Path, slept: list[float], **settings) -> JudgeClient:
    options = {"timeout": 5.0, "backoff": 0.05, "retries": 3, **settings}
    return JudgeClient(
        JudgeSettings(base_url=base_url, model="scripted", **options), cache, sleep=slept.append
    )


def test_busy_server_is_retried_with_doubling_backoff(tmp_path) -> None:
    slept: list[float] = []
    with serving(Busy(2)) as base_url:
        client = _client(base_url, tmp_path / "cache", slept)
        assert client.ask(STATEMENTS, {"question": "q", "answer": "a"}) == ["x"]
    assert slept == pytest.approx([0.05, 0.1])
    assert client.stats()["requests"] == 3 and client.stats()["retries"] == 2


def test_requests_are_spaced_by_the_rate_limit(tmp_path) -> None:
    slept: list[float] = []
    with serving(Busy(0)) as base_url:
        client = _client(base_url, tmp_path / "cache", slept, max_rps=4.0)
        client.ask(STATEMENTS, {"question": "q", "answer": "a"})
        client.ask(STATEMENTS, {"question": "q", "answer": "b"})
    # The second request followed the first at once, so it waited out the rest of its 1/4 s.
    assert len(slept) == 1 and 0 < slept[0] <= 0.25


@pytest.mark.parametrize(
    ("status", "requests", "message"), [(401, 1, "HTTP 401"), (503, 4, "failed 4 times")]
)
def test_refusal_or_endless_busy_is_one_error(tmp_path, status: int, requests: int, message: str) -> None:
    script = Busy(99, status)
    with serving(script) as base_url:
        client = _client(base_url, tmp_path / "cache", [])
        with pytest.raises(HarnessError, match=message):
            client.ask(STATEMENTS, {"question": "q", "answer": "a"})
    assert script.calls == requests
    assert not list((tmp_path / "cache").rglob("*.json"))
