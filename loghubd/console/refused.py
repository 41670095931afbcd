"""A credential refused at a sign-in form or a bearer-token check (the consoles of serve and
the daemon, the daemon's `/status`): one warning line per client (an address, or an IPv6 /64
network: `loghubd.server.addresses`) at most every 10 seconds (the rest counted in the next
line, as serve counts its refused requests), and the answer held back `REFUSED_DELAY_S`, so
that guessing is slow and seen."""

from __future__ import annotations

import anyio
import structlog
from aiohttp import web

from loghubd.server.addresses import client_key
from loghubd.server.refusals import RefusalThrottle

log = structlog.get_logger("loghubd.console")

REFUSED_DELAY_S = 1.0
_THROTTLE = RefusalThrottle()


async def refused_credential(request: web.Request, event: str, reason: str, **fields: str) -> None:
    """Log (throttled) and wait before the caller answers 401. `fields` are shown cut to 64
    characters: a key id, never a secret."""
    remote = request.remote or ""
    admitted = _THROTTLE.admit((401, event, client_key(remote)))
    if admitted is not None:
        suppressed, others = admitted
        log.warning(
            event,
            remote=remote,
            path=request.path[:200],
            reason=reason,
            suppressed=suppressed,
            suppressed_other=others,
            **{k: v[:64] for k, v in fields.items()},
        )
    await anyio.sleep(REFUSED_DELAY_S)
