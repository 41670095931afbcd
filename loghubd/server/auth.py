"""Access keys, request signatures and access control for `loghubd serve` (PROTOCOL.md §4).

The access-keys file is TOML:

    account_id = "0"                  # optional: the <account> of every resource (default 0)

    [[keys]]
    id = "LTAI..."
    secret = "..."

    [[keys]]
    id = "STS.consumer"
    secret = "..."
    security_token = "..."            # optional: requests must carry it (x-acs-security-token)
    expires = 2026-12-01T00:00:00Z    # optional, with security_token: later → SecurityTokenExpired
    policy = "consumer"               # optional: [policies.<name>] (or a list); none: full access

    [[policies.consumer.statements]]     # or: statements = [{effect=..., ...}] on one line
    effect = "Allow"                     # or "Deny" (wins over any Allow)
    actions = ["log:GetCursorOrData", "log:ConsumerGroup*"]
    resources = ["acs:log:*:*:project/demo/logstore/app*"]

Policies follow RAM (see `loghubd.server.policy`). Without a file `loghubd serve` checks no
signatures (and says so at start-up).
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

from loghubd.protocol import errors as E
from loghubd.protocol import signing
from loghubd.server import policy as P

MAX_SKEW_S = 15 * 60
TOKEN_HEADER = "x-acs-security-token"


class AccessKeysError(ValueError):
    """The access-keys file is unreadable or malformed (names the problem)."""


@dataclass(frozen=True, slots=True)
class AccessKey:
    id: str
    secret: str
    security_token: str = ""  # STS: requests must carry it
    expires: float | None = None  # unix time the token expires at (STS keys only)
    policy: P.Policy | None = None  # None: full access
    account_id: str = P.DEFAULT_ACCOUNT


def _expiry(value: object, where: str) -> float:
    """A TOML offset date-time or an ISO-8601 string with a time zone → unix time."""
    when: datetime | None = None
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            when = None
    elif isinstance(value, date):
        raise AccessKeysError(f"{where}: a date and time with a time zone is required")
    if when is None:
        raise AccessKeysError(
            f"{where}: must be an ISO-8601 date and time with a time zone "
            f"(e.g. 2026-12-01T00:00:00Z), not {value!r}"
        )
    if when.tzinfo is None:
        raise AccessKeysError(f"{where}: the time needs a time zone (e.g. a trailing Z)")
    return when.timestamp()


def _load_policies(path: Path, raw: object) -> dict[str, P.Policy]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise AccessKeysError(f"{path}: policies: must be a table of [policies.<name>] tables")
    out: dict[str, P.Policy] = {}
    for name, table in raw.items():
        try:
            out[name] = P.parse_policy(name, table, f"policies.{name}")
        except P.PolicyError as exc:
            raise AccessKeysError(f"{path}: {exc}") from None
    return out


def _key_policy(
    path: Path, where: str, value: object, policies: Mapping[str, P.Policy]
) -> P.Policy | None:
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise AccessKeysError(f"{path}: {where}: the name of a [policies.<name>] table (or a list)")
    for name in names:
        if name not in policies:
            raise AccessKeysError(f"{path}: {where}: no [policies.{name}] table defines {name!r}")
    return P.combine([policies[n] for n in names])


def load_access_keys(path: Path) -> dict[str, AccessKey]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AccessKeysError(f"{path}: {exc}") from exc
    unknown_top = set(data) - {"keys", "policies", "account_id"}
    if unknown_top:
        raise AccessKeysError(f"{path}: {sorted(unknown_top)[0]}: unknown key")
    account = data.get("account_id", P.DEFAULT_ACCOUNT)
    if not isinstance(account, str) or not account or ":" in account:
        raise AccessKeysError(f"{path}: account_id: a non-empty string without ':'")
    policies = _load_policies(path, data.get("policies"))
    entries = data.get("keys")
    if not isinstance(entries, list) or not entries:
        raise AccessKeysError(f"{path}: expected one or more [[keys]] tables with id and secret")
    keys: dict[str, AccessKey] = {}
    allowed = {"id", "secret", "security_token", "expires", "policy"}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise AccessKeysError(f"{path}: keys[{i}] is not a table")
        unknown = set(entry) - allowed
        if unknown:
            raise AccessKeysError(f"{path}: keys[{i}].{sorted(unknown)[0]}: unknown key")
        for field in ("id", "secret"):
            if not isinstance(entry.get(field), str) or not entry[field]:
                raise AccessKeysError(f"{path}: keys[{i}].{field}: required, a non-empty string")
        ak = entry["id"]
        where = f"keys[{i}] ({ak})"
        if ak in keys:
            raise AccessKeysError(f"{path}: {where}.id: defined twice")
        token = entry.get("security_token", "")
        if not isinstance(token, str) or ("security_token" in entry and not token):
            raise AccessKeysError(f"{path}: {where}.security_token: a non-empty string")
        expires = None
        if "expires" in entry:
            if not token:
                raise AccessKeysError(
                    f"{path}: {where}.expires: only STS keys expire (set security_token)"
                )
            expires = _expiry(entry["expires"], f"{path}: {where}.expires")
        keys[ak] = AccessKey(
            ak,
            entry["secret"],
            token,
            expires,
            _key_policy(path, f"{where}.policy", entry.get("policy"), policies),
            account,
        )
    return keys


@dataclass(frozen=True, slots=True)
class SignedRequest:
    method: str
    path: str
    params: Mapping[str, str]
    headers: Mapping[str, str]  # lower-case names
    body: bytes = b""  # only `verify` reads it


def verify(req: SignedRequest, keys: Mapping[str, AccessKey], now: float) -> str:
    """`verify_head` then `verify_body`: the whole request at once."""
    ak = verify_head(req, keys, now)
    verify_body(req.headers, req.body)
    return ak


def verify_head(req: SignedRequest, keys: Mapping[str, AccessKey], now: float) -> str:
    """Check the request's signature, key and date and, for an STS key, its security token
    and expiry, from the request line and headers alone (`req.body` is not read: the body's
    digest is a signed header, checked against the body by `verify_body` once it is read).
    Returns the access key id or raises an SLS error."""
    auth = req.headers.get("authorization", "")
    if not auth:
        raise E.Unauthorized("the request is not signed: Authorization header missing")
    if auth.startswith("LOG "):
        ak = _verify_v1(req, auth[4:], keys, now)
    elif auth.startswith(signing.V4_ALGORITHM + " "):
        ak = _verify_v4(req, auth[len(signing.V4_ALGORITHM) + 1 :], keys, now)
    else:
        raise E.Unauthorized("unsupported Authorization scheme")
    _check_token(keys[ak], req.headers.get(TOKEN_HEADER, ""), now)
    return ak


def verify_body(headers: Mapping[str, str], body: bytes) -> None:
    """The body is the one the signature covers: its MD5 (v1) or SHA-256 (v4) header."""
    if headers.get("authorization", "").startswith("LOG "):
        md5 = headers.get("content-md5", "")
        if body and not md5:
            raise E.SignatureNotMatch("a v1-signed request with a body must carry Content-MD5")
        if body and md5.upper() != signing.content_md5(body):
            raise E.SignatureNotMatch("Content-MD5 does not match the body")
        return
    payload = headers.get("x-log-content-sha256", "")
    actual = hashlib.sha256(body).hexdigest() if body else signing.EMPTY_SHA256
    if payload != actual:
        raise E.SignatureNotMatch("x-log-content-sha256 does not match the body")


def _declares_body(headers: Mapping[str, str]) -> bool:
    length = headers.get("content-length", "").strip()
    return "transfer-encoding" in headers or (length not in ("", "0"))


def _check_token(key: AccessKey, token: str, now: float) -> None:
    """STS keys need their token (signed, as every x-acs- header); other keys take none."""
    if not key.security_token:
        if token:
            raise E.Unauthorized(f"access key {key.id!r} is not an STS key: send no {TOKEN_HEADER}")
        return
    if not token:
        raise E.Unauthorized(
            f"access key {key.id!r} is an STS key: the request must carry its security token "
            f"in {TOKEN_HEADER}"
        )
    if not hmac.compare_digest(token.encode(), key.security_token.encode()):
        raise E.Unauthorized(f"the security token does not belong to access key {key.id!r}")
    if key.expires is not None and now >= key.expires:
        at = datetime.fromtimestamp(key.expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        raise E.SecurityTokenExpired(f"the security token of access key {key.id!r} expired at {at}")


def authorize(key: AccessKey, action: str, resource: str) -> None:
    """Refuse (403 Unauthorized) what the key's policy does not allow; no policy: allow."""
    if key.policy is None:
        return
    decision = P.decide(key.policy, action, resource)
    if decision is not P.Decision.ALLOW:
        raise E.Unauthorized(
            f"access key {key.id!r} may not perform {action} on {resource}: "
            f"{decision.value} in policy {key.policy.name!r}",
            status=403,
        )


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
    if _declares_body(req.headers) and not req.headers.get("content-md5", ""):
        raise E.SignatureNotMatch("a v1-signed request with a body must carry Content-MD5")
    expected = signing.v1_signature(
        key.secret, signing.v1_string_to_sign(req.method, req.path, req.params, req.headers)
    )
    if not hmac.compare_digest(expected.encode(), sig.encode()):
        raise E.SignatureNotMatch("signature does not match")
    return ak


def _v4_fields(cred: str) -> dict[str, str]:
    """`Credential=...,Signature=...` of an SLS4-HMAC-SHA256 Authorization, by name."""
    return dict(part.strip().partition("=")[::2] for part in cred.split(","))


def claimed_key_id(headers: Mapping[str, str]) -> str:
    """The access key id the `Authorization` header names, verified or not ("" if none), for
    the log of a refused request: never the signature, nor anything else of the header."""
    auth = headers.get("authorization", "")
    if auth.startswith("LOG "):
        key_id = auth[4:].rpartition(":")[0]
    elif auth.startswith(signing.V4_ALGORITHM + " "):
        cred = _v4_fields(auth[len(signing.V4_ALGORITHM) + 1 :]).get("Credential", "")
        key_id = cred.split("/", 1)[0]
    else:
        key_id = ""
    return key_id[:64]


def _verify_v4(req: SignedRequest, cred: str, keys: Mapping[str, AccessKey], now: float) -> str:
    fields = _v4_fields(cred)
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
    canonical, _ = signing.v4_canonical_request(req.method, req.path, req.params, req.headers)
    expected, _ = signing.v4_signature(key.secret, region, stamp, canonical)
    if not hmac.compare_digest(expected.encode(), sig.encode()):
        raise E.SignatureNotMatch("signature does not match")
    return ak
