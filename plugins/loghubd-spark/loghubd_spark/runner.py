"""The daemon's one SparkSession and the one thread that makes every Spark call.

Spark job tags are thread-local (the Python thread is pinned to a JVM thread), so every call
runs on a single dedicated thread: a capacity-1 limiter, which also keeps two writes from
competing for the driver's memory. Each job is tagged with `loghubd-spark` plus a per-call tag;
a caller that gives up (timeout, shutdown) cancels by tag (`cancelJobsWithTag`), which stops the
JVM job; cancelling only the Python side would leave it running.

A driver JVM that died (the kernel's OOM killer, a crash) is noticed on the first call that
fails: the runner starts a new session (a new JVM) on the Spark thread and the call fails
with a SparkError that says so, so the daemon retries the batch, which then runs on the new
session. Nothing the old JVM wrote is trusted: the write-ahead log replays it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("loghubd.spark")

T = TypeVar("T")

TAG = "loghubd-spark"
# Session defaults; `[processor.spark.conf]` overrides any of them.
DEFAULT_CONF: Mapping[str, str] = {
    "spark.app.name": "loghubd-spark",
    "spark.sql.session.timeZone": "UTC",  # `dt` is the UTC date of __time__
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.ui.showConsoleProgress": "false",
    # Each write task holds one or two (dt, batch) partitions: write them with concurrent
    # writers instead of sorting every row by partition first (-6 % CPU per write).
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "8",
}
# A call's waiter wakes this often to repeat a cancel (`SparkRunner._wait`), and waits this long
# for a cancelled call to end before giving up on it (it then stays `busy`).
CANCEL_POLL_S = 0.5
CANCEL_WAIT_S = 60.0
OOM_MARKERS = ("OutOfMemoryError", "Java heap space", "GC overhead limit exceeded")
# The driver JVM's quiet log4j2 configuration (`quiet_jvm_logging`): FATAL lines only.
LOG4J2_QUIET = Path(__file__).with_name("log4j2-quiet.properties")
LOG4J2_OPTION = "log4j2.configurationFile"


def under_spark_submit() -> bool:
    """Started by spark-submit (its JVM is already up and configured)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def quiet_jvm_logging(env: MutableMapping[str, str]) -> None:
    """The driver JVM, started after this, logs through `LOG4J2_QUIET` (FATAL lines only):
    Spark's plain-text console lines (its default profile's notice, the loopback-address and
    native-hadoop warnings, "task of very large size") stay out of the output, which for the
    daemon is JSON. An operator's own `-Dlog4j2.configurationFile` in `SPARK_SUBMIT_OPTS`
    wins."""
    opts = env.get("SPARK_SUBMIT_OPTS", "")
    if LOG4J2_OPTION not in opts:
        quiet = f"-D{LOG4J2_OPTION}={LOG4J2_QUIET.as_uri()}"
        env["SPARK_SUBMIT_OPTS"] = f"{opts} {quiet}".strip()


def own_log4j(conf: Mapping[str, str]) -> bool:
    """The user's Spark conf configures the driver's log4j itself."""
    return LOG4J2_OPTION in conf.get("spark.driver.extraJavaOptions", "")


class SparkError(RuntimeError):
    """A Spark call failed (the batch is retried); the message says what to do if it can."""


class SparkTimeout(SparkError):
    pass


def explain(exc: BaseException, arrow_bytes: int = 0) -> str:
    """The error, plus guidance when the driver ran out of memory."""
    text = f"{type(exc).__name__}: {str(exc).strip()[:2000]}"
    if any(marker in text for marker in OOM_MARKERS):
        held = ""
        if arrow_bytes:
            mib = arrow_bytes / 2**20
            held = f" (this write held {mib:.0f} MiB of Arrow data: plan ~{4 * mib:.0f} MiB)"
        text += (
            "\nThe Spark driver ran out of memory. Raise spark.driver.memory in "
            '[processor.spark.conf] (e.g. "spark.driver.memory" = "4g"; plan about 4x the '
            f"Arrow bytes in flight){held}, or lower processor.spark.max_rows / max_bytes."
        )
    return text


def jvm_exited() -> bool:
    """Whether the driver JVM that PySpark launched has exited."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return proc is not None and proc.poll() is not None


class SparkRunner:
    """Owns the session (unless given one) and the thread every Spark call runs on."""

    def __init__(
        self,
        master: str,
        conf: Mapping[str, str],
        *,
        session: SparkSession | None = None,
    ) -> None:
        self.master = master
        self.conf = {**DEFAULT_CONF, **conf}
        self._session = session
        self._owns_session = session is None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="loghubd-spark"
        )
        self._lock = threading.Lock()
        self._closed = False
        self._current: concurrent.futures.Future[Any] | None = None
        # A cancel asked for while this call runs, and its tag: repeated until the call ends.
        self._cancel_asked: tuple[concurrent.futures.Future[Any], str] | None = None
        self.started_s = 0.0
        self.restarts = 0

    @property
    def busy(self) -> bool:
        """A call is still running on the Spark thread (e.g. one that was given up on)."""
        current = self._current
        return current is not None and not current.done()

    @property
    def spark(self) -> SparkSession:
        if self._session is None:
            raise RuntimeError("the Spark session is not started")
        return self._session

    def start(self) -> None:
        """Create (or adopt) the session, on the Spark thread."""
        started = time.monotonic()
        self._submit(self._create).result()
        self.started_s = time.monotonic() - started

    def _create(self) -> None:
        if self._session is None:
            from pyspark.sql import SparkSession

            if not under_spark_submit() and not own_log4j(self.conf):
                quiet_jvm_logging(os.environ)  # the JVM's console lines are not JSON
            builder = SparkSession.builder.master(self.master)
            for key, value in self.conf.items():
                builder = builder.config(key, value)
            self._session = builder.getOrCreate()
        else:
            for key, value in self.conf.items():
                if key.startswith("spark.sql."):
                    self._session.conf.set(key, value)

    def _submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._closed:
                raise SparkError("the Spark runner is closed")
            return self._executor.submit(fn)

    def run(
        self,
        fn: Callable[[SparkSession], T],
        *,
        tag: str,
        timeout: float | None = None,
        arrow_bytes: int = 0,
    ) -> T:
        """Run `fn(spark)` on the Spark thread with its jobs tagged `tag`; wait up to `timeout`
        seconds, then cancel the jobs by tag. Failures come back as SparkError."""

        def job() -> T:
            sc = self.spark.sparkContext
            sc.addJobTag(TAG)
            sc.addJobTag(tag)
            try:
                return fn(self.spark)
            finally:
                sc.removeJobTag(tag)
                sc.removeJobTag(TAG)

        future = self._submit(job)
        self._current = future
        try:
            return self._wait(future, timeout)
        except concurrent.futures.TimeoutError:
            self.cancel(tag)
            try:
                self._wait(future, CANCEL_WAIT_S)
            except Exception as exc:
                log.warning("spark_job_cancelled", tag=tag, error=repr(exc)[:300])
            raise SparkTimeout(
                f"the Spark write did not finish within {timeout}s; its jobs were cancelled "
                "(processor.spark.write_timeout)"
            ) from None
        except SparkError:
            raise
        except Exception as exc:
            if self._owns_session and (self._session is None or jvm_exited()):
                self._restart_session(exc)
                raise SparkError(
                    f"the Spark driver JVM exited ({explain(exc, arrow_bytes)[:300]}); "
                    "a new session was started and the write will be retried"
                ) from exc
            raise SparkError(explain(exc, arrow_bytes)) from exc

    def _wait(self, future: concurrent.futures.Future[T], timeout: float | None) -> T:
        """`future.result(timeout)`, in slices: after a cancel, each slice cancels again.

        `cancelJobsWithTag` stops only the jobs already submitted; a call that was still
        planning its query (or is between two jobs) submits its next job after the cancel,
        and that one would run to its end. Cancelling again until the call ends catches it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = CANCEL_POLL_S
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            try:
                return future.result(wait)
            except concurrent.futures.TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            asked = self._cancel_asked
            if asked is not None and asked[0] is future:
                self._cancel_jobs(asked[1])

    def _restart_session(self, cause: BaseException) -> None:
        log.error("spark_jvm_exited", error=repr(cause)[:500], restarts=self.restarts)
        started = time.monotonic()
        try:
            self._submit(self._recreate).result()
        except Exception as exc:
            # The next call notices again (the JVM is still not there) and tries again.
            log.error("spark_session_restart_failed", error=repr(exc)[:500])
            return
        self.restarts += 1
        log.warning(
            "spark_session_restarted",
            restarts=self.restarts,
            seconds=round(time.monotonic() - started, 2),
        )

    def _recreate(self) -> None:
        """Forget the dead JVM (PySpark keeps it in class attributes) and start a new one."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession, SQLContext

        old, self._session = self._session, None
        with warnings.catch_warnings(), contextlib.suppress(Exception):
            warnings.simplefilter("ignore")  # "Unable to cleanly shutdown Spark JVM process"
            if old is not None:
                old.stop()
        gateway = SparkContext._gateway
        if gateway is not None:
            with contextlib.suppress(Exception):
                gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None
        SQLContext._instantiatedContext = None
        self._create()

    def cancel(self, tag: str = TAG) -> None:
        """Cancel the running jobs with this tag (all of ours by default); any thread. While
        the current call runs, its waiter cancels again every CANCEL_POLL_S (see `_wait`)."""
        current = self._current
        if current is not None and not current.done():
            self._cancel_asked = (current, tag)
        self._cancel_jobs(tag)

    def _cancel_jobs(self, tag: str) -> None:
        session = self._session
        if session is None:
            return
        try:
            session.sparkContext.cancelJobsWithTag(tag)
        except Exception as exc:
            log.warning("spark_cancel_failed", tag=tag, error=repr(exc)[:300])

    def stop(self, timeout: float = 60.0) -> None:
        """Cancel what runs, stop the session (if it is ours), end the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.cancel()
        if self._owns_session and self._session is not None:
            session = self._session
            future = self._executor.submit(session.stop)
            try:
                future.result(timeout)
            except Exception as exc:
                log.warning("spark_stop_failed", error=repr(exc)[:300])
            self._session = None
        self._executor.shutdown(wait=False, cancel_futures=True)
