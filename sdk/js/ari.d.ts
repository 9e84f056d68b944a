// Types of the ari guest SDK (ari.js), for agents written in TypeScript.

export class AriError extends Error {}
export class Denied extends AriError {}
export class QuotaExceeded extends AriError {}
export class Invalid extends AriError {}
export class Unsupported extends AriError {}
export class Failed extends AriError {}
export class Unavailable extends AriError {}
export class LimitReached extends AriError {}
export class BudgetExhausted extends AriError {}
/** A person rejected a delegation or HTTP request that needed approval (the message: who, why). */
export class Rejected extends AriError {}
export class ChildFailed extends AriError {
  constructor(reason: string, childMessage: string);
  /** The child Task's reason: `FuelExhausted`, `CapabilityDenied`, `AgentError`, ... */
  readonly reason: string;
  readonly childMessage: string;
}

/** The case of the WIT's model-error, as it spells it. */
export type ModelErrorCode =
  | "denied"
  | "budget-exhausted"
  | "rate-limited"
  | "unavailable"
  | "invalid-request"
  | "provider-error";

/** A model call failed; `code` says how. */
export class ModelError extends AriError {
  constructor(code: ModelErrorCode, message?: string, fields?: { retryAfterMillis?: number; status?: number });
  readonly code: ModelErrorCode;
  /** For "rate-limited": the wait the provider asked for, if it named one. */
  readonly retryAfterMillis?: number;
  /** For "provider-error": the provider's HTTP status (200: an unreadable answer). */
  readonly status?: number;
  /** The host's message (`message` adds the wait or the status). */
  readonly detail: string;
}

export type Role = "system" | "user" | "assistant" | "tool";
export type FinishReason = "stop" | "length" | "tool-calls" | "content-filter" | "other";

export interface ToolCall {
  id: string;
  name: string;
  /** JSON text as the model wrote it (it may be invalid JSON). */
  arguments: string;
}

export interface Message {
  role: Role;
  content?: string;
  toolCalls?: ToolCall[];
  /** The call a "tool" message answers. */
  toolCallId?: string;
}

export const Message: {
  system(content: string): Message;
  user(content: string): Message;
  assistant(content: string): Message;
  toolResult(callId: string, content: string): Message;
};

export interface Tool {
  name: string;
  description?: string;
  /** JSON Schema of the arguments, as JSON text or an object. */
  parameters?: string | object;
}

export type ToolChoice = "auto" | "none" | "required" | { function: string };
export type ResponseFormat =
  | "text"
  | "json_object"
  | { jsonSchema: { name: string; schema: string | object; strict?: boolean } };

export interface ChatRequestFields {
  model: string;
  messages?: Message[];
  tools?: Tool[];
  toolChoice?: ToolChoice;
  responseFormat?: ResponseFormat;
  maxTokens?: number;
  temperature?: number;
  seed?: number | bigint;
  stop?: string[];
}

export class ChatRequest implements ChatRequestFields {
  constructor(model: string, fields?: Partial<ChatRequestFields>);
  model: string;
  messages: Message[];
  tools: Tool[];
  toolChoice?: ToolChoice;
  responseFormat?: ResponseFormat;
  maxTokens?: number;
  temperature?: number;
  seed?: number | bigint;
  stop: string[];
  add(message: Message): this;
  system(content: string): this;
  user(content: string): this;
  assistant(content: string): this;
  tool(name: string, parameters?: string | object, description?: string): this;
  send(): ChatResponse;
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
}

export interface ChatResponse {
  message: Message;
  finishReason: FinishReason;
  usage: Usage;
  model: string;
  /** The answer's text, if any. */
  text?: string;
  toolCalls: ToolCall[];
}

export interface EmbeddingResponse {
  embeddings: number[][];
  usage: Usage;
  model: string;
}

export const model: {
  chat(request: ChatRequestFields): ChatResponse;
  embed(model: string, inputs: Iterable<string>, options?: { dimensions?: number }): EmbeddingResponse;
  models(): string[];
};

export class Task {
  readonly id: string;
  readonly input: Uint8Array;
  readonly requirements: string[];
  readonly deadlineSeconds: bigint;
  /** The input as UTF-8 (`Invalid` if it is not). */
  readonly text: string;
  requires(capability: string): boolean;
}

export interface Estimate {
  fuel?: number | bigint;
  durationMillis?: number | bigint;
  memoryBytes?: number | bigint;
}

export class Agent {
  initialize(config: Uint8Array): void;
  canExecute(task: Task): boolean;
  estimate(task: Task): Estimate;
  execute(task: Task): string | Uint8Array;
}

export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";
export type HashAlgorithm = "sha256" | "sha384" | "sha512";
export type Data = string | Uint8Array;

export interface Response {
  status: number;
  headers: [string, string][];
  body: Uint8Array;
  text(): string;
}

/** What a child may spend out of this task's budget; a bound left out takes the default share. */
export interface Budget {
  fuel?: number | bigint;
  timeoutMillis?: number | bigint;
}

export class Child {
  constructor(handle: number);
  readonly handle: number;
  wait(): Uint8Array;
}

export const host: {
  log(level: LogLevel, message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
  storageGet(key: string): Uint8Array | null;
  storageSet(key: string, value: Data): void;
  storageDelete(key: string): void;
  randomBytes(length: number): Uint8Array;
  hash(algorithm: HashAlgorithm, data: Data): Uint8Array;
  sign(message: Data): Uint8Array;
  verify(publicKey: Data, message: Data, signature: Data): boolean;
  httpRequest(request: {
    method?: string;
    url: string;
    headers?: Record<string, string>;
    body?: Data;
  }): Response;
  now(): bigint;
  delegate(agent: string, input: Data, budget?: Budget): Uint8Array;
  startChild(agent: string, input: Data, budget?: Budget): Child;
  awaitChild(handle: number): Uint8Array;
  sendMessage(agent: string, input: Data, budget?: Budget): void;
};

export function toHex(data: Uint8Array): string;
export function fromHex(text: string): Uint8Array;
export function fromWit(value: { tag: string; val: string }): AriError;
export function fromModelError(value: { tag: string; val: unknown }): ModelError;
export function fromToolError(value: { tag: string; val: unknown }): ToolError;

/** The case of the WIT's tool-error, as it spells it. */
export type ToolErrorCode =
  | "denied"
  | "not-found"
  | "invalid-arguments"
  | "unavailable"
  | "timeout"
  | "too-large"
  | "server-error"
  | "rejected";

/** A tools call failed; `code` says how. */
export class ToolError extends AriError {
  constructor(code: ToolErrorCode, message?: string);
  readonly code: ToolErrorCode;
}

/** What a server says a tool does: hints, not guarantees. */
export interface ToolHints {
  readOnly?: boolean;
  destructive?: boolean;
  idempotent?: boolean;
  openWorld?: boolean;
}

/** A tool this Agent may call. */
export interface Tool {
  name: string;
  title?: string;
  description?: string;
  /** JSON Schema of the arguments object, as JSON text. */
  inputSchema: string;
  hints: ToolHints;
}

/** What a tool call returned; `isError`: the tool failed in its own terms. */
export interface ToolResult {
  text: string;
  /** Every content block, as a JSON array (text). */
  content: string;
  /** The structured output, as JSON text. */
  structured?: string;
  isError: boolean;
}

/** One earlier turn of a conversation. */
export interface Turn {
  number: number;
  input: Uint8Array;
  output: Uint8Array;
}

/** Conversations: end a turn asking for input, read the earlier turns. */
export const conversation: {
  history(): Turn[];
  askForInput(): void;
};

/** MCP tools (capability `tools`); failures throw a `ToolError`. */
export const tools: {
  servers(): string[];
  list(server: string): Tool[];
  call(server: string, tool: string, args?: string | Record<string, unknown>): ToolResult;
};
export function toErrorCode(err: unknown): { tag: string; val: string };
export function exportAgent(agent: new () => Agent): {
  initialize(config: Uint8Array): void;
  canExecute(task: unknown): boolean;
  estimate(task: unknown): unknown;
  execute(task: unknown): unknown;
};
