"""A small MCP server for ari's tests, built with the official Python SDK (`mcp`, MCPServer,
formerly FastMCP), served over streamable HTTP on 127.0.0.1.

It binds its own socket on a free port and prints `listening PORT` once it accepts connections,
so a test never guesses a port or sleeps. Tools:

- echo(text): the text back (read-only);
- add(a, b): the sum, as structured output;
- slow(seconds): answers after `seconds` (a call the host's deadline cuts);
- big(size): `size` bytes of text (an answer over the host's bound);
- delete_everything(confirm): marked destructive; deletes nothing;
- auth_echo(): answers with the Authorization header it was sent (a server that echoes
  credentials, which the host must cut out);
- search(query), fetch(id), close(ticket, duplicate_of): a small document store and ticket
  tracker, the `docs` and `tracker` servers of the declarative examples
  (examples/manifests/declarative/); `close` is a write the server does not mark destructive,
  so only a declaration's `requireApproval` makes it wait.

With ARI_MCP_TOKEN set, every request must carry `Authorization: Bearer <token>` (else 401).

Usage: python server.py [--stateless]
"""

import os
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("ari-test-tools")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Returns the text it is given."""
    return text


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after the given number of seconds."""
    await anyio.sleep(seconds)
    return "done"


@server.tool()
def big(size: int) -> str:
    """Returns `size` bytes of text."""
    return "x" * size


@server.tool(annotations=ToolAnnotations(destructiveHint=True, readOnlyHint=False))
def delete_everything(confirm: bool) -> str:
    """Pretends to delete everything (a destructive tool, for the annotations)."""
    return "deleted nothing" if confirm else "not confirmed"


@server.tool()
def auth_echo(ctx: Context) -> str:
    """Answers with the Authorization header it was sent."""
    headers = ctx.headers or {}
    return f"you sent {headers.get('authorization', 'nothing')}"


# The documents and tickets `search` and `fetch` find (the e2e declarative trials and the
# walk-throughs in docs/declarative.md quote them).
RECORDS = {
    "sandbox": "WebAssembly sandbox. Agents run as WebAssembly components in a sandbox. "
    "The sandbox grants nothing by default: every capability an agent uses is granted by name.",
    "attestations": "Attestations. Every task ends with a signed attestation naming the "
    "component, the config and the output, and every run replays offline.",
    "TICKET-7": "Disk full on the build server (open).",
}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def search(query: str) -> str:
    """Searches the documents and tickets; answers the ids that match, one a line."""
    words = [w for w in query.lower().split() if len(w) > 2]
    found = [key for key, text in RECORDS.items() if any(w in text.lower() for w in words)]
    return "\n".join(found) if found else "no matches"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def fetch(id: str) -> str:  # noqa: A002 (the tool's argument name)
    """Returns the text of a document or ticket by its id."""
    return RECORDS.get(id, f"no record {id}")


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def close(ticket: str, duplicate_of: str) -> str:
    """Closes a ticket as a duplicate of another."""
    return f"closed {ticket} as a duplicate of {duplicate_of}"


class RequireToken:
    """ASGI middleware: 401 without the expected bearer token."""

    def __init__(self, app, token):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != self.expected:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


def main() -> None:
    stateless = "--stateless" in sys.argv[1:]
    app = server.streamable_http_app(stateless_http=stateless, json_response=stateless)
    token = os.environ.get("ARI_MCP_TOKEN")
    if token:
        app = RequireToken(app, token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"listening {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
