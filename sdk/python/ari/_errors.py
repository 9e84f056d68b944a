"""One exception per case of the contract's error variants."""


class AriError(Exception):
    """Base of every error an agent or a host call can raise; ``message`` is the host's text."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class Denied(AriError):
    """A capability is not granted, or the call is outside the grant (fails the Task
    ``CapabilityDenied`` when raised from ``execute``)."""


class QuotaExceeded(AriError):
    """A storage write would take the Agent over its quota (leaves as ``denied``)."""


class Invalid(AriError):
    """An argument, a storage key, an HTTP request or the task input is not acceptable."""


class Unsupported(AriError):
    """The agent does not handle this kind of task."""


class Failed(AriError):
    """Anything else: a backend or transport failure, or the agent's own error."""


# Case names of the three WIT variants, to the exception each becomes.
_FROM_CASE = {
    "Denied": Denied,
    "QuotaExceeded": QuotaExceeded,
    "InvalidKey": Invalid,
    "InvalidInput": Invalid,
    "InvalidRequest": Invalid,
    "Unsupported": Unsupported,
    "Failed": Failed,
}


def from_wit(err: object) -> AriError:
    """The exception for a WIT error value (``ErrorCode_Denied("...")`` and the like)."""
    case = type(err).__name__.rsplit("_", 1)[-1]
    return _FROM_CASE.get(case, Failed)(str(getattr(err, "value", err)))


def to_error_code(exc: BaseException) -> object:
    """The ``error-code`` an exception from the agent leaves as."""
    from wit_world.imports import types

    message = exc.message if isinstance(exc, AriError) else f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (Denied, QuotaExceeded)):
        return types.ErrorCode_Denied(message)
    if isinstance(exc, Invalid):
        return types.ErrorCode_InvalidInput(message)
    if isinstance(exc, Unsupported):
        return types.ErrorCode_Unsupported(message)
    return types.ErrorCode_Failed(message)
