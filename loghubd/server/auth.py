"""Access keys and request signature verification for `loghubd serve` (PROTOCOL.md §4).

The access-keys file is TOML:

    [[keys]]
    id = "LTAI..."
    secret = "..."

Without a file `loghubd serve` checks no signatures (and says so at start-up).
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

from loghubd.protocol import errors as E
from loghubd.protocol import signing

MAX_SKEW_S = 15 * 60


class AccessKeysError(ValueError):
    """The access-keys file is unreadable or malformed (names the problem)."""


@dataclass(frozen=True, slots=True)
class AccessKey:
    id: str
    secret: str


def load_access_keys(path: Path) -> dict[str, AccessKey]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AccessKeysError(f"{path}: {exc}") from exc
    entries = data.get("keys")
    if not isinstance(entries, list) or not entries:
        raise AccessKeysError(f"{path}: expected one or more [[keys]] tables with id and secret")
    keys: dict[str, AccessKey] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise AccessKeysError(f"{path}: keys[{i}] is not a table")
        unknown = set(entry) - {"id", "secret"}
        if unknown:
            raise AccessKeysError(f"{path}: keys[{i}].{sorted(unknown)[0]}: unknown key")
        for field in ("id", "secret"):
            if not isinstance(entry.get(field), str) or not entry[field]:
                raise AccessKeysError(f"{path}: keys[{i}].{field}: required, a non-empty string")
        keys[entry["id"]] = AccessKey(entry["id"], entry["secret"])
    return keys


@dataclass(frozen=True, slots=True)
class SignedRequest:
    method: str
    path: str
    params: Mapping[str, str]
    headers: Mapping[str, str]  # lower-case names
    body: bytes


def verify(req: SignedRequest, keys: Mapping[str, AccessKey], now: float) -> str:
    """Check the request's signature; returns the access key id or raises an SLS error."""
    auth = req.headers.get("authorization", "")
    if not auth:
        raise E.Unauthorized("the request is not signed: Authorization header missing")
    if auth.startswith("LOG "):
        return _verify_v1(req, auth[4:], keys, now)
    if auth.startswith(signing.V4_ALGORITHM + " "):
        return _verify_v4(req, auth[len(signing.V4_ALGORITHM) + 1 :], keys, now)
    raise E.Unauthorized("unsupported Authorization scheme")


def _key(keys: Mapping[str, AccessKey], ak: str) -> AccessKey:
    if not ak:
        raise E.MissAccessKeyId("access key id is missing")
    key = keys.get(ak)
    if key is None:
        raise E.InvalidAccessKeyId(f"access key id {ak[:64]!r} does not exist")
    return key


def _check_skew(when: datetime, now: float) -> None:
    if abs(when.timestamp() - now) > MAX_SKEW_S:
        raise E.RequestTimeTooSkewed("request time is more than 15 minutes off the server time")


def _verify_v1(req: SignedRequest, cred: str, keys: Mapping[str, AccessKey], now: float) -> str:
    ak, _, sig = cred.rpartition(":")
    key = _key(keys, ak)
    date = req.headers.get("date", "")
    if not date:
        raise E.MissingDate("Date header is required with v1 signatures")
    try:
        when = parsedate_to_datetime(date)
    except (TypeError, ValueError):
        raise E.InvalidDateFormat(f"Date {date[:64]!r} is not an RFC 1123 date") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    _check_skew(when, now)
    method = req.headers.get("x-log-signaturemethod", "")
    if method and method != "hmac-sha1":
        raise E.InvalidSignatureMethod(f"signature method {method[:32]!r} is not supported")
    md5 = req.headers.get("content-md5", "")
    if req.body and md5 and md5.upper() != signing.content_md5(req.body):
        raise E.SignatureNotMatch("Content-MD5 does not match the body")
    expected = signing.v1_signature(
        key.secret, signing.v1_string_to_sign(req.method, req.path, req.params, req.headers)
    )
    if not hmac.compare_digest(expected.encode(), sig.encode()):
        raise E.SignatureNotMatch("signature does not match")
    return ak


def _verify_v4(req: SignedRequest, cred: str, keys: Mapping[str, AccessKey], now: float) -> str:
    fields = dict(part.strip().partition("=")[::2] for part in cred.split(","))
    scope = fields.get("Credential", "").split("/")
    sig = fields.get("Signature", "")
    if len(scope) != 5 or scope[3:] != ["sls", "aliyun_v4_request"] or not sig:
        raise E.Unauthorized("malformed SLS4-HMAC-SHA256 credential")
    ak, day, region = scope[0], scope[1], scope[2]
    key = _key(keys, ak)
    stamp = req.headers.get("x-log-date", "")
    try:
        when = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise E.InvalidDateFormat("x-log-date must be YYYYMMDDTHHMMSSZ") from None
    if stamp[:8] != day:
        raise E.SignatureNotMatch("credential scope date differs from x-log-date")
    _check_skew(when, now)
    payload = req.headers.get("x-log-content-sha256", "")
    actual = hashlib.sha256(req.body).hexdigest() if req.body else signing.EMPTY_SHA256
    if payload != actual:
        raise E.SignatureNotMatch("x-log-content-sha256 does not match the body")
    canonical, _ = signing.v4_canonical_request(req.method, req.path, req.params, req.headers)
    expected, _ = signing.v4_signature(key.secret, region, stamp, canonical)
    if not hmac.compare_digest(expected.encode(), sig.encode()):
        raise E.SignatureNotMatch("signature does not match")
    return ak
