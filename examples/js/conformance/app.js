// The conformance agent in JavaScript: one command per task (conformance/README.md).
import {
  Agent, AriError, BudgetExhausted, ChatRequest, Child, ChildFailed, Denied, Failed, Invalid, LimitReached,
  Message, ModelError, QuotaExceeded, Rejected, ToolError, Unavailable, Unsupported, exportAgent, fromHex, host, model,
  toHex, tools,
} from "../../../sdk/js/ari.js";

// The arguments of the conformance tool `lookup`, a JSON Schema (as JSON text, so every
// language sends the same bytes).
const LOOKUP_PARAMETERS = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}';

/** A chat answer as the protocol prints it (the text last: it may hold spaces). */
function chatLine(answer) {
  const u = answer.usage;
  return `finish:${answer.finishReason} in:${u.inputTokens} out:${u.outputTokens} ` +
    `cached:${u.cachedInputTokens} model:${answer.model} text:${answer.text ?? ""}`;
}

const vector = (v) => (v ?? []).map((x) => x.toFixed(3)).join(",");

const decoder = new TextDecoder();

function word(s) {
  const i = s.indexOf(" ");
  return i < 0 ? [s, ""] : [s.slice(0, i), s.slice(i + 1)];
}

function number(text) {
  if (!/^[0-9]+$/.test(text)) throw new Invalid(`${JSON.stringify(text)} is not a number`);
  return Number(text);
}

const FAILURES = { denied: Denied, invalid: Invalid, unsupported: Unsupported };
const KINDS = [
  [Denied, "denied"], [QuotaExceeded, "quota-exceeded"], [Invalid, "invalid"],
  [Unsupported, "unsupported"], [Failed, "failed"], [Unavailable, "unavailable"],
  [LimitReached, "limit-reached"], [BudgetExhausted, "budget-exhausted"], [ChildFailed, "child-failed"],
  [Rejected, "rejected"],
];

/** A budget bound: a number (a BigInt, exact beyond 2^53), or `-` for the default share. */
function bound(text) {
  if (text === "-") return undefined;
  number(text);
  return BigInt(text);
}

function command(line) {
  const [op, rest] = word(line);
  switch (op) {
    case "echo":
      return rest;
    case "log": {
      const [level, message] = word(rest);
      host.log(level, message);
      return "logged";
    }
    case "storage": {
      const [key, value] = word(rest);
      host.storageSet(key, value);
      const got = host.storageGet(key);
      host.storageDelete(key);
      const after = host.storageGet(key) === null ? "none" : "some";
      return `set:ok get:${decoder.decode(got)} delete:ok after:${after}`;
    }
    case "storage-fill": {
      const [key, n] = word(rest);
      host.storageSet(key, new Uint8Array(number(n)).fill(0x78));
      return "ok";
    }
    case "random":
      return toHex(host.randomBytes(number(rest)));
    case "hash": {
      const [alg, data] = word(rest);
      return toHex(host.hash(alg, data));
    }
    case "sign":
      return toHex(host.sign(rest));
    case "sign-verify": {
      const [publicHex, message] = word(rest);
      const publicKey = fromHex(publicHex);
      const signature = host.sign(message);
      const valid = host.verify(publicKey, message, signature);
      const tampered = host.verify(publicKey, message + "!", signature);
      return `valid:${valid} tampered:${tampered}`;
    }
    case "verify": {
      const [publicHex, more] = word(rest);
      const [signature, message] = word(more);
      return String(host.verify(fromHex(publicHex), message, fromHex(signature)));
    }
    case "http": {
      const [method, more] = word(rest);
      const [url, body] = word(more);
      const resp = host.httpRequest({ method, url, body });
      return `status:${resp.status} body:${resp.text()}`;
    }
    case "now": {
      const first = host.now();
      const second = host.now();
      return `delta:${second - first}`;
    }
    case "delegate": {
      const [agent, input] = word(rest);
      return decoder.decode(host.delegate(agent, input));
    }
    case "delegate-budget": {
      const [fuel, more] = word(rest);
      const [millis, tail] = word(more);
      const [agent, input] = word(tail);
      return decoder.decode(host.delegate(agent, input, { fuel: bound(fuel), timeoutMillis: bound(millis) }));
    }
    case "fan": {
      // Every child is started before the first is awaited, so they run side by side.
      const [agent, inputs] = word(rest);
      const children = inputs.split(" | ").map((input) => host.startChild(agent, input));
      return children.map((child) => decoder.decode(child.wait())).join(" | ");
    }
    case "message": {
      const [fuel, more] = word(rest);
      const [agent, input] = word(more);
      host.sendMessage(agent, input, { fuel: bound(fuel) });
      return "sent";
    }
    case "await":
      return decoder.decode(new Child(number(rest)).wait());
    case "models":
      return model.models().join(",");
    case "model-chat": {
      const [name, prompt] = word(rest);
      return chatLine(new ChatRequest(name).user(prompt).send());
    }
    case "model-tools": {
      // A tool loop of one round: the model calls `lookup`, gets `42`, and answers.
      const [name, prompt] = word(rest);
      const request = new ChatRequest(name, { toolChoice: "required" })
        .user(prompt)
        .tool("lookup", LOOKUP_PARAMETERS, "looks a word up");
      const first = request.send();
      let out = `finish:${first.finishReason}`;
      for (const call of first.toolCalls) out += ` call:${call.id}:${call.name}:${call.arguments}`;
      request.add(first.message);
      for (const call of first.toolCalls) request.add(Message.toolResult(call.id, "42"));
      const last = request.send();
      return `${out} then:${last.finishReason} text:${last.text ?? ""}`;
    }
    case "model-embed": {
      const [name, inputs] = word(rest);
      const answer = model.embed(name, inputs.split(" | "));
      const vectors = answer.embeddings;
      return `vectors:${vectors.length} dims:${vectors[0]?.length ?? 0} first:${vector(vectors[0])} ` +
        `last:${vector(vectors[vectors.length - 1])} in:${answer.usage.inputTokens} model:${answer.model}`;
    }
    case "tools":
      return tools.servers().join(",");
    case "tool-list":
      return tools
        .list(rest)
        .map((t) => t.name + (t.hints.readOnly ? ":read-only" : "") + (t.hints.destructive ? ":destructive" : ""))
        .join(",");
    case "tool-call": {
      const [server, more] = word(rest);
      const [tool, args] = word(more);
      const r = tools.call(server, tool, args);
      return `error:${r.isError} text:${r.text}`;
    }
    default:
      throw new Unsupported(`unknown command ${JSON.stringify(op)}`);
  }
}

class Conformance extends Agent {
  execute(task) {
    let line = task.text;
    const strict = line.startsWith("must ");
    if (strict) line = line.slice("must ".length);
    if (line.startsWith("fail ")) {
      const [kind, message] = word(line.slice("fail ".length));
      throw new (FAILURES[kind] ?? Failed)(message);
    }
    try {
      return command(line);
    } catch (e) {
      if (strict || e instanceof Unsupported || !(e instanceof AriError)) throw e;
      // Logged too: a task whose host call was denied ends CapabilityDenied even when the
      // agent carries on, and then only the log shows what the agent saw.
      // A model or tools error is spelt as the WIT's model-error or tool-error case.
      let seen = "err:" + (e instanceof ModelError || e instanceof ToolError
        ? e.code
        : KINDS.find(([Class]) => e instanceof Class)[1]);
      // The table checks each SDK keeps a child's reason, a rate limit's wait and a provider's status.
      if (e instanceof ChildFailed) seen += `:${e.reason}`;
      if (e instanceof ModelError && e.code === "rate-limited") seen += `:${e.retryAfterMillis ?? "-"}`;
      if (e instanceof ModelError && e.code === "provider-error") seen += `:${e.status}`;
      host.warn(seen);
      return seen;
    }
  }
}

export const agent = exportAgent(Conformance);
