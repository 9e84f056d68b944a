"""Tools of remote MCP servers (capability ``tools``): the servers this Agent is granted, the
tools it may call on each, and calls with JSON arguments. The host is the MCP client: it holds
the servers' credentials (they never enter the guest), bounds every answer and records it, so a
replay needs no server; the agent only names a server and a tool::

    from ari import tools

    for server in tools.servers():
        for tool in tools.list_tools(server):
            print(server, tool.name, "destructive" if tool.hints.destructive else "")
    answer = tools.call("docs", "search", {"query": "fuel"})
    print(answer.text)

Every failure raises a :class:`ari.ToolError` subclass (:class:`ari.ToolDenied`,
:class:`ari.ToolNotFound`, :class:`ari.InvalidArguments`, :class:`ari.ToolUnavailable`,
:class:`ari.ToolTimeout`, :class:`ari.ToolTooLarge`, :class:`ari.ToolServerError`,
:class:`ari.ToolRejected`), never a
trap. A tool that failed in its own terms still answered: its result has ``is_error`` set.
"""

import json
from dataclasses import dataclass
from typing import List, Optional, Union

from componentize_py_types import Err
from wit_world.imports import tools as _wit

from ._errors import from_tool_error


def _call(fn, *args):
    try:
        return fn(*args)
    except Err as e:
        raise from_tool_error(e.value) from None


@dataclass
class ToolHints:
    """What a server says a tool does: hints, not guarantees."""

    read_only: Optional[bool] = None
    destructive: Optional[bool] = None
    idempotent: Optional[bool] = None
    open_world: Optional[bool] = None


@dataclass
class Tool:
    """A tool this Agent may call; ``input_schema`` is the JSON Schema of its arguments, as
    JSON text."""

    name: str
    title: Optional[str]
    description: Optional[str]
    input_schema: str
    hints: ToolHints


@dataclass
class ToolResult:
    """What a call returned: the text blocks joined by newlines, every content block as a JSON
    array, the structured output as JSON text, and whether the tool failed in its own terms."""

    text: str
    content: str
    structured: Optional[str]
    is_error: bool


def servers() -> List[str]:
    """The servers this Agent is granted."""
    return list(_wit.servers())


def list_tools(server: str) -> List[Tool]:
    """The tools of ``server`` this Agent may call."""
    return [
        Tool(
            t.name,
            t.title,
            t.description,
            t.input_schema,
            ToolHints(t.hints.read_only, t.hints.destructive, t.hints.idempotent, t.hints.open_world),
        )
        for t in _call(_wit.list_tools, server)
    ]


def call(server: str, tool: str, arguments: Union[str, dict, None] = None) -> ToolResult:
    """Calls ``tool`` of ``server`` with ``arguments``: a dict, or a JSON object as text
    (``None`` or ``""`` for none)."""
    if arguments is None:
        text = ""
    elif isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, separators=(",", ":"))
    r = _call(_wit.call_tool, server, tool, text)
    return ToolResult(r.text, r.content, r.structured, bool(r.is_error))
