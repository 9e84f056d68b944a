// MCP tools for ari agents in C: see ari_tools.h.
#include "ari_tools.h"

#include <stdlib.h>
#include <string.h>

// The generated error as an ari_tools_error_t; frees the generated one. Every case holds one
// string, at the same place in the union.
static ari_tools_status_t failed(ainur_ari_tools_tool_error_t *e, ari_tools_error_t *err) {
  // A case added to the contract after this SDK: still an error, never OK.
  err->status = e->tag <= AINUR_ARI_TOOLS_TOOL_ERROR_REJECTED ? (ari_tools_status_t)(e->tag + 1)
                                                               : ARI_TOOLS_SERVER_ERROR;
  const ari_agent_string_t *text = &e->val.denied;
  err->message = malloc(text->len + 1);
  if (!err->message) abort();
  memcpy(err->message, text->ptr, text->len);
  err->message[text->len] = 0;
  ainur_ari_tools_tool_error_free(e);
  return err->status;
}

// A borrowed view of a C string, for the call only (the host only reads it).
static ari_agent_string_t view(const char *s) { return (ari_agent_string_t){(uint8_t *)s, strlen(s)}; }

ari_tools_status_t ari_tools_list(const char *server, ainur_ari_tools_list_tool_info_t *tools,
                                  ari_tools_error_t *err) {
  *err = (ari_tools_error_t){0};
  ari_agent_string_t s = view(server);
  ainur_ari_tools_tool_error_t e;
  if (!ainur_ari_tools_list_tools(&s, tools, &e)) return failed(&e, err);
  return ARI_TOOLS_OK;
}

ari_tools_status_t ari_tools_call(const char *server, const char *tool, const char *arguments,
                                  ainur_ari_tools_tool_result_t *result, ari_tools_error_t *err) {
  *err = (ari_tools_error_t){0};
  ari_agent_string_t s = view(server), t = view(tool), a = view(arguments ? arguments : "");
  ainur_ari_tools_tool_error_t e;
  if (!ainur_ari_tools_call_tool(&s, &t, &a, result, &e)) return failed(&e, err);
  return ARI_TOOLS_OK;
}

void ari_tools_error_free(ari_tools_error_t *err) {
  free(err->message);
  err->message = NULL;
}

const char *ari_tools_status_name(ari_tools_status_t status) {
  static const char *NAMES[] = {"ok",          "denied",  "not-found", "invalid-arguments",
                                "unavailable", "timeout", "too-large", "server-error",
                                "rejected"};
  return (unsigned)status < sizeof NAMES / sizeof *NAMES ? NAMES[status] : "unknown";
}
