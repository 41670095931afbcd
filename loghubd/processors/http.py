"""The `http` processor: POST each batch as NDJSON to a URL, at least once.

A batch is cut into requests of `batch_size` logs and at most `max_body_bytes` (one JSON
object per line, counted before the optional gzip), sent with up to `concurrency` requests
in flight per shard. A request is done when the endpoint answers 2xx. 5xx, 408, 429, the
statuses listed in `retry_statuses`, time-outs and connection errors are retried with
exponential backoff and jitter, waiting at least what a `Retry-After` header asks; any other
answer (4xx; for 413, lower `max_body_bytes`) rejects the batch (`BatchRejected`): the
daemon's failure policy (`consumer.on_failure`) applies at once, without `max_attempts`
retries. The shard's checkpoint moves only once every request
of the batch was acknowledged, so a crash re-sends, never skips: **at least once**. When the
daemon retries a failed batch, the requests already acknowledged are not sent again.

Each request carries `X-Loghubd-Shard`, `X-Loghubd-Cursor` (where its batch starts) and
`X-Loghubd-Part` (`<index>/<count>` within the batch): a receiver that wants exactly once can
drop a (shard, cursor, part) it has already stored.

TLS: an `https://` endpoint is verified against the system's CA certificates, or against
`tls_ca_file` (a private CA); `tls_cert_file` / `tls_key_file` present a client certificate
(mutual TLS); `tls_verify = false` turns verification off (a warning at start). The files are
loaded at start, so a missing or bad one fails `loghubd run` naming its key. Requests go
through the proxy `HTTP_PROXY` / `HTTPS_PROXY` / `NO_PROXY` give (`loghubd.proxy`).
"""

from __future__ import annotations

import gzip
import os
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import anyio
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from yarl import URL

from loghubd.backoff import Backoff
from loghubd.config.redact import described, redact_text
from loghubd.consumer.tracking import until_stopping
from loghubd.errors import leaves
from loghubd.faults import Episode
from loghubd.models import Batch
from loghubd.plugins.api import (
    BatchInterrupted,
    BatchRejected,
    ProcessorContext,
    Tracker,
)
from loghubd.processors.options import check_options
from loghubd.proxy import is_loopback, proxy_for

log = structlog.get_logger("loghubd.http")

PREFIX = "processor.http"
MAX_RETRY_AFTER_S = 300.0  # a Retry-After longer than this is taken as this
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # below the common ingest limits (Loki, HEC, nginx)
# 4xx answers retried like a 5xx whatever `retry_statuses` says: 408 Request Timeout (the
# endpoint gave up waiting for the body) and 429 Too Many Requests say "later", not "never".
RETRIED_4XX = frozenset({408, 429})


class HttpRejected(BatchRejected):
    """The endpoint refused a request with a status that retrying cannot fix (4xx): the
    failure policy applies at once, without the `max_attempts` retries."""


class GaveUp(Exception):
    """`max_retries` retryable failures in a row for one request."""


@dataclass(frozen=True, slots=True)
class HttpOptions:
    url: str
    headers: Mapping[str, str]
    gzip: bool
    batch_size: int
    max_body_bytes: int  # 0: no limit
    concurrency: int
    timeout_s: float
    retry_initial_backoff_s: float
    retry_max_backoff_s: float
    max_retries: int  # 0: retry retryable failures for ever
    # 4xx statuses retried (RETRIED_4XX and the `retry_statuses` option); 5xx always are
    retried_4xx: frozenset[int] = RETRIED_4XX
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_verify: bool = True


_ALLOWED: dict[str, type | tuple[type, ...]] = {
    "url": str,
    "headers": Mapping,
    "bearer_token": str,
    "gzip": bool,
    "batch_size": int,
    "max_body_bytes": int,
    "concurrency": int,
    "timeout_s": (int, float),
    "retry_initial_backoff_s": (int, float),
    "retry_max_backoff_s": (int, float),
    "max_retries": int,
    "retry_statuses": list,
    "tls_ca_file": str,
    "tls_cert_file": str,
    "tls_key_file": str,
    "tls_verify": bool,
}


def parse(options: Mapping[str, Any]) -> HttpOptions:
    """The `[processor.http]` table, checked; ValueError naming the key."""
    check_options("http", options, _ALLOWED)
    raw_url = options.get("url")
    if not raw_url:
        raise ValueError(f"{PREFIX}.url: required (the endpoint logs are POSTed to)")
    try:
        url = URL(raw_url)
    except ValueError as exc:
        shown = redact_text(str(raw_url))
        raise ValueError(f"{PREFIX}.url: {shown!r} is not a URL: {redact_text(str(exc))}") from None
    if url.scheme not in ("http", "https") or not url.host:
        shown = redact_text(raw_url)
        raise ValueError(f"{PREFIX}.url: {shown!r} is not an http:// or https:// URL")
    if any(c.isspace() for c in str(raw_url)):
        shown = redact_text(raw_url)
        raise ValueError(
            f"{PREFIX}.url: {shown!r} has a space in it (sent, it would become %20): "
            "encode it as %20 yourself if that is meant"
        )
    headers = {}
    for name, value in dict(options.get("headers", {})).items():
        if not isinstance(value, str) or "\n" in value or "\r" in value:
            raise ValueError(
                f"{PREFIX}.headers.{name}: must be a one-line string, got {described(name, value)}"
            )
        headers[str(name)] = value
    token = options.get("bearer_token")
    authorization = [k for k in headers if k.lower() == "authorization"]
    if url.user is not None:
        authorization.append("the user:password in url")
    if token:
        authorization.append("bearer_token")
    if len(authorization) > 1:
        raise ValueError(
            f"{PREFIX}.{'bearer_token' if token else 'url'}: {' and '.join(authorization)} "
            "each set the Authorization header: give one"
        )
    if token:
        headers["Authorization"] = f"Bearer {token}"
    numbers = {
        "batch_size": int(options.get("batch_size", 1000)),
        "concurrency": int(options.get("concurrency", 2)),
    }
    for key, value in numbers.items():
        if value < 1:
            raise ValueError(f"{PREFIX}.{key}: must be >= 1, got {value}")
    max_body = int(options.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES))
    if max_body != 0 and max_body < 1024:
        raise ValueError(
            f"{PREFIX}.max_body_bytes: must be 0 (no limit) or >= 1024, got {max_body}"
        )
    timeout = float(options.get("timeout_s", 30.0))
    initial = float(options.get("retry_initial_backoff_s", 0.5))
    maximum = float(options.get("retry_max_backoff_s", 30.0))
    if timeout <= 0:
        raise ValueError(f"{PREFIX}.timeout_s: must be > 0, got {timeout:g}")
    if not 0 < initial <= maximum:
        raise ValueError(
            f"{PREFIX}.retry_initial_backoff_s: must be > 0 and <= retry_max_backoff_s "
            f"({maximum:g}), got {initial:g}"
        )
    retries = int(options.get("max_retries", 0))
    if retries < 0:
        raise ValueError(f"{PREFIX}.max_retries: must be >= 0 (0: for ever), got {retries}")
    retried = RETRIED_4XX | _retry_statuses(options.get("retry_statuses", []))
    tls = {
        key: str(options.get(key, "")) for key in ("tls_ca_file", "tls_cert_file", "tls_key_file")
    }
    verify = bool(options.get("tls_verify", True))
    if url.scheme != "https":
        given = [key for key, value in tls.items() if value] + ([] if verify else ["tls_verify"])
        if given:
            raise ValueError(f"{PREFIX}.{given[0]}: only for https:// URLs")
    if tls["tls_key_file"] and not tls["tls_cert_file"]:
        raise ValueError(f"{PREFIX}.tls_key_file: needs tls_cert_file (the client certificate)")
    if not verify and tls["tls_ca_file"]:
        raise ValueError(f"{PREFIX}.tls_verify: false ignores tls_ca_file; give one or the other")
    return HttpOptions(
        url=str(url),
        headers=headers,
        gzip=bool(options.get("gzip", False)),
        batch_size=numbers["batch_size"],
        max_body_bytes=max_body,
        concurrency=numbers["concurrency"],
        timeout_s=timeout,
        retry_initial_backoff_s=initial,
        retry_max_backoff_s=maximum,
        max_retries=retries,
        retried_4xx=retried,
        tls_verify=verify,
        **tls,
    )


def _retry_statuses(given: list[Any]) -> frozenset[int]:
    """The `retry_statuses` option: 4xx statuses to retry instead of rejecting the batch (a
    401 while a token is rotated, a 403 until a permission is granted). 5xx are always
    retried, and retrying a 2xx or 3xx would mean nothing."""
    bad = [v for v in given if isinstance(v, bool) or not isinstance(v, int) or not 400 <= v < 500]
    if bad:
        raise ValueError(
            f"{PREFIX}.retry_statuses: 4xx status codes only (5xx are always retried), got "
            f"{', '.join(repr(v) for v in bad)}"
        )
    return frozenset(given)


def sends_credentials_in_clear(o: HttpOptions) -> bool:
    """Whether requests carry credentials (an Authorization header from `bearer_token`,
    `headers` or a user:password in the URL) over plain http:// to a host that is not this
    one, where anyone on the path can read them."""
    url = URL(o.url)
    if url.scheme != "http" or is_loopback(url.host or ""):
        return False
    return url.user is not None or any(k.lower() == "authorization" for k in o.headers)


def failure_reason(exc: BaseException, timeout_s: float) -> str:
    """A request's failure as an operator reads it: the exception's message, which names
    the cause (`Cannot connect to host ... [SSLCertVerificationError: ... certificate verify
    failed: ...]`), not its repr (a connection key first, cut before the cause)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"no answer within timeout_s ({timeout_s:g} s)"
    return redact_text(f"{type(exc).__name__}: {exc}")[:400]


def tls_context(o: HttpOptions) -> ssl.SSLContext | None:
    """The TLS settings as an SSLContext, or None for aiohttp's default (the system's CAs);
    ValueError naming the key of a file that cannot be loaded."""
    if not (o.tls_ca_file or o.tls_cert_file or not o.tls_verify):
        return None
    try:
        context = ssl.create_default_context(cafile=o.tls_ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"{PREFIX}.tls_ca_file: cannot load {o.tls_ca_file!r}: {exc}") from None
    if not o.tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if o.tls_cert_file:
        try:
            context.load_cert_chain(o.tls_cert_file, o.tls_key_file or None)
        except (OSError, ssl.SSLError) as exc:
            files = ", ".join(repr(f) for f in (o.tls_cert_file, o.tls_key_file) if f)
            raise ValueError(f"{PREFIX}.tls_cert_file: cannot load {files}: {exc}") from None
    return context


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return min(max(0.0, when - now), MAX_RETRY_AFTER_S)


_REQUEST_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class HttpMetrics:
    """The processor's own series on the source's registry (docs/metrics.md). A request the
    endpoint refuses for a while is retried inside the processor, so without these a sink
    answering 503 would show only as a stalled checkpoint."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.requests = Counter(
            "loghubd_http_requests_total",
            "Requests sent, by the answer's status code ('error': no answer, or a timeout)",
            ["status"],
            registry=r,
        )
        self.seconds = Histogram(
            "loghubd_http_request_duration_seconds",
            "Time to the answer of one request (every attempt)",
            buckets=_REQUEST_SECONDS,
            registry=r,
        )
        self.retries = Counter(
            "loghubd_http_retries_total", "Requests scheduled again after a failure", registry=r
        )
        self.logs = Counter(
            "loghubd_http_delivered_logs_total", "Logs in requests answered 2xx", registry=r
        )


def bodies(batch: Batch, size: int, compress: bool, max_bytes: int = 0) -> list[tuple[bytes, int]]:
    """The batch's logs as NDJSON request bodies of up to `size` logs and, with `max_bytes`,
    up to that many bytes before compression (a longer line goes alone), with their log
    counts. The JSON-lines view is written in C from the wire bytes; the cuts depend only on
    the batch and the options, so a retried batch is cut the same way (its parts keep their
    numbers)."""
    lines = batch.jsonl().split(b"\n")
    lines.pop()  # the text ends with a newline: the last piece is empty
    parts = [lines[i : i + size] for i in range(0, len(lines), size)]
    if max_bytes:
        parts = [cut for part in parts for cut in _by_bytes(part, max_bytes)]
    out = [(b"\n".join(part) + b"\n", len(part)) for part in parts]
    if compress:
        out = [(gzip.compress(body, compresslevel=1), n) for body, n in out]
    return out


def _by_bytes(lines: list[bytes], max_bytes: int) -> list[list[bytes]]:
    """`lines` cut where the next line would take a part past `max_bytes` (newlines counted)."""
    if sum(map(len, lines)) + len(lines) <= max_bytes:
        return [lines]
    out: list[list[bytes]] = []
    start = used = 0
    for i, line in enumerate(lines):
        if i > start and used + len(line) + 1 > max_bytes:
            out.append(lines[start:i])
            start, used = i, 0
        used += len(line) + 1
    out.append(lines[start:])
    return out


class HttpProcessor:
    def __init__(self, factory: HttpFactory, shard: int) -> None:
        self.factory = factory
        self.options = factory.options
        self.shard = shard
        # Requests of a failed batch that were acknowledged: not sent again when the daemon
        # retries the batch (keyed by where it starts).
        self._acked: dict[str, set[int]] = {}

    def initialize(self, shard: int) -> None:
        pass

    async def process(self, batch: Batch, tracker: Tracker) -> None:
        o = self.options
        parts = await anyio.to_thread.run_sync(
            bodies, batch, o.batch_size, o.gzip, o.max_body_bytes
        )
        acked = self._acked.setdefault(batch.cursor, set())
        limit = anyio.Semaphore(o.concurrency)
        interrupted: list[BatchInterrupted] = []

        async def send(index: int, body: bytes, logs: int) -> None:
            async with limit:
                if interrupted:  # the batch is left to the next owner: start nothing more
                    return
                try:
                    await self._post(batch, index, len(parts), body, tracker)
                except BatchInterrupted as exc:
                    # Not raised here: that would cancel the other parts' first attempts,
                    # which a stop never cuts short (their endpoint may have the body).
                    interrupted.append(exc)
                    return
            acked.add(index)
            self.factory.metrics.logs.inc(logs)

        try:
            async with anyio.create_task_group() as tg:
                for index, (body, logs) in enumerate(parts):
                    if index not in acked:
                        tg.start_soon(send, index, body, logs)
        except ExceptionGroup as group:
            # One refused request fails the batch; report the first reason, not a group.
            raise leaves(group)[0] from None
        if interrupted:
            raise interrupted[0]
        del self._acked[batch.cursor]
        tracker.save_checkpoint(persist=False)

    async def _post(
        self, batch: Batch, index: int, count: int, body: bytes, tracker: Tracker
    ) -> None:
        """One request, retried until it is acknowledged (each failure told to the daemon:
        `tracker.note_problem`). Once it has failed, a stop of the shard ends the retrying
        (`BatchInterrupted`): the wait, and an attempt in flight. A first attempt is never cut
        short, so a graceful stop duplicates nothing that was going well."""
        o = self.options
        stopping = tracker.stopping
        headers = {
            **o.headers,
            "Content-Type": "application/x-ndjson",
            "X-Loghubd-Shard": str(batch.shard),
            "X-Loghubd-Cursor": batch.cursor,
            "X-Loghubd-Part": f"{index}/{count}",
        }
        if o.gzip:
            headers["Content-Encoding"] = "gzip"
        proxy = self.factory.proxy
        if proxy is not None:
            headers.update(proxy.request_headers)
        where = f"shard {batch.shard}, cursor {batch.cursor}, part {index}/{count}"
        attempt = 1
        failing = Episode()  # `http_recovered` when the endpoint takes the part after failures
        failed = await self._attempt(body, headers, where)
        while failed is not None:
            failing.failed(time.monotonic())
            reason, asked = failed
            if o.max_retries and attempt > o.max_retries:
                raise GaveUp(
                    f"{redact_text(o.url)}: {attempt} failures in a row, the last: {reason}"
                )
            backoff = Backoff(
                initial=o.retry_initial_backoff_s, cap=o.retry_max_backoff_s, jitter=0.5
            )
            wait = backoff.wait(attempt)
            if asked is not None:
                wait = max(wait, asked)
            self.factory.log.warning(
                "http_retry",
                shard=batch.shard,
                part=index,
                attempt=attempt,
                reason=reason,
                retry_in_s=round(wait, 3),
            )
            self.factory.metrics.retries.inc()
            tracker.note_problem(
                f"{redact_text(o.url)}: {reason} (part {index}/{count}, {attempt} failure(s) in "
                f"a row; retrying in {wait:.1f}s)"
            )
            attempt += 1

            async def again(wait: float = wait) -> tuple[str, float | None] | None:
                await anyio.sleep(wait)
                return await self._attempt(body, headers, where)

            finished, failed = await until_stopping(stopping, again)
            if not finished:
                raise BatchInterrupted(
                    f"{redact_text(o.url)}: the shard is stopping; {attempt - 1} failures in "
                    f"a row, the last: {reason} ({where})"
                )
        if ended := failing.recovered(time.monotonic()):
            self.factory.log.info("http_recovered", shard=batch.shard, part=index, **ended)

    async def _attempt(
        self, body: bytes, headers: Mapping[str, str], where: str
    ) -> tuple[str, float | None] | None:
        """POST once: None when acknowledged, else why it failed and the wait the endpoint
        asked for (Retry-After). A refusal that retrying cannot help raises `HttpRejected`."""
        o = self.options
        session = self.factory.session
        assert session is not None, "factory.start() first"
        metrics = self.factory.metrics
        proxy = self.factory.proxy
        sent = time.perf_counter()
        status = "error"
        try:
            async with session.post(
                o.url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=o.timeout_s),
                proxy=proxy.url if proxy else None,
                proxy_headers=proxy.tunnel_headers if proxy else None,
                # Followed, a 301/302/303 turns the POST into a GET without the body, and a
                # 2xx to that GET would pass for the logs' acknowledgement.
                allow_redirects=False,
            ) as resp:
                status = str(resp.status)
                if 200 <= resp.status < 300:
                    await resp.read()
                    return None
                text = (await resp.text(errors="replace"))[:300]
                if resp.status < 500 and resp.status not in o.retried_4xx:
                    moved = resp.headers.get("Location") if 300 <= resp.status < 400 else None
                    to = f" to {redact_text(moved)!r} (set url to where it points)" if moved else ""
                    raise HttpRejected(
                        f"{redact_text(o.url)} answered {resp.status} {resp.reason}{to}: "
                        f"{text!r} ({where})"
                    )
                asked = retry_after(resp.headers.get("Retry-After"), time.time())
                said = f": {text[:200]!r}" if text.strip() else ""  # what the endpoint says why
                return f"{resp.status} {resp.reason}{said}", asked
        except (aiohttp.ClientError, TimeoutError) as exc:
            return failure_reason(exc, o.timeout_s), None
        except anyio.get_cancelled_exc_class():
            # Given up by us, not failed by the endpoint: a stop, or another part of the
            # batch was rejected.
            if status == "error":
                status = "cancelled"
            raise
        finally:
            metrics.requests.labels(status).inc()
            metrics.seconds.observe(time.perf_counter() - sent)

    def shutdown(self, tracker: Tracker) -> None:
        pass


class HttpFactory:
    """Per daemon: one aiohttp session (connection pool) shared by the shards."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = parse(options)
        self.tls = tls_context(self.options)
        self.proxy = proxy_for(self.options.url, os.environ)  # HTTP(S)_PROXY, NO_PROXY
        self.log: Any = log  # bound to the group and consumer by `bind`
        if not self.options.tls_verify:
            log.warning("http_tls_verify_off", url=redact_text(self.options.url))
        if sends_credentials_in_clear(self.options):
            log.warning(
                "http_credentials_in_clear",
                url=redact_text(self.options.url),
                reason="the Authorization header goes over plain http:// to another host: "
                "use https://",
            )
        self.session: aiohttp.ClientSession | None = None
        self.metrics = HttpMetrics(CollectorRegistry())  # bind() puts them on the daemon's

    def bind(self, context: ProcessorContext) -> None:
        self.metrics = context.instruments(HttpMetrics)
        # Its lines name the group and consumer, as the shard tasks' do.
        self.log = log.bind(group=context.group, consumer=context.consumer)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(ssl=self.tls) if self.tls is not None else None
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=True)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    def __call__(self, shard: int) -> HttpProcessor:
        return HttpProcessor(self, shard)
