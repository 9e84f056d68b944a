// MCP tools for ari agents in C (capability `tools`): the servers this Agent is granted, the
// tools it may call on each, and calls with JSON arguments. A thin layer over the generated
// `ainur_ari_tools_list_tools` and `_call_tool` (ari_agent.h from `wit-bindgen c`) that takes C
// strings, returns one status per case of the WIT's `tool-error` and hands the error's text back
// as a NUL-terminated string. Answers are the generated records
// (`ainur_ari_tools_list_tool_info_t`, `ainur_ari_tools_tool_result_t`), freed with their
// generated `_free`. The host is the MCP client and holds the servers' credentials: the agent
// only names a server and a tool. Link ari_tools.c beside the agent.
#ifndef ARI_TOOLS_H
#define ARI_TOOLS_H

#include "ari_agent.h"

#ifdef __cplusplus
extern "C" {
#endif

// How a tools call ended: OK, or the case of `tool-error`.
typedef enum ari_tools_status {
  ARI_TOOLS_OK = 0,
  // The server or the tool is not granted. Ends the task CapabilityDenied.
  ARI_TOOLS_DENIED,
  // The server offers no such tool.
  ARI_TOOLS_NOT_FOUND,
  // The arguments are not a JSON object, too large, or the server refused them.
  ARI_TOOLS_INVALID_ARGUMENTS,
  // The server is not configured, not reachable, or refused the host's credentials.
  ARI_TOOLS_UNAVAILABLE,
  // No answer within the call's time limit.
  ARI_TOOLS_TIMEOUT,
  // The answer is over the host's size bound.
  ARI_TOOLS_TOO_LARGE,
  // The server answered with an error.
  ARI_TOOLS_SERVER_ERROR,
  // A person rejected the call, which needed approval; nothing was sent.
  ARI_TOOLS_REJECTED,
} ari_tools_status_t;

// Why a call failed. `message` is NUL-terminated and owned by the struct: release it with
// ari_tools_error_free.
typedef struct ari_tools_error {
  ari_tools_status_t status;
  char *message;
} ari_tools_error_t;

// The servers this Agent is granted: `ainur_ari_tools_servers(&list)` (generated; free the list
// with `ari_agent_list_string_free`).

// The tools of `server` this Agent may call. On success `*tools` is the caller's
// (`ainur_ari_tools_list_tool_info_free`); on failure `*err` says why.
ari_tools_status_t ari_tools_list(const char *server, ainur_ari_tools_list_tool_info_t *tools,
                                  ari_tools_error_t *err);

// Calls `tool` of `server` with `arguments`, a JSON object as text ("" for none). On success
// `*result` is the caller's (`ainur_ari_tools_tool_result_free`); a tool that failed in its own
// terms is a success with `result->is_error` set.
ari_tools_status_t ari_tools_call(const char *server, const char *tool, const char *arguments,
                                  ainur_ari_tools_tool_result_t *result, ari_tools_error_t *err);

// Frees the message of an error filled in by a failed call (and nothing on a zeroed one).
void ari_tools_error_free(ari_tools_error_t *err);

// The status as the WIT spells it ("denied", "not-found", ..., "ok").
const char *ari_tools_status_name(ari_tools_status_t status);

#ifdef __cplusplus
}
#endif

#endif
