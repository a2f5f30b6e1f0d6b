"""Credentials never shown: ``user:password@`` in a URL is replaced by ``***@`` wherever text is printed or
written (error lines, provenance, ``experiment.yaml``, ``--dry-run``)."""

from __future__ import annotations

import re
from typing import Any

# Everything between ``scheme://`` and the last ``@`` before the path: a password may itself hold ``@``.
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s]*@")


def redact_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it (``https://user:pw@host``) shown as ``***@``."""
    return _URL_CREDENTIALS.sub("***@", text)


def redacted_url(url: str) -> str:
    """``url`` with anything before an ``@`` in it (``user:password@``) shown as ``***@``."""
    head, at, rest = url.rpartition("@")
    if not at:
        return url
    scheme = head.partition("//")[0] + "//" if "//" in head else ""
    return f"{scheme}***@{rest}"


def redacted(value: Any) -> Any:
    """``value`` (text, or lists and mappings of it) with every URL's credentials redacted."""
    if isinstance(value, str):
        return redact_credentials(value)
    if isinstance(value, dict):
        return {key: redacted(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(item) for item in value]
    return value
