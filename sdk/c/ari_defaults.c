// Defaults for the three optional exports of an ari agent in C, so an agent defines only
// `exports_ainur_ari_agent_execute`: link this file beside the agent and the bindings of
// `wit-bindgen c wit --world ari-agent`. Each default is weak; an agent's own definition wins.
#include <string.h>

#include "ari_agent.h"

__attribute__((weak)) bool exports_ainur_ari_agent_initialize(ari_agent_list_u8_t *config,
                                                              exports_ainur_ari_agent_error_code_t *err) {
  (void)err;
  ari_agent_list_u8_free(config);
  return true;
}

__attribute__((weak)) bool exports_ainur_ari_agent_can_execute(exports_ainur_ari_agent_task_spec_t *task) {
  exports_ainur_ari_agent_task_spec_free(task);
  return true;
}

__attribute__((weak)) bool exports_ainur_ari_agent_estimate(exports_ainur_ari_agent_task_spec_t *task,
                                                            exports_ainur_ari_agent_estimation_t *ret,
                                                            exports_ainur_ari_agent_error_code_t *err) {
  (void)ret;
  exports_ainur_ari_agent_task_spec_free(task);
  err->tag = AINUR_ARI_TYPES_ERROR_CODE_UNSUPPORTED;
  ari_agent_string_dup(&err->val.unsupported, "this agent gives no estimate");
  return false;
}
