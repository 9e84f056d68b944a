"""Language models (capability ``models``): chat with tools, embeddings, and the models this
Agent is granted. The host holds the credentials, clips every call to the task's token budget
and records each answer, so a replay needs no model; the agent names a model by its
ModelConfig name::

    from ari import model

    request = model.ChatRequest("small").system("Answer in one word.").user("Capital of France?")
    request.tool(model.Tool("lookup", {"type": "object", "properties": {"q": {"type": "string"}}}))
    answer = request.send()
    while answer.tool_calls:                      # a tool loop: hand results back, ask again
        request.add(answer.message)
        for call in answer.tool_calls:
            request.add(model.Message.tool_result(call.id, "Paris"))
        answer = request.send()
    print(answer.text)

Every failure raises a :class:`ari.ModelError` subclass (:class:`ari.ModelDenied`,
:class:`ari.TokenBudgetExhausted`, :class:`ari.RateLimited`, :class:`ari.ModelUnavailable`,
:class:`ari.InvalidRequest`, :class:`ari.ProviderError`), never a trap.
"""

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Union

from componentize_py_types import Err
from wit_world.imports import model as _wit

from ._errors import Invalid, from_model_error

ROLES = ("system", "user", "assistant", "tool")
_ROLE_TO_WIT = {
    "system": _wit.Role.SYSTEM,
    "user": _wit.Role.USER,
    "assistant": _wit.Role.ASSISTANT,
    "tool": _wit.Role.TOOL,
}
_ROLE_OF_WIT = {v: k for k, v in _ROLE_TO_WIT.items()}
# Finish reasons as the WIT spells them.
_FINISH = {
    _wit.FinishReason.STOP: "stop",
    _wit.FinishReason.LENGTH: "length",
    _wit.FinishReason.TOOL_CALLS: "tool-calls",
    _wit.FinishReason.CONTENT_FILTER: "content-filter",
    _wit.FinishReason.OTHER: "other",
}


def _call(fn, *args):
    try:
        return fn(*args)
    except Err as e:
        raise from_model_error(e.value) from None


def _json_text(value: Union[str, dict, list]) -> str:
    """JSON text as the contract carries it: a string as it is, anything else serialised."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _u(value: Optional[int], bits: int, name: str) -> Optional[int]:
    # Checked here: out of range, the binding would raise an error of its own instead.
    if value is not None and not 0 <= value < 1 << bits:
        raise Invalid(f"{name} {value} is not a u{bits}")
    return value


@dataclass
class ToolCall:
    """A tool the model asked to run; ``arguments`` is JSON text as the model wrote it (it may
    be invalid JSON: parse it with care)."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> Any:
        """The arguments as Python values (:class:`ari.Invalid` when they are not JSON)."""
        try:
            return json.loads(self.arguments)
        except ValueError as e:
            raise Invalid(f"tool call {self.id} has arguments that are not JSON: {e}") from None


@dataclass
class Message:
    """One message: ``role`` is ``system``, ``user``, ``assistant`` or ``tool``."""

    role: str
    content: Optional[str] = None
    tool_calls: List[ToolCall] = field(default_factory=list)
    tool_call_id: Optional[str] = None

    @staticmethod
    def system(content: str) -> "Message":
        return Message("system", content)

    @staticmethod
    def user(content: str) -> "Message":
        return Message("user", content)

    @staticmethod
    def assistant(content: str) -> "Message":
        return Message("assistant", content)

    @staticmethod
    def tool_result(call_id: str, content: str) -> "Message":
        """The result of the tool call ``call_id`` (a :attr:`ToolCall.id`)."""
        return Message("tool", content, tool_call_id=call_id)

    def _to_wit(self) -> "_wit.Message":
        try:
            role = _ROLE_TO_WIT[self.role]
        except KeyError:
            raise Invalid(f"no message role {self.role!r} (one of {', '.join(ROLES)})") from None
        calls = [_wit.ToolCall(c.id, c.name, c.arguments) for c in self.tool_calls]
        return _wit.Message(role, self.content, calls, self.tool_call_id)

    @staticmethod
    def _of_wit(m: "_wit.Message") -> "Message":
        calls = [ToolCall(c.id, c.name, c.arguments) for c in m.tool_calls]
        return Message(_ROLE_OF_WIT[m.role], m.content, calls, m.tool_call_id)


@dataclass
class Tool:
    """A tool the model may call; ``parameters`` is the arguments' JSON Schema, as JSON text or
    as a dict."""

    name: str
    parameters: Union[str, dict] = field(default_factory=lambda: {"type": "object"})
    description: Optional[str] = None


@dataclass(frozen=True)
class Function:
    """``tool_choice``: this tool, by name."""

    name: str


@dataclass(frozen=True)
class JsonSchema:
    """``response_format``: an answer matching ``schema`` (JSON text or a dict)."""

    name: str
    schema: Union[str, dict]
    strict: bool = True


@dataclass
class ChatRequest:
    """One chat completion's request. The builder methods return the request, so they chain.

    ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"`` or a :class:`Function`;
    ``response_format`` is ``"text"``, ``"json_object"`` or a :class:`JsonSchema`."""

    model: str
    messages: List[Message] = field(default_factory=list)
    tools: List[Tool] = field(default_factory=list)
    tool_choice: Union[None, str, Function] = None
    response_format: Union[None, str, JsonSchema] = None
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    seed: Optional[int] = None
    stop: List[str] = field(default_factory=list)

    def add(self, message: Message) -> "ChatRequest":
        self.messages.append(message)
        return self

    def system(self, content: str) -> "ChatRequest":
        return self.add(Message.system(content))

    def user(self, content: str) -> "ChatRequest":
        return self.add(Message.user(content))

    def assistant(self, content: str) -> "ChatRequest":
        return self.add(Message.assistant(content))

    def tool(self, tool: Tool) -> "ChatRequest":
        self.tools.append(tool)
        return self

    def send(self) -> "ChatResponse":
        return chat(self)

    def _to_wit(self) -> "_wit.ChatRequest":
        return _wit.ChatRequest(
            self.model,
            [m._to_wit() for m in self.messages],
            [_wit.ToolDefinition(t.name, t.description, _json_text(t.parameters)) for t in self.tools],
            _tool_choice(self.tool_choice),
            _response_format(self.response_format),
            _u(self.max_tokens, 32, "max_tokens"),
            None if self.temperature is None else float(self.temperature),
            _u(self.seed, 64, "seed"),
            list(self.stop),
        )


def _tool_choice(choice: Union[None, str, Function]) -> "Optional[_wit.ToolChoice]":
    if choice is None:
        return None
    if isinstance(choice, Function):
        return _wit.ToolChoice_Function(choice.name)
    cases = {
        "auto": _wit.ToolChoice_Auto,
        "none": _wit.ToolChoice_None_,
        "required": _wit.ToolChoice_Required,
    }
    if choice not in cases:
        raise Invalid(f"no tool choice {choice!r} (auto, none, required, or a Function)")
    return cases[choice]()


def _response_format(fmt: Union[None, str, JsonSchema]) -> "Optional[_wit.ResponseFormat]":
    if fmt is None:
        return None
    if isinstance(fmt, JsonSchema):
        return _wit.ResponseFormat_JsonSchema(
            _wit.JsonSchemaFormat(fmt.name, _json_text(fmt.schema), fmt.strict)
        )
    cases = {"text": _wit.ResponseFormat_Text, "json_object": _wit.ResponseFormat_JsonObject}
    if fmt not in cases:
        raise Invalid(f"no response format {fmt!r} (text, json_object, or a JsonSchema)")
    return cases[fmt]()


@dataclass
class Usage:
    """Tokens a call used, as the provider reported them: what the task's budget was charged."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0


@dataclass
class ChatResponse:
    """The answer: ``message`` (add it to the request to go on), ``finish_reason`` as the WIT
    spells it (``stop``, ``length``, ``tool-calls``, ``content-filter``, ``other``), ``usage``
    and the ``model`` id the provider says answered."""

    message: Message
    finish_reason: str
    usage: Usage
    model: str

    @property
    def text(self) -> Optional[str]:
        return self.message.content

    @property
    def tool_calls(self) -> List[ToolCall]:
        return self.message.tool_calls


@dataclass
class EmbeddingResponse:
    """One vector per input, in input order."""

    embeddings: List[List[float]]
    usage: Usage
    model: str


def _usage(u: "_wit.Usage") -> Usage:
    return Usage(u.input_tokens, u.output_tokens, u.cached_input_tokens)


def chat(request: ChatRequest) -> ChatResponse:
    """One chat completion: the whole answer, or a :class:`ari.ModelError`."""
    r = _call(_wit.chat, request._to_wit())
    return ChatResponse(
        Message._of_wit(r.message), _FINISH.get(r.finish_reason, "other"), _usage(r.usage), r.model
    )


def embed(model: str, inputs: Iterable[str], dimensions: Optional[int] = None) -> EmbeddingResponse:
    """Vectors for ``inputs`` from ``model``."""
    request = _wit.EmbeddingRequest(model, list(inputs), _u(dimensions, 32, "dimensions"))
    r = _call(_wit.embed, request)
    return EmbeddingResponse([list(v) for v in r.embeddings], _usage(r.usage), r.model)


def models() -> List[str]:
    """The names of the models this Agent is granted (empty without a ``models`` grant)."""
    return list(_wit.models())
