"""The conformance agent in Python: one command per task (conformance/README.md)."""

import ari
from ari import host


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
]


def bound(text: str):
    """A budget bound: a number, or ``-`` for the default share."""
    return None if text == "-" else number(text)


def text(output: bytes) -> str:
    return output.decode("utf-8", "replace")


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
            seen = "err:" + next(name for cls, name in KINDS if isinstance(e, cls))
            if isinstance(e, ari.ChildFailed):  # the table checks how the child ended
                seen += ":" + e.reason
            host.warn(seen)
            return seen


Agent = ari.export(Conformance)
