"""Async SLS client on aiohttp: the HTTP calls the daemon (and `loghubd produce`) make.

Every call has a deadline (`request_timeout`, kept below the group timeout by the config) that
covers its retries. Only network errors and 5xx answers are retried, with exponential backoff
and full jitter; any other SLS error is raised at once as its typed exception
(`loghubd.protocol.errors`). The project goes into the Host header as SLS expects; for an IP or
`localhost` endpoint the connection goes to the endpoint itself (this is how `loghubd serve` is
reached), otherwise to `<project>.<endpoint host>`.

Credentials come from a callable, asked again for every attempt (they may be rotated). An
auth error that fresh credentials could cure (SecurityTokenExpired, InvalidAccessKeyId,
SignatureNotMatch, or Unauthorized for an STS key) calls `on_auth_error` with the refused
credentials before it is raised, so a refreshing provider reloads at once
(`loghubd.sls.credentials`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import anyio

from loghubd.backoff import Backoff
from loghubd.protocol import compress as codec
from loghubd.protocol import errors as E
from loghubd.protocol import signing
from loghubd.proxy import proxy_for
from loghubd.sls import network
from loghubd.sls.endpoint import base_url, project_in_host
from loghubd.sls.errors import AnswerTooLarge, Unreachable

API_VERSION = "0.6.0"
USER_AGENT = "loghubd/0.1"

CredentialsSource = Callable[[], signing.Credentials]


@dataclass(frozen=True, slots=True)
class Pulled:
    """One PullLogs answer. `data` is the uncompressed LogGroupList bytes."""

    data: bytes
    count: int  # log groups
    next_cursor: str
    raw_size: int
    end_of_cursor: bool
    raw_count: int  # groups before server-side filtering (== count without a query)
    raw_data_size: int
    # Logs before / after the server's SPL query (x-log-rawdatalines / x-log-resultlines);
    # None when the server does not say (no query, or a server that omits them).
    raw_lines: int | None = None
    result_lines: int | None = None


class SlsClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        endpoint: str,
        project: str,
        credentials: CredentialsSource,
        *,
        auth_version: str = "v1",
        region: str = "",
        request_timeout: float = 10.0,
        initial_backoff: float = 0.1,
        max_backoff: float = 2.0,
        accept_compress: str = codec.LZ4,
        user_agent: str = USER_AGENT,
        on_auth_error: Callable[[signing.Credentials], None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """`environ` (default: the process's) gives the proxy (`loghubd.proxy`): ValueError
        naming the variable when it cannot be used."""
        self._base, self._host_header = base_url(endpoint, project)
        self._endpoint = endpoint
        self._session = session
        self.project = project
        self._credentials = credentials
        self._auth_version = auth_version
        self._region = region
        self.request_timeout = request_timeout
        self._backoff = Backoff(initial=initial_backoff, cap=max_backoff, jitter=1.0)
        self._accept = accept_compress
        self._user_agent = user_agent
        self._on_auth_error = on_auth_error
        self.proxy = proxy_for(self._base, os.environ if environ is None else environ)

    # -- transport ---------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        max_body: int = 0,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One SLS call with retries inside one deadline; returns (status, headers, body).
        `max_body` (0: no cap): a longer answer body is refused (`AnswerTooLarge`)."""
        params = dict(params or {})
        deadline = timeout if timeout is not None else self.request_timeout
        attempt = 0
        last_error: Exception | None = None
        with anyio.move_on_after(deadline) as scope:
            while True:
                attempt += 1
                creds = self._credentials()
                try:
                    status, rheaders, rbody = await self._send(
                        method, path, params, body, headers, creds, max_body
                    )
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    last_error = exc
                    if network.hopeless(exc):  # another attempt would fail the same way
                        raise self._unreachable(method, path, exc, f"at attempt {attempt}") from exc
                else:
                    if status < 500:
                        if status >= 300:
                            error = _error(status, rheaders, rbody)
                            if self._on_auth_error is not None and _stale(error, creds):
                                self._on_auth_error(creds)
                            raise error
                        return status, rheaders, rbody
                    last_error = _error(status, rheaders, rbody)
                await anyio.sleep(self._backoff.wait(attempt))
        assert scope.cancel_called
        if isinstance(last_error, E.SlsError):
            raise last_error
        raise self._unreachable(
            method, path, last_error, f"no answer within {deadline:.1f}s after {attempt} attempt(s)"
        )

    def _unreachable(
        self, method: str, path: str, error: BaseException | None, when: str
    ) -> Unreachable:
        why = network.cause(error)
        if isinstance(error, aiohttp.ClientConnectorDNSError):
            # An SDK-era endpoint naming the project, doubled by `base_url`, does not resolve.
            hint = project_in_host(self._endpoint, self.project)
            why += f"; {hint}" if hint else ""
        return Unreachable(
            f"{method} {path}: {when}: {why}", cause=why, wrong_scheme=network.wrong_scheme(error)
        )

    async def _send(
        self,
        method: str,
        path: str,
        params: dict[str, str],
        body: bytes,
        extra: Mapping[str, str] | None,
        creds: signing.Credentials,
        max_body: int = 0,
    ) -> tuple[int, Mapping[str, str], bytes]:
        headers: dict[str, str] = {
            "host": self._host_header,
            "x-log-apiversion": API_VERSION,
            "user-agent": self._user_agent,
            "content-length": str(len(body)),
        }
        if extra:
            headers.update(extra)
        if not body:  # as both official SDKs do on every body-less request
            headers.setdefault("x-log-bodyrawsize", "0")
        if creds.access_key_id:
            if self._auth_version == "v4":
                now = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
                signing.sign_v4(creds, self._region, now, method, path, params, headers, body)
            else:
                signing.sign_v1(creds, method, path, params, headers, body)
                # As the official SDK does after a v1 signature: a copy of Date for proxies
                # that drop it (not signed).
                headers["x-log-date"] = headers["date"]
        if self.proxy is not None:  # after signing: the proxy consumes it
            headers.update(self.proxy.request_headers)
        async with self._session.request(
            method,
            self._base + path,
            params=params or None,
            data=body or None,
            headers=headers,
            # No Content-Type of aiohttp's own (octet-stream on a body-less POST): it would
            # be a header the signature did not cover (SignatureNotMatch on `leave`, split).
            skip_auto_headers=("Content-Type",),
            auto_decompress=False,
            allow_redirects=False,
            proxy=self.proxy.url if self.proxy else None,
            proxy_headers=self.proxy.tunnel_headers if self.proxy else None,
        ) as resp:
            data = await (_read_capped(resp, max_body) if max_body else resp.read())
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, data

    async def _json(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        payload: object = None,
        timeout: float | None = None,
        *,
        sized: bool = True,
        json_type: bool = False,
    ) -> Any:
        """A JSON call. The headers follow the official SDK's per call: `x-log-bodyrawsize`
        on a JSON body unless `sized` is False (heartbeat, checkpoint), a JSON content type
        also on some body-less GETs (`json_type`: GetCursor, GetCursorTime)."""
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = {"content-type": "application/json"} if payload is not None or json_type else {}
        if payload is not None and sized:
            headers["x-log-bodyrawsize"] = str(len(body))
        _status, _h, data = await self.request(
            method, path, params, body=body, headers=headers, timeout=timeout
        )
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise E.SlsError(f"answer is not JSON: {data[:200]!r}", code="BadResponse") from exc

    # -- projects, logstores, shards ---------------------------------------------------------

    async def create_project(self, description: str = "") -> None:
        await self._json(
            "POST", "/", payload={"projectName": self.project, "description": description}
        )

    async def create_logstore(self, logstore: str, shard_count: int, ttl: int = 30) -> None:
        await self._json(
            "POST",
            "/logstores",
            payload={"logstoreName": logstore, "ttl": ttl, "shardCount": shard_count},
        )

    async def update_logstore(self, logstore: str, ttl: int) -> None:
        """Sets how many days the logstore keeps logs; the service expires older ones."""
        await self._json(
            "PUT", f"/logstores/{logstore}", payload={"logstoreName": logstore, "ttl": ttl}
        )

    async def list_shards(self, logstore: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._json("GET", f"/logstores/{logstore}/shards")
        return result

    async def split_shard(self, logstore: str, shard: int, key: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._json(
            "POST", f"/logstores/{logstore}/shards/{shard}", {"action": "split", "key": key}
        )
        return result

    async def merge_shard(self, logstore: str, shard: int) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._json(
            "POST", f"/logstores/{logstore}/shards/{shard}", {"action": "merge"}
        )
        return result

    async def put_log_group(
        self, logstore: str, raw: bytes, hash_key: str | None = None, compress: str = codec.LZ4
    ) -> None:
        body = codec.compress(compress, raw)
        headers = {"content-type": "application/x-protobuf", "x-log-bodyrawsize": str(len(raw))}
        if compress:
            headers["x-log-compresstype"] = compress
        if hash_key is None:
            await self.request(
                "POST", f"/logstores/{logstore}/shards/lb", body=body, headers=headers
            )
        else:
            await self.request(
                "POST",
                f"/logstores/{logstore}/shards/route",
                {"key": hash_key},
                body=body,
                headers=headers,
            )

    async def get_cursor(self, logstore: str, shard: int, where: str) -> str:
        data = await self._json(
            "GET",
            f"/logstores/{logstore}/shards/{shard}",
            {"type": "cursor", "from": where},
            json_type=True,
        )
        return str(data["cursor"])

    async def cursor_time(self, logstore: str, shard: int, cursor: str) -> int:
        data = await self._json(
            "GET",
            f"/logstores/{logstore}/shards/{shard}",
            {"type": "cursor_time", "cursor": cursor},
            json_type=True,
        )
        return int(data["cursor_time"])

    async def pull(
        self,
        logstore: str,
        shard: int,
        cursor: str,
        count: int,
        end_cursor: str | None = None,
        query: str | None = None,
        max_bytes: int = 0,
    ) -> Pulled:
        """`max_bytes` (0: no cap): an answer whose body or decoded size is larger is refused
        (`AnswerTooLarge`) before it is read in full or decoded."""
        params = {"type": "log", "cursor": cursor, "count": str(count)}
        if end_cursor:
            params["end_cursor"] = end_cursor
        if query:
            params["query"] = query
            params["pullMode"] = "scan_on_stream"
        _s, h, body = await self.request(
            "GET",
            f"/logstores/{logstore}/shards/{shard}",
            params,
            headers={"accept": "application/x-protobuf", "accept-encoding": self._accept},
            max_body=max_bytes,
        )
        try:
            count_got = int(h["x-log-count"])
            raw_size = int(h["x-log-bodyrawsize"])
            next_cursor = h["x-log-cursor"]
        except (KeyError, ValueError) as exc:
            raise E.SlsError(f"PullLogs answer lacks {exc}", code="BadResponse") from exc
        if max_bytes and raw_size > max_bytes:
            raise AnswerTooLarge(
                f"PullLogs answer of {count_got} log groups decodes to {raw_size} bytes "
                f"(x-log-bodyrawsize), above the {max_bytes} this pull takes"
            )
        ctype = h.get("x-log-compresstype", "")
        try:
            data = codec.decompress(ctype, body, raw_size) if raw_size else b""
        except codec.CompressionError as exc:
            raise E.SlsError(str(exc), code="DecompressError") from exc
        return Pulled(
            data=data,
            count=count_got,
            next_cursor=next_cursor,
            raw_size=raw_size,
            end_of_cursor=h.get("x-log-end-of-cursor") == "1",
            raw_count=_int_header(h, "x-log-rawdatacount", count_got),
            raw_data_size=_int_header(h, "x-log-rawdatasize", raw_size),
            raw_lines=_optional_int_header(h, "x-log-rawdatalines"),
            result_lines=_optional_int_header(h, "x-log-resultlines"),
        )

    # -- consumer groups ---------------------------------------------------------------------

    async def list_groups(self, logstore: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = (
            await self._json("GET", f"/logstores/{logstore}/consumergroups") or []
        )
        return result

    async def create_group(self, logstore: str, group: str, timeout: int, order: bool) -> None:
        await self._json(
            "POST",
            f"/logstores/{logstore}/consumergroups",
            payload={"consumerGroup": group, "timeout": timeout, "order": order},
        )

    async def heartbeat(
        self,
        logstore: str,
        group: str,
        consumer: str,
        held: list[int],
        timeout: float | None = None,
        allowed: Sequence[int] | None = None,
    ) -> list[int]:
        """`allowed` (loghubd's extension, `consumer.shards`): the only shards this consumer
        may be given, as `&shards=0,1,5`. A service without the extension ignores it."""
        params = {"type": "heartbeat", "consumer": consumer}
        if allowed is not None:
            params["shards"] = ",".join(str(s) for s in allowed)
        data = await self._json(
            "POST",
            f"/logstores/{logstore}/consumergroups/{group}",
            params,
            payload=held,
            timeout=timeout,
            sized=False,
        )
        if not isinstance(data, list) or not all(isinstance(s, int) for s in data):
            raise E.SlsError(
                f"heartbeat answer is not a list of shards: {data!r}", code="BadResponse"
            )
        return data

    async def leave(self, logstore: str, group: str, consumer: str) -> None:
        """loghubd's extension: hand every shard back now (real SLS does not have it)."""
        await self._json(
            "POST",
            f"/logstores/{logstore}/consumergroups/{group}",
            {"type": "leave", "consumer": consumer},
        )

    async def commit(
        self,
        logstore: str,
        group: str,
        consumer: str,
        shard: int,
        cursor: str,
        *,
        force: bool = False,
    ) -> None:
        await self._json(
            "POST",
            f"/logstores/{logstore}/consumergroups/{group}",
            {
                "type": "checkpoint",
                "consumer": consumer,
                "forceSuccess": "true" if force else "false",
            },
            payload={"shard": shard, "checkpoint": cursor},
            sized=False,
        )

    async def checkpoints(
        self, logstore: str, group: str, shard: int | None = None
    ) -> list[dict[str, Any]]:
        params = {} if shard is None else {"shard": str(shard)}
        result: list[dict[str, Any]] = (
            await self._json("GET", f"/logstores/{logstore}/consumergroups/{group}", params) or []
        )
        return result

    async def delete_group(self, logstore: str, group: str) -> None:
        await self._json("DELETE", f"/logstores/{logstore}/consumergroups/{group}")

    async def group_status(self, logstore: str, group: str) -> dict[str, Any]:
        """loghubd's extension: the coordinator's view of the group."""
        result: dict[str, Any] = await self._json(
            "GET", f"/logstores/{logstore}/consumergroups/{group}", {"type": "status"}
        )
        return result


def _stale(error: E.SlsError, creds: signing.Credentials) -> bool:
    """Whether other credentials could cure `error`: expired or unknown keys, a signature
    made with an old secret; a refusal of an STS key (its role may have been re-issued)."""
    if isinstance(error, E.SecurityTokenExpired | E.InvalidAccessKeyId | E.SignatureNotMatch):
        return True
    return isinstance(error, E.Unauthorized) and bool(creds.security_token)


def _optional_int_header(h: Mapping[str, str], name: str) -> int | None:
    try:
        value = int(h.get(name, ""))
    except ValueError:
        return None
    return None if value < 0 else value


def _int_header(h: Mapping[str, str], name: str, default: int) -> int:
    try:
        value = int(h.get(name, ""))
    except ValueError:
        return default
    return default if value < 0 else value


def _error(status: int, headers: Mapping[str, str], body: bytes) -> E.SlsError:
    rid = headers.get("x-log-requestid", "")
    try:
        data = json.loads(body)
        return E.from_response(status, str(data["errorCode"]), str(data["errorMessage"]), rid)
    except (ValueError, KeyError, TypeError):
        return E.SlsError(
            f"HTTP {status}: {body[:200]!r}", status=status, code="BadResponse", request_id=rid
        )


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The answer's body, or AnswerTooLarge as soon as it is known to pass `cap` bytes: from
    its Content-Length before anything is read, else while it is read."""
    if resp.content_length is not None:
        if resp.content_length > cap:
            raise AnswerTooLarge(f"answer of {resp.content_length} bytes, above the cap of {cap}")
        return await resp.read()
    body = bytearray()
    async for chunk in resp.content.iter_any():
        body += chunk
        if len(body) > cap:
            raise AnswerTooLarge(f"answer of more than {cap} bytes (chunked)")
    return bytes(body)
