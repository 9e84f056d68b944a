-- Argo CD health of an ari.dev/ModelConfig or ari.dev/MCPServer (Lua 5.1, as Argo CD runs
-- it): both are probed by the operator. Healthy once the operator observed the current spec
-- and the endpoint answered its probe (Ready=True: a model list, a tool list), or when the
-- operator may not probe it (Ready=Unknown, ProbeNotAllowed: an internal endpoint its admin did
-- not list; executors may still reach it); Degraded when Ready is False (Unreachable,
-- EndpointError, CredentialsNotMarked, ...); Progressing otherwise.
-- Fields: status.observedGeneration, status.conditions[] (type, status, reason, message).
local hs = {}
local function ready(status)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == "Ready" then
      return c
    end
  end
  return nil
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the ari operator"
  return hs
end
local gen = obj.metadata.generation
if gen ~= nil and obj.status.observedGeneration ~= gen then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. gen
  return hs
end
local c = ready(obj.status)
if c == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the first probe"
  return hs
end
local text = c.reason
if c.message ~= nil and c.message ~= "" then
  text = c.reason .. ": " .. c.message
end
if c.status == "True" or c.reason == "ProbeNotAllowed" then
  hs.status = "Healthy"
  hs.message = text
  return hs
end
if c.status == "False" then
  hs.status = "Degraded"
  hs.message = text
  return hs
end
hs.status = "Progressing"
hs.message = text
return hs
