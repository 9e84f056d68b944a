// The conformance agent in C: one command per task (conformance/README.md).
//
// Bindings come from `wit-bindgen c wit --world ari-agent` (ari_agent.h), the optional exports
// from sdk/c/ari_defaults.c, delegation from sdk/c/ari_delegation.c, models from
// sdk/c/ari_model.c; scripts/build-guests.sh
// compiles this file with Debian's clang against wasi-libc and turns the core module into a
// component with `wasm-tools component embed` + `component new`. Only malloc and the string
// functions of libc are used (no stdio), so the module imports nothing of WASI and needs no adapter.
#include <stdlib.h>
#include <string.h>

#include "ari_agent.h"
#include "ari_delegation.h"
#include "ari_model.h"
#include "ari_tools.h"

// The SDK-level error kinds of the protocol.
enum kind {
  OK = 0,
  DENIED,
  QUOTA_EXCEEDED,
  INVALID,
  UNSUPPORTED,
  FAILED,
  UNAVAILABLE,
  LIMIT_REACHED,
  BUDGET_EXHAUSTED,
  CHILD_FAILED,
  // The model-error cases the kinds above do not name.
  RATE_LIMITED,
  INVALID_REQUEST,
  PROVIDER_ERROR,
  // The tool-error cases the kinds above do not name (`rejected` is also http-error's and
  // delegation-error's).
  NOT_FOUND,
  INVALID_ARGUMENTS,
  TIMEOUT,
  TOO_LARGE,
  SERVER_ERROR,
  REJECTED,
};
static const char *KIND_NAMES[] = {"ok",           "denied",          "quota-exceeded", "invalid",
                                   "unsupported",  "failed",          "unavailable",    "limit-reached",
                                   "budget-exhausted", "child-failed", "rate-limited",   "invalid-request",
                                   "provider-error", "not-found", "invalid-arguments", "timeout",
                                   "too-large", "server-error", "rejected"};

// What a command produced: its output, or its error kind and message (and a failed child's
// reason).
struct result {
  char *buf;
  size_t len, cap;
  enum kind kind;
  char message[256];
  char reason[64];
  // A rate limit's wait (if named) and a provider's status.
  bool has_retry_after;
  uint64_t retry_after_millis;
  uint16_t http_status;
};

static void put_bytes(struct result *r, const void *data, size_t len) {
  if (r->len + len > r->cap) {
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + len) cap *= 2;
    r->buf = realloc(r->buf, cap);
    if (!r->buf) abort();
    r->cap = cap;
  }
  memcpy(r->buf + r->len, data, len);
  r->len += len;
}

static void put(struct result *r, const char *s) { put_bytes(r, s, strlen(s)); }

static void put_u64(struct result *r, uint64_t n) {
  char digits[20];
  size_t i = sizeof digits;
  do {
    digits[--i] = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  put_bytes(r, digits + i, sizeof digits - i);
}

static void put_hex(struct result *r, const uint8_t *data, size_t len) {
  static const char DIGITS[] = "0123456789abcdef";
  for (size_t i = 0; i < len; i++) {
    char pair[2] = {DIGITS[data[i] >> 4], DIGITS[data[i] & 15]};
    put_bytes(r, pair, 2);
  }
}

static enum kind fail(struct result *r, enum kind kind, const char *message, size_t len) {
  if (len >= sizeof r->message) len = sizeof r->message - 1;
  memcpy(r->message, message, len);
  r->message[len] = 0;
  r->kind = kind;
  return kind;
}

static enum kind failf(struct result *r, enum kind kind, const char *message) {
  return fail(r, kind, message, strlen(message));
}

// Host errors to kinds, freeing the host's string.
static enum kind from_error_code(struct result *r, ainur_ari_host_error_code_t *e) {
  static const enum kind BY_TAG[] = {DENIED, INVALID, UNSUPPORTED, FAILED};
  enum kind k = e->tag < 4 ? BY_TAG[e->tag] : FAILED;
  fail(r, k, (const char *)e->val.failed.ptr, e->val.failed.len);
  ainur_ari_host_error_code_free(e);
  return k;
}

static enum kind from_storage_error(struct result *r, ainur_ari_host_storage_error_t *e) {
  static const enum kind BY_TAG[] = {DENIED, QUOTA_EXCEEDED, INVALID, FAILED};
  enum kind k = e->tag < 4 ? BY_TAG[e->tag] : FAILED;
  fail(r, k, (const char *)e->val.failed.ptr, e->val.failed.len);
  ainur_ari_host_storage_error_free(e);
  return k;
}

static enum kind from_http_error(struct result *r, ainur_ari_host_http_error_t *e) {
  static const enum kind BY_TAG[] = {DENIED, INVALID, FAILED, REJECTED};
  enum kind k = e->tag < 4 ? BY_TAG[e->tag] : FAILED;
  fail(r, k, (const char *)e->val.failed.ptr, e->val.failed.len);
  ainur_ari_host_http_error_free(e);
  return k;
}

// A delegation error to its kind (an invalid handle is `invalid`, as in every SDK), freeing it.
static enum kind from_delegation_error(struct result *r, ari_delegation_error_t *e) {
  static const enum kind BY_STATUS[] = {
      [ARI_DELEGATION_DENIED] = DENIED,
      [ARI_DELEGATION_LIMIT_REACHED] = LIMIT_REACHED,
      [ARI_DELEGATION_UNAVAILABLE] = UNAVAILABLE,
      [ARI_DELEGATION_BUDGET_EXHAUSTED] = BUDGET_EXHAUSTED,
      [ARI_DELEGATION_CHILD_FAILED] = CHILD_FAILED,
      [ARI_DELEGATION_INVALID_HANDLE] = INVALID,
      [ARI_DELEGATION_REJECTED] = REJECTED,
  };
  enum kind k = e->status > ARI_DELEGATION_OK && e->status <= ARI_DELEGATION_REJECTED ? BY_STATUS[e->status] : FAILED;
  if (k == CHILD_FAILED) {
    // "child failed with REASON: MESSAGE", as the other SDKs say it.
    char text[sizeof r->message];
    size_t n = 0;
    const char *parts[] = {"child failed with ", e->reason, ": ", e->message};
    for (size_t i = 0; i < 4; i++) {
      size_t len = strlen(parts[i]);
      if (len > sizeof text - 1 - n) len = sizeof text - 1 - n;
      memcpy(text + n, parts[i], len);
      n += len;
    }
    fail(r, k, text, n);
    size_t len = strlen(e->reason);
    if (len >= sizeof r->reason) len = sizeof r->reason - 1;
    memcpy(r->reason, e->reason, len);
    r->reason[len] = 0;
  } else {
    fail(r, k, e->message, strlen(e->message));
  }
  ari_delegation_error_free(e);
  return k;
}

// A model error to its kind (spelt as the WIT's model-error case), freeing it.
static enum kind from_model_error(struct result *r, ari_model_error_t *e) {
  static const enum kind BY_STATUS[] = {
      [ARI_MODEL_DENIED] = DENIED,
      [ARI_MODEL_BUDGET_EXHAUSTED] = BUDGET_EXHAUSTED,
      [ARI_MODEL_RATE_LIMITED] = RATE_LIMITED,
      [ARI_MODEL_UNAVAILABLE] = UNAVAILABLE,
      [ARI_MODEL_INVALID_REQUEST] = INVALID_REQUEST,
      [ARI_MODEL_PROVIDER_ERROR] = PROVIDER_ERROR,
  };
  enum kind k = e->status > ARI_MODEL_OK && e->status <= ARI_MODEL_PROVIDER_ERROR ? BY_STATUS[e->status] : FAILED;
  r->has_retry_after = e->has_retry_after_millis;
  r->retry_after_millis = e->retry_after_millis;
  r->http_status = e->http_status;
  if (k == PROVIDER_ERROR) {
    // "model provider error (HTTP STATUS): MESSAGE", as the other SDKs say it.
    struct result text = {0};
    put(&text, "model provider error (HTTP ");
    put_u64(&text, e->http_status);
    put(&text, "): ");
    put(&text, e->message);
    fail(r, k, text.buf, text.len);
    free(text.buf);
  } else {
    fail(r, k, e->message, strlen(e->message));
  }
  ari_model_error_free(e);
  return k;
}

// Splits off the first space-separated word of `s` (NUL-terminating it); `*rest` is the rest.
static char *word(char *s, char **rest) {
  char *space = strchr(s, ' ');
  if (space) {
    *space = 0;
    *rest = space + 1;
  } else {
    *rest = s + strlen(s);
  }
  return s;
}

static ari_agent_string_t str(const char *s) { return (ari_agent_string_t){(uint8_t *)s, strlen(s)}; }
static ari_agent_list_u8_t bytes(const char *s) { return (ari_agent_list_u8_t){(uint8_t *)s, strlen(s)}; }

static int number(const char *text, uint32_t *out) {
  if (!*text) return 0;
  uint64_t n = 0;
  for (const char *p = text; *p; p++) {
    if (*p < '0' || *p > '9' || n > UINT32_MAX) return 0;
    n = n * 10 + (uint64_t)(*p - '0');
  }
  if (n > UINT32_MAX) return 0;
  *out = (uint32_t)n;
  return 1;
}

// A budget bound: a number, or `-` for the default share.
static int bound(const char *text, bool *has, uint64_t *out) {
  *has = false;
  *out = 0;
  if (strcmp(text, "-") == 0) return 1;
  if (!*text) return 0;
  uint64_t n = 0;
  for (const char *p = text; *p; p++) {
    if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10) return 0;
    n = n * 10 + (uint64_t)(*p - '0');
  }
  *has = true;
  *out = n;
  return 1;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes hex into a malloc'd list; 0 if `text` is not hex.
static int unhex(const char *text, ari_agent_list_u8_t *out) {
  size_t len = strlen(text);
  if (len % 2) return 0;
  out->len = len / 2;
  out->ptr = malloc(out->len ? out->len : 1);
  if (!out->ptr) abort();
  for (size_t i = 0; i < out->len; i++) {
    int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      free(out->ptr);
      return 0;
    }
    out->ptr[i] = (uint8_t)(hi << 4 | lo);
  }
  return 1;
}

static enum kind cmd_log(struct result *r, char *rest) {
  static const char *LEVELS[] = {"trace", "debug", "info", "warn", "error"};
  char *message;
  char *level = word(rest, &message);
  for (uint8_t i = 0; i < 5; i++) {
    if (strcmp(level, LEVELS[i]) == 0) {
      ari_agent_string_t m = str(message);
      ainur_ari_host_log(i, &m);
      put(r, "logged");
      return OK;
    }
  }
  return failf(r, INVALID, "no such log level");
}

static enum kind cmd_storage(struct result *r, char *rest) {
  char *value;
  char *key = word(rest, &value);
  ari_agent_string_t k = str(key);
  ari_agent_list_u8_t v = bytes(value);
  ainur_ari_host_storage_error_t err;
  ari_agent_option_list_u8_t got;
  if (!ainur_ari_host_storage_set(&k, &v, &err)) return from_storage_error(r, &err);
  if (!ainur_ari_host_storage_get(&k, &got, &err)) return from_storage_error(r, &err);
  if (!got.is_some) return failf(r, FAILED, "a value just set is missing");
  put(r, "set:ok get:");
  put_bytes(r, got.val.ptr, got.val.len);
  ari_agent_option_list_u8_free(&got);
  if (!ainur_ari_host_storage_delete(&k, &err)) return from_storage_error(r, &err);
  if (!ainur_ari_host_storage_get(&k, &got, &err)) return from_storage_error(r, &err);
  put(r, got.is_some ? " delete:ok after:some" : " delete:ok after:none");
  ari_agent_option_list_u8_free(&got);
  return OK;
}

static enum kind cmd_storage_fill(struct result *r, char *rest) {
  char *n_text;
  char *key = word(rest, &n_text);
  uint32_t n;
  if (!number(n_text, &n)) return failf(r, INVALID, "not a number");
  ari_agent_string_t k = str(key);
  ari_agent_list_u8_t v = {malloc(n ? n : 1), n};
  if (!v.ptr) abort();
  memset(v.ptr, 'x', n);
  ainur_ari_host_storage_error_t err;
  bool ok = ainur_ari_host_storage_set(&k, &v, &err);
  free(v.ptr);
  if (!ok) return from_storage_error(r, &err);
  put(r, "ok");
  return OK;
}

static enum kind cmd_random(struct result *r, char *rest) {
  uint32_t n;
  if (!number(rest, &n)) return failf(r, INVALID, "not a number");
  ari_agent_list_u8_t out;
  ainur_ari_host_error_code_t err;
  if (!ainur_ari_host_random_bytes(n, &out, &err)) return from_error_code(r, &err);
  put_hex(r, out.ptr, out.len);
  ari_agent_list_u8_free(&out);
  return OK;
}

static enum kind cmd_hash(struct result *r, char *rest) {
  static const char *ALGORITHMS[] = {"sha256", "sha384", "sha512"};
  char *data;
  char *alg = word(rest, &data);
  for (uint8_t i = 0; i < 3; i++) {
    if (strcmp(alg, ALGORITHMS[i]) == 0) {
      ari_agent_list_u8_t d = bytes(data), out;
      ainur_ari_host_hash(i, &d, &out);
      put_hex(r, out.ptr, out.len);
      ari_agent_list_u8_free(&out);
      return OK;
    }
  }
  return failf(r, INVALID, "no such hash algorithm");
}

// Signs `message` into `*sig`; OK or the error kind.
static enum kind sign(struct result *r, const char *message, ari_agent_list_u8_t *sig) {
  ari_agent_list_u8_t m = bytes(message);
  ainur_ari_host_error_code_t err;
  if (!ainur_ari_host_sign(&m, sig, &err)) return from_error_code(r, &err);
  return OK;
}

static enum kind cmd_sign(struct result *r, char *rest) {
  ari_agent_list_u8_t sig;
  if (sign(r, rest, &sig) != OK) return r->kind;
  put_hex(r, sig.ptr, sig.len);
  ari_agent_list_u8_free(&sig);
  return OK;
}

static enum kind cmd_sign_verify(struct result *r, char *rest) {
  char *message;
  char *public_hex = word(rest, &message);
  ari_agent_list_u8_t public_key, sig;
  if (!unhex(public_hex, &public_key)) return failf(r, INVALID, "public key is not hex");
  if (sign(r, message, &sig) != OK) {
    free(public_key.ptr);
    return r->kind;
  }
  ari_agent_list_u8_t m = bytes(message);
  bool valid = ainur_ari_host_verify(&public_key, &m, &sig);
  size_t len = strlen(message);
  char *tampered_text = malloc(len + 2);
  if (!tampered_text) abort();
  memcpy(tampered_text, message, len);
  memcpy(tampered_text + len, "!", 2);
  ari_agent_list_u8_t t = bytes(tampered_text);
  bool tampered = ainur_ari_host_verify(&public_key, &t, &sig);
  free(tampered_text);
  free(public_key.ptr);
  ari_agent_list_u8_free(&sig);
  put(r, valid ? "valid:true" : "valid:false");
  put(r, tampered ? " tampered:true" : " tampered:false");
  return OK;
}

static enum kind cmd_verify(struct result *r, char *rest) {
  char *more, *message;
  char *public_hex = word(rest, &more);
  char *sig_hex = word(more, &message);
  ari_agent_list_u8_t public_key, sig;
  if (!unhex(public_hex, &public_key)) return failf(r, INVALID, "public key is not hex");
  if (!unhex(sig_hex, &sig)) {
    free(public_key.ptr);
    return failf(r, INVALID, "signature is not hex");
  }
  ari_agent_list_u8_t m = bytes(message);
  put(r, ainur_ari_host_verify(&public_key, &m, &sig) ? "true" : "false");
  free(public_key.ptr);
  free(sig.ptr);
  return OK;
}

static enum kind cmd_http(struct result *r, char *rest) {
  char *more, *body;
  char *method = word(rest, &more);
  char *url = word(more, &body);
  ainur_ari_host_outgoing_request_t req = {str(method), str(url), {NULL, 0}, bytes(body)};
  ainur_ari_host_incoming_response_t resp;
  ainur_ari_host_http_error_t err;
  if (!ainur_ari_host_http_request(&req, &resp, &err)) return from_http_error(r, &err);
  put(r, "status:");
  put_u64(r, resp.status);
  put(r, " body:");
  put_bytes(r, resp.body.ptr, resp.body.len);
  ainur_ari_host_incoming_response_free(&resp);
  return OK;
}

static enum kind cmd_now(struct result *r) {
  uint64_t first, second;
  ainur_ari_host_error_code_t err;
  if (!ainur_ari_host_now(&first, &err)) return from_error_code(r, &err);
  if (!ainur_ari_host_now(&second, &err)) return from_error_code(r, &err);
  put(r, "delta:");
  put_u64(r, second - first);
  return OK;
}

// The child's output, appended to the result; frees it.
static void put_output(struct result *r, ari_agent_list_u8_t *out) {
  put_bytes(r, out->ptr, out->len);
  ari_agent_list_u8_free(out);
}

static enum kind cmd_delegate(struct result *r, char *rest) {
  char *input;
  char *agent = word(rest, &input);
  ari_agent_list_u8_t out;
  ari_delegation_error_t err;
  if (ari_delegate(agent, (const uint8_t *)input, strlen(input), ARI_BUDGET_DEFAULT, &out, &err) != ARI_DELEGATION_OK)
    return from_delegation_error(r, &err);
  put_output(r, &out);
  return OK;
}

static enum kind cmd_delegate_budget(struct result *r, char *rest) {
  char *more, *tail, *input;
  char *fuel = word(rest, &more);
  char *millis = word(more, &tail);
  char *agent = word(tail, &input);
  ari_budget_t budget;
  if (!bound(fuel, &budget.has_fuel, &budget.fuel) ||
      !bound(millis, &budget.has_timeout_millis, &budget.timeout_millis))
    return failf(r, INVALID, "a budget bound is not a number or -");
  ari_agent_list_u8_t out;
  ari_delegation_error_t err;
  if (ari_delegate(agent, (const uint8_t *)input, strlen(input), budget, &out, &err) != ARI_DELEGATION_OK)
    return from_delegation_error(r, &err);
  put_output(r, &out);
  return OK;
}

// Every child is started before the first is awaited, so they run side by side.
static enum kind cmd_fan(struct result *r, char *rest) {
  enum { MAX_CHILDREN = 16 };
  char *inputs;
  char *agent = word(rest, &inputs);
  uint32_t children[MAX_CHILDREN];
  size_t n = 0;
  ari_delegation_error_t err;
  for (char *input = inputs;; n++) {
    if (n == MAX_CHILDREN) return failf(r, INVALID, "more than 16 inputs");
    char *sep = strstr(input, " | ");
    if (sep) *sep = 0;
    if (ari_start_child(agent, (const uint8_t *)input, strlen(input), ARI_BUDGET_DEFAULT, &children[n], &err) !=
        ARI_DELEGATION_OK)
      return from_delegation_error(r, &err);
    if (!sep) break;
    input = sep + 3;
  }
  for (size_t i = 0; i <= n; i++) {
    ari_agent_list_u8_t out;
    if (ari_await_child(children[i], &out, &err) != ARI_DELEGATION_OK) return from_delegation_error(r, &err);
    if (i) put(r, " | ");
    put_output(r, &out);
  }
  return OK;
}

static enum kind cmd_message(struct result *r, char *rest) {
  char *more, *input;
  char *fuel = word(rest, &more);
  char *agent = word(more, &input);
  ari_budget_t budget = ARI_BUDGET_DEFAULT;
  if (!bound(fuel, &budget.has_fuel, &budget.fuel)) return failf(r, INVALID, "fuel is not a number or -");
  ari_delegation_error_t err;
  if (ari_send_message(agent, (const uint8_t *)input, strlen(input), budget, &err) != ARI_DELEGATION_OK)
    return from_delegation_error(r, &err);
  put(r, "sent");
  return OK;
}

static enum kind cmd_await(struct result *r, char *rest) {
  uint32_t child;
  if (!number(rest, &child)) return failf(r, INVALID, "not a number");
  ari_agent_list_u8_t out;
  ari_delegation_error_t err;
  if (ari_await_child(child, &out, &err) != ARI_DELEGATION_OK) return from_delegation_error(r, &err);
  put_output(r, &out);
  return OK;
}

static void put_string(struct result *r, const ari_agent_string_t *s) { put_bytes(r, s->ptr, s->len); }

// `x` with 3 decimals, rounded half away from zero (the table's values are exact).
static void put_fixed3(struct result *r, float x) {
  double v = x;
  if (v < 0) {
    put(r, "-");
    v = -v;
  }
  uint64_t milli = (uint64_t)(v * 1000.0 + 0.5);
  put_u64(r, milli / 1000);
  char frac[4] = {(char)('0' + milli / 100 % 10), (char)('0' + milli / 10 % 10), (char)('0' + milli % 10), 0};
  put(r, ".");
  put(r, frac);
}

static void put_vector(struct result *r, const ari_agent_list_f32_t *v) {
  for (size_t i = 0; i < v->len; i++) {
    if (i) put(r, ",");
    put_fixed3(r, v->ptr[i]);
  }
}

static enum kind cmd_models(struct result *r) {
  ari_agent_list_string_t names;
  ainur_ari_model_models(&names);
  for (size_t i = 0; i < names.len; i++) {
    if (i) put(r, ",");
    put_string(r, &names.ptr[i]);
  }
  ari_agent_list_string_free(&names);
  return OK;
}

// The arguments of the conformance tool `lookup`, a JSON Schema.
static const char LOOKUP_PARAMETERS[] =
    "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}},\"required\":[\"q\"]}";

static void put_text(struct result *r, const ari_agent_option_string_t *content) {
  put(r, "text:");
  if (content->is_some) put_string(r, &content->val);
}

static enum kind cmd_model_chat(struct result *r, char *rest) {
  char *prompt;
  char *name = word(rest, &prompt);
  ari_chat_request_t req;
  ari_chat_request_init(&req, name);
  ari_chat_request_add_message(&req, AINUR_ARI_MODEL_ROLE_USER, prompt);
  ainur_ari_model_chat_response_t resp;
  ari_model_error_t err;
  ari_model_status_t status = ari_model_chat(&req, &resp, &err);
  ari_chat_request_free(&req);
  if (status != ARI_MODEL_OK) return from_model_error(r, &err);
  put(r, "finish:");
  put(r, ari_finish_reason_name(resp.finish_reason));
  put(r, " in:");
  put_u64(r, resp.usage.input_tokens);
  put(r, " out:");
  put_u64(r, resp.usage.output_tokens);
  put(r, " cached:");
  put_u64(r, resp.usage.cached_input_tokens);
  put(r, " model:");
  put_string(r, &resp.model);
  put(r, " ");
  put_text(r, &resp.message.content);
  ainur_ari_model_chat_response_free(&resp);
  return OK;
}

// A tool loop of one round: the model calls `lookup`, gets `42`, and answers.
static enum kind cmd_model_tools(struct result *r, char *rest) {
  char *prompt;
  char *name = word(rest, &prompt);
  ari_chat_request_t req;
  ari_chat_request_init(&req, name);
  ari_chat_request_add_message(&req, AINUR_ARI_MODEL_ROLE_USER, prompt);
  ari_chat_request_add_tool(&req, "lookup", "looks a word up", LOOKUP_PARAMETERS);
  ari_chat_request_tool_choice(&req, AINUR_ARI_MODEL_TOOL_CHOICE_REQUIRED, NULL);
  ainur_ari_model_chat_response_t first, last;
  ari_model_error_t err;
  if (ari_model_chat(&req, &first, &err) != ARI_MODEL_OK) {
    ari_chat_request_free(&req);
    return from_model_error(r, &err);
  }
  put(r, "finish:");
  put(r, ari_finish_reason_name(first.finish_reason));
  const ainur_ari_model_list_tool_call_t *calls = &first.message.tool_calls;
  for (size_t i = 0; i < calls->len; i++) {
    put(r, " call:");
    put_string(r, &calls->ptr[i].id);
    put(r, ":");
    put_string(r, &calls->ptr[i].name);
    put(r, ":");
    put_string(r, &calls->ptr[i].arguments);
  }
  ari_chat_request_add_answer(&req, &first.message);
  for (size_t i = 0; i < calls->len; i++) {
    char *id = malloc(calls->ptr[i].id.len + 1);
    if (!id) abort();
    memcpy(id, calls->ptr[i].id.ptr, calls->ptr[i].id.len);
    id[calls->ptr[i].id.len] = 0;
    ari_chat_request_add_tool_result(&req, id, "42");
    free(id);
  }
  ainur_ari_model_chat_response_free(&first);
  ari_model_status_t status = ari_model_chat(&req, &last, &err);
  ari_chat_request_free(&req);
  if (status != ARI_MODEL_OK) return from_model_error(r, &err);
  put(r, " then:");
  put(r, ari_finish_reason_name(last.finish_reason));
  put(r, " ");
  put_text(r, &last.message.content);
  ainur_ari_model_chat_response_free(&last);
  return OK;
}

static enum kind cmd_model_embed(struct result *r, char *rest) {
  enum { MAX_INPUTS = 16 };
  char *inputs_text;
  char *name = word(rest, &inputs_text);
  const char *inputs[MAX_INPUTS];
  size_t n = 0;
  for (char *input = inputs_text;;) {
    if (n == MAX_INPUTS) return failf(r, INVALID, "more than 16 inputs");
    inputs[n++] = input;
    char *sep = strstr(input, " | ");
    if (!sep) break;
    *sep = 0;
    input = sep + 3;
  }
  ainur_ari_model_embedding_response_t resp;
  ari_model_error_t err;
  if (ari_model_embed(name, inputs, n, 0, &resp, &err) != ARI_MODEL_OK) return from_model_error(r, &err);
  const ari_agent_list_list_f32_t *vectors = &resp.embeddings;
  put(r, "vectors:");
  put_u64(r, vectors->len);
  put(r, " dims:");
  put_u64(r, vectors->len ? vectors->ptr[0].len : 0);
  put(r, " first:");
  if (vectors->len) put_vector(r, &vectors->ptr[0]);
  put(r, " last:");
  if (vectors->len) put_vector(r, &vectors->ptr[vectors->len - 1]);
  put(r, " in:");
  put_u64(r, resp.usage.input_tokens);
  put(r, " model:");
  put_string(r, &resp.model);
  ainur_ari_model_embedding_response_free(&resp);
  return OK;
}

// A tools error to its kind, freeing its message.
static enum kind from_tools_error(struct result *r, ari_tools_error_t *err) {
  static const enum kind BY_STATUS[] = {
      [ARI_TOOLS_DENIED] = DENIED,       [ARI_TOOLS_NOT_FOUND] = NOT_FOUND,
      [ARI_TOOLS_INVALID_ARGUMENTS] = INVALID_ARGUMENTS, [ARI_TOOLS_UNAVAILABLE] = UNAVAILABLE,
      [ARI_TOOLS_TIMEOUT] = TIMEOUT,     [ARI_TOOLS_TOO_LARGE] = TOO_LARGE,
      [ARI_TOOLS_SERVER_ERROR] = SERVER_ERROR, [ARI_TOOLS_REJECTED] = REJECTED,
  };
  enum kind k = (unsigned)err->status < sizeof BY_STATUS / sizeof *BY_STATUS ? BY_STATUS[err->status] : SERVER_ERROR;
  failf(r, k, err->message ? err->message : "");
  ari_tools_error_free(err);
  return k;
}

static enum kind cmd_tools(struct result *r) {
  ari_agent_list_string_t servers;
  ainur_ari_tools_servers(&servers);
  for (size_t i = 0; i < servers.len; i++) {
    if (i) put(r, ",");
    put_string(r, &servers.ptr[i]);
  }
  ari_agent_list_string_free(&servers);
  return OK;
}

static enum kind cmd_tool_list(struct result *r, char *server) {
  ainur_ari_tools_list_tool_info_t tools;
  ari_tools_error_t err;
  if (ari_tools_list(server, &tools, &err) != ARI_TOOLS_OK) return from_tools_error(r, &err);
  for (size_t i = 0; i < tools.len; i++) {
    const ainur_ari_tools_tool_hints_t *h = &tools.ptr[i].hints;
    if (i) put(r, ",");
    put_string(r, &tools.ptr[i].name);
    if (h->read_only.is_some && h->read_only.val) put(r, ":read-only");
    if (h->destructive.is_some && h->destructive.val) put(r, ":destructive");
  }
  ainur_ari_tools_list_tool_info_free(&tools);
  return OK;
}

static enum kind cmd_tool_call(struct result *r, char *rest) {
  char *more, *arguments;
  char *server = word(rest, &more);
  char *tool = word(more, &arguments);
  ainur_ari_tools_tool_result_t result;
  ari_tools_error_t err;
  if (ari_tools_call(server, tool, arguments, &result, &err) != ARI_TOOLS_OK) return from_tools_error(r, &err);
  put(r, result.is_error ? "error:true text:" : "error:false text:");
  put_string(r, &result.text);
  ainur_ari_tools_tool_result_free(&result);
  return OK;
}

static enum kind command(struct result *r, char *line) {
  char *rest;
  char *op = word(line, &rest);
  if (strcmp(op, "echo") == 0) {
    put(r, rest);
    return OK;
  }
  if (strcmp(op, "log") == 0) return cmd_log(r, rest);
  if (strcmp(op, "storage") == 0) return cmd_storage(r, rest);
  if (strcmp(op, "storage-fill") == 0) return cmd_storage_fill(r, rest);
  if (strcmp(op, "random") == 0) return cmd_random(r, rest);
  if (strcmp(op, "hash") == 0) return cmd_hash(r, rest);
  if (strcmp(op, "sign") == 0) return cmd_sign(r, rest);
  if (strcmp(op, "sign-verify") == 0) return cmd_sign_verify(r, rest);
  if (strcmp(op, "verify") == 0) return cmd_verify(r, rest);
  if (strcmp(op, "http") == 0) return cmd_http(r, rest);
  if (strcmp(op, "now") == 0) return cmd_now(r);
  if (strcmp(op, "delegate") == 0) return cmd_delegate(r, rest);
  if (strcmp(op, "delegate-budget") == 0) return cmd_delegate_budget(r, rest);
  if (strcmp(op, "fan") == 0) return cmd_fan(r, rest);
  if (strcmp(op, "message") == 0) return cmd_message(r, rest);
  if (strcmp(op, "await") == 0) return cmd_await(r, rest);
  if (strcmp(op, "models") == 0) return cmd_models(r);
  if (strcmp(op, "model-chat") == 0) return cmd_model_chat(r, rest);
  if (strcmp(op, "model-tools") == 0) return cmd_model_tools(r, rest);
  if (strcmp(op, "model-embed") == 0) return cmd_model_embed(r, rest);
  if (strcmp(op, "tools") == 0) return cmd_tools(r);
  if (strcmp(op, "tool-list") == 0) return cmd_tool_list(r, rest);
  if (strcmp(op, "tool-call") == 0) return cmd_tool_call(r, rest);
  return failf(r, UNSUPPORTED, "unknown command");
}

// The error-code an error of kind `k` leaves as (a quota refusal as `denied`, a refused model
// request and refused tool arguments as `invalid-input`, the delegation, model and tools kinds
// other than these as `failed`).
static bool leave(exports_ainur_ari_agent_error_code_t *err, enum kind k, const char *message) {
  static const uint8_t TAGS[] = {
      [DENIED] = AINUR_ARI_TYPES_ERROR_CODE_DENIED,
      [QUOTA_EXCEEDED] = AINUR_ARI_TYPES_ERROR_CODE_DENIED,
      [INVALID] = AINUR_ARI_TYPES_ERROR_CODE_INVALID_INPUT,
      [UNSUPPORTED] = AINUR_ARI_TYPES_ERROR_CODE_UNSUPPORTED,
      [FAILED] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [UNAVAILABLE] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [LIMIT_REACHED] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [BUDGET_EXHAUSTED] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [CHILD_FAILED] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [RATE_LIMITED] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [INVALID_REQUEST] = AINUR_ARI_TYPES_ERROR_CODE_INVALID_INPUT,
      [PROVIDER_ERROR] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [NOT_FOUND] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [INVALID_ARGUMENTS] = AINUR_ARI_TYPES_ERROR_CODE_INVALID_INPUT,
      [TIMEOUT] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [TOO_LARGE] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [SERVER_ERROR] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
      [REJECTED] = AINUR_ARI_TYPES_ERROR_CODE_FAILED,
  };
  err->tag = TAGS[k];
  ari_agent_string_dup(&err->val.failed, message);
  return false;
}

bool exports_ainur_ari_agent_execute(exports_ainur_ari_agent_task_spec_t *task,
                                     exports_ainur_ari_agent_execution_result_t *ret,
                                     exports_ainur_ari_agent_error_code_t *err) {
  // The input as a NUL-terminated line.
  char *line = malloc(task->input.len + 1);
  if (!line) abort();
  memcpy(line, task->input.ptr, task->input.len);
  line[task->input.len] = 0;
  exports_ainur_ari_agent_task_spec_free(task);

  struct result r = {0};
  bool strict = strncmp(line, "must ", 5) == 0;
  char *cmd = strict ? line + 5 : line;
  bool ok;
  if (strncmp(cmd, "fail ", 5) == 0) {
    static const char *KINDS[] = {"denied", "invalid", "unsupported"};
    static const enum kind BY_NAME[] = {DENIED, INVALID, UNSUPPORTED};
    char *message;
    char *kind = word(cmd + 5, &message);
    enum kind k = FAILED;
    for (int i = 0; i < 3; i++)
      if (strcmp(kind, KINDS[i]) == 0) k = BY_NAME[i];
    ok = leave(err, k, message);
  } else if (command(&r, cmd) == OK) {
    ok = true;
  } else if (strict || r.kind == UNSUPPORTED) {
    ok = leave(err, r.kind, r.message);
  } else {
    // Logged too: a task whose host call was denied ends CapabilityDenied even when the agent
    // carries on, and then only the log shows what the agent saw.
    r.len = 0;
    put(&r, "err:");
    put(&r, KIND_NAMES[r.kind]);
    // The table checks each SDK keeps a child's reason, a rate limit's wait and a provider's
    // status.
    if (r.kind == CHILD_FAILED) {
      put(&r, ":");
      put(&r, r.reason);
    } else if (r.kind == RATE_LIMITED) {
      put(&r, ":");
      if (r.has_retry_after)
        put_u64(&r, r.retry_after_millis);
      else
        put(&r, "-");
    } else if (r.kind == PROVIDER_ERROR) {
      put(&r, ":");
      put_u64(&r, r.http_status);
    }
    ari_agent_string_t seen = {(uint8_t *)r.buf, r.len};
    ainur_ari_host_log(AINUR_ARI_HOST_LOG_LEVEL_WARN, &seen);
    ok = true;
  }
  free(line);
  if (!ok) {
    free(r.buf);
    return false;
  }
  memset(ret, 0, sizeof *ret);
  ret->output = (ari_agent_list_u8_t){(uint8_t *)r.buf, r.len};
  return true;
}

// initialize, can-execute and estimate: the weak defaults of sdk/c/ari_defaults.c.
