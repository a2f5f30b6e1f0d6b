"""A judge model behind an OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, a hosted API).

Every call is cached on disk (``<cache>/judge/<model>/<key>.json``, the one cache layout) under a key
over the prompt's name and version, the model, the inputs, the sampling settings and the repeat
number, so a re-run sends no request. Requests are sequential, spaced by ``max_rps``, time out after
``timeout`` seconds and are retried with exponential backoff on a timeout, HTTP 429 or 5xx. A server
that cannot be reached, or that keeps timing out, is one ``HarnessError``; a reply that is not the
JSON a prompt asks for is counted as malformed and never stops the run.

Prompts are this harness's own wording of Ragas's steps; each carries a version that changes with its
text, so a changed prompt never reuses old replies.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.cache import CacheLayout, digest_of
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, read_json_or_none

log = logging.getLogger(__name__)

BASE_URL_ENV = ("HARNESS_JUDGE_BASE_URL", "OPENAI_BASE_URL")
MODEL_ENV = ("HARNESS_JUDGE_MODEL",)
API_KEY_ENV = ("HARNESS_JUDGE_API_KEY", "OPENAI_API_KEY")
# Ragas's sampling temperatures: near-greedy for one answer, some spread when asking several times.
SINGLE_TEMPERATURE = 0.01
REPEAT_TEMPERATURE = 0.3
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def env_value(names: tuple[str, ...]) -> str | None:
    return next((os.environ[name] for name in names if os.environ.get(name)), None)


@dataclass(frozen=True)
class JudgeSettings:
    """Where the judge is and how it is asked. The key is never written anywhere."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    retries: int = 3
    backoff: float = 1.0  # seconds before the first retry, doubled each time
    max_rps: float | None = None  # requests per second at most; None: no limit
    temperature: float = SINGLE_TEMPERATURE
    max_tokens: int = 1024

    @property
    def endpoint(self) -> str:
        """``<base URL>/chat/completions``; the base URL ends in ``/v1`` for every server named above."""
        return self.base_url.rstrip("/") + "/chat/completions"

    def validate(self) -> JudgeSettings:
        if not self.base_url.startswith(("http://", "https://")):
            raise HarnessError(
                f"judge base URL {self.base_url!r} is not http(s); pass --judge-base-url such as "
                "http://127.0.0.1:8000/v1 (or set HARNESS_JUDGE_BASE_URL / OPENAI_BASE_URL)"
            )
        if not self.model:
            raise HarnessError("no judge model; pass --judge-model or set HARNESS_JUDGE_MODEL")
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0 or (self.max_rps or 1) <= 0:
            raise HarnessError(
                "judge timeout and --judge-rps must be positive, retries and backoff not negative"
            )
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
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }


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


def parse_reply(text: str) -> dict | None:
    """The JSON object in a reply (code fences and text around it tolerated); ``None`` if there is none."""
    text = re.sub(r"```(?:json)?", "", text or "")
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


# ---- the client --------------------------------------------------------------------------------


class JudgeClient:
    """Asks the judge, through the disk cache; counts requests, cache hits, retries and malformed replies."""

    def __init__(
        self, settings: JudgeSettings, cache_dir: str | Path, *, sleep: Callable[[float], None] = time.sleep
    ):
        self.settings = settings.validate()
        self.layout = CacheLayout(Path(cache_dir))
        self.sleep = sleep
        self.counts: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self._last_request = 0.0

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.counts["requests"],
            "cache_hits": self.counts["cache_hits"],
            "retries": self.counts["retries"],
            "timeouts": self.counts["timeouts"],
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
        path = self.layout.judge_reply(self.settings.model, digest_of(key_inputs))
        cached = read_json_or_none(path)
        if cached is not None and isinstance(cached.get("reply"), str):
            self.counts["cache_hits"] += 1
            text = cached["reply"]
        else:
            text = self._request(prompt.messages(inputs), seed=repeat * 1000 + sample)
            atomic_write_json(
                path, {"key_inputs": key_inputs, "endpoint": self.settings.endpoint, "reply": text}
            )
        reply = parse_reply(text)
        parsed = prompt.parse(reply) if reply is not None else None
        if parsed is None:
            self.malformed[prompt.name] += 1
        return parsed

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
        headers = {"Content-Type": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        data = json.dumps(body).encode("utf-8")
        last_problem = ""
        for attempt in range(self.settings.retries + 1):
            if attempt:
                self.counts["retries"] += 1
                self.sleep(self.settings.backoff * 2 ** (attempt - 1))
            self._wait_for_rate()
            self.counts["requests"] += 1
            request = urllib.request.Request(
                self.settings.endpoint, data=data, headers=headers, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.settings.timeout) as response:
                    return _content(response.read())
            except urllib.error.HTTPError as error:
                if error.code not in RETRY_STATUSES:
                    raise HarnessError(
                        f"judge at {self.settings.endpoint} answered HTTP {error.code} ({error.reason}); check "
                        "--judge-model and the API key (--judge-api-key or OPENAI_API_KEY)"
                    ) from None
                last_problem = f"HTTP {error.code}"
            except TimeoutError:
                self.counts["timeouts"] += 1
                last_problem = f"no answer within {self.settings.timeout:g} s"
            except urllib.error.URLError as error:
                if isinstance(error.reason, TimeoutError):
                    self.counts["timeouts"] += 1
                    last_problem = f"no answer within {self.settings.timeout:g} s"
                    continue
                raise HarnessError(
                    f"judge unreachable at {self.settings.endpoint} ({error.reason}); start the server or "
                    "point --judge-base-url (HARNESS_JUDGE_BASE_URL) at it"
                ) from None
            except (OSError, http.client.HTTPException) as error:
                raise HarnessError(
                    f"judge unreachable at {self.settings.endpoint} ({error}); start the server or point "
                    "--judge-base-url (HARNESS_JUDGE_BASE_URL) at it"
                ) from None
        raise HarnessError(
            f"judge at {self.settings.endpoint} failed {self.settings.retries + 1} times ({last_problem}); "
            "replies so far are cached, rerun to continue, or raise --judge-timeout / --judge-retries"
        )


def _content(raw: bytes) -> str:
    """The message text of a chat completion; ``""`` (a malformed reply) when the body is not one."""
    try:
        body = json.loads(raw.decode("utf-8"))
        content = body["choices"][0]["message"]["content"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""
