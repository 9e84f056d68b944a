// Guest SDK for writing ari agents in JavaScript, built into Wasm components with
// componentize-js (`jco componentize`).
//
//   import { Agent, exportAgent } from "ari";   // or a relative path to sdk/js/ari.js
//   class Echo extends Agent {
//     execute(task) { return task.input; }
//   }
//   export const agent = exportAgent(Echo);
//
// Host functions are in `host`, language models in `model`, MCP tools in `tools`. Every typed
// error of the contract (error-code, storage-error, http-error, delegation-error) arrives as one
// of the error classes below, a model-error as a `ModelError` and a tool-error as a `ToolError`,
// each with its `code`, and an error thrown from `execute` leaves as the matching error-code.
import * as wit from "ainur:ari/host@2.0.0";
import * as witModel from "ainur:ari/model@2.0.0";
import * as witTools from "ainur:ari/tools@2.0.0";
import * as witConversation from "ainur:ari/conversation@2.0.0";

export class AriError extends Error {
  constructor(message = "") {
    super(message);
    this.name = new.target.name;
  }
}
/** A capability is not granted, or the call is outside the grant (fails the Task CapabilityDenied). */
export class Denied extends AriError {}
/** A storage write would take the Agent over its quota (leaves as `denied`). */
export class QuotaExceeded extends AriError {}
/** An argument, a storage key, an HTTP request or the task input is not acceptable. */
export class Invalid extends AriError {}
/** The agent does not handle this kind of task. */
export class Unsupported extends AriError {}
/** Anything else: a backend or transport failure, or the agent's own error. */
export class Failed extends AriError {}
/** No Agent of that name can take a delegated task (unknown, not ready, or refusing). Nothing ran. */
export class Unavailable extends AriError {}
/** The delegation grant's depth or children limit is reached; not a denial, the task may go on. */
export class LimitReached extends AriError {}
/** What is left of this task's fuel or time cannot fund a child. Nothing was started. */
export class BudgetExhausted extends AriError {}
/**
 * A person rejected a delegation or an HTTP request the grant marks for approval; the message
 * says who and why. Nothing was started or sent, and the agent may go on.
 */
export class Rejected extends AriError {}
/** A delegated task ran and failed: `reason` is its Task reason (`FuelExhausted`, `AgentError`, ...). */
export class ChildFailed extends AriError {
  constructor(reason = "", childMessage = "") {
    super(`child failed with ${reason}: ${childMessage}`);
    this.reason = reason;
    this.childMessage = childMessage;
  }
}

/**
 * A model call failed. `code` is the case of the WIT's model-error: "denied",
 * "budget-exhausted", "rate-limited" (with `retryAfterMillis`, a number or undefined),
 * "unavailable", "invalid-request" or "provider-error" (with the provider's HTTP `status`).
 */
export class ModelError extends AriError {
  constructor(code, message = "", { retryAfterMillis, status } = {}) {
    super(message);
    this.code = code;
    if (code === "rate-limited") {
      this.retryAfterMillis = retryAfterMillis;
      const after = retryAfterMillis === undefined ? "" : ` (retry after ${retryAfterMillis} ms)`;
      this.message = `rate limited${after}: ${message}`;
    }
    if (code === "provider-error") {
      this.status = status;
      this.message = `model provider error (HTTP ${status}): ${message}`;
    }
    this.detail = message;
  }
}

/** The ModelError for a WIT model-error value `{tag, val}`. */
export function fromModelError(value) {
  const tag = String(value?.tag ?? "provider-error");
  if (tag === "rate-limited") {
    const ms = value.val?.retryAfterMillis;
    return new ModelError(tag, String(value.val?.message ?? ""), {
      retryAfterMillis: ms === undefined || ms === null ? undefined : Number(ms),
    });
  }
  if (tag === "provider-error") {
    return new ModelError(tag, String(value.val?.message ?? ""), { status: Number(value.val?.status ?? 0) });
  }
  return new ModelError(tag, String(value?.val ?? value));
}

/**
 * A tools call failed. `code` is the case of the WIT's tool-error: "denied", "not-found",
 * "invalid-arguments", "unavailable", "timeout", "too-large", "server-error" or "rejected".
 */
export class ToolError extends AriError {
  constructor(code, message = "") {
    super(message);
    this.code = code;
  }
}

/** The ToolError for a WIT tool-error value `{tag, val}`. */
export function fromToolError(value) {
  // A case added to the contract after this SDK: still a tools error, never success.
  return new ToolError(String(value?.tag ?? "server-error"), String(value?.val ?? value));
}

const FROM_TAG = {
  denied: Denied,
  "quota-exceeded": QuotaExceeded,
  "invalid-key": Invalid,
  "invalid-input": Invalid,
  "invalid-request": Invalid,
  unsupported: Unsupported,
  failed: Failed,
  unavailable: Unavailable,
  "limit-reached": LimitReached,
  "budget-exhausted": BudgetExhausted,
  // As in the Rust SDK: a handle that names no child is an invalid argument.
  "invalid-handle": Invalid,
  rejected: Rejected,
};

/** The error class instance for a WIT error variant value `{tag, val}`. */
export function fromWit(value) {
  // A delegation-error's `failed` carries the child's failure record, not a string.
  if (value?.tag === "failed" && value.val !== null && typeof value.val === "object") {
    return new ChildFailed(String(value.val.reason), String(value.val.message));
  }
  const Class = FROM_TAG[value?.tag] ?? Failed;
  return new Class(String(value?.val ?? value));
}

/** The `error-code` an error thrown by the agent leaves as. */
export function toErrorCode(err) {
  // A model denial is a denial, a request the provider refused as malformed invalid input.
  if (err instanceof ModelError && err.code === "denied") return { tag: "denied", val: err.message };
  if (err instanceof ModelError && err.code === "invalid-request") return { tag: "invalid-input", val: err.message };
  // Likewise a tools denial, and arguments the host or the server refused.
  if (err instanceof ToolError && err.code === "denied") return { tag: "denied", val: err.message };
  if (err instanceof ToolError && err.code === "invalid-arguments") return { tag: "invalid-input", val: err.message };
  if (err instanceof Denied || err instanceof QuotaExceeded) return { tag: "denied", val: err.message };
  if (err instanceof Invalid) return { tag: "invalid-input", val: err.message };
  if (err instanceof Unsupported) return { tag: "unsupported", val: err.message };
  if (err instanceof AriError) return { tag: "failed", val: err.message };
  return { tag: "failed", val: `${err?.name ?? "Error"}: ${err?.message ?? err}` };
}

function call(fn, ...args) {
  try {
    return fn(...args);
  } catch (e) {
    throw e && typeof e === "object" && "payload" in e ? fromWit(e.payload) : e;
  }
}

/** A child-budget record: each bound a u64 BigInt, or undefined for the default share. */
function childBudget({ fuel, timeoutMillis } = {}) {
  const u64 = (name, value) => {
    if (value === undefined || value === null) return undefined;
    let n;
    try {
      n = BigInt(value);
    } catch {
      throw new Invalid(`budget ${name} ${value} is not an integer`);
    }
    if (n < 0n || n >= 1n << 64n) throw new Invalid(`budget ${name} ${value} is not a u64`);
    return n;
  };
  return { fuel: u64("fuel", fuel), timeoutMillis: u64("timeoutMillis", timeoutMillis) };
}

/** A child started with `host.startChild`; collect it with `wait()` (never waited for, it is
 * cancelled when the task ends). */
export class Child {
  constructor(handle) {
    this.handle = handle;
  }
  /** The child's output, a Uint8Array (`ChildFailed` if it failed, `Invalid` if collected). */
  wait() {
    return host.awaitChild(this.handle);
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const bytes = (data) => (typeof data === "string" ? encoder.encode(data) : Uint8Array.from(data));

export const host = {
  /** level: "trace" | "debug" | "info" | "warn" | "error"; always available. */
  log(level, message) {
    if (!["trace", "debug", "info", "warn", "error"].includes(level)) throw new Invalid(`no log level ${level}`);
    wit.log(level, message);
  },
  info: (message) => wit.log("info", message),
  warn: (message) => wit.log("warn", message),
  error: (message) => wit.log("error", message),

  /** Storage (capability `storage`), transactional per task. */
  storageGet: (key) => call(wit.storageGet, key) ?? null,
  storageSet: (key, value) => call(wit.storageSet, key, bytes(value)),
  storageDelete: (key) => call(wit.storageDelete, key),

  /** `length` bytes of the task's seeded PRNG (capability `randomness`). */
  randomBytes: (length) => call(wit.randomBytes, length),

  /** Digest under "sha256" | "sha384" | "sha512"; always available. */
  hash(algorithm, data) {
    if (!["sha256", "sha384", "sha512"].includes(algorithm)) throw new Invalid(`no hash algorithm ${algorithm}`);
    return wit.hash(algorithm, bytes(data));
  },
  /** Ed25519 signature with the Agent's granted key (capability `signing`). */
  sign: (message) => call(wit.sign, bytes(message)),
  verify: (publicKey, message, signature) => wit.verify(bytes(publicKey), bytes(message), bytes(signature)),

  /** One HTTP request (capability `network`); a 404 is a response, a refused transfer throws. */
  httpRequest({ method = "GET", url, headers = {}, body = "" }) {
    const resp = call(wit.httpRequest, {
      method,
      url,
      headers: Object.entries(headers).map(([name, value]) => ({ name, value })),
      body: bytes(body),
    });
    return {
      status: resp.status,
      headers: resp.headers.map((h) => [h.name, h.value]),
      body: resp.body,
      text: () => decoder.decode(resp.body),
    };
  },

  /** Nanoseconds since the Unix epoch on the task's logical clock (capability `timeAccess`), a BigInt. */
  now: () => call(wit.now),

  // Delegation (capability `delegation`): tasks on other Agents, paid out of this task's fuel
  // and time. `budget` is `{ fuel, timeoutMillis }`; a bound left out takes the default share
  // (half of the fuel left, all the time left).
  /** Runs a task on `agent` and waits for its output (a Uint8Array). */
  delegate: (agent, input, budget) => call(wit.delegate, agent, bytes(input), childBudget(budget)),
  /** Starts a task on `agent` and returns a `Child` at once, so several children run in parallel. */
  startChild: (agent, input, budget) => new Child(call(wit.startChild, agent, bytes(input), childBudget(budget))),
  /** Waits for the child with this handle (prefer `child.wait()`). */
  awaitChild(handle) {
    if (!Number.isInteger(handle) || handle < 0 || handle > 0xffffffff) throw new Invalid(`child handle ${handle} is not a u32`);
    return call(wit.awaitChild, handle);
  },
  /** A one-way message: a task on `agent` this task never waits for; its whole fuel budget is spent. */
  sendMessage: (agent, input, budget) => call(wit.sendMessage, agent, bytes(input), childBudget(budget)),
};

function callModel(fn, ...args) {
  try {
    return fn(...args);
  } catch (e) {
    throw e && typeof e === "object" && "payload" in e ? fromModelError(e.payload) : e;
  }
}

const u32 = (name, value) => {
  if (value === undefined || value === null) return undefined;
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) throw new Invalid(`${name} ${value} is not a u32`);
  return value;
};

const u64 = (name, value) => {
  if (value === undefined || value === null) return undefined;
  let n;
  try {
    n = BigInt(value);
  } catch {
    throw new Invalid(`${name} ${value} is not an integer`);
  }
  if (n < 0n || n >= 1n << 64n) throw new Invalid(`${name} ${value} is not a u64`);
  return n;
};

/** JSON text as the contract carries it: a string as it is, anything else serialised. */
const jsonText = (value) => (typeof value === "string" ? value : JSON.stringify(value));

const ROLES = ["system", "user", "assistant", "tool"];

function witMessage(m) {
  if (!ROLES.includes(m.role)) throw new Invalid(`no message role ${JSON.stringify(m.role)}`);
  return {
    role: m.role,
    content: m.content ?? undefined,
    toolCalls: (m.toolCalls ?? []).map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
    toolCallId: m.toolCallId ?? undefined,
  };
}

function witToolChoice(choice) {
  if (choice === undefined || choice === null) return undefined;
  if (choice === "auto" || choice === "none" || choice === "required") return { tag: choice };
  if (typeof choice === "object" && typeof choice.function === "string") return { tag: "function", val: choice.function };
  throw new Invalid(`no tool choice ${JSON.stringify(choice)} ("auto", "none", "required" or {function: name})`);
}

function witResponseFormat(format) {
  if (format === undefined || format === null) return undefined;
  if (format === "text") return { tag: "text" };
  if (format === "json_object") return { tag: "json-object" };
  if (typeof format === "object" && format.jsonSchema) {
    const { name, schema, strict = true } = format.jsonSchema;
    return { tag: "json-schema", val: { name: String(name), schema: jsonText(schema), strict: Boolean(strict) } };
  }
  throw new Invalid(`no response format ${JSON.stringify(format)} ("text", "json_object" or {jsonSchema})`);
}

function ofWitMessage(m) {
  return {
    role: m.role,
    content: m.content ?? undefined,
    toolCalls: m.toolCalls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
    toolCallId: m.toolCallId ?? undefined,
  };
}

const ofWitUsage = (u) => ({
  inputTokens: u.inputTokens,
  outputTokens: u.outputTokens,
  cachedInputTokens: u.cachedInputTokens,
});

/** Messages of a conversation: `{role, content, toolCalls, toolCallId}`. */
export const Message = {
  system: (content) => ({ role: "system", content, toolCalls: [] }),
  user: (content) => ({ role: "user", content, toolCalls: [] }),
  assistant: (content) => ({ role: "assistant", content, toolCalls: [] }),
  /** The result of the tool call `callId` (a tool call's `id`). */
  toolResult: (callId, content) => ({ role: "tool", content, toolCalls: [], toolCallId: callId }),
};

/**
 * A chat request to `model` (a ModelConfig name the Agent is granted), built by chaining:
 * `new ChatRequest("small").system("Be brief.").user("Hi").send()`. `toolChoice` is "auto",
 * "none", "required" or `{function: name}`; `responseFormat` is "text", "json_object" or
 * `{jsonSchema: {name, schema, strict}}`.
 */
export class ChatRequest {
  constructor(model, fields = {}) {
    this.model = model;
    this.messages = [];
    this.tools = [];
    this.stop = [];
    Object.assign(this, fields);
  }
  add(message) {
    this.messages.push(message);
    return this;
  }
  system(content) {
    return this.add(Message.system(content));
  }
  user(content) {
    return this.add(Message.user(content));
  }
  assistant(content) {
    return this.add(Message.assistant(content));
  }
  /** Offers a tool; `parameters` is its arguments' JSON Schema, as JSON text or an object. */
  tool(name, parameters = { type: "object" }, description) {
    this.tools.push({ name, parameters, description });
    return this;
  }
  send() {
    return model.chat(this);
  }
}

// Language models (capability `models`): the host holds the credentials, clips each call to
// the task's token budget and records the answer. Failures throw a `ModelError`.
export const model = {
  /**
   * One chat completion of a `ChatRequest` (or a plain object with its fields). The answer is
   * `{message, finishReason ("stop", "length", "tool-calls", "content-filter", "other"),
   * usage {inputTokens, outputTokens, cachedInputTokens}, model, text, toolCalls}`.
   */
  chat(request) {
    const answer = callModel(witModel.chat, {
      model: String(request.model),
      messages: (request.messages ?? []).map(witMessage),
      tools: (request.tools ?? []).map((t) => ({
        name: t.name,
        description: t.description ?? undefined,
        parameters: jsonText(t.parameters ?? { type: "object" }),
      })),
      toolChoice: witToolChoice(request.toolChoice),
      responseFormat: witResponseFormat(request.responseFormat),
      maxTokens: u32("maxTokens", request.maxTokens),
      temperature: request.temperature ?? undefined,
      seed: u64("seed", request.seed),
      stop: [...(request.stop ?? [])],
    });
    const message = ofWitMessage(answer.message);
    return {
      message,
      finishReason: answer.finishReason,
      usage: ofWitUsage(answer.usage),
      model: answer.model,
      text: message.content,
      toolCalls: message.toolCalls,
    };
  },
  /** Vectors for `inputs` (strings), one array of numbers per input, in input order. */
  embed(modelName, inputs, { dimensions } = {}) {
    const answer = callModel(witModel.embed, {
      model: String(modelName),
      inputs: [...inputs].map(String),
      dimensions: u32("dimensions", dimensions),
    });
    return {
      embeddings: answer.embeddings.map((v) => Array.from(v)),
      usage: ofWitUsage(answer.usage),
      model: answer.model,
    };
  },
  /** The names of the models this Agent is granted (empty without a `models` grant). */
  models: () => [...witModel.models()],
};

/** Hex of a byte array, for digests and signatures. */
function callTools(fn, ...args) {
  try {
    return fn(...args);
  } catch (e) {
    throw e && typeof e === "object" && "payload" in e ? fromToolError(e.payload) : e;
  }
}

// MCP tools (capability `tools`): the host is the MCP client and holds the servers'
// credentials; the agent names a server and a tool. Failures throw a `ToolError`.
export const tools = {
  /** The servers this Agent is granted (empty without a `tools` grant). */
  servers: () => [...witTools.servers()],
  /**
   * The tools of `server` this Agent may call: `{name, title, description, inputSchema (JSON
   * text), hints: {readOnly, destructive, idempotent, openWorld}}`; a hint the server does not
   * give is undefined.
   */
  list(server) {
    return callTools(witTools.listTools, String(server)).map((t) => ({
      name: t.name,
      title: t.title ?? undefined,
      description: t.description ?? undefined,
      inputSchema: t.inputSchema,
      hints: {
        readOnly: t.hints.readOnly ?? undefined,
        destructive: t.hints.destructive ?? undefined,
        idempotent: t.hints.idempotent ?? undefined,
        openWorld: t.hints.openWorld ?? undefined,
      },
    }));
  },
  /**
   * Calls `tool` of `server` with `args`, an object or a JSON object as text (none: no
   * arguments): `{text, content (JSON text), structured (JSON text or undefined), isError}`.
   */
  call(server, tool, args) {
    const text = args === undefined || args === null ? "" : typeof args === "string" ? args : JSON.stringify(args);
    const r = callTools(witTools.callTool, String(server), String(tool), text);
    return { text: r.text, content: r.content, structured: r.structured ?? undefined, isError: Boolean(r.isError) };
  },
};

// Conversations: end a turn asking for input, read the earlier turns of the one continued.
export const conversation = {
  /** The earlier turns, oldest first: `{number, input, output}` (bytes); empty on a first turn. */
  history: () =>
    [...witConversation.history()].map((t) => ({ number: t.number, input: t.input, output: t.output })),
  /** Ends this turn asking for input: the task ends InputRequired, its output the question. */
  askForInput: () => witConversation.askForInput(),
};

export const toHex = (data) => Array.from(data, (b) => b.toString(16).padStart(2, "0")).join("");

/** Bytes of a hex string (`Invalid` when it is not hex). */
export function fromHex(text) {
  if (text.length % 2 !== 0 || /[^0-9a-fA-F]/.test(text)) throw new Invalid(`${JSON.stringify(text)} is not hex`);
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** One unit of work. `input` is a Uint8Array; `text` decodes it as UTF-8. */
export class Task {
  constructor(spec) {
    this.id = spec.id;
    this.input = spec.input;
    this.requirements = spec.requirements;
    this.deadlineSeconds = spec.deadlineSeconds;
  }
  get text() {
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(this.input);
    } catch (e) {
      throw new Invalid(`input is not UTF-8: ${e.message}`);
    }
  }
  requires(capability) {
    return this.requirements.includes(capability);
  }
}

/** Extend and implement `execute(task)`, returning a string or bytes; the rest has defaults. */
export class Agent {
  initialize(_config) {}
  canExecute(_task) {
    return true;
  }
  estimate(_task) {
    throw new Unsupported("this agent gives no estimate");
  }
  execute(_task) {
    throw new Unsupported("execute is not implemented");
  }
}

function guarded(fn) {
  try {
    return fn();
  } catch (e) {
    const err = new Error(e?.message ?? String(e));
    err.payload = toErrorCode(e);
    throw err;
  }
}

/** The object to export as `agent` (`export const agent = exportAgent(MyAgent)`). */
export function exportAgent(AgentClass) {
  const agent = new AgentClass();
  return {
    initialize: (config) => guarded(() => agent.initialize(config)),
    canExecute(spec) {
      try {
        return Boolean(agent.canExecute(new Task(spec)));
      } catch {
        return false;
      }
    },
    estimate: (spec) =>
      guarded(() => {
        const e = agent.estimate(new Task(spec));
        return {
          fuel: BigInt(e.fuel ?? 0),
          durationMillis: BigInt(e.durationMillis ?? 0),
          memoryBytes: BigInt(e.memoryBytes ?? 0),
        };
      }),
    execute: (spec) =>
      guarded(() => {
        const out = agent.execute(new Task(spec));
        return {
          output: bytes(out ?? ""),
          resourcesUsed: { cpuMillis: 0n, memoryBytes: 0n, storageBytes: 0n, networkBytes: 0n },
          attestation: undefined,
        };
      }),
  };
}
