"""Browser sessions for the dashboard: a signed cookie made from an API key, and CSRF tokens.

Browsers cannot put an ``X-API-Key`` header on an ``EventSource`` or a link, so a key is
exchanged once (``POST /login``) for a cookie::

    kl_session = v1.<payload>.<signature>        payload: base64url JSON {"kid", "kh", "exp", "nonce"}

``kid`` is the key's id, ``kh`` a prefix of its stored digest (the cookie dies with the key's
row), ``exp`` a Unix time, ``nonce`` random. The signature is HMAC-SHA256 with the session secret
over ``v1.<payload>``. The cookie is HttpOnly and SameSite=Lax (Secure on https). The key's row
is read again on every request, so revoking a key ends its sessions.

Unsafe requests (POST, DELETE …) authenticated by the cookie must also carry the session's
CSRF token, HMAC(secret, nonce): in a form field (``csrf_token``) or the ``X-CSRF-Token``
header. Header-authenticated requests need none (a browser never adds that header by itself).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass

from starlette.requests import HTTPConnection
from starlette.responses import Response

from vocabulary.wire import Reader

__all__ = [
    "COOKIE_NAME",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "LOGIN_CSRF_COOKIE",
    "SAFE_METHODS",
    "SESSION_TTL_S",
    "BrowserSession",
    "SessionCodec",
    "clear_session_cookie",
    "codec_for",
    "read_session",
    "set_session_cookie",
]

COOKIE_NAME = "kl_session"
#: The double-submit cookie of the login form (there is no session yet to derive a token from).
LOGIN_CSRF_COOKIE = "kl_login_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
#: A working day: long enough not to interrupt watching a job, short enough that a cookie
#: left on a shared machine does not outlive the day.
SESSION_TTL_S = 12 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_VERSION = "v1"
#: Characters of the key's stored SHA-256 hex digest carried in the cookie.
_KEY_HASH_CHARS = 16
_NONCE_BYTES = 16
_SECRET_BYTES = 32


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class BrowserSession:
    """A verified session cookie's content."""

    key_id: int
    key_hash_prefix: str
    expires_at: int
    nonce: str

    def matches(self, key_hash: str) -> bool:
        return hmac.compare_digest(self.key_hash_prefix, key_hash[:_KEY_HASH_CHARS])


class SessionCodec:
    """Signs and verifies session cookies and CSRF tokens with one secret."""

    def __init__(self, secret: bytes, *, ttl_s: int = SESSION_TTL_S) -> None:
        if len(secret) < 16:
            raise ValueError("the session secret must be at least 16 bytes")
        self._secret = secret
        self.ttl_s = ttl_s

    def _sign(self, message: str) -> str:
        return _b64(hmac.new(self._secret, message.encode("ascii"), hashlib.sha256).digest())

    def issue(self, *, key_id: int, key_hash: str, now: float | None = None) -> str:
        """A new cookie value for the key with this id and stored digest."""
        payload = {
            "kid": key_id,
            "kh": key_hash[:_KEY_HASH_CHARS],
            "exp": int((now if now is not None else time.time()) + self.ttl_s),
            "nonce": secrets.token_urlsafe(_NONCE_BYTES),
        }
        body = f"{_VERSION}.{_b64(json.dumps(payload, separators=(',', ':')).encode())}"
        return f"{body}.{self._sign(body)}"

    def verify(self, value: str, *, now: float | None = None) -> BrowserSession | None:
        """The session in a cookie value; ``None`` if it is malformed, forged or expired."""
        parts = value.split(".")
        if len(parts) != 3 or parts[0] != _VERSION:
            return None
        body = f"{parts[0]}.{parts[1]}"
        if not hmac.compare_digest(self._sign(body), parts[2]):
            return None
        try:
            payload = Reader(json.loads(_unb64(parts[1])), "the session cookie")
            session = BrowserSession(
                key_id=payload.integer("kid"),
                key_hash_prefix=payload.text("kh"),
                expires_at=payload.integer("exp"),
                nonce=payload.text("nonce"),
            )
        except (ValueError, binascii.Error):
            return None
        if session.expires_at <= (now if now is not None else time.time()):
            return None
        return session

    def csrf_token(self, session: BrowserSession) -> str:
        """The token unsafe cookie-authenticated requests of this session must carry."""
        return self._sign(f"csrf.{session.nonce}")

    def check_csrf(self, session: BrowserSession, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf_token(session), str(token))


_secret_lock = threading.Lock()


def codec_for(connection: HTTPConnection) -> SessionCodec:
    """The app's codec: from ``settings.session_secret``, or a secret made once per app (kept on
    ``app.state``; sessions then end when the process does, and several API processes behind
    one address need ``KERNELLOOP_SESSION_SECRET`` set to share them)."""
    state = connection.app.state
    codec: SessionCodec | None = getattr(state, "session_codec", None)
    if codec is not None:
        return codec
    with _secret_lock:
        codec = getattr(state, "session_codec", None)
        if codec is None:
            configured = state.settings.session_secret
            if configured is not None and configured.get_secret_value():
                # Hashed: any configured text makes a full-length HMAC key.
                secret = hashlib.sha256(b"kernelloop-session:" + configured.get_secret_value().encode()).digest()
            else:
                secret = secrets.token_bytes(_SECRET_BYTES)
            codec = SessionCodec(secret)
            state.session_codec = codec
    return codec


def read_session(connection: HTTPConnection) -> BrowserSession | None:
    """The request's verified session cookie, if it has one."""
    value = connection.cookies.get(COOKIE_NAME)
    if not value:
        return None
    return codec_for(connection).verify(value)


def _secure(connection: HTTPConnection) -> bool:
    return connection.url.scheme == "https"


def set_session_cookie(response: Response, connection: HTTPConnection, value: str) -> None:
    response.set_cookie(
        COOKIE_NAME,
        value,
        max_age=codec_for(connection).ttl_s,
        path="/",
        httponly=True,
        samesite="lax",
        secure=_secure(connection),
    )


def clear_session_cookie(response: Response, connection: HTTPConnection) -> None:
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="lax", secure=_secure(connection))
