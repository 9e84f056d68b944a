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


class Unavailable(AriError):
    """No Agent of that name can take a delegated task (unknown, not ready, or its mode refuses
    delegated tasks). Nothing ran."""


class LimitReached(AriError):
    """The delegation grant's depth or children limit is reached. Not a denial: the task may
    carry on (this is how a recursion learns it is deep enough)."""


class BudgetExhausted(AriError):
    """What is left of this task's fuel or time cannot fund a child. Nothing was started."""


class ChildFailed(AriError):
    """A delegated task ran and failed: ``reason`` is its Task reason (``FuelExhausted``,
    ``CapabilityDenied``, ``AgentError``, ...), ``message`` its message."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.args = (f"child failed with {reason}: {message}",)


class Rejected(AriError):
    """A person rejected a delegation or an HTTP request the grant marks for approval; the
    message says who and why. Nothing was started or sent, and the agent may go on (raised from
    ``execute``, it leaves as ``failed``)."""


class ModelError(AriError):
    """Base of every model call's failure, one subclass per case of the WIT's ``model-error``;
    ``kind`` is the case as the WIT spells it. Each also derives from the general class of its
    meaning (a model denial is a :class:`Denied`), so it leaves ``execute`` as that class does."""

    kind = "model-error"


class ModelDenied(ModelError, Denied):
    """The Agent is not granted that model; the task ends ``CapabilityDenied``."""

    kind = "denied"


class TokenBudgetExhausted(ModelError, BudgetExhausted):
    """The task's token budget cannot cover the prompt; nothing was sent."""

    kind = "budget-exhausted"


class RateLimited(ModelError):
    """The provider still refused after the host's retries; ``retry_after_millis`` is the wait
    it asked for, or ``None``."""

    kind = "rate-limited"

    def __init__(self, message: str = "", retry_after_millis: "int | None" = None) -> None:
        super().__init__(message)
        self.retry_after_millis = retry_after_millis
        after = "" if retry_after_millis is None else f" (retry after {retry_after_millis} ms)"
        self.args = (f"rate limited{after}: {message}",)


class ModelUnavailable(ModelError, Unavailable):
    """The endpoint could not be reached or did not answer in time."""

    kind = "unavailable"


class InvalidRequest(ModelError, Invalid):
    """The request is malformed, or the provider rejected it as such."""

    kind = "invalid-request"


class ProviderError(ModelError):
    """The provider failed otherwise; ``status`` is its HTTP status (200: an unreadable
    answer)."""

    kind = "provider-error"

    def __init__(self, message: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.args = (f"model provider error (HTTP {status}): {message}",)


def from_model_error(err: object) -> ModelError:
    """The exception for a WIT ``model-error`` value (``ModelError_RateLimited(...)``, ...)."""
    case = type(err).__name__
    value = getattr(err, "value", None)
    if case == "ModelError_RateLimited":
        return RateLimited(str(value.message), value.retry_after_millis)
    if case == "ModelError_ProviderError":
        return ProviderError(str(value.message), int(value.status))
    simple = {
        "ModelError_Denied": ModelDenied,
        "ModelError_BudgetExhausted": TokenBudgetExhausted,
        "ModelError_Unavailable": ModelUnavailable,
        "ModelError_InvalidRequest": InvalidRequest,
    }
    # A case added to the contract after this SDK: still a model error, never success.
    return simple.get(case, ProviderError)(str(value if value is not None else err))


class ToolError(AriError):
    """Base of every tools call's failure, one subclass per case of the WIT's ``tool-error``;
    ``kind`` is the case as the WIT spells it. Like model errors, each also derives from the
    general class of its meaning (a tools denial is a :class:`Denied`, refused arguments an
    :class:`Invalid`), so it leaves ``execute`` as that class does."""

    kind = "tool-error"


class ToolDenied(ToolError, Denied):
    """The server or the tool is not granted; the task ends ``CapabilityDenied``."""

    kind = "denied"


class ToolNotFound(ToolError):
    """The server offers no such tool."""

    kind = "not-found"


class InvalidArguments(ToolError, Invalid):
    """The arguments are not a JSON object, too large, or the server refused them."""

    kind = "invalid-arguments"


class ToolUnavailable(ToolError, Unavailable):
    """The server is not configured, not reachable, or refused the host's credentials."""

    kind = "unavailable"


class ToolTimeout(ToolError):
    """No answer within the call's time limit."""

    kind = "timeout"


class ToolTooLarge(ToolError):
    """The answer is over the host's size bound."""

    kind = "too-large"


class ToolServerError(ToolError):
    """The server answered with an error."""

    kind = "server-error"


class ToolRejected(ToolError, Rejected):
    """A person rejected the call, which needed approval; nothing was sent."""

    kind = "rejected"


_TOOL_ERRORS = {
    "ToolError_Denied": ToolDenied,
    "ToolError_NotFound": ToolNotFound,
    "ToolError_InvalidArguments": InvalidArguments,
    "ToolError_Unavailable": ToolUnavailable,
    "ToolError_Timeout": ToolTimeout,
    "ToolError_TooLarge": ToolTooLarge,
    "ToolError_ServerError": ToolServerError,
    "ToolError_Rejected": ToolRejected,
}


def from_tool_error(err: object) -> ToolError:
    """The exception for a WIT ``tool-error`` value (``ToolError_NotFound("...")``, ...)."""
    value = getattr(err, "value", err)
    # A case added to the contract after this SDK: still a tools error, never success.
    return _TOOL_ERRORS.get(type(err).__name__, ToolServerError)(str(value))


# Case names of the WIT's error variants, to the exception each becomes (a delegation
# `invalid-handle` is an `Invalid` argument, as in the Rust SDK).
_FROM_CASE = {
    "Denied": Denied,
    "QuotaExceeded": QuotaExceeded,
    "InvalidKey": Invalid,
    "InvalidInput": Invalid,
    "InvalidRequest": Invalid,
    "Unsupported": Unsupported,
    "Failed": Failed,
    "Unavailable": Unavailable,
    "LimitReached": LimitReached,
    "BudgetExhausted": BudgetExhausted,
    "InvalidHandle": Invalid,
    "Rejected": Rejected,
}


def from_wit(err: object) -> AriError:
    """The exception for a WIT error value (``ErrorCode_Denied("...")`` and the like)."""
    if type(err).__name__ == "DelegationError_Failed":  # the only case that carries a record
        child = err.value
        return ChildFailed(str(child.reason), str(child.message))
    case = type(err).__name__.rsplit("_", 1)[-1]
    return _FROM_CASE.get(case, Failed)(str(getattr(err, "value", err)))


def to_error_code(exc: BaseException) -> object:
    """The ``error-code`` an exception from the agent leaves as."""
    from wit_world.imports import types

    if isinstance(exc, (ChildFailed, RateLimited, ProviderError)):
        message = str(exc)  # the child's reason, the wait, the status stay readable
    elif isinstance(exc, AriError):
        message = exc.message
    else:
        message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (Denied, QuotaExceeded)):
        return types.ErrorCode_Denied(message)
    if isinstance(exc, Invalid):
        return types.ErrorCode_InvalidInput(message)
    if isinstance(exc, Unsupported):
        return types.ErrorCode_Unsupported(message)
    return types.ErrorCode_Failed(message)
