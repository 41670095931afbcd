"""Who may see the console, and what: sign-in checks, session cookies, policy questions.

Pure: no I/O; time arrives as `now`. The rules:

- A console with credentials (the access keys of `loghubd serve --access-keys`, or a console
  token) needs a sign-in: an access key pair whose secret matches, or the token. The session
  is a cookie `<who>.<expiry>.<hmac>` signed with `session_secret`: a random key the
  server keeps (serve: in its data directory, so a restart keeps sessions) mixed with the
  credentials that can sign in (a changed token or key secret signs everyone out).
- A key with a policy sees only what the policy allows (`Viewer.may`, RAM semantics of
  `loghubd.server.policy`); a key without a policy and the console token see everything.
- A console with no credentials needs no sign-in but answers only clients on loopback,
  unless it was started open (`--console-open`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from loghubd.server import policy as P
from loghubd.server.addresses import is_loopback
from loghubd.server.auth import AccessKey

COOKIE = "loghubd_console"
SESSION_S = 12 * 3600.0
TOKEN_USER = "console token"


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking: a display name, and the policy that limits them (None: everything)."""

    name: str
    policy: P.Policy | None = None
    account: str = P.DEFAULT_ACCOUNT

    def may(
        self, action: str, project: str, logstore: str | None = None, group: str | None = None
    ) -> bool:
        if self.policy is None:
            return True
        res = P.resource(self.account, project, logstore, group)
        return P.decide(self.policy, action, res) is P.Decision.ALLOW


ANONYMOUS = Viewer("")

# What the console shows of a logstore, and the RAM action each part needs.
SEE_SHARDS = "log:ListShards"
SEE_GROUPS = "log:ListConsumerGroup"
SEE_GROUP = "log:GetConsumerGroupCheckPoint"
SEE_LOGS = "log:GetCursorOrData"
_ANY_OF_LOGSTORE = ("log:GetLogStore", SEE_SHARDS, SEE_LOGS, SEE_GROUPS)


def sees_logstore(viewer: Viewer, project: str, logstore: str) -> bool:
    """A logstore is listed when the viewer may do any console-shown thing with it."""
    return any(viewer.may(a, project, logstore) for a in _ANY_OF_LOGSTORE)


def session_secret(kept: bytes, keys: Mapping[str, AccessKey], token: str) -> bytes:
    """The key session cookies are signed with: `kept` (random, kept by the server) bound
    to every credential that can sign in, so rotating one ends the sessions it opened."""
    creds = [f"token\0{token}"] + [
        f"key\0{k.id}\0{k.secret}\0{k.security_token}" for _id, k in sorted(keys.items())
    ]
    return hmac.new(kept, "\n".join(creds).encode(), hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Gate:
    """The console's credentials: access keys by id, an optional token, and whether a
    console with neither answers clients off loopback."""

    keys: Mapping[str, AccessKey]
    token: str = ""
    open_to_all: bool = False
    secret: bytes = b""  # signs session cookies (`session_secret`)

    @property
    def needs_sign_in(self) -> bool:
        return bool(self.keys) or bool(self.token)

    def allows_address(self, remote: str | None) -> bool:
        """Without credentials: loopback only, unless started open."""
        if self.needs_sign_in or self.open_to_all:
            return True
        return is_loopback(remote)

    def sign_in(self, key_id: str, secret: str, token: str, now: float) -> str:
        """The session's subject (`key:<id>` or `token`), or ValueError saying why not."""
        if token:
            if self.token and hmac.compare_digest(token.encode(), self.token.encode()):
                return "token"
            raise ValueError("that console token is not right")
        key = self.keys.get(key_id)
        if key is None or not hmac.compare_digest(secret.encode(), key.secret.encode()):
            raise ValueError("that access key id and secret do not match")
        if key.expires is not None and now >= key.expires:
            raise ValueError(f"access key {key_id} has expired")
        return "key:" + key_id

    def cookie(self, subject: str, now: float) -> str:
        who = base64.urlsafe_b64encode(subject.encode()).decode().rstrip("=")
        body = f"{who}.{int(now + SESSION_S)}"
        return f"{body}.{self._mac(body)}"

    def viewer(self, cookie: str | None, now: float) -> Viewer | None:
        """The signed-in viewer a cookie names, or None (absent, forged, expired, or its key
        is gone or expired)."""
        if not self.needs_sign_in:
            return ANONYMOUS
        if not cookie or cookie.count(".") != 2:
            return None
        body, mac = cookie.rsplit(".", 1)
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        who, until = body.split(".")
        if not until.isdigit() or int(until) <= now:
            return None
        try:
            subject = base64.urlsafe_b64decode(who + "=" * (-len(who) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        if subject == "token":
            return Viewer(TOKEN_USER) if self.token else None
        key = self.keys.get(subject.removeprefix("key:"))
        if key is None or (key.expires is not None and now >= key.expires):
            return None
        return Viewer(key.id, key.policy, key.account_id)

    def _mac(self, body: str) -> str:
        digest = hmac.new(self.secret, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
