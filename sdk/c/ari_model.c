// Language models for ari agents in C: see ari_model.h.
#include "ari_model.h"

#include <stdlib.h>
#include <string.h>

// malloc that aborts when memory runs out, like the bindings.
static void *alloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) abort();
  return p;
}

// A NUL-terminated copy of a WIT string.
static char *cstr(const ari_agent_string_t *s) {
  char *out = alloc(s->len + 1);
  memcpy(out, s->ptr, s->len);
  out[s->len] = 0;
  return out;
}

// A WIT string owning a copy of `s`.
static ari_agent_string_t own(const char *s) {
  ari_agent_string_t out;
  ari_agent_string_dup(&out, s);
  return out;
}

static ari_agent_string_t own_n(const ari_agent_string_t *s) {
  ari_agent_string_t out = {alloc(s->len), s->len};
  memcpy(out.ptr, s->ptr, s->len);
  return out;
}

static ari_agent_option_string_t own_option(const ari_agent_option_string_t *s) {
  ari_agent_option_string_t out = {0};
  if (s->is_some) {
    out.is_some = true;
    out.val = own_n(&s->val);
  }
  return out;
}

// Grows a generated list by one element of `size` bytes and returns the new element, zeroed.
static void *push(void **ptr, size_t *len, size_t size) {
  void *grown = realloc(*ptr, (*len + 1) * size);
  if (!grown) abort();
  *ptr = grown;
  void *slot = (char *)grown + *len * size;
  memset(slot, 0, size);
  (*len)++;
  return slot;
}

static ainur_ari_model_message_t *new_message(ari_chat_request_t *req) {
  return push((void **)&req->messages.ptr, &req->messages.len, sizeof *req->messages.ptr);
}

void ari_chat_request_init(ari_chat_request_t *req, const char *model) {
  memset(req, 0, sizeof *req);
  req->model = own(model);
}

void ari_chat_request_add_message(ari_chat_request_t *req, ainur_ari_model_role_t role, const char *content) {
  ainur_ari_model_message_t *m = new_message(req);
  m->role = role;
  m->content.is_some = true;
  m->content.val = own(content);
}

void ari_chat_request_add_answer(ari_chat_request_t *req, const ainur_ari_model_message_t *message) {
  ainur_ari_model_message_t *m = new_message(req);
  m->role = message->role;
  m->content = own_option(&message->content);
  m->tool_call_id = own_option(&message->tool_call_id);
  for (size_t i = 0; i < message->tool_calls.len; i++) {
    const ainur_ari_model_tool_call_t *from = &message->tool_calls.ptr[i];
    ainur_ari_model_tool_call_t *call =
        push((void **)&m->tool_calls.ptr, &m->tool_calls.len, sizeof *m->tool_calls.ptr);
    call->id = own_n(&from->id);
    call->name = own_n(&from->name);
    call->arguments = own_n(&from->arguments);
  }
}

void ari_chat_request_add_tool_result(ari_chat_request_t *req, const char *call_id, const char *content) {
  ari_chat_request_add_message(req, AINUR_ARI_MODEL_ROLE_TOOL, content);
  ainur_ari_model_message_t *m = &req->messages.ptr[req->messages.len - 1];
  m->tool_call_id.is_some = true;
  m->tool_call_id.val = own(call_id);
}

void ari_chat_request_add_tool(ari_chat_request_t *req, const char *name, const char *description,
                               const char *parameters) {
  ainur_ari_model_tool_definition_t *t = push((void **)&req->tools.ptr, &req->tools.len, sizeof *req->tools.ptr);
  t->name = own(name);
  if (description) {
    t->description.is_some = true;
    t->description.val = own(description);
  }
  t->parameters = own(parameters);
}

void ari_chat_request_tool_choice(ari_chat_request_t *req, uint8_t choice, const char *name) {
  ainur_ari_model_option_tool_choice_free(&req->tool_choice);
  req->tool_choice.is_some = true;
  req->tool_choice.val.tag = choice;
  if (choice == AINUR_ARI_MODEL_TOOL_CHOICE_FUNCTION) req->tool_choice.val.val.function = own(name ? name : "");
}

void ari_chat_request_free(ari_chat_request_t *req) { ainur_ari_model_chat_request_free(req); }

// The generated error as an ari_model_error_t; frees the generated one.
static ari_model_status_t failed(ainur_ari_model_model_error_t *e, ari_model_error_t *err) {
  *err = (ari_model_error_t){0};
  switch (e->tag) {
    case AINUR_ARI_MODEL_MODEL_ERROR_DENIED:
      err->status = ARI_MODEL_DENIED;
      err->message = cstr(&e->val.denied);
      break;
    case AINUR_ARI_MODEL_MODEL_ERROR_BUDGET_EXHAUSTED:
      err->status = ARI_MODEL_BUDGET_EXHAUSTED;
      err->message = cstr(&e->val.budget_exhausted);
      break;
    case AINUR_ARI_MODEL_MODEL_ERROR_RATE_LIMITED:
      err->status = ARI_MODEL_RATE_LIMITED;
      err->message = cstr(&e->val.rate_limited.message);
      err->has_retry_after_millis = e->val.rate_limited.retry_after_millis.is_some;
      err->retry_after_millis = e->val.rate_limited.retry_after_millis.val;
      break;
    case AINUR_ARI_MODEL_MODEL_ERROR_UNAVAILABLE:
      err->status = ARI_MODEL_UNAVAILABLE;
      err->message = cstr(&e->val.unavailable);
      break;
    case AINUR_ARI_MODEL_MODEL_ERROR_INVALID_REQUEST:
      err->status = ARI_MODEL_INVALID_REQUEST;
      err->message = cstr(&e->val.invalid_request);
      break;
    case AINUR_ARI_MODEL_MODEL_ERROR_PROVIDER_ERROR:
      err->status = ARI_MODEL_PROVIDER_ERROR;
      err->message = cstr(&e->val.provider_error.message);
      err->http_status = e->val.provider_error.status;
      break;
    default: {
      // A case added to the contract after this SDK: still an error, never OK.
      static const ari_agent_string_t unknown = {(uint8_t *)"unknown model error", 19};
      err->status = ARI_MODEL_PROVIDER_ERROR;
      err->message = cstr(&unknown);
    }
  }
  ainur_ari_model_model_error_free(e);
  return err->status;
}

static ari_model_status_t ok(ari_model_error_t *err) {
  *err = (ari_model_error_t){0};
  return ARI_MODEL_OK;
}

ari_model_status_t ari_model_chat(const ari_chat_request_t *req, ainur_ari_model_chat_response_t *resp,
                                  ari_model_error_t *err) {
  ainur_ari_model_model_error_t e;
  // The host only reads the request: the cast lends it the caller's.
  if (!ainur_ari_model_chat((ari_chat_request_t *)req, resp, &e)) return failed(&e, err);
  return ok(err);
}

ari_model_status_t ari_model_embed(const char *model, const char *const *inputs, size_t n, uint32_t dimensions,
                                   ainur_ari_model_embedding_response_t *resp, ari_model_error_t *err) {
  // Borrowed views of the caller's strings, for the call only.
  ari_agent_string_t *views = alloc(n * sizeof *views);
  for (size_t i = 0; i < n; i++) views[i] = (ari_agent_string_t){(uint8_t *)inputs[i], strlen(inputs[i])};
  ainur_ari_model_embedding_request_t req = {
      .model = {(uint8_t *)model, strlen(model)},
      .inputs = {views, n},
      .dimensions = {dimensions != 0, dimensions},
  };
  ainur_ari_model_model_error_t e;
  bool done = ainur_ari_model_embed(&req, resp, &e);
  free(views);
  if (!done) return failed(&e, err);
  return ok(err);
}

void ari_model_error_free(ari_model_error_t *err) {
  free(err->message);
  err->message = NULL;
}

const char *ari_model_status_name(ari_model_status_t status) {
  static const char *NAMES[] = {"ok",          "denied",          "budget-exhausted", "rate-limited",
                                "unavailable", "invalid-request", "provider-error"};
  return (unsigned)status < sizeof NAMES / sizeof *NAMES ? NAMES[status] : "unknown";
}

const char *ari_finish_reason_name(ainur_ari_model_finish_reason_t reason) {
  static const char *NAMES[] = {"stop", "length", "tool-calls", "content-filter", "other"};
  return (unsigned)reason < sizeof NAMES / sizeof *NAMES ? NAMES[reason] : "other";
}
