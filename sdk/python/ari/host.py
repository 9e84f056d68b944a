"""The host functions of ``ainur:ari/host@2.0.0`` with Python types.

Capability-gated calls raise :class:`ari.Denied` when the capability was not granted; the host
never traps for it. Storage, HTTP, random, sign, now and delegation raise the exception of the
host's typed error (:class:`ari.QuotaExceeded`, :class:`ari.Invalid`, :class:`ari.Failed`,
:class:`ari.ChildFailed`, ...).
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


# --- delegation (capability `delegation`: tasks on other Agents, out of this task's budget) ---


@dataclass(frozen=True)
class Budget:
    """What a child may spend, out of what this task has left. ``None`` takes the default share:
    half of the fuel this task can spare (it keeps a reserve to await and finish), and all the
    time left."""

    fuel: Optional[int] = None
    timeout_millis: Optional[int] = None


def _budget(budget: Optional[Budget]) -> "_types.ChildBudget":
    budget = budget or Budget()
    for name, value in (("fuel", budget.fuel), ("timeout_millis", budget.timeout_millis)):
        # Checked here: out of range, the binding would raise an error of its own instead.
        if value is not None and not 0 <= value < 1 << 64:
            raise Invalid(f"budget {name} {value} is not a u64")
    return _types.ChildBudget(budget.fuel, budget.timeout_millis)


def delegate(agent: str, input: Bytes, budget: Optional[Budget] = None) -> bytes:  # noqa: A002
    """Runs a task on ``agent`` with ``input`` and waits for its output.

    A child that ran and failed raises :class:`ari.ChildFailed` (its ``reason`` says why)."""
    return bytes(_call(_wit.delegate, agent, _b(input), _budget(budget)))


class Child:
    """A child started with :func:`start_child`; collect it with :meth:`wait`. A child never
    waited for is cancelled when the task ends."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def wait(self) -> bytes:
        """Waits for the child's output (:class:`ari.Invalid` when already collected)."""
        return await_child(self.handle)

    def __repr__(self) -> str:
        return f"Child({self.handle})"


def start_child(agent: str, input: Bytes, budget: Optional[Budget] = None) -> Child:  # noqa: A002
    """Starts a task on ``agent`` and returns at once, so several children run in parallel."""
    return Child(_call(_wit.start_child, agent, _b(input), _budget(budget)))


def await_child(handle: int) -> bytes:
    """Waits for the child with this handle (prefer :meth:`Child.wait`)."""
    if not 0 <= handle < 1 << 32:
        raise Invalid(f"child handle {handle} is not a u32")
    return bytes(_call(_wit.await_child, handle))


def send_message(agent: str, input: Bytes, budget: Optional[Budget] = None) -> None:  # noqa: A002
    """Starts a task on ``agent`` that this task never waits for; its whole fuel budget is spent
    when it is sent."""
    _call(_wit.send_message, agent, _b(input), _budget(budget))
