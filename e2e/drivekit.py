"""What the e2e suite's Python drivers share (e2e/a2a/drive.py with the A2A SDK, e2e/mcp/drive.py
with the MCP SDK): the research document, the check that prints each line, and the raw request
that declares a large body. Standard library only: each driver runs in its own SDK's virtualenv.
"""

import asyncio
import urllib.parse

DOCUMENT = (
    "Agents delegate within a budget. The answer comes back to the parent, "
    "and the host controls every message between agents."
)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}", flush=True)


async def declare_large_body(url, token, declared=2 << 20):
    """The status the gateway answers a POST to `url` that declares `declared` bytes of body.

    A raw socket, not an HTTP client: the gateway answers from the headers and closes without
    reading the body, so a client still writing 2 MiB may get a reset before it reads the answer
    (the race that failed CI twice). Only 64 KiB is written, which the socket buffers hold.
    """
    target = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(target.hostname, target.port)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (f"POST {target.path} HTTP/1.1\r\nHost: {target.hostname}:{target.port}\r\n{auth}"
            f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Length: {declared}\r\n\r\n")
    writer.write(head.encode() + b"{" + b" " * (64 << 10))
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 60)
    writer.close()
    return int(status_line.split()[1]) if status_line.startswith(b"HTTP/1.1 ") else status_line
