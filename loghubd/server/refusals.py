"""The server's line for a refused request (4xx): a developer finds on the server why an SDK
was refused, by the `x-log-requestid` it got, without a flood of lines when a client keeps
being refused."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from aiohttp import web

from loghubd.protocol import errors as E
from loghubd.server.auth import claimed_key_id

log = structlog.get_logger("loghubd.server")

# A refused request (4xx) is logged, one line, so that a developer can find on the server why
# an SDK was refused, by the `x-log-requestid` it got. 401/403 at info: their answers are
# deliberately vague ("signature does not match"). At most one line per REFUSAL_WINDOW_S for
# each (status, errorCode, access key id) and REFUSAL_KEYS distinct ones per window, so a
# flood of refusals cannot flood the log; what was left out is counted in the next line.
REFUSAL_WINDOW_S = 10.0
REFUSAL_KEYS = 100
RefusalKey = tuple[int, str, str]  # status, errorCode, access key id


@dataclass(slots=True)
class _Logged:
    at: float  # when its last line was written
    suppressed: int = 0  # lines left out since


class RefusalThrottle:
    """Which refusal lines to write: at most one per `window` seconds for each key, and at
    most `max_keys` keys at once (memory stays bounded however many access key ids clients
    make up, and so do the lines: at most `max_keys` per window)."""

    def __init__(
        self,
        window: float = REFUSAL_WINDOW_S,
        max_keys: int = REFUSAL_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window
        self._max_keys = max_keys
        self._clock = clock
        self._logged: OrderedDict[RefusalKey, _Logged] = OrderedDict()  # oldest line first
        self._others = 0  # left out for want of room, or counted by a forgotten key

    def admit(self, key: RefusalKey) -> tuple[int, int] | None:
        """None: leave this line out (it is counted). Else write it, with the lines of this
        key left out since its last one and those of other keys not reported yet."""
        now = self._clock()
        seen = self._logged.get(key)
        if seen is not None and now - seen.at < self._window:
            seen.suppressed += 1
            return None
        if seen is not None:
            del self._logged[key]  # written again: it moves to the newest end
        elif not self._make_room(now):
            self._others += 1
            return None
        self._logged[key] = _Logged(now)
        others, self._others = self._others, 0
        return (seen.suppressed if seen else 0), others

    def _make_room(self, now: float) -> bool:
        """Forget keys whose last line is older than the window, oldest first, until there
        is room for one more; False if every remembered key is still within its window."""
        while len(self._logged) >= self._max_keys:
            oldest, entry = next(iter(self._logged.items()))
            if now - entry.at < self._window:
                return False
            del self._logged[oldest]
            self._others += entry.suppressed
        return True


def log_refusal(
    request: web.Request, request_id: str, api: str, exc: E.SlsError, throttle: RefusalThrottle
) -> None:
    """One line for a 4xx answer (see RefusalThrottle); nothing for a success or a 5xx."""
    status = exc.http_status
    if not 400 <= status < 500:
        return
    level = logging.INFO if status in (401, 403) else logging.DEBUG
    if not log.is_enabled_for(level):
        return
    key_id = claimed_key_id(request.headers)
    admitted = throttle.admit((status, exc.error_code, key_id))
    if admitted is None:
        return
    suppressed, others = admitted
    log.log(
        level,
        "request_refused",
        request_id=request_id,
        method=request.method,
        path=request.path[:200],  # no query string: it may carry cursors, keys or SPL
        api=api,
        status=status,
        error_code=exc.error_code,
        error_message=exc.message[:500],
        access_key_id=key_id,
        suppressed=suppressed,  # lines like this one left out since the last one
        suppressed_other=others,  # lines of other (status, code, key) left out
    )
