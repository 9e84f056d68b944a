"""The conformance agent in Python: one command per task (conformance/README.md)."""

import ari
from ari import host, model, tools

# The arguments of the conformance tool `lookup`, a JSON Schema (as JSON text, so every
# language sends the same bytes).
LOOKUP_PARAMETERS = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'


def word(s: str):
    head, _, rest = s.partition(" ")
    return head, rest


def number(text: str) -> int:
    if not text.isdigit():
        raise ari.Invalid(f"{text!r} is not a number")
    return int(text)


def unhex(text: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ari.Invalid(f"{text!r} is not hex") from None


FAILURES = {"denied": ari.Denied, "invalid": ari.Invalid, "unsupported": ari.Unsupported}
KINDS = [
    (ari.Denied, "denied"),
    (ari.QuotaExceeded, "quota-exceeded"),
    (ari.Invalid, "invalid"),
    (ari.Unsupported, "unsupported"),
    (ari.Failed, "failed"),
    (ari.Unavailable, "unavailable"),
    (ari.LimitReached, "limit-reached"),
    (ari.BudgetExhausted, "budget-exhausted"),
    (ari.ChildFailed, "child-failed"),
    (ari.Rejected, "rejected"),
]


def bound(text: str):
    """A budget bound: a number, or ``-`` for the default share."""
    return None if text == "-" else number(text)


def text(output: bytes) -> str:
    return output.decode("utf-8", "replace")


def chat_line(answer: model.ChatResponse) -> str:
    """A chat answer as the protocol prints it (the text last: it may hold spaces)."""
    u = answer.usage
    return (
        f"finish:{answer.finish_reason} in:{u.input_tokens} out:{u.output_tokens} "
        f"cached:{u.cached_input_tokens} model:{answer.model} text:{answer.text or ''}"
    )


def vector(v) -> str:
    return ",".join(f"{x:.3f}" for x in v)


def command(line: str) -> str:
    op, rest = word(line)
    if op == "echo":
        return rest
    if op == "log":
        level, message = word(rest)
        host.log(level, message)
        return "logged"
    if op == "storage":
        key, value = word(rest)
        host.storage_set(key, value)
        got = host.storage_get(key)
        host.storage_delete(key)
        after = "none" if host.storage_get(key) is None else "some"
        return f"set:ok get:{got.decode('utf-8', 'replace')} delete:ok after:{after}"
    if op == "storage-fill":
        key, n = word(rest)
        host.storage_set(key, b"x" * number(n))
        return "ok"
    if op == "random":
        return host.random_bytes(number(rest)).hex()
    if op == "hash":
        alg, data = word(rest)
        return host.hash(alg, data).hex()
    if op == "sign":
        return host.sign(rest).hex()
    if op == "sign-verify":
        public, message = word(rest)
        public = unhex(public)
        signature = host.sign(message)
        valid = host.verify(public, message, signature)
        tampered = host.verify(public, message + "!", signature)
        return f"valid:{str(valid).lower()} tampered:{str(tampered).lower()}"
    if op == "verify":
        public, rest = word(rest)
        signature, message = word(rest)
        return str(host.verify(unhex(public), message, unhex(signature))).lower()
    if op == "http":
        method, rest = word(rest)
        url, body = word(rest)
        resp = host.http_request(method, url, body=body)
        return f"status:{resp.status} body:{resp.text}"
    if op == "now":
        first = host.now()
        second = host.now()
        return f"delta:{second - first}"
    if op == "delegate":
        agent, input = word(rest)
        return text(host.delegate(agent, input))
    if op == "delegate-budget":
        fuel, rest = word(rest)
        millis, rest = word(rest)
        agent, input = word(rest)
        return text(host.delegate(agent, input, host.Budget(bound(fuel), bound(millis))))
    if op == "fan":
        # Every child is started before the first is awaited, so they run side by side.
        agent, inputs = word(rest)
        children = [host.start_child(agent, input) for input in inputs.split(" | ")]
        return " | ".join(text(child.wait()) for child in children)
    if op == "message":
        fuel, rest = word(rest)
        agent, input = word(rest)
        host.send_message(agent, input, host.Budget(fuel=bound(fuel)))
        return "sent"
    if op == "await":
        return text(host.Child(number(rest)).wait())
    if op == "models":
        return ",".join(model.models())
    if op == "model-chat":
        name, prompt = word(rest)
        return chat_line(model.ChatRequest(name).user(prompt).send())
    if op == "model-tools":
        # A tool loop of one round: the model calls `lookup`, gets `42`, and answers.
        name, prompt = word(rest)
        request = model.ChatRequest(name, tool_choice="required").user(prompt)
        request.tool(model.Tool("lookup", LOOKUP_PARAMETERS, "looks a word up"))
        first = request.send()
        out = f"finish:{first.finish_reason}"
        for call in first.tool_calls:
            out += f" call:{call.id}:{call.name}:{call.arguments}"
        request.add(first.message)
        for call in first.tool_calls:
            request.add(model.Message.tool_result(call.id, "42"))
        last = request.send()
        return out + f" then:{last.finish_reason} text:{last.text or ''}"
    if op == "model-embed":
        name, inputs = word(rest)
        answer = model.embed(name, inputs.split(" | "))
        vectors = answer.embeddings
        return (
            f"vectors:{len(vectors)} dims:{len(vectors[0]) if vectors else 0} "
            f"first:{vector(vectors[0]) if vectors else ''} "
            f"last:{vector(vectors[-1]) if vectors else ''} "
            f"in:{answer.usage.input_tokens} model:{answer.model}"
        )
    if op == "tools":
        return ",".join(tools.servers())
    if op == "tool-list":
        shown = []
        for t in tools.list_tools(rest):
            flags = (":read-only" if t.hints.read_only else "") + (
                ":destructive" if t.hints.destructive else ""
            )
            shown.append(t.name + flags)
        return ",".join(shown)
    if op == "tool-call":
        server, rest2 = word(rest)
        tool, arguments = word(rest2)
        r = tools.call(server, tool, arguments)
        return f"error:{'true' if r.is_error else 'false'} text:{r.text}"
    raise ari.Unsupported(f"unknown command {op!r}")


class Conformance(ari.Agent):
    def execute(self, task: ari.Task) -> str:
        line = task.text
        strict = line.startswith("must ")
        if strict:
            line = line[len("must "):]
        if line.startswith("fail "):
            kind, message = word(line[len("fail "):])
            raise FAILURES.get(kind, ari.Failed)(message)
        try:
            return command(line)
        except ari.Unsupported:
            raise
        except ari.AriError as e:
            if strict:
                raise
            # Logged too: a task whose host call was denied ends CapabilityDenied even when
            # the agent carries on, and then only the log shows what the agent saw.
            if isinstance(e, (ari.ModelError, ari.ToolError)):  # spelt as the WIT's case
                seen = "err:" + e.kind
            else:
                seen = "err:" + next(name for cls, name in KINDS if isinstance(e, cls))
            # The table checks each SDK keeps a child's reason, a rate limit's wait and a
            # provider's status.
            if isinstance(e, ari.ChildFailed):
                seen += ":" + e.reason
            elif isinstance(e, ari.RateLimited):
                seen += ":" + ("-" if e.retry_after_millis is None else str(e.retry_after_millis))
            elif isinstance(e, ari.ProviderError):
                seen += f":{e.status}"
            host.warn(seen)
            return seen


Agent = ari.export(Conformance)
