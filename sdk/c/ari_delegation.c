// Delegation for ari agents in C: see ari_delegation.h.
#include "ari_delegation.h"

#include <stdlib.h>
#include <string.h>

// A NUL-terminated copy of a WIT string (aborts when memory runs out, like the bindings).
static char *cstr(const ari_agent_string_t *s) {
  char *out = malloc(s->len + 1);
  if (!out) abort();
  memcpy(out, s->ptr, s->len);
  out[s->len] = 0;
  return out;
}

// The generated error as an ari_delegation_error_t; frees the generated one.
static ari_delegation_status_t failed(ainur_ari_host_delegation_error_t *e, ari_delegation_error_t *err) {
  *err = (ari_delegation_error_t){ARI_DELEGATION_OK, NULL, NULL};
  switch (e->tag) {
    case AINUR_ARI_TYPES_DELEGATION_ERROR_DENIED:
      err->status = ARI_DELEGATION_DENIED;
      err->message = cstr(&e->val.denied);
      break;
    case AINUR_ARI_TYPES_DELEGATION_ERROR_LIMIT_REACHED:
      err->status = ARI_DELEGATION_LIMIT_REACHED;
      err->message = cstr(&e->val.limit_reached);
      break;
    case AINUR_ARI_TYPES_DELEGATION_ERROR_UNAVAILABLE:
      err->status = ARI_DELEGATION_UNAVAILABLE;
      err->message = cstr(&e->val.unavailable);
      break;
    case AINUR_ARI_TYPES_DELEGATION_ERROR_BUDGET_EXHAUSTED:
      err->status = ARI_DELEGATION_BUDGET_EXHAUSTED;
      err->message = cstr(&e->val.budget_exhausted);
      break;
    case AINUR_ARI_TYPES_DELEGATION_ERROR_FAILED:
      err->status = ARI_DELEGATION_CHILD_FAILED;
      err->reason = cstr(&e->val.failed.reason);
      err->message = cstr(&e->val.failed.message);
      break;
    case AINUR_ARI_TYPES_DELEGATION_ERROR_INVALID_HANDLE:
      err->status = ARI_DELEGATION_INVALID_HANDLE;
      err->message = cstr(&e->val.invalid_handle);
      break;
    case AINUR_ARI_TYPES_DELEGATION_ERROR_REJECTED:
      err->status = ARI_DELEGATION_REJECTED;
      err->message = cstr(&e->val.rejected);
      break;
    default: {
      // A case added to the contract after this SDK: still an error, never OK.
      static const ari_agent_string_t unknown = {(uint8_t *)"unknown delegation error", 24};
      err->status = ARI_DELEGATION_UNAVAILABLE;
      err->message = cstr(&unknown);
    }
  }
  ainur_ari_host_delegation_error_free(e);
  return err->status;
}

static ainur_ari_host_child_budget_t child_budget(ari_budget_t b) {
  return (ainur_ari_host_child_budget_t){
      .fuel = {b.has_fuel, b.fuel},
      .timeout_millis = {b.has_timeout_millis, b.timeout_millis},
  };
}

static ari_delegation_status_t ok(ari_delegation_error_t *err) {
  *err = (ari_delegation_error_t){ARI_DELEGATION_OK, NULL, NULL};
  return ARI_DELEGATION_OK;
}

ari_delegation_status_t ari_delegate(const char *agent, const uint8_t *input, size_t input_len,
                                     ari_budget_t budget, ari_agent_list_u8_t *output,
                                     ari_delegation_error_t *err) {
  // The host only reads the arguments: the casts lend it the caller's buffers.
  ari_agent_string_t a = {(uint8_t *)agent, strlen(agent)};
  ari_agent_list_u8_t in = {(uint8_t *)input, input_len};
  ainur_ari_host_child_budget_t b = child_budget(budget);
  ainur_ari_host_delegation_error_t e;
  if (!ainur_ari_host_delegate(&a, &in, &b, output, &e)) return failed(&e, err);
  return ok(err);
}

ari_delegation_status_t ari_start_child(const char *agent, const uint8_t *input, size_t input_len,
                                        ari_budget_t budget, uint32_t *child,
                                        ari_delegation_error_t *err) {
  ari_agent_string_t a = {(uint8_t *)agent, strlen(agent)};
  ari_agent_list_u8_t in = {(uint8_t *)input, input_len};
  ainur_ari_host_child_budget_t b = child_budget(budget);
  ainur_ari_host_delegation_error_t e;
  if (!ainur_ari_host_start_child(&a, &in, &b, child, &e)) return failed(&e, err);
  return ok(err);
}

ari_delegation_status_t ari_await_child(uint32_t child, ari_agent_list_u8_t *output,
                                        ari_delegation_error_t *err) {
  ainur_ari_host_delegation_error_t e;
  if (!ainur_ari_host_await_child(child, output, &e)) return failed(&e, err);
  return ok(err);
}

ari_delegation_status_t ari_send_message(const char *agent, const uint8_t *input, size_t input_len,
                                         ari_budget_t budget, ari_delegation_error_t *err) {
  ari_agent_string_t a = {(uint8_t *)agent, strlen(agent)};
  ari_agent_list_u8_t in = {(uint8_t *)input, input_len};
  ainur_ari_host_child_budget_t b = child_budget(budget);
  ainur_ari_host_delegation_error_t e;
  if (!ainur_ari_host_send_message(&a, &in, &b, &e)) return failed(&e, err);
  return ok(err);
}

void ari_delegation_error_free(ari_delegation_error_t *err) {
  free(err->message);
  free(err->reason);
  err->message = NULL;
  err->reason = NULL;
}

const char *ari_delegation_status_name(ari_delegation_status_t status) {
  static const char *NAMES[] = {"ok", "denied", "limit-reached", "unavailable", "budget-exhausted",
                                "child-failed", "invalid-handle", "rejected"};
  return (unsigned)status < sizeof NAMES / sizeof *NAMES ? NAMES[status] : "unknown";
}
