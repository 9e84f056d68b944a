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
export class ChildFailed extends AriError {
  constructor(reason: string, childMessage: string);
  /** The child Task's reason: `FuelExhausted`, `CapabilityDenied`, `AgentError`, ... */
  readonly reason: string;
  readonly childMessage: string;
}

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
export function toErrorCode(err: unknown): { tag: string; val: string };
export function exportAgent(agent: new () => Agent): {
  initialize(config: Uint8Array): void;
  canExecute(task: unknown): boolean;
  estimate(task: unknown): unknown;
  execute(task: unknown): unknown;
};
