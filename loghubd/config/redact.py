"""Secrets out of what loghubd prints: `check-config`'s effective config, and the error
messages and log lines that quote a URL, a DSN or a path a user configured.

Plugin tables have no schema the core knows, so a secret is recognised two ways:

- by its key: a key holding one of `SECRET_WORDS` (`password`, `token`, `authorization`,
  ...) has its whole value replaced by "***", at any depth of a table (a header named
  `Authorization` under `[processor.http.headers]` as well as `bearer_token`);
- by its shape, whatever the key: the password of a URL's user information
  (`postgresql://app:pw@db/logs`, `s3://KEY:SECRET@bucket/logs`) and the value of a
  `name=value` pair whose name holds a secret word (a libpq `password=pw`, a query string's
  `access_token=...`, a JDBC URL's `&password=...`).

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

SECRET_WORDS = (
    "secret",
    "password",
    "passwd",
    "pwd",
    "token",
    "credential",
    "private_key",
    "authorization",
    "api_key",
    "api-key",
    "apikey",
    "cookie",
)

_WORDS = "|".join(re.escape(w) for w in SECRET_WORDS)
# `name=value` with a secret word in the name; the value is quoted (libpq: '...' with \'
# escapes) or runs to the next space, `&`, `;`, `#` or quote.
_PAIR = re.compile(
    rf"(?i)(?P<name>[\w.-]*(?:{_WORDS})[\w.-]*\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s&;#'\"]+)"
)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_secret_name(name: str) -> bool:
    """Whether a key's name says its value is a secret."""
    low = name.lower()
    return any(word in low for word in SECRET_WORDS)


def _url_passwords(text: str) -> str:
    """Each `scheme://user:password@host` in `text` with its password masked.

    The user information runs to the last `@` before the query, the fragment or a space: a
    password may hold `@` or, written unencoded, `/` (S3 secret keys do). A URL with `@` in
    its path after a port is masked too much rather than too little."""
    out: list[str] = []
    pos = 0
    for m in _SCHEME.finditer(text):
        start = m.end()
        if start < pos:
            continue
        end = start
        while end < len(text) and text[end] not in "?#'\"" and not text[end].isspace():
            end += 1
        at = text.rfind("@", start, end)
        colon = text.find(":", start, at) if at >= 0 else -1
        if colon < 0 or colon + 1 == at or "/" in text[start:colon]:
            continue
        out.append(text[pos : colon + 1])
        out.append(MASK)
        pos = at
    out.append(text[pos:])
    return "".join(out)


def redact_text(text: str) -> str:
    """`text` with URL passwords and secret `name=value` values masked (see the module)."""
    if "=" in text:
        text = _PAIR.sub(lambda m: m.group("name") + MASK, text)
    if "://" in text:
        text = _url_passwords(text)
    return text


def redact_value(name: str, value: Any) -> Any:
    """What may be shown of `value` under the key `name`: MASK for a non-empty string under a
    secret name, the text redacted for other strings, anything else unchanged (tables are
    the caller's to walk)."""
    if not isinstance(value, str) or not value:
        return value
    return MASK if is_secret_name(name) else redact_text(value)
