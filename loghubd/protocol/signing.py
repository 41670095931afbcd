"""Request signatures, v1 (`LOG ak:sig`, HMAC-SHA1) and v4 (`SLS4-HMAC-SHA256`), PROTOCOL.md §4.

The same canonical strings serve both sides: the client signs with them, `loghubd serve`
recomputes them to verify. Header names are handled lower-case throughout.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from email.utils import formatdate
from urllib.parse import quote

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
V4_ALGORITHM = "SLS4-HMAC-SHA256"


def _is_signed_extra(name: str) -> bool:
    return name.startswith("x-acs-") or (
        name.startswith("x-log-") and not name.startswith("x-log-meta-")
    )


def content_md5(body: bytes) -> str:
    return hashlib.md5(body).hexdigest().upper()


def v1_string_to_sign(
    method: str, path: str, params: Mapping[str, str], headers: Mapping[str, str]
) -> str:
    # x-log-date is excluded: the Python SDK adds it *after* signing (PROTOCOL.md §4.1).
    extra = sorted((k, v) for k, v in headers.items() if _is_signed_extra(k) and k != "x-log-date")
    resource = path
    if params:
        resource += "?" + "&".join(f"{k}={v}" for k, v in sorted(params.items()))
    return "".join(
        [
            method,
            "\n",
            headers.get("content-md5", ""),
            "\n",
            headers.get("content-type", ""),
            "\n",
            headers.get("date", ""),
            "\n",
            "".join(f"{k}:{v}\n" for k, v in extra),
            resource,
        ]
    )


def v1_signature(secret: str, string_to_sign: str) -> str:
    digest = hmac.new(secret.encode(), string_to_sign.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _v4_quote(value: str) -> str:
    return quote(value.encode(), safe="~")


def v4_canonical_request(
    method: str, path: str, params: Mapping[str, str], headers: Mapping[str, str]
) -> tuple[str, str]:
    """(canonical request, signed header list)."""
    names = sorted(k for k in headers if k in ("content-type", "host") or _is_signed_extra(k))
    canonical_headers = "".join(f"{k}:{headers[k].strip()}\n" for k in names)
    query_parts = []
    for k, v in sorted(params.items()):
        encoded = _v4_quote(v)
        query_parts.append(f"{k}={encoded}" if encoded else k)
    signed = ";".join(names)
    payload_hash = headers.get("x-log-content-sha256", EMPTY_SHA256)
    text = "\n".join([method, path, "&".join(query_parts), canonical_headers, signed, payload_hash])
    return text, signed


def v4_signature(
    secret: str, region: str, date_time: str, canonical_request: str
) -> tuple[str, str]:
    """(hex signature, credential scope) for a request stamped `date_time` (YYYYMMDDTHHMMSSZ)."""
    day = date_time[:8]
    scope = f"{day}/{region}/sls/aliyun_v4_request"
    string_to_sign = "\n".join(
        [V4_ALGORITHM, date_time, scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
    )
    key = hmac.new(("aliyun_v4" + secret).encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, "sls", "aliyun_v4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest(), scope


@dataclass(frozen=True, slots=True)
class Credentials:
    """Keys to sign with. The secret and the token stay out of `repr`, so a log line or a
    traceback that shows a Credentials object shows no secret."""

    access_key_id: str
    access_key_secret: str = field(repr=False)
    security_token: str = field(default="", repr=False)


def sign_v1(
    creds: Credentials,
    method: str,
    path: str,
    params: Mapping[str, str],
    headers: MutableMapping[str, str],
    body: bytes,
) -> None:
    """Add the v1 signature headers to `headers` (lower-case names)."""
    if creds.security_token:
        headers["x-acs-security-token"] = creds.security_token
    headers["x-log-signaturemethod"] = "hmac-sha1"
    headers["date"] = formatdate(usegmt=True)
    if body:
        headers["content-md5"] = content_md5(body)
    sts = v1_string_to_sign(method, path, params, headers)
    headers["authorization"] = (
        f"LOG {creds.access_key_id}:{v1_signature(creds.access_key_secret, sts)}"
    )


def sign_v4(
    creds: Credentials,
    region: str,
    now_utc: str,
    method: str,
    path: str,
    params: Mapping[str, str],
    headers: MutableMapping[str, str],
    body: bytes,
) -> None:
    """Add the v4 signature headers; `now_utc` is YYYYMMDDTHHMMSSZ."""
    if creds.security_token:
        headers["x-acs-security-token"] = creds.security_token
    headers["x-log-content-sha256"] = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
    headers["x-log-date"] = now_utc
    canonical, _signed = v4_canonical_request(method, path, params, headers)
    sig, scope = v4_signature(creds.access_key_secret, region, now_utc, canonical)
    headers["authorization"] = (
        f"{V4_ALGORITHM} Credential={creds.access_key_id}/{scope},Signature={sig}"
    )
