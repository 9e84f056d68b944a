"""Drives ari's A2A gateway with the official A2A Python SDK (a2a-sdk), as another agent would.

Run by e2e/tests/a2a.rs: `python drive.py SCENARIO` with the gateway's base URL, namespace and
tokens in the environment (A2A_BASE, A2A_NS, A2A_TOKEN, ...). Each scenario asserts what a caller
must see and prints one line per check; a failed check raises and exits non-zero.
"""

import asyncio
import base64
import hashlib
import json
import os
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.client.errors import A2AClientError
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf import json_format, struct_pb2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from drivekit import DOCUMENT, check, declare_large_body  # noqa: E402

BASE = os.environ.get("A2A_BASE", "")
NS = os.environ.get("A2A_NS", "")
def agent_url(agent):
    return f"{BASE}/a2a/{NS}/{agent}"


def http(token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # Cards name their endpoint by a relative URL (no gateway.publicUrl here): resolved against
    # the gateway's base URL.
    return httpx.AsyncClient(headers=headers, timeout=120, base_url=BASE)


async def client(agent, token, streaming):
    factory = ClientFactory(ClientConfig(httpx_client=http(token), streaming=streaming))
    return await factory.create_from_url(agent_url(agent))


def message(text, context_id=None):
    m = pb.Message(message_id=str(uuid.uuid4()), role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    if context_id:
        m.context_id = context_id
    return m


async def collect(c, request):
    return [ev async for ev in c.send_message(request)]


def event_meta(ev):
    """The `ari.dev/event` a status update carries, as a dict (or None)."""
    if not ev.HasField("status_update"):
        return None
    meta = json_format.MessageToDict(ev.status_update.metadata)
    return meta.get("ari.dev/event")


async def wait_state(c, task_id, states, tries=600):
    for _ in range(tries):
        t = await c.get_task(pb.GetTaskRequest(id=task_id))
        if t.status.state in states:
            return t
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {states}")


async def main_flow():
    token = os.environ["A2A_TOKEN"]
    blocking = await client("research", token, streaming=False)
    card = blocking._card
    check(card.name == "research", "the card names the agent")
    check(card.capabilities.streaming, "the card announces streaming")
    check(
        any(i.protocol_binding == "JSONRPC" and i.url.endswith(f"/a2a/{NS}/research") for i in card.supported_interfaces),
        "the card's JSON-RPC interface is the agent's URL",
    )
    check([s.id for s in card.skills] == ["research"], "the card lists the agent's skill")

    # A blocking SendMessage: the task comes back ended, with its output and attestation.
    context = str(uuid.uuid4())
    events = await collect(blocking, pb.SendMessageRequest(message=message(DOCUMENT, context)))
    task = events[-1].task
    check(task.status.state == pb.TASK_STATE_COMPLETED, f"SendMessage completes ({pb.TaskState.Name(task.status.state)})")
    out = json.loads(task.artifacts[0].parts[0].text)
    check(out["wordcount"]["words"] == 20, f"the output artifact is the merged research ({out})")
    meta = json_format.MessageToDict(task.metadata)
    envelope = meta.get("ari.dev/attestation", {})
    check(envelope.get("payloadType") == "application/vnd.in-toto+json", "the attestation envelope travels as metadata")
    canonical = json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode()
    check(
        meta.get("ari.dev/attestationSha256") == hashlib.sha256(canonical).hexdigest(),
        "the metadata names the envelope's digest",
    )
    check(meta.get("ari.dev/resourcesUsed", {}).get("fuel", 0) > 0, "resources used travel as metadata")
    first_id = task.id

    # A streaming SendMessage: status, log and delegation events, the artifact, the end.
    streaming = await client("research", token, streaming=True)
    events = await collect(streaming, pb.SendMessageRequest(message=message(DOCUMENT)))
    check(events[0].HasField("task"), "a stream starts with the task")
    stream_id = events[0].task.id
    kinds = [e.get("type") for e in map(event_meta, events) if e]
    states = [pb.TaskState.Name(e.status_update.status.state) for e in events if e.HasField("status_update")]
    check("TASK_STATE_WORKING" in states, f"the stream shows the task working ({states})")
    logs = [line for e in map(event_meta, events) if e and e.get("type") == "log" for line in e["lines"]]
    check(any("researching a document" in l for l in logs), f"guest log lines stream ({logs})")
    delegations = [e for e in map(event_meta, events) if e and e.get("type") == "delegation"]
    started = {d["agent"] for d in delegations if d["state"] == "TASK_STATE_SUBMITTED"}
    ended = {d["agent"] for d in delegations if d["state"] == "TASK_STATE_COMPLETED"}
    check(started == ended == {"wordcount", "keywords", "summarize"}, f"each child's start and end stream ({delegations})")
    check(any(e.HasField("artifact_update") for e in events), "the output streams as an artifact")
    last = events[-1].status_update
    check(last.status.state == pb.TASK_STATE_COMPLETED, "the stream ends completed")
    check("ari.dev/attestation" in json_format.MessageToDict(last.metadata), "the final update carries the attestation")
    print(f"event kinds: {kinds}")

    # GetTask and ListTasks.
    got = await blocking.get_task(pb.GetTaskRequest(id=first_id))
    check(got.status.state == pb.TASK_STATE_COMPLETED and got.context_id == context, "GetTask returns the task in its context")
    check(len(got.history) == 1 and got.history[0].parts[0].text == DOCUMENT, "the task's history is the message")
    listed = await blocking.list_tasks(pb.ListTasksRequest())
    ids = {t.id for t in listed.tasks}
    check({first_id, stream_id} <= ids, f"ListTasks lists both tasks ({ids})")
    in_context = await blocking.list_tasks(pb.ListTasksRequest(context_id=context))
    check([t.id for t in in_context.tasks] == [first_id], "ListTasks filters by context")
    try:
        await blocking.get_task(pb.GetTaskRequest(id="no-such-task"))
        check(False, "an unknown task is an error")
    except TaskNotFoundError:
        check(True, "an unknown task is TaskNotFoundError")

    # A pre-1.0 client (the SDK's A2A 0.3 transport: message/send, message/stream, tasks/get).
    legacy = CompatJsonRpcTransport(http(token), None, agent_url("research"))
    old = await legacy.send_message(pb.SendMessageRequest(
        message=message(DOCUMENT), configuration=pb.SendMessageConfiguration()))
    check(old.task.status.state == pb.TASK_STATE_COMPLETED
          and "wordcount" in old.task.artifacts[0].parts[0].text,
          f"a 0.3 client's message/send completes with its output ({pb.TaskState.Name(old.task.status.state)})")
    again = await legacy.get_task(pb.GetTaskRequest(id=old.task.id))
    check(again.status.state == pb.TASK_STATE_COMPLETED, "a 0.3 client's tasks/get reads it")
    streamed = [e async for e in legacy.send_message_streaming(pb.SendMessageRequest(message=message(DOCUMENT)))]
    check(streamed[0].HasField("task") and streamed[-1].status_update.status.state == pb.TASK_STATE_COMPLETED,
          f"a 0.3 client's message/stream runs to completed ({len(streamed)} events)")

    # Cancel a running task; a second cancel is refused.
    waiter = await client("waiter", token, streaming=False)
    sent = await collect(waiter, pb.SendMessageRequest(
        message=message("spin"), configuration=pb.SendMessageConfiguration(return_immediately=True)))
    wid = sent[-1].task.id
    check(sent[-1].task.status.state == pb.TASK_STATE_SUBMITTED, "returnImmediately answers at once, submitted")
    await wait_state(waiter, wid, {pb.TASK_STATE_WORKING})
    canceled = await waiter.cancel_task(pb.CancelTaskRequest(id=wid))
    check(canceled.status.state == pb.TASK_STATE_CANCELED, f"CancelTask cancels ({pb.TaskState.Name(canceled.status.state)})")
    try:
        await waiter.cancel_task(pb.CancelTaskRequest(id=wid))
        check(False, "cancelling an ended task is an error")
    except TaskNotCancelableError:
        check(True, "cancelling an ended task is TaskNotCancelableError")

    # SubscribeToTask follows a running task to its end (cancelled from elsewhere).
    sent = await collect(waiter, pb.SendMessageRequest(
        message=message("spin"), configuration=pb.SendMessageConfiguration(return_immediately=True)))
    sid = sent[-1].task.id
    await wait_state(waiter, sid, {pb.TASK_STATE_WORKING})
    sub = await client("waiter", token, streaming=True)
    seen = []

    async def follow():
        async for ev in sub.subscribe(pb.SubscribeToTaskRequest(id=sid)):
            seen.append(ev)

    follower = asyncio.create_task(follow())
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.05)
    check(seen and seen[0].HasField("task"), "SubscribeToTask starts with the task")
    await waiter.cancel_task(pb.CancelTaskRequest(id=sid))
    await asyncio.wait_for(follower, 60)
    check(seen[-1].status_update.status.state == pb.TASK_STATE_CANCELED, "the subscription ends canceled")


async def auth_flow():
    url = agent_url("research")
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}
    async with http() as h:
        r = await h.post(url, json=body)
        check(r.status_code == 401, f"no token: 401 ({r.status_code})")
    async with http("not-a-token") as h:
        r = await h.post(url, json=body)
        check(r.status_code == 401, f"a bad token: 401 ({r.status_code})")
    # The SDK as an under-privileged caller: the HTTP status surfaces as its error.
    reader = await client("research", os.environ["A2A_READER_TOKEN"], streaming=False)
    try:
        await collect(reader, pb.SendMessageRequest(message=message("x")))
        check(False, "a caller without create on tasks is refused")
    except A2AClientError as e:
        check("403" in str(e), f"a caller without create on tasks: 403 ({e})")
    try:
        await reader.get_task(pb.GetTaskRequest(id="no-such-task"))
        check(False, "an unknown task is an error")
    except TaskNotFoundError:
        check(True, "the same caller may get tasks (TaskNotFound for an unknown one)")
    nobody = os.environ["A2A_NOBODY_TOKEN"]
    async with http(nobody) as h:
        r = await h.post(url, json=body)
        check(r.status_code == 403, f"a caller with no RBAC: 403 ({r.status_code})")
        r = await h.get(f"{url}/.well-known/agent-card.json")
        check(r.status_code == 403, f"... nor may it read a card that is not public ({r.status_code})")
    # A caller with every right in its own namespace has none here.
    async with http(os.environ["A2A_OUTSIDER_TOKEN"]) as h:
        r = await h.post(url, json=body)
        check(r.status_code == 403, f"another namespace's caller may not send here ({r.status_code})")
        r = await h.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
        check(r.status_code == 403, f"... nor list this namespace's tasks ({r.status_code})")
        r = await h.get(f"{url}/tasks/anything/events")
        check(r.status_code == 403, f"... nor follow its events ({r.status_code})")
        r = await h.get(f"{url}/.well-known/agent-card.json")
        check(r.status_code == 403, f"... nor read its card ({r.status_code})")
    async with http(os.environ["A2A_TOKEN"]) as h:
        r = await h.post(url, content=b"{not json")
        check(r.status_code == 200 and r.json()["error"]["code"] == -32700, "a broken body: JSON-RPC parse error")
        r = await h.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tasks/pushNotificationConfig/set", "params": {}})
        check(r.json()["error"]["code"] == -32003, "push notifications: PushNotificationNotSupported")
        r = await h.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": body["params"]})
        result = r.json().get("result", {})
        check(result.get("kind") == "task" and result.get("status", {}).get("state") == "completed",
              f"the pre-1.0 message/send is answered in the 0.3 shape ({result.get('kind')}, {result.get('status')})")


async def card_flow():
    async with http() as h:
        r = await h.get(f"{agent_url('public')}/.well-known/agent-card.json")
        check(r.status_code == 200, f"a public card needs no token ({r.status_code})")
        card = parse_agent_card(r.json())
        check(card.name == "public" and card.supported_interfaces[0].protocol_version == "1.0", "it parses as an A2A v1.0 card")
        verify_signed_card(card, os.environ["A2A_CARD_KEY"])
        r = await h.get(f"{agent_url('public')}/.well-known/agent.json")
        check(r.status_code == 200, "the pre-1.0 card path is served too")
        r = await h.get(f"{agent_url('research')}/.well-known/agent-card.json")
        check(r.status_code == 401, f"a card that is not public needs a token ({r.status_code})")
    async with http(os.environ["A2A_TOKEN"]) as h:
        r = await h.get(f"{agent_url('hidden')}/.well-known/agent-card.json")
        check(r.status_code == 404, f"an Agent that is not exposed has no card ({r.status_code})")
        r = await h.post(agent_url("hidden"), json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
        check(r.status_code == 404, f"... and no JSON-RPC endpoint ({r.status_code})")
    # A capability refusal is TASK_STATE_REJECTED, its reason and message riding along.
    fetcher = await client("fetcher", os.environ["A2A_TOKEN"], streaming=False)
    events = await collect(fetcher, pb.SendMessageRequest(message=message("https://example.com/")))
    task = events[-1].task
    meta = json_format.MessageToDict(task.metadata)
    check(task.status.state == pb.TASK_STATE_REJECTED and meta.get("ari.dev/reason") == "CapabilityDenied",
          f"a capability refusal is rejected ({pb.TaskState.Name(task.status.state)}, {meta.get('ari.dev/reason')})")
    check(task.status.message.parts and "network" in task.status.message.parts[0].text,
          f"the refusal says why ({task.status.message.parts[0].text if task.status.message.parts else ''})")


def verify_signed_card(card, public_key_hex):
    """The card verifies with the SDK's own verifier and the Agent's published key (its
    status.attestationPublicKey); the same card with one field changed does not."""
    from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    raw = bytes.fromhex(public_key_hex)
    kid = hashlib.sha256(raw).hexdigest()
    key = Ed25519PublicKey.from_public_bytes(raw)
    header = json.loads(base64.urlsafe_b64decode(card.signatures[0].protected + "=="))
    check(header == {"alg": "EdDSA", "typ": "JOSE", "kid": kid}, f"the card is signed with EdDSA by the attestation key ({header})")
    # The key comes from the Agent's status, never from the card: kid only has to match.
    verifier = create_signature_verifier(lambda k, _jku: key if k == kid else None, ["EdDSA"])
    verifier(card)
    check(True, "the a2a-sdk verifies the card's signature with the Agent's public key")
    tampered = pb.AgentCard()
    tampered.CopyFrom(card)
    tampered.description = "Echoes its input, and more"
    try:
        verifier(tampered)
        check(False, "a changed card must not verify")
    except InvalidSignaturesError:
        check(True, "the same card with its description changed does not verify")


async def bounds_flow():
    token, streamer = os.environ["A2A_TOKEN"], os.environ["A2A_STREAM_TOKEN"]
    url = agent_url("waiter")
    status = await declare_large_body(url, token)
    check(status == 413, f"a body past the limit: 413 ({status})")
    async with http(token) as h:
        # Sent at once, not one after another: on a slow machine sixty requests in a row can
        # take longer than the bucket needs to refill, and then none is refused.
        async def get(i):
            r = await h.post(url, json={"jsonrpc": "2.0", "id": i, "method": "GetTask", "params": {"id": "x"}})
            return r.status_code

        codes = await asyncio.gather(*(get(i) for i in range(200)))
        seen = {c: codes.count(c) for c in set(codes)}
        check(429 in codes and 200 in codes, f"a caller past its rate: 429 ({seen})")
    task_id = os.environ["A2A_WAIT_TASK"]
    async with http(streamer) as h:
        events = f"{url}/tasks/{task_id}/events"
        async with h.stream("GET", events) as first:
            check(first.status_code == 200, f"one stream opens ({first.status_code})")
            lines = first.aiter_lines()
            head = [await lines.__anext__() for _ in range(2)]
            check(head[0] == "event: status", f"the plain stream names its events ({head})")
            r = await h.get(events)
            check(r.status_code == 429, f"a second stream past the caller's limit: 429 ({r.status_code})")
        # The first stream is closed: its place is free again.
        for _ in range(50):
            async with h.stream("GET", events) as again:
                if again.status_code == 200:
                    break
            await asyncio.sleep(0.1)
        check(again.status_code == 200, f"a closed stream frees its place ({again.status_code})")


def decision(task_id, data):
    """A follow-up message on `task_id` carrying a kagent hitl/v1-shaped decision."""
    value = json_format.ParseDict(data, struct_pb2.Value())
    return pb.Message(message_id=str(uuid.uuid4()), role=pb.ROLE_USER, task_id=task_id,
                      parts=[pb.Part(data=value)])


async def approve_flow():
    """A destructive tool call waits (input-required); a caller without the right to update
    Tasks cannot decide it; another caller approves one call and rejects another, each
    answered on the same task, which then runs on to its end."""
    caller, approver = os.environ["A2A_TOKEN"], os.environ["A2A_APPROVER_TOKEN"]
    ask = "call demo delete_everything {\"confirm\":true}"
    mine = await client("toolbox", caller, streaming=False)
    events = await collect(mine, pb.SendMessageRequest(message=message(ask)))
    task = events[-1].task
    check(task.status.state == pb.TASK_STATE_INPUT_REQUIRED,
          f"the call waits: input-required ({pb.TaskState.Name(task.status.state)})")
    pending = json_format.MessageToDict(task.metadata).get("ari.dev/pendingApproval", {})
    check(pending.get("tool") == "delete_everything" and pending.get("call"), f"the task names the call ({pending})")
    try:
        await collect(mine, pb.SendMessageRequest(message=decision(task.id, {"decision_type": "approve"})))
        check(False, "a caller who may not update Tasks decided a call")
    except Exception as e:  # noqa: BLE001 (the SDK raises per JSON-RPC code)
        check("403" in str(e), f"a caller who may not update Tasks cannot decide: 403 ({e})")

    theirs = await client("toolbox", approver, streaming=False)
    try:
        await collect(theirs, pb.SendMessageRequest(message=decision(task.id, {"decision_type": "approve", "call": "0" * 16})))
        check(False, "a decision about another call was taken")
    except Exception as e:  # noqa: BLE001 (the SDK raises per JSON-RPC code)
        check("waits on call" in str(e), f"a decision naming another call is refused ({e})")
    done = await collect(theirs, pb.SendMessageRequest(message=decision(task.id, {"decision_type": "approve"})))
    ended = done[-1].task
    check(ended.status.state == pb.TASK_STATE_COMPLETED,
          f"approved over A2A, the task runs on to completed ({pb.TaskState.Name(ended.status.state)})")
    text = ended.artifacts[0].parts[0].text if ended.artifacts else ""
    check(text == "deleted nothing", f"the approved call's result is the output ({text[:120]})")
    try:
        await collect(theirs, pb.SendMessageRequest(message=decision(task.id, {"decision_type": "deny"})))
        check(False, "an ended task took a second decision")
    except Exception as e:  # noqa: BLE001 (the SDK raises per JSON-RPC code)
        check("waits for no decision" in str(e), f"a task that waits on nothing takes no further message ({e})")

    events = await collect(mine, pb.SendMessageRequest(message=message(ask)))
    second = events[-1].task
    check(second.status.state == pb.TASK_STATE_INPUT_REQUIRED, "a second call waits")
    done = await collect(theirs, pb.SendMessageRequest(message=decision(
        second.id, {"decision_type": "reject", "rejection_reason": "not over A2A"})))
    ended = done[-1].task
    text = ended.artifacts[0].parts[0].text if ended.artifacts else ""
    check(text.startswith("error rejected:") and text.endswith("not over A2A"),
          f"rejected over A2A, the guest gets the reason ({text[:120]})")


async def approve_delegation_flow():
    """A delegation to an Agent the grant marks waits (input-required), naming the call, its
    kind and the Agent; the caller, who may update Tasks, approves it on the same task, which
    then completes with the child's answer. A second task rejected with a reason ends failed:
    the guest gave up on the rejection, which says who rejected the call and why."""
    token = os.environ["A2A_TOKEN"]
    mine = await client("fanout", token, streaming=False)
    events = await collect(mine, pb.SendMessageRequest(message=message("alpha beta gamma")))
    task = events[-1].task
    check(task.status.state == pb.TASK_STATE_INPUT_REQUIRED,
          f"the delegation waits: input-required ({pb.TaskState.Name(task.status.state)})")
    pending = json_format.MessageToDict(task.metadata).get("ari.dev/pendingApproval", {})
    check(pending.get("kind") == "Delegation" and pending.get("agent") == "wordcount"
          and pending.get("arguments") == "alpha beta gamma" and pending.get("call"),
          f"the task names the waiting delegation ({pending})")
    done = await collect(mine, pb.SendMessageRequest(message=decision(
        task.id, {"decision_type": "approve", "call": pending["call"]})))
    ended = done[-1].task
    check(ended.id == task.id, f"the decision is answered on the same task ({ended.id})")
    check(ended.status.state == pb.TASK_STATE_COMPLETED,
          f"approved over A2A, the task completes ({pb.TaskState.Name(ended.status.state)})")
    text = ended.artifacts[0].parts[0].text if ended.artifacts else ""
    check(text == '{"parts":1,"words":3}', f"the child's answer is in the output ({text[:120]})")

    events = await collect(mine, pb.SendMessageRequest(message=message("one two")))
    second = events[-1].task
    check(second.status.state == pb.TASK_STATE_INPUT_REQUIRED, "a second delegation waits")
    done = await collect(mine, pb.SendMessageRequest(message=decision(
        second.id, {"decision_type": "reject", "rejection_reason": "not over A2A"})))
    ended = done[-1].task
    said = ended.status.message.parts[0].text if ended.status.message.parts else ""
    check(ended.status.state == pb.TASK_STATE_FAILED and "rejected: " in said and "not over A2A" in said,
          f"rejected over A2A, the guest gave up saying who rejected it and why "
          f"({pb.TaskState.Name(ended.status.state)}: {said[:200]})")
    print(json.dumps({"approved": task.id, "rejected": second.id}))


def reply(task, text):
    """A follow-up on `task`: the same taskId and contextId, as A2A asks of a reply."""
    m = message(text, task.context_id)
    m.task_id = task.id
    return m


def question(task):
    msg = task.status.message
    return msg.parts[0].text if msg.parts else ""


async def conversation_flow():
    """A conversation with `intake` (examples/agents/intake): each turn ends input-required
    with a question, a reply on the same task is the next turn, the last ends completed with
    every answer; another caller cannot join it."""
    token, other = os.environ["A2A_TOKEN"], os.environ["A2A_OTHER_TOKEN"]
    mine = await client("intake", token, streaming=False)
    events = await collect(mine, pb.SendMessageRequest(message=message("a new laptop")))
    first = events[-1].task
    check(first.status.state == pb.TASK_STATE_INPUT_REQUIRED,
          f"the first turn asks for input ({pb.TaskState.Name(first.status.state)})")
    check(question(first) == "What is your name?", f"the question is the status message ({question(first)!r})")

    theirs = await client("intake", other, streaming=False)
    try:
        await collect(theirs, pb.SendMessageRequest(message=reply(first, "Mallory")))
        check(False, "another caller joined the conversation")
    except TaskNotFoundError:
        check(True, "another caller's reply: TaskNotFoundError, as for a task that does not exist")

    events = await collect(mine, pb.SendMessageRequest(message=reply(first, "Ada")))
    second = events[-1].task
    check(second.id == first.id and second.context_id == first.context_id,
          f"the reply continues the same task ({second.id}, {second.context_id})")
    check(second.status.state == pb.TASK_STATE_INPUT_REQUIRED and question(second) == "When do you need it?",
          f"the second turn asks the next question ({question(second)!r})")

    streaming = await client("intake", token, streaming=True)
    events = await collect(streaming, pb.SendMessageRequest(message=reply(second, "Friday")))
    check(all((e.task.id if e.HasField("task") else e.status_update.task_id if e.HasField("status_update")
               else e.artifact_update.task_id) == first.id for e in events),
          "a streamed reply streams under the conversation's task id")
    last = events[-1].status_update
    check(last.status.state == pb.TASK_STATE_COMPLETED, f"the last turn completes ({pb.TaskState.Name(last.status.state)})")

    done = await mine.get_task(pb.GetTaskRequest(id=first.id))
    out = json.loads(done.artifacts[0].parts[0].text)
    check(out == {"request": "a new laptop", "answers": {"What is your name?": "Ada", "When do you need it?": "Friday"}},
          f"the answer holds every turn's input ({out})")
    said = [(pb.Role.Name(m.role), m.parts[0].text) for m in done.history]
    check(said == [("ROLE_USER", "a new laptop"), ("ROLE_AGENT", "What is your name?"), ("ROLE_USER", "Ada"),
                   ("ROLE_AGENT", "When do you need it?"), ("ROLE_USER", "Friday")],
          f"the task's history is the whole conversation ({said})")
    listed = await mine.list_tasks(pb.ListTasksRequest(context_id=first.context_id))
    check([(t.id, t.status.state) for t in listed.tasks] == [(first.id, pb.TASK_STATE_COMPLETED)],
          f"ListTasks shows the conversation once, as it is now ({[(t.id, t.status.state) for t in listed.tasks]})")
    try:
        await collect(mine, pb.SendMessageRequest(message=reply(first, "more")))
        check(False, "a completed conversation took a reply")
    except Exception as e:  # noqa: BLE001 (the SDK raises per JSON-RPC code)
        check("asks no question" in str(e), f"a completed conversation takes no reply ({e})")
    print(json.dumps({"task": first.id}))


async def declarative_flow():
    """The declarative examples (examples/manifests/declarative/) streamed to an A2A caller: the
    research assistant's MCP tool calls and results and its two delegations as they happen, the
    model's text, and the usage as it grows and with the end; the triage agent's search
    and its answer. The model is the test's scripted server
    (e2e/tests/declarative.rs says why), so the tools each one calls are known."""
    token = os.environ["A2A_TOKEN"]
    research = await client("research-assistant", token, streaming=True)
    check(research._card.capabilities.streaming, "the declarative Agent's card announces streaming")
    events = await collect(research, pb.SendMessageRequest(message=message("What does the sandbox grant by default?")))
    metas = [e for e in map(event_meta, events) if e]
    kinds = [e.get("type") for e in metas]
    print(f"research event kinds: {kinds}")
    calls = [e for e in metas if e.get("type") == "toolCall"]
    results = [e for e in metas if e.get("type") == "toolResult"]
    check([(c["server"], c["tool"]) for c in calls] == [("docs", "search"), ("docs", "fetch")],
          f"each MCP tool call streams before it is made ({calls})")
    check([r["outcome"] for r in results] == ["answered", "answered"] and results[0]["text"] == "sandbox",
          f"each result streams after it ({results})")
    check(kinds.index("toolCall") < kinds.index("toolResult"), "a call streams before its result")
    delegations = [e for e in metas if e.get("type") == "delegation"]
    ended = {d["agent"] for d in delegations if d["state"] == "TASK_STATE_COMPLETED"}
    check(ended == {"summarize", "keywords"}, f"both Agents used as tools stream as delegations ({delegations})")
    text = "".join(e["text"] for e in metas if e.get("type") == "modelText")
    artifacts = [p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts]
    answer = "".join(artifacts)
    # The stream follows from the Task's creation, so every call's text streams; the tool-call
    # turns have none, the last turn's is the answer.
    check(text == answer, f"the model's text streams, all of it, before the answer ({text[:120]!r})")
    so_far = [e for e in metas if e.get("type") == "usage"]
    check(so_far and all(u.get("partial") for u in so_far), f"usage streams while the Task runs ({so_far})")
    grown = [(u["resourcesUsed"].get("modelCalls", 0), u["resourcesUsed"].get("toolCalls", 0)) for u in so_far]
    check(grown == sorted(grown), f"each usage event counts at least as much as the one before ({grown})")
    check(grown[-1] == (4, 2), f"the last usage before the end counts every call ({grown})")
    check(so_far[0]["resourcesUsed"].get("modelCalls", 0) >= 1 and "fuel" not in so_far[0]["resourcesUsed"],
          f"a partial usage counts calls, not fuel ({so_far[0]})")
    # The usage of the end rides on the final status update.
    final = json_format.MessageToDict(events[-1].status_update.metadata)
    used = final.get("ari.dev/resourcesUsed", {})
    models = final.get("ari.dev/models", [])
    check(used.get("modelCalls") == 4 and used.get("toolCalls") == 2, f"the usage: four model calls, two tool calls ({used})")
    check([(m.get("name"), m.get("calls")) for m in models] == [("small", 4)], f"per model ({models})")
    last = events[-1].status_update
    check(last.status.state == pb.TASK_STATE_COMPLETED, "the research stream ends completed")
    check(answer.endswith("Source: sandbox."), f"the answer streams as an artifact ({artifacts})")

    triage = await client("triage", token, streaming=True)
    check([s.id for s in triage._card.skills] == ["triage"], "the triage card lists its declared skill")
    events = await collect(triage, pb.SendMessageRequest(message=message("TICKET-11: the printer on floor 2 jams")))
    metas = [e for e in map(event_meta, events) if e]
    print(f"triage event kinds: {[e.get('type') for e in metas]}")
    tools = [(e["type"], e["tool"], e.get("text", "")) for e in metas if e.get("type") in ("toolCall", "toolResult")]
    check(tools == [("toolCall", "search", ""), ("toolResult", "search", "no matches")],
          f"the search and its result stream ({tools})")
    last = events[-1].status_update
    check(last.status.state == pb.TASK_STATE_COMPLETED, "the triage stream ends completed")
    used = json_format.MessageToDict(last.metadata).get("ari.dev/resourcesUsed", {})
    check(used.get("modelCalls") == 2 and used.get("toolCalls") == 1, f"its usage ({used})")
    so_far = [e["resourcesUsed"] for e in metas if e.get("type") == "usage"]
    check(so_far and (so_far[-1].get("modelCalls"), so_far[-1].get("toolCalls")) == (2, 1),
          f"its usage streams as it grows ({so_far})")
    artifacts = [p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts]
    check(any("facilities team" in a for a in artifacts), f"the answer routes the ticket ({artifacts})")


if __name__ == "__main__":
    flows = {"main": main_flow, "auth": auth_flow, "card": card_flow, "bounds": bounds_flow,
             "approve": approve_flow, "approve-delegation": approve_delegation_flow,
             "conversation": conversation_flow, "declarative": declarative_flow}
    asyncio.run(flows[sys.argv[1]]())
