// Language models for ari agents in C (capability `models`): chat with tools, embeddings, and
// the models this Agent is granted. A thin layer over the generated `ainur_ari_model_chat` and
// `_embed` (ari_agent.h from `wit-bindgen c`) that builds requests from C strings, returns one
// status per case of the WIT's `model-error` and hands the error's text back as a
// NUL-terminated string, so an agent can branch on the status without touching the generated
// unions. Answers are the generated records (`ainur_ari_model_chat_response_t`, ...), freed with
// their generated `_free`. Link ari_model.c beside the agent.
#ifndef ARI_MODEL_H
#define ARI_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ari_agent.h"

#ifdef __cplusplus
extern "C" {
#endif

// How a model call ended: OK, or the case of `model-error`.
typedef enum ari_model_status {
  ARI_MODEL_OK = 0,
  // The Agent is not granted that model. Ends the task CapabilityDenied.
  ARI_MODEL_DENIED,
  // The task's token budget cannot cover the prompt; nothing was sent.
  ARI_MODEL_BUDGET_EXHAUSTED,
  // The provider still refused after the host's retries: `retry_after_millis` if it said when.
  ARI_MODEL_RATE_LIMITED,
  // The endpoint could not be reached or did not answer in time.
  ARI_MODEL_UNAVAILABLE,
  // The request is malformed, or the provider rejected it as such.
  ARI_MODEL_INVALID_REQUEST,
  // The provider failed otherwise: `http_status` is its status (200: an unreadable answer).
  ARI_MODEL_PROVIDER_ERROR,
} ari_model_status_t;

// Why a call failed. `message` is NUL-terminated and owned by the struct: release it with
// ari_model_error_free.
typedef struct ari_model_error {
  ari_model_status_t status;
  char *message;
  // ARI_MODEL_RATE_LIMITED: the wait the provider named, if it named one.
  bool has_retry_after_millis;
  uint64_t retry_after_millis;
  // ARI_MODEL_PROVIDER_ERROR: the provider's HTTP status.
  uint16_t http_status;
} ari_model_error_t;

// A chat request, the generated record. Build it with the functions below, which copy every
// string they take, and set the optional fields directly (`req.max_tokens =
// (ari_agent_option_u32_t){true, 256}`, `temperature`, `seed`); free it with
// ari_chat_request_free.
typedef ainur_ari_model_chat_request_t ari_chat_request_t;

// An empty request to `model` (a ModelConfig name the Agent is granted).
void ari_chat_request_init(ari_chat_request_t *req, const char *model);

// Appends a message of `role` (AINUR_ARI_MODEL_ROLE_SYSTEM, _USER, _ASSISTANT) with `content`.
void ari_chat_request_add_message(ari_chat_request_t *req, ainur_ari_model_role_t role, const char *content);

// Appends a copy of an answer's message (`resp.message`), tool calls included: how a
// conversation or a tool loop goes on.
void ari_chat_request_add_answer(ari_chat_request_t *req, const ainur_ari_model_message_t *message);

// Appends the result `content` of the tool call `call_id` (a tool call's `id`).
void ari_chat_request_add_tool_result(ari_chat_request_t *req, const char *call_id, const char *content);

// Offers a tool: `parameters` is the JSON Schema of its arguments as JSON text; `description`
// may be NULL.
void ari_chat_request_add_tool(ari_chat_request_t *req, const char *name, const char *description,
                               const char *parameters);

// Whether and which tool the model must call: AINUR_ARI_MODEL_TOOL_CHOICE_AUTO, _NONE,
// _REQUIRED, or _FUNCTION with the tool's `name` (ignored otherwise).
void ari_chat_request_tool_choice(ari_chat_request_t *req, uint8_t choice, const char *name);

// Frees everything the request holds.
void ari_chat_request_free(ari_chat_request_t *req);

// One chat completion. On success `*resp` is the caller's (`ainur_ari_model_chat_response_free`);
// on failure `*err` says why and `*resp` is untouched. The request stays the caller's.
ari_model_status_t ari_model_chat(const ari_chat_request_t *req, ainur_ari_model_chat_response_t *resp,
                                  ari_model_error_t *err);

// Vectors for `inputs[0..n]` from `model`, one per input in input order; `dimensions` 0 leaves
// the size to the model. `*resp` is the caller's (`ainur_ari_model_embedding_response_free`).
ari_model_status_t ari_model_embed(const char *model, const char *const *inputs, size_t n, uint32_t dimensions,
                                   ainur_ari_model_embedding_response_t *resp, ari_model_error_t *err);

// The names of the models this Agent is granted: `ainur_ari_model_models(&list)`
// (generated; free the list with `ari_agent_list_string_free`).

// Frees the message of an error filled in by a failed call (and nothing on a zeroed one).
void ari_model_error_free(ari_model_error_t *err);

// The status as the WIT spells it ("denied", "budget-exhausted", ..., "ok").
const char *ari_model_status_name(ari_model_status_t status);

// A finish reason as the WIT spells it ("stop", "length", "tool-calls", "content-filter", "other").
const char *ari_finish_reason_name(ainur_ari_model_finish_reason_t reason);

#ifdef __cplusplus
}
#endif

#endif
