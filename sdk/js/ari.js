// Guest SDK for writing ari agents in JavaScript, built into Wasm components with
// componentize-js (`jco componentize`).
//
//   import { Agent, exportAgent } from "ari";   // or a relative path to sdk/js/ari.js
//   class Echo extends Agent {
//     execute(task) { return task.input; }
//   }
//   export const agent = exportAgent(Echo);
//
// Host functions are in `host`. Every typed error of the contract (error-code, storage-error,
// http-error, delegation-error) arrives as one of the error classes below, and an error thrown from `execute`
// leaves as the matching error-code.
import * as wit from "ainur:ari/host@2.0.0";

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
/** A delegated task ran and failed: `reason` is its Task reason (`FuelExhausted`, `AgentError`, ...). */
export class ChildFailed extends AriError {
  constructor(reason = "", childMessage = "") {
    super(`child failed with ${reason}: ${childMessage}`);
    this.reason = reason;
    this.childMessage = childMessage;
  }
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

/** Hex of a byte array, for digests and signatures. */
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
