"""The host functions of ``ainur:ari/host@2.0.0`` with Python types.

Capability-gated calls raise :class:`ari.Denied` when the capability was not granted; the host
never traps for it. Storage, HTTP, random, sign and now raise the exception of the host's typed
error (:class:`ari.QuotaExceeded`, :class:`ari.Invalid`, :class:`ari.Failed`, ...).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

from componentize_py_types import Err
from wit_world.imports import host as _wit
from wit_world.imports import types as _types

from ._errors import Invalid, from_wit

Bytes = Union[bytes, str]


def _b(data: Bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def _call(fn, *args):
    try:
        return fn(*args)
    except Err as e:
        raise from_wit(e.value) from None


# --- log (always available) ---

_LEVELS = {
    "trace": _wit.LogLevel.TRACE,
    "debug": _wit.LogLevel.DEBUG,
    "info": _wit.LogLevel.INFO,
    "warn": _wit.LogLevel.WARN,
    "error": _wit.LogLevel.ERROR,
}


def log(level: str, message: str) -> None:
    """Logs ``message`` at ``level`` (``trace`` ``debug`` ``info`` ``warn`` ``error``)."""
    try:
        wit_level = _LEVELS[level]
    except KeyError:
        raise Invalid(f"no log level {level!r}") from None
    _wit.log(wit_level, message)


def info(message: str) -> None:
    log("info", message)


def warn(message: str) -> None:
    log("warn", message)


def error(message: str) -> None:
    log("error", message)


# --- storage (capability `storage`, transactional per task) ---


def storage_get(key: str) -> Optional[bytes]:
    value = _call(_wit.storage_get, key)
    return None if value is None else bytes(value)


def storage_set(key: str, value: Bytes) -> None:
    _call(_wit.storage_set, key, _b(value))


def storage_delete(key: str) -> None:
    _call(_wit.storage_delete, key)


# --- randomness (capability `randomness`, the task's seeded PRNG) ---


def random_bytes(length: int) -> bytes:
    return bytes(_call(_wit.random_bytes, length))


# --- crypto: hash and verify always, sign with `signing` ---

_ALGORITHMS = {
    "sha256": _types.HashAlgorithm.SHA256,
    "sha384": _types.HashAlgorithm.SHA384,
    "sha512": _types.HashAlgorithm.SHA512,
}


def hash(algorithm: str, data: Bytes) -> bytes:  # noqa: A001 - the contract's name
    """``data``'s digest under ``sha256``, ``sha384`` or ``sha512``."""
    try:
        alg = _ALGORITHMS[algorithm]
    except KeyError:
        raise Invalid(f"no hash algorithm {algorithm!r}") from None
    return bytes(_wit.hash(alg, _b(data)))


def sign(message: Bytes) -> bytes:
    return bytes(_call(_wit.sign, _b(message)))


def verify(public_key: bytes, message: Bytes, signature: bytes) -> bool:
    return _wit.verify(bytes(public_key), _b(message), bytes(signature))


# --- HTTP (capability `network`, allowed hosts only) ---


@dataclass
class Response:
    status: int
    headers: List[Tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> Optional[str]:
        return next((v for n, v in self.headers if n.lower() == name.lower()), None)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def http_request(
    method: str, url: str, headers: Optional[Dict[str, str]] = None, body: Bytes = b""
) -> Response:
    """Sends one request; a 404 is a response, a refused or failed transfer an exception."""
    req = _wit.OutgoingRequest(
        method,
        url,
        [_wit.HttpHeader(n, v) for n, v in (headers or {}).items()],
        _b(body),
    )
    resp = _call(_wit.http_request, req)
    return Response(resp.status, [(h.name, h.value) for h in resp.headers], bytes(resp.body))


def http_get(url: str) -> Response:
    return http_request("GET", url)


# --- time (capability `timeAccess`, the task's logical clock) ---


def now() -> int:
    """Nanoseconds since the Unix epoch on the task's logical clock."""
    return _call(_wit.now)
