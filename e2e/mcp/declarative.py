"""Calls the declarative examples (examples/manifests/declarative/) as MCP tools through ari's
gateway, with the official MCP Python SDK (`mcp`, installed by scripts/mcp-server.sh), as an MCP
client would: both exposed Agents are tools at /mcp/NAMESPACE, and each call runs a Task.

Run by e2e/tests/declarative.rs with MCP_URL and MCP_TOKEN (may create Tasks) in the
environment. Each check prints a line; a failed one raises and exits non-zero. The last line is
the triage call's structured result, as JSON, for the test to find its Task.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from drivekit import check  # noqa: E402


def client(token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(180.0))
    return Client(streamable_http_client(os.environ["MCP_URL"], http_client=http))


async def main():
    async with client(os.environ["MCP_TOKEN"]) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        check({"research-assistant", "triage"} <= set(tools), f"both declarative Agents are tools ({sorted(tools)})")
        check("Triage a ticket" in (tools["triage"].description or ""),
              f"the triage tool is described by its skill ({tools['triage'].description!r})")

        result = await c.call_tool("research-assistant", {"input": "What does the sandbox grant by default?"})
        check(not result.is_error, f"the research call succeeded ({result.content})")
        text = result.content[0].text
        check("Source: sandbox" in text, f"the research answer cites its source ({text[:200]})")

        # A ticket about data loss goes to the escalation subagent, which answers from the real
        # model: its words do not matter, only that they are the answer.
        result = await c.call_tool("triage", {"input": "TICKET-12: data loss on the shared drive"})
        check(not result.is_error, f"the triage call succeeded ({result.content})")
        check(result.content and result.content[0].text, "the escalation's answer is the triage answer")
        print(json.dumps(result.structured_content))


if __name__ == "__main__":
    asyncio.run(main())
