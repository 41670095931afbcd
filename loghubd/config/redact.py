"""Secrets out of what loghubd prints: `check-config`'s effective config, and the error
messages and log lines that quote a URL, a DSN or a path a user configured (`described`:
how a message quotes a value a user gave, in the words of a config file).

Plugin tables have no schema the core knows, so a secret is recognised two ways:

- by its key: a key holding one of `SECRET_WORDS` (`password`, `token`, `authorization`,
  ...), a header-style name whose last word is one of `SECRET_LAST_WORDS` (`X-Auth`,
  `X-Access-Key`, `X-Session`, `X-Amz-Signature`; not `access_key_id`, `auth_version` or
  `primary_key`), or `sig` has its whole value replaced by "***", at any depth of a table (a
  header named `Authorization` under `[processor.http.headers]` as well as `bearer_token`);
- by its shape, whatever the key: the password of a URL's user information
  (`postgresql://app:pw@db/logs`, `s3://KEY:SECRET@bucket/logs`), the value of a
  `name=value` pair whose name is a secret's (a libpq `password=pw`, a query string's
  `access_token=...` or `sig=...`, a JDBC URL's `&password=...`), and the word after a
  command-line option named so (`--password pw`; not `--token-file /run/token`, which says
  where the secret is).

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, time
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
# A header-style name (words joined by `-`) whose last word is one of these: `X-Auth`,
# `X-Auth-Key`, `X-Access-Key`, `X-Session`, `X-Amz-Signature`. Anywhere in a name they would
# catch `auth_version`, `access_key_id`, `primary_key` or `SignatureVersion`.
SECRET_LAST_WORDS = ("auth", "key", "session", "signature")
# Names that are a secret as they stand: an Azure SAS's `sig`, an OSS signed URL's `Signature`.
SECRET_NAMES = ("sig", "signature")

# A quoted value (libpq: '...' with \' escapes; "..." likewise), or one that runs to the next
# space, `&`, `;`, `#` or quote.
_VALUE = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s&;#'"]+"""
# Every `name=value` of running text; which are secrets, `is_secret_name` decides. A name
# starts only where a word does (a match tried at every character of a long word took time
# quadratic in its length).
_PAIR = re.compile(rf"(?<![\w.-])(?P<name>[\w.-]+\s*=\s*)(?P<value>{_VALUE})")
# Every `--option VALUE` of a command line (`--option=VALUE` is a pair).
_OPTION = re.compile(rf"(?<!\S)(?P<name>--?(?P<option>[\w-]+)\s+)(?P<value>(?!-)(?:{_VALUE}))")
# Options that name where a secret is, not the secret: `--token-file /run/token`.
_WHERE = ("file", "path", "dir")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_secret_name(name: str) -> bool:
    """Whether a key's name says its value is a secret."""
    low = name.strip().lower()
    if any(word in low for word in SECRET_WORDS) or low in SECRET_NAMES:
        return True
    return "-" in low and low.rsplit("-", 1)[1] in SECRET_LAST_WORDS


def _masked_pair(m: re.Match[str]) -> str:
    name = m.group("name").rstrip().rstrip("=")
    return m.group("name") + MASK if is_secret_name(name) else m.group(0)


def _masked_option(m: re.Match[str]) -> str:
    option = m.group("option")
    if not is_secret_name(option) or re.split(r"[-_]", option.lower())[-1] in _WHERE:
        return m.group(0)
    return m.group("name") + MASK


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
        text = _PAIR.sub(_masked_pair, text)
    if "-" in text:
        text = _OPTION.sub(_masked_option, text)
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


def described(key: str, value: Any) -> str:
    """A value a user gave under `key`, as an error message quotes it: its kind in the words of
    a config file and, unless it may be a secret, the value itself, cut short (`a string
    '60s'`, `an integer -5`, `a list ['a', 'b']`, `true`). The value is left out under a key
    named like a secret, and when its text holds a secret word (a header line
    `Authorization: Bearer ...` given where a table was expected); URL passwords are masked."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:  # given from Python, not from a file
        return "None"
    kind = _kind(value)
    text = redact_text(_text(value))
    if is_secret_name(key) or is_secret_name(text):
        return kind
    return f"{kind} {text if len(text) <= _SHOWN else text[: _SHOWN - 3] + '...'}"


_SHOWN = 60  # characters of a value quoted in a message


# What a TOML value is, in the file's words; first match wins (a bool is an int to Python,
# and a datetime a date).
_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (str, "a string"),
    (bool, "true/false"),
    (int, "an integer"),
    (float, "a number"),
    (Mapping, "a table"),
    ((list, tuple), "a list"),
    (datetime, "a date and time"),
    (date, "a date"),
    (time, "a time of day"),
)


def _kind(value: Any) -> str:
    for types, words in _KINDS:
        if isinstance(value, types):
            return words
    return f"a {type(value).__name__}"  # given from Python, not from a file


def _text(value: Any) -> str:
    """`value` as it was written: a frozen table or array (`loghubd.config.sections`) shown as
    a dict or list, not as a mappingproxy or tuple; dates and times in ISO 8601."""

    def plain(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {k: plain(item) for k, item in v.items()}
        if isinstance(v, list | tuple):
            return [plain(item) for item in v]
        return v

    if isinstance(value, date | time):  # datetime is a date
        return value.isoformat()
    return repr(plain(value))
