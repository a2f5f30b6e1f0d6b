"""A judge model behind an OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, a hosted API).

Every call is cached on disk (``<cache>/judge/<model>/<key>.json``, the one cache layout) under a key
over the prompt's name and version, the model, the inputs, the sampling settings and the repeat
number, so a re-run sends no request. Each entry carries a checksum of its key and reply, checked like
the embedding shards: a changed or damaged entry is asked again, with a warning, never used.

Requests are sequential and spaced by ``max_rps``. ``timeout`` bounds the WHOLE request (connect, send,
headers and every byte of the body), not each socket read, so a server that drips its reply cannot hold
a run for longer. A timeout, HTTP 408/429/5xx, a connection reset, a short read and an HTTP 200 body that
is not a chat completion (a proxy's HTML page) are retried with exponential backoff, or after the wait a
429/503's ``Retry-After`` asks for (up to :data:`MAX_RETRY_AFTER` seconds; a longer one is an error).
Only a chat completion is cached. A reply larger than :data:`MAX_REPLY_BYTES` is refused without reading
it whole. A server that cannot be reached, that refuses, or that keeps failing is one ``HarnessError``;
a completion whose text is not the JSON a prompt asks for is counted as malformed and never stops the run.

Secrets: the key is never written or shown (``describe`` says only whether one is set), and a base URL's
``user:password@`` is sent as HTTP Basic auth and shown as ``***@`` in every line and file.

Prompts are this harness's own wording of Ragas's steps; each carries a version that changes with its
text, so a changed prompt never reuses old replies.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import http.client
import json
import logging
import math
import os
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.cache import CacheLayout, digest_of
from harness.core.credentials import redacted_url
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write_json, parse_json, read_json_object

log = logging.getLogger(__name__)

BASE_URL_ENV = ("HARNESS_JUDGE_BASE_URL", "OPENAI_BASE_URL")
MODEL_ENV = ("HARNESS_JUDGE_MODEL",)
API_KEY_ENV = ("HARNESS_JUDGE_API_KEY", "OPENAI_API_KEY")
# Ragas's sampling temperatures: near-greedy for one answer, some spread when asking several times.
SINGLE_TEMPERATURE = 0.01
REPEAT_TEMPERATURE = 0.3
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# A chat completion of max_tokens 1024 is a few kB; 4 MiB leaves room for any server's extras.
MAX_REPLY_BYTES = 4 * 1024 * 1024
MAX_RETRY_AFTER = 120.0  # seconds; a server asking for longer is reported, not waited for
READ_CHUNK = 64 * 1024
ENTRY_FORMAT = 2  # cache entries with a checksum; older ones are asked again
DAMAGE_WARNINGS = 5  # damaged cache entries named one by one; the rest are counted in the report
# An environment variable's name, as the key's variable must be named: upper case, so that a key pasted
# there by mistake is refused without being echoed.
KEY_VARIABLE = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
KEY_REFUSED = (
    "a judge API key is never taken from the command line, a file or --set (it would show in `ps` and be "
    f"written to experiment.yaml and step.json); export it as {API_KEY_ENV[0]} (or {API_KEY_ENV[1]}), or "
    "name your own variable with --judge-api-key-env NAME (judge_api_key_env: NAME in a file)"
)


def env_value(names: tuple[str, ...]) -> str | None:
    return next((os.environ[name] for name in names if os.environ.get(name)), None)


def key_variable_problem(name: str) -> str | None:
    """Why ``name`` cannot be the key's environment variable (never quoting it: it may be a key), or None."""
    if KEY_VARIABLE.fullmatch(name):
        return None
    return (
        "expected the NAME of an environment variable (upper-case letters, digits and _, "
        f"e.g. {API_KEY_ENV[0]}), not the key itself"
    )


def key_from_environment(variable: str | None) -> str | None:
    """The judge's key: from ``variable`` when named (it must be set), else from :data:`API_KEY_ENV`."""
    if variable is None:
        return env_value(API_KEY_ENV)
    problem = key_variable_problem(variable)
    if problem:
        raise HarnessError(f"--judge-api-key-env: {problem}")
    key = os.environ.get(variable)
    if not key:
        raise HarnessError(
            f"--judge-api-key-env {variable}: that environment variable is not set; export {variable} first "
            "or leave the option out"
        )
    return key


@dataclass(frozen=True)
class JudgeSettings:
    """Where the judge is and how it is asked. Neither the key nor the URL's credentials are shown."""

    base_url: str = field(repr=False)
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0  # seconds for the whole request, the reply's last byte included
    retries: int = 3
    backoff: float = 1.0  # seconds before the first retry, doubled each time
    max_rps: float | None = None  # requests per second at most; None: no limit
    temperature: float = SINGLE_TEMPERATURE
    max_tokens: int = 1024
    max_reply_bytes: int = MAX_REPLY_BYTES

    @property
    def endpoint(self) -> str:
        """``<base URL>/chat/completions`` as shown (credentials redacted); the base URL ends in ``/v1``."""
        return redacted_url(self.base_url.rstrip("/") + "/chat/completions")

    def validate(self) -> JudgeSettings:
        parts = _split(self.base_url)
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise HarnessError(
                f"judge base URL {redacted_url(self.base_url)!r} is not an http(s) URL; pass --judge-base-url "
                f"such as http://127.0.0.1:8000/v1 (or set {' / '.join(BASE_URL_ENV)})"
            )
        if parts.query or parts.fragment:
            raise HarnessError(
                f"judge base URL {redacted_url(self.base_url.split('?')[0].split('#')[0])!r} has a ?query or "
                "#fragment; give only the part before /chat/completions, e.g. http://127.0.0.1:8000/v1"
            )
        if not self.model:
            raise HarnessError(f"no judge model; pass --judge-model or set {MODEL_ENV[0]}")
        numbers = (self.timeout, self.backoff, self.max_rps or 1.0)
        if not all(math.isfinite(n) for n in numbers) or self.timeout <= 0 or (self.max_rps or 1) <= 0:
            raise HarnessError("--judge-timeout and --judge-rps must be positive finite numbers")
        if self.retries < 0 or self.backoff < 0 or self.max_reply_bytes < 1:
            raise HarnessError("--judge-retries and --judge-backoff must not be negative")
        return self

    def describe(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "api_key": "set" if self.api_key else "none",
            "timeout_seconds": self.timeout,
            "retries": self.retries,
            "backoff_seconds": self.backoff,
            "max_requests_per_second": self.max_rps,
            "max_retry_after_seconds": MAX_RETRY_AFTER,
            "max_reply_bytes": self.max_reply_bytes,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }


def _split(url: str) -> urllib.parse.SplitResult | None:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        return None
    return parts


# ---- prompts -----------------------------------------------------------------------------------


def _is_text_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_flag(value: Any) -> bool:
    return value in (0, 1) and not isinstance(value, float) or isinstance(value, bool)


def _statements(reply: dict) -> list[str] | None:
    value = reply.get("statements")
    return value if _is_text_list(value) else None


def _flags(list_key: str, flag_key: str) -> Callable[[dict], list[int] | None]:
    def parse(reply: dict) -> list[int] | None:
        items = reply.get(list_key)
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and _is_flag(i.get(flag_key)) for i in items
        ):
            return None
        return [int(item[flag_key]) for item in items]

    return parse


def _question(reply: dict) -> tuple[str, int] | None:
    question, flag = reply.get("question"), reply.get("noncommittal")
    return (question, int(flag)) if isinstance(question, str) and _is_flag(flag) else None


def _classes(reply: dict) -> dict[str, int] | None:
    if not all(_is_text_list(reply.get(name)) for name in ("TP", "FP", "FN")):
        return None
    return {name: len(reply[name]) for name in ("TP", "FP", "FN")}


@dataclass(frozen=True)
class Prompt:
    """One versioned judge task: its instruction, the JSON it must answer with, and that answer's parser."""

    name: str
    version: int
    instruction: str
    reply_format: str
    parse: Callable[[dict], Any]

    def messages(self, inputs: Mapping[str, Any]) -> list[dict[str, str]]:
        shown = "\n\n".join(f"{name}:\n{_shown(value)}" for name, value in inputs.items())
        return [
            {
                "role": "system",
                "content": f"You are a careful evaluator (task {self.name}, v{self.version}). "
                "Answer with one JSON object and nothing else.",
            },
            {
                "role": "user",
                "content": f"{self.instruction}\n\nReply as JSON: {self.reply_format}\n\n{shown}",
            },
        ]


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(f"{number}. {item}" for number, item in enumerate(value, start=1))
    return str(value)


STATEMENTS = Prompt(
    "statements",
    1,
    "Break the answer to the question into short standalone statements, each one claim that can be checked "
    "on its own, with pronouns replaced by what they refer to.",
    '{"statements": ["...", "..."]}',
    _statements,
)
VERDICTS = Prompt(
    "verdicts",
    1,
    "For each statement, decide whether it can be directly inferred from the context. Verdict 1 if it can, "
    "0 if it cannot. Give one verdict per statement, in the order given.",
    '{"verdicts": [{"statement": "...", "reason": "...", "verdict": 0 or 1}]}',
    _flags("verdicts", "verdict"),
)
QUESTION = Prompt(
    "question",
    1,
    "Write the question this answer answers, and say whether the answer is noncommittal (evasive, vague "
    'or ambiguous, such as "I don\'t know"): 1 if it is, 0 if it is not.',
    '{"question": "...", "noncommittal": 0 or 1}',
    _question,
)
ATTRIBUTION = Prompt(
    "attribution",
    1,
    "Split the reference answer into sentences and decide for each whether it can be attributed to the "
    "context: 1 if it can, 0 if it cannot.",
    '{"classifications": [{"statement": "...", "reason": "...", "attributed": 0 or 1}]}',
    _flags("classifications", "attributed"),
)
CORRECTNESS = Prompt(
    "correctness",
    1,
    "Classify the statements. TP: answer statements supported by the ground-truth statements. FP: answer "
    "statements not supported by any ground-truth statement. FN: ground-truth statements missing from the "
    "answer. Each statement belongs to exactly one class.",
    '{"TP": ["..."], "FP": ["..."], "FN": ["..."]}',
    _classes,
)
PROMPTS = {prompt.name: prompt for prompt in (STATEMENTS, VERDICTS, QUESTION, ATTRIBUTION, CORRECTNESS)}


def prompt_versions() -> dict[str, int]:
    return {name: prompt.version for name, prompt in PROMPTS.items()}


def json_or_none(text: str | bytes, source: str) -> Any:
    """The JSON value of ``text`` (from ``source``), through the harness's one JSON parser; ``None`` when it
    is not JSON, not UTF-8, or nested deeper than that parser allows (never a ``RecursionError``)."""
    try:
        return parse_json(text.decode("utf-8") if isinstance(text, bytes) else text, source)
    except (InputError, UnicodeDecodeError):
        return None


def parse_reply(text: str) -> dict | None:
    """The JSON object in a reply (code fences and text around it tolerated); ``None`` if there is none."""
    text = re.sub(r"```(?:json)?", "", text or "")
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    value = json_or_none(text[start : end + 1], "the judge's reply")
    return value if isinstance(value, dict) else None


def completion_text(body: bytes) -> str | None:
    """The message text of a chat completion (``""`` when its content is null), or ``None`` when the body
    is not a chat completion at all (an HTML page, an error object, JSON of another shape)."""
    value = json_or_none(body, "the judge's reply")
    choices = value.get("choices") if isinstance(value, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if content is None:  # the model said nothing (a refusal, a tool call): a malformed answer, not a bad body
        return ""
    return content if isinstance(content, str) else None


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header's wait in seconds (a number of seconds or an HTTP date); None if absent or
    unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


# ---- the client --------------------------------------------------------------------------------


class _Retry(Exception):
    """One failed attempt worth repeating: what went wrong, the wait the server asked for, the fix."""

    def __init__(self, problem: str, *, wait: float | None = None, timed_out: bool = False, fix: str = ""):
        super().__init__(problem)
        self.problem, self.wait, self.timed_out, self.fix = problem, wait, timed_out, fix


RERUN = "replies so far are cached, rerun to continue, or raise --judge-timeout / --judge-retries"
NOT_AN_API = "check that --judge-base-url is the API's base, the part before /chat/completions"
# Errors of a connection that was made and then broke: worth another attempt.
BROKEN = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.HTTPException)


class JudgeClient:
    """Asks the judge, through the disk cache; counts requests, cache hits, retries and malformed replies.

    ``warn`` receives the text of each warning (a damaged cache entry); the default logs it.
    """

    def __init__(
        self,
        settings: JudgeSettings,
        cache_dir: str | Path,
        *,
        sleep: Callable[[float], None] = time.sleep,
        warn: Callable[[str], None] | None = None,
    ):
        self.settings = settings.validate()
        self.layout = CacheLayout(Path(cache_dir))
        self.sleep = sleep
        self.warn = warn or log.warning
        self.counts: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self._last_request = 0.0

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.counts["requests"],
            "cache_hits": self.counts["cache_hits"],
            "retries": self.counts["retries"],
            "timeouts": self.counts["timeouts"],
            "damaged_cache_entries": self.counts["damaged_cache_entries"],
            "malformed_replies": sum(self.malformed.values()),
            "malformed_by_prompt": dict(self.malformed),
        }

    def ask(self, prompt: Prompt, inputs: Mapping[str, Any], *, repeat: int = 0, sample: int = 0) -> Any:
        """The parsed reply, or ``None`` when the reply is malformed (counted under the prompt's name)."""
        key_inputs = {
            "prompt": prompt.name,
            "version": prompt.version,
            "model": self.settings.model,
            "inputs": dict(inputs),
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
            "repeat": repeat,
            "sample": sample,
        }
        key = digest_of(key_inputs)
        path = self.layout.judge_reply(self.settings.model, key)
        text = self._cached(path, key)
        if text is not None:
            self.counts["cache_hits"] += 1
        else:
            text = self._request(prompt.messages(inputs), seed=repeat * 1000 + sample)
            entry = {
                "format": ENTRY_FORMAT,
                "key_inputs": key_inputs,
                "endpoint": self.settings.endpoint,
                "reply": text,
                "sha256": _entry_digest(key, text),
            }
            atomic_write_json(path, entry)
        reply = parse_reply(text)
        parsed = prompt.parse(reply) if reply is not None else None
        if parsed is None:
            self.malformed[prompt.name] += 1
        return parsed

    # ---- the cache ----

    def _cached(self, path: Path, key: str) -> str | None:
        """The reply cached under ``key``, or None: absent, or damaged or changed (warned, asked again)."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        except OSError as error:
            return self._damaged(path, f"unreadable: {error.strerror or error}")
        # JSON escapes at most 6 bytes per byte of reply; anything larger is not one of our entries.
        if size > 6 * self.settings.max_reply_bytes + 65536:
            return self._damaged(path, f"{size} bytes, larger than any reply")
        try:
            entry = read_json_object(path)
        except InputError as error:
            return self._damaged(path, error.problem)
        reply = entry.get("reply")
        if "sha256" not in entry:
            return self._damaged(path, "no checksum (written by an older harness)")
        if not isinstance(reply, str) or entry.get("sha256") != _entry_digest(key, reply):
            return self._damaged(path, "its checksum does not match its reply")
        if digest_of(entry.get("key_inputs")) != key:
            return self._damaged(path, "its inputs do not match its file name")
        return reply

    def _damaged(self, path: Path, why: str) -> None:
        self.counts["damaged_cache_entries"] += 1
        count = self.counts["damaged_cache_entries"]
        if count <= DAMAGE_WARNINGS:
            self.warn(f"judge cache entry {path} is damaged or was changed ({why}); asking the judge again")
        elif count == DAMAGE_WARNINGS + 1:
            self.warn(
                "more damaged judge cache entries; each is asked again and counted in the report "
                "(judge_calls.damaged_cache_entries)"
            )
        return None

    # ---- requests ----

    def _wait_for_rate(self) -> None:
        if self.settings.max_rps:
            gap = 1.0 / self.settings.max_rps - (time.monotonic() - self._last_request)
            if gap > 0:
                self.sleep(gap)
        self._last_request = time.monotonic()

    def _request(self, messages: list[dict[str, str]], *, seed: int) -> str:
        body = {
            "model": self.settings.model,
            "messages": messages,
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
            "seed": seed,
        }
        data = json.dumps(body).encode("utf-8")
        failed: _Retry | None = None
        for attempt in range(self.settings.retries + 1):
            if failed is not None:
                self.counts["retries"] += 1
                backoff = self.settings.backoff * 2 ** (attempt - 1)
                self.sleep(failed.wait if failed.wait is not None else backoff)
            self._wait_for_rate()
            self.counts["requests"] += 1
            try:
                return self._attempt(data)
            except _Retry as retry:
                failed = retry
                self.counts["timeouts"] += retry.timed_out
        assert failed is not None
        raise HarnessError(
            f"judge at {self.settings.endpoint} failed {self.settings.retries + 1} times (last: {failed.problem}); "
            f"{failed.fix or RERUN}"
        )

    def _headers(self, parts: urllib.parse.SplitResult) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        elif parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return headers

    def _attempt(self, data: bytes) -> str:
        """One request, bounded as a whole by the timeout: the completion's text, or ``_Retry``/an error."""
        parts = _split(self.settings.base_url)
        assert parts is not None and parts.hostname  # checked by validate()
        connection, target, headers = _route(parts, self.settings.timeout)
        deadline = time.monotonic() + self.settings.timeout
        # A server dripping its reply keeps every single read under the socket timeout: cut the socket at
        # the deadline, whatever the request is waiting for then.
        watchdog = threading.Timer(self.settings.timeout, _cut, (connection,))
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.connect()
            if time.monotonic() >= deadline or connection.sock is None:
                raise TimeoutError
            connection.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            connection.request("POST", target, body=data, headers={**self._headers(parts), **headers})
            response = connection.getresponse()
            if response.status not in range(200, 300):
                self._refused(response)
            body = self._body(response, deadline)
        except (OSError, http.client.HTTPException) as error:
            raise self._broken(error, deadline) from None
        finally:
            watchdog.cancel()
            connection.close()
        text = completion_text(body)
        if text is None:
            kind = (response.getheader("Content-Type") or "no content type")[:60]
            raise _Retry(
                f"HTTP {response.status} with a body that is not a chat completion ({kind}, {len(body)} bytes)",
                fix=NOT_AN_API,
            )
        return text

    def _broken(self, error: BaseException, deadline: float) -> Exception:
        """What a failed connection means: a timeout or a broken connection (retried), or unreachable."""
        if isinstance(error, TimeoutError) or time.monotonic() >= deadline:
            return _Retry(f"no complete reply within {self.settings.timeout:g} s", timed_out=True)
        if isinstance(error, http.client.IncompleteRead):
            return _Retry(f"the reply ended after {len(error.partial)} bytes (incomplete read)")
        if isinstance(error, BROKEN):
            return _Retry(f"the connection broke ({type(error).__name__})")
        return HarnessError(
            f"judge unreachable at {self.settings.endpoint} ({_reason(error)}); start the server or point "
            f"--judge-base-url ({BASE_URL_ENV[0]}) at it"
        )

    def _refused(self, response: http.client.HTTPResponse) -> None:
        """A status other than 2xx: retried (408, 429, 5xx; after its Retry-After) or one error."""
        status = response.status
        if status not in RETRY_STATUSES:
            raise HarnessError(
                f"judge at {self.settings.endpoint} answered HTTP {status} ({response.reason}); check "
                f"--judge-model, --judge-base-url and the API key ({' / '.join(API_KEY_ENV)} or the variable "
                "--judge-api-key-env names)"
            )
        wait = retry_after_seconds(response.getheader("Retry-After")) if status in (429, 503) else None
        if wait is not None and wait > MAX_RETRY_AFTER:
            raise HarnessError(
                f"judge at {self.settings.endpoint} answered HTTP {status} asking to retry after {wait:.0f} s "
                f"(Retry-After), longer than the {MAX_RETRY_AFTER:g} s this client waits; replies so far are "
                "cached, rerun later"
            )
        raise _Retry(f"HTTP {status}", wait=wait)

    def _body(self, response: http.client.HTTPResponse, deadline: float) -> bytes:
        """The reply's body, read in chunks against the deadline and the size cap; a short one retried."""
        cap = self.settings.max_reply_bytes
        length = response.getheader("Content-Length")
        expected = int(length) if length and length.strip().isdigit() else None
        if expected is not None and expected > cap:
            self._too_large(f"announced a reply of {expected:,} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := response.read1(READ_CHUNK):
            size += len(chunk)
            if size > cap:
                self._too_large(f"sent more than {cap:,} bytes")
            chunks.append(chunk)
            if time.monotonic() >= deadline:
                raise TimeoutError
        if time.monotonic() >= deadline:
            raise TimeoutError
        if expected is not None and size < expected:
            raise _Retry(f"the reply ended after {size} of {expected} bytes (short read)")
        return b"".join(chunks)

    def _too_large(self, what: str) -> None:
        raise HarnessError(
            f"judge at {self.settings.endpoint} {what}, over the {self.settings.max_reply_bytes:,}-byte cap "
            f"for one chat completion; refused unread and not cached ({NOT_AN_API})"
        )


def _route(
    parts: urllib.parse.SplitResult, timeout: float
) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """The connection to open, the request target and the proxy's headers: straight to the server, or
    through the proxy the environment names for its scheme (``https_proxy``, ``no_proxy``...), as urllib."""
    path = parts.path.rstrip("/") + "/chat/completions"
    secure = parts.scheme == "https"
    host, port = parts.hostname or "", parts.port or (443 if secure else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        kind = http.client.HTTPSConnection if secure else http.client.HTTPConnection
        return kind(host, port, timeout=timeout), path, {}
    proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    headers = {}
    if proxy_parts.username is not None:
        credentials = (
            f"{urllib.parse.unquote(proxy_parts.username)}:{urllib.parse.unquote(proxy_parts.password or '')}"
        )
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    proxy_host, proxy_port = proxy_parts.hostname or "", proxy_parts.port or 8080
    if secure:  # a CONNECT tunnel, then TLS with the server itself
        connection = http.client.HTTPSConnection(proxy_host, proxy_port, timeout=timeout)
        connection.set_tunnel(host, port, headers=headers)
        return connection, path, {}
    shown_host = f"[{host}]" if ":" in host else host
    return (
        http.client.HTTPConnection(proxy_host, proxy_port, timeout=timeout),
        f"http://{shown_host}:{port}{path}",
        headers,
    )


def _cut(connection: http.client.HTTPConnection) -> None:
    """Shut the connection's socket so that whatever read or write waits on it returns now."""
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _entry_digest(key: str, reply: str) -> str:
    """The checksum a cache entry carries: over its key and its reply."""
    return digest_of({"key": key, "reply": reply})
