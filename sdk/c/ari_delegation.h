// Delegation for ari agents in C (capability `delegation`): run tasks on other Agents, out of
// this task's fuel and time. A thin layer over the generated `ainur_ari_host_delegate`,
// `_start_child`, `_await_child` and `_send_message` (ari_agent.h from `wit-bindgen c`) that
// takes C strings, returns one status per case of the WIT's `delegation-error` and hands the
// error's text back as NUL-terminated strings, so an agent can branch on the status and print
// the message without touching the generated unions. Link ari_delegation.c beside the agent.
#ifndef ARI_DELEGATION_H
#define ARI_DELEGATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ari_agent.h"

#ifdef __cplusplus
extern "C" {
#endif

// How a delegation call ended: OK, or the case of `delegation-error`.
typedef enum ari_delegation_status {
  ARI_DELEGATION_OK = 0,
  // No `delegation` grant names that Agent; nothing started. Ends the task CapabilityDenied.
  ARI_DELEGATION_DENIED,
  // The grant's depth or children limit is reached; not a denial, the task may carry on.
  ARI_DELEGATION_LIMIT_REACHED,
  // No Agent of that name can take the task (unknown, not ready, or refusing); nothing ran.
  ARI_DELEGATION_UNAVAILABLE,
  // What is left of this task's fuel or time cannot fund the child; nothing started.
  ARI_DELEGATION_BUDGET_EXHAUSTED,
  // The child ran and failed: `reason` says why (`FuelExhausted`, `AgentError`, ...).
  ARI_DELEGATION_CHILD_FAILED,
  // The handle names no child of this task, or one already collected.
  ARI_DELEGATION_INVALID_HANDLE,
  // The grant marks the Agent for approval and a person rejected the delegation; `message`
  // says who and why. Nothing was started; the task may carry on.
  ARI_DELEGATION_REJECTED,
} ari_delegation_status_t;

// What a child may spend out of this task's budget. A bound whose `has_` flag is false takes
// the default share (half of the fuel left, all the time left): `ARI_BUDGET_DEFAULT`.
typedef struct ari_budget {
  bool has_fuel;
  uint64_t fuel;
  bool has_timeout_millis;
  uint64_t timeout_millis;
} ari_budget_t;

#define ARI_BUDGET_DEFAULT ((ari_budget_t){0})
#define ARI_BUDGET_FUEL(n) ((ari_budget_t){.has_fuel = true, .fuel = (n)})

// Why a call failed. `message` (and for ARI_DELEGATION_CHILD_FAILED, `reason`) are
// NUL-terminated and owned by the struct: release them with ari_delegation_error_free.
typedef struct ari_delegation_error {
  ari_delegation_status_t status;
  char *message;
  char *reason;
} ari_delegation_error_t;

// Runs a task on `agent` with `input` and waits for its output, which the caller owns
// (`ari_agent_list_u8_free`). On failure `*err` says why and `*output` is untouched.
ari_delegation_status_t ari_delegate(const char *agent, const uint8_t *input, size_t input_len,
                                     ari_budget_t budget, ari_agent_list_u8_t *output,
                                     ari_delegation_error_t *err);

// Starts a task on `agent` and returns at once with its handle in `*child`, so several
// children run in parallel. A child never awaited is cancelled when the task ends.
ari_delegation_status_t ari_start_child(const char *agent, const uint8_t *input, size_t input_len,
                                        ari_budget_t budget, uint32_t *child,
                                        ari_delegation_error_t *err);

// Waits for a child of ari_start_child and returns its output, which the caller owns.
ari_delegation_status_t ari_await_child(uint32_t child, ari_agent_list_u8_t *output,
                                        ari_delegation_error_t *err);

// A one-way message: starts a task on `agent` that this task never waits for; its whole fuel
// budget is spent when it is sent.
ari_delegation_status_t ari_send_message(const char *agent, const uint8_t *input, size_t input_len,
                                         ari_budget_t budget, ari_delegation_error_t *err);

// Frees the strings of an error filled in by a failed call (and nothing on a zeroed one).
void ari_delegation_error_free(ari_delegation_error_t *err);

// The status as the WIT spells it ("denied", "limit-reached", ..., "ok").
const char *ari_delegation_status_name(ari_delegation_status_t status);

#ifdef __cplusplus
}
#endif

#endif
