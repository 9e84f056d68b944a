-- Argo CD health of an ari.dev/Plan (Lua 5.1, as Argo CD runs it).
-- Healthy once every step succeeded; Degraded when the Plan failed (its reason: Rejected with
-- the number of rules the proposal breaks, PlannerFailed, InvalidProposal, StepFailed,
-- DeadlineExceeded) or was cancelled; Progressing while it is planned or its steps run, with
-- the steps done so far. Fields: status.phase, status.reason, status.message,
-- status.progress, status.violationCount, status.observedGeneration.
local hs = {}
local s = obj.status
if s == nil or s.phase == nil then
  hs.status = "Progressing"
  hs.message = "Pending: waiting for the ari operator"
  return hs
end
local gen = obj.metadata.generation
if gen ~= nil and s.observedGeneration ~= nil and s.observedGeneration ~= gen then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. gen
  return hs
end
local function steps()
  if s.progress ~= nil then
    return " (" .. s.progress .. " steps)"
  end
  return ""
end
if s.phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = "Succeeded" .. steps()
  return hs
end
if s.phase == "Failed" or s.phase == "Cancelled" then
  hs.status = "Degraded"
  hs.message = s.phase .. ": " .. (s.reason or "unknown reason")
  if s.reason == "Rejected" and s.violationCount ~= nil then
    hs.message = hs.message .. " (" .. s.violationCount .. " rule(s) broken)"
  end
  if s.message ~= nil and s.message ~= "" then
    hs.message = hs.message .. ": " .. s.message
  end
  return hs
end
hs.status = "Progressing"
hs.message = s.phase .. steps()
return hs
