-- Argo CD health of an ari.dev/Agent (Lua 5.1, as Argo CD runs it).
-- Healthy once the operator observed the current spec and at least one executor is available
-- (Ready=True); Degraded when the spec is invalid or its module cannot be resolved;
-- Progressing otherwise. Fields: status.observedGeneration, status.conditions[] (type, status,
-- reason, message), status.readyReplicas, status.replicas.
local hs = {}
local function condition(status, ctype)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end
local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
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
for _, ctype in ipairs({"Valid", "ModuleResolved"}) do
  local c = condition(obj.status, ctype)
  if c ~= nil and c.status == "False" then
    hs.status = "Degraded"
    hs.message = ctype .. " is False (" .. describe(c) .. ")"
    return hs
  end
end
local ready = condition(obj.status, "Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end
hs.status = "Progressing"
if ready ~= nil then
  hs.message = describe(ready)
else
  hs.message = "Waiting for the Ready condition"
end
return hs
