"""Drives ari's gateway as an MCP client would, with the official MCP Python SDK (`mcp`, installed
by scripts/mcp-server.sh): each exposed Agent of a namespace is a tool at /mcp/NAMESPACE.

Run by e2e/tests/a2a.rs with MCP_URL, MCP_TOKEN (may create Tasks), MCP_NOBODY_TOKEN (may not)
and MCP_OUTSIDER_TOKEN (may, in another namespace) in the environment. Each check prints a line;
a failed one raises and exits non-zero. The last line is the research call's structured result,
as JSON, for the test to compare with the cluster's Task.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from drivekit import DOCUMENT, check, declare_large_body  # noqa: E402

URL = os.environ["MCP_URL"]
def client(token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0))
    return Client(streamable_http_client(URL, http_client=http))


def leaves(e):
    """The innermost exceptions of a (possibly nested) exception group."""
    if isinstance(e, BaseExceptionGroup):
        return [leaf for inner in e.exceptions for leaf in leaves(inner)]
    return [e]


async def refused(token, want, what):
    try:
        async with client(token) as c:
            await c.list_tools()
    except Exception as e:  # the SDK raises its own error types, in an exception group
        why = " | ".join(f"{type(l).__name__}: {l}" for l in leaves(e))
        print(f"   refused: {why[:300]}")
        check(want in why, f"{what} ({want})")
        return
    raise AssertionError(f"{what}: the listing was answered")


async def main():
    async with client(os.environ["MCP_TOKEN"]) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        check({"research", "waiter"} <= set(tools), f"the exposed Agents are tools ({sorted(tools)})")
        check("wordcount" not in tools, "an Agent not exposed is no tool")
        research = tools["research"]
        check(research.input_schema.get("required") == ["input"], "a tool takes one input")
        check("Research a document: Word counts" in (research.description or ""), f"its skills describe it ({research.description!r})")

        result = await c.call_tool("research", {"input": DOCUMENT})
        check(not result.is_error, f"the research call succeeded ({result.content})")
        text = result.content[0].text
        check(json.loads(text)["wordcount"]["words"] == 20, "the answer is the Task's output")
        s = result.structured_content or {}
        check(s.get("state") == "TASK_STATE_COMPLETED", f"the Task completed ({s})")
        digest = s.get("attestationSha256") or ""
        check(len(digest) == 64, "the answer carries the attestation's digest")

        bad = await c.call_tool("research", {"text": "no input"})
        check(bad.is_error, "arguments without input are refused")
        try:
            await c.call_tool("nobody-here", {"input": "x"})
        except Exception as e:
            print(f"   refused: {type(e).__name__}: {str(e)[:200]}")
            check("nobody-here" in str(e), "a tool that is no exposed Agent is a protocol error")
        else:
            raise AssertionError("a call of a tool that does not exist was answered")

    await refused(None, "a bearer token is required", "no token: refused")
    await refused("not-a-token", "the token was not accepted", "a bad token: refused")
    await refused(os.environ["MCP_NOBODY_TOKEN"], "may not create tasks", "a caller who may not create Tasks: refused")
    await refused(os.environ["MCP_OUTSIDER_TOKEN"], "may not create tasks", "a caller of another namespace: refused")
    # The network caller: a body past the gateway's bound (1 MiB) is refused before rmcp reads
    # a byte of it, with or without a token.
    for token, want in [(os.environ["MCP_TOKEN"], 413), (None, 401)]:
        status = await declare_large_body(URL, token)
        check(status == want, f"a 2 MiB body is refused {want} unread ({status})")
    print(json.dumps(s))


asyncio.run(main())
