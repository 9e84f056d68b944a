-- Argo CD health of an ari.dev/Task (Lua 5.1, as Argo CD runs it).
-- A Task runs once: Succeeded is Healthy, Failed is Degraded (with its reason: Trap,
-- FuelExhausted, DeadlineExceeded, CapabilityDenied, ...), Cancelled is Degraded (it will not
-- finish its work), Pending and Running are Progressing.
-- Fields: status.phase, status.reason, status.message, status.attempts.
local hs = {}
local s = obj.status
if s == nil or s.phase == nil then
  hs.status = "Progressing"
  hs.message = "Pending: waiting for an executor"
  return hs
end
if s.phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = "Succeeded"
  if s.reason ~= nil then
    hs.message = "Succeeded (" .. s.reason .. ")"
  end
  return hs
end
if s.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = "Failed: " .. (s.reason or "unknown reason")
  if s.message ~= nil and s.message ~= "" then
    hs.message = hs.message .. ": " .. s.message
  end
  return hs
end
if s.phase == "Cancelled" then
  hs.status = "Degraded"
  hs.message = "Cancelled"
  if s.message ~= nil and s.message ~= "" then
    hs.message = hs.message .. ": " .. s.message
  end
  return hs
end
hs.status = "Progressing"
hs.message = s.phase
if s.phase == "Running" and s.executor ~= nil then
  hs.message = "Running on " .. s.executor
end
return hs
