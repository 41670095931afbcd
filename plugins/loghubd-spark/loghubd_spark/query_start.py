"""Starting a streaming query past Spark's fixed wait for its Python source process.

A query initialising its sources starts the Python process that runs a Python data source's
reader (PythonStreamingSourceRunner) and waits a fixed 10 s for it to connect back
(`PythonWorkerFactory.createSimpleWorker`; no setting changes it). That process imports
pyspark before it connects: about half a second on an idle host, but on a host whose CPUs are
all busy it can take longer than 10 s, and the query then fails before it has read anything
("Python worker failed to connect back").

Starting the query again from its checkpoint loses and repeats nothing (nothing was planned,
read or committed), so that is what `start_past_worker_timeout` does, a bounded number of
times and saying so each time. Any other failure is returned as it is: a query that fails for
a reason of its own fails again. A stop asked for meanwhile (`stopping`: the command's
signal) cuts the wait short, and the query is not started again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

# The text of the SocketTimeoutException Spark raises when the process did not connect back.
WORKER_TIMEOUT = "Python worker failed to connect back"
ATTEMPTS = 3
BACKOFF_S = (2.0, 5.0)  # before the 2nd and the 3rd attempt
RESTARTING = "starting the query again from its checkpoint"  # in the line said each time
INITIALIZING = "Initializing"  # "Initializing StreamExecution", then "Initializing sources"
# Said as a query ends, before Spark stops its sources and marks it inactive: in between it
# is ending, not running.
ENDING = ("Terminated with exception", "Stopped")
POLL_S = 0.1


class Stopping(Protocol):
    """What is used of the threading.Event a signal sets."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Query(Protocol):
    """What is used of pyspark's StreamingQuery."""

    @property
    def isActive(self) -> bool: ...

    @property
    def status(self) -> dict[str, object]: ...

    def exception(self) -> BaseException | None: ...


Q = TypeVar("Q", bound=Query)


def worker_timed_out(error: BaseException | None) -> bool:
    return error is not None and WORKER_TIMEOUT in str(error)


def past_initializing(
    query: Query,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stopping: Stopping | None = None,
) -> bool:
    """Wait until the query has its sources (True: its status says something other than
    "Initializing ..." or that it is ending) or has ended (False: failed, or an available-now
    query that is done). True after `timeout_s` too, or once `stopping` is set: it is still
    active, and the caller waits on it or stops it as usual."""
    deadline = clock() + timeout_s
    while query.isActive:
        message = str(query.status.get("message", ""))
        # Ending: wait until it is no longer active, when its exception() is set.
        if not message.startswith((INITIALIZING, *ENDING)):
            return query.isActive  # False if it ended since the look above
        if clock() >= deadline or (stopping is not None and stopping.is_set()):
            return True
        sleep(POLL_S)
    return False


def start_past_worker_timeout(
    start: Callable[[], Q],
    *,
    say: Callable[[str], None],
    attempts: int = ATTEMPTS,
    init_timeout_s: float = 300.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stopping: Stopping | None = None,
) -> Q:
    """`start()` the query and wait until it has initialised its sources; if it failed there
    because its Python source process did not connect back in time, start it again (at most
    `attempts` starts in all, after 2 s, then 5 s). Returns the query: running, done, or
    failed (the last attempt's failure, or any other failure at once). Once `stopping` is
    set, the query is returned as it is: not waited for further, not started again."""
    attempt = 1
    while True:
        query = start()
        if past_initializing(query, init_timeout_s, clock=clock, sleep=sleep, stopping=stopping):
            return query
        if not worker_timed_out(query.exception()) or attempt >= attempts:
            return query
        if stopping is not None and stopping.is_set():
            return query
        delay = BACKOFF_S[min(attempt, len(BACKOFF_S)) - 1]
        say(
            f"Spark's Python source process did not connect back within Spark's 10 s (a busy "
            f"host?); {RESTARTING} in {delay:g} s "
            f"(attempt {attempt + 1} of {attempts})"
        )
        if stopping is None:
            sleep(delay)
        elif stopping.wait(delay):
            return query
        attempt += 1
