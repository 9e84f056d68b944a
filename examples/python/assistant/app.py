"""A model that uses other Agents as its tools (the Python twin of examples/agents/assistant):
each tool the model may call is an Agent this one may delegate to, so every tool call is a child
Task whose fuel and time come out of this task's budget and whose signed attestation this task's
trace names. The model's answers and the children's results are recorded, so ``ari verify``
replays the whole run with neither the model nor the other Agents.

Config (the Agent's ``spec.config``), one setting per line::

    model=small
    tool=wordcount: counts the words of a text
    tool=keywords: lists the main keywords of a text

Input: the user's request. Output: the model's final answer. At most :data:`MAX_TURNS` model
calls; a tool the model names that is not configured is answered as an error, not run.
"""

import json
from typing import List, Optional, Tuple

import ari
from ari import host, model

# Model calls per task: a model that keeps calling tools is stopped here.
MAX_TURNS = 6

# Every tool takes one string: the input of the Agent it runs (JSON text, so the request's bytes
# are the Rust assistant's).
PARAMETERS = (
    '{"type":"object","properties":{"input":{"type":"string",'
    '"description":"the text to hand the tool"}},"required":["input"]}'
)

SYSTEM = (
    "You are an assistant with tools. Call a tool when it helps; "
    "answer the user briefly once you have what you need."
)


def settings(config: str) -> Tuple[Optional[str], List[Tuple[str, str]]]:
    """The configured model (``None``: the first granted) and tools as (Agent name, what it
    does), from the config's ``model=`` and ``tool=NAME: description`` lines; blank lines and
    ``#`` comments are skipped, anything else is :class:`ari.Invalid`."""
    name, tools = None, []
    for line in (raw.strip() for raw in config.splitlines()):
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if eq and key == "model":
            name = value.strip()
        elif eq and key == "tool":
            agent, _, what = value.partition(":")
            tools.append((agent.strip(), what.strip()))
        else:
            raise ari.Invalid(f"config: cannot read {line!r}")
    return name, tools


def tool_input(call: model.ToolCall) -> str:
    """The input a tool call asks for: the ``input`` argument, or the raw arguments when they
    are not the JSON object asked for (small models are sloppy; the Agent still gets
    something)."""
    try:
        value = json.loads(call.arguments)
    except ValueError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return value["input"]
    return call.arguments.strip()


# The configured model and tools, read by `initialize`. Module state, not attributes: the adapter
# componentize-py generates makes a new object of the exported class for each call, so what
# `initialize` kept on `self` is gone by `execute` (the Wasm instance, and this module, live for
# one task).
MODEL: Optional[str] = None
TOOLS: List[Tuple[str, str]] = []


class Assistant(ari.Agent):
    def initialize(self, config: bytes) -> None:
        global MODEL, TOOLS
        try:
            text = config.decode("utf-8")
        except UnicodeDecodeError:
            raise ari.Invalid("config: UTF-8") from None
        MODEL, TOOLS = settings(text)

    def execute(self, task: ari.Task) -> str:
        try:
            question = task.input.decode("utf-8")
        except UnicodeDecodeError:
            raise ari.Invalid("the request must be UTF-8 text") from None
        name = MODEL
        if name is None:
            granted = model.models()
            if not granted:
                raise ari.Denied("no model is granted to this agent")
            name = granted[0]
        request = model.ChatRequest(name, max_tokens=256).system(SYSTEM).user(question)
        for agent, what in TOOLS:
            request.tool(model.Tool(agent, PARAMETERS, what))
        configured = {agent for agent, _ in TOOLS}
        for _ in range(MAX_TURNS):
            answer = request.send()
            if not answer.tool_calls:
                return answer.text or ""
            request.add(answer.message)
            for call in answer.tool_calls:
                if call.name in configured:
                    try:
                        out = host.delegate(call.name, tool_input(call))
                        result = out.decode("utf-8", "replace")
                    except ari.AriError as e:
                        result = f"error: {e}"
                else:
                    # Quoted as JSON, as the Rust assistant quotes it.
                    result = f"error: there is no tool named {json.dumps(call.name)}"
                request.add(model.Message.tool_result(call.id, result))
        raise ari.Failed(f"no answer after {MAX_TURNS} model calls")


Agent = ari.export(Assistant)
