"""Guest SDK for writing ari agents in Python, built into Wasm components with componentize-py.

An agent subclasses :class:`Agent`, implements :meth:`Agent.execute`, and names its class in
``app.py`` with :func:`export`::

    import ari

    class Echo(ari.Agent):
        def execute(self, task: ari.Task) -> bytes:
            return task.input

    Agent = ari.export(Echo)

Host functions live in :mod:`ari.host`, language models in :mod:`ari.model`, MCP tools in
:mod:`ari.tools`, conversations in :mod:`ari.conversation`. Every typed error
of the contract (``error-code``, ``storage-error``, ``http-error``, ``delegation-error``, and
``model-error`` as a :class:`ModelError`, ``tool-error`` as a :class:`ToolError`) arrives as one of the exceptions below, and an
exception raised from ``execute`` leaves as the matching ``error-code``.
"""

from ._agent import Agent, Estimate, Task, export
from ._errors import (
    AriError,
    BudgetExhausted,
    ChildFailed,
    Denied,
    Failed,
    Invalid,
    InvalidRequest,
    LimitReached,
    ModelDenied,
    ModelError,
    ModelUnavailable,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    Rejected,
    TokenBudgetExhausted,
    ToolDenied,
    ToolError,
    ToolNotFound,
    ToolRejected,
    ToolServerError,
    ToolTimeout,
    ToolTooLarge,
    ToolUnavailable,
    InvalidArguments,
    Unavailable,
    Unsupported,
)

__all__ = [
    "Agent",
    "AriError",
    "BudgetExhausted",
    "ChildFailed",
    "Denied",
    "Estimate",
    "Failed",
    "Invalid",
    "InvalidRequest",
    "LimitReached",
    "ModelDenied",
    "ModelError",
    "ModelUnavailable",
    "ProviderError",
    "QuotaExceeded",
    "RateLimited",
    "Rejected",
    "Task",
    "TokenBudgetExhausted",
    "ToolDenied",
    "ToolError",
    "ToolNotFound",
    "ToolRejected",
    "ToolServerError",
    "ToolTimeout",
    "ToolTooLarge",
    "ToolUnavailable",
    "InvalidArguments",
    "Unavailable",
    "Unsupported",
    "export",
]
