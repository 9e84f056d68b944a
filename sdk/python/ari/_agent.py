"""The :class:`Agent` base class and the adapter componentize-py calls."""

from dataclasses import dataclass, field
from typing import List, Union

from ._errors import Invalid, Unsupported, to_error_code


@dataclass
class Task:
    """One unit of work, as the executor hands it to the agent."""

    id: str
    input: bytes
    requirements: List[str] = field(default_factory=list)
    deadline_seconds: int = 0

    @property
    def text(self) -> str:
        """The input as UTF-8 text (:class:`ari.Invalid` if it is not)."""
        try:
            return self.input.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Invalid(f"input is not UTF-8: {e}") from None

    def requires(self, capability: str) -> bool:
        return capability in self.requirements


@dataclass
class Estimate:
    """What a task will need, in the units the executor limits (recorded, never enforced)."""

    fuel: int = 0
    duration_millis: int = 0
    memory_bytes: int = 0


class Agent:
    """Subclass and implement :meth:`execute`; the other methods have defaults.

    The executor makes a fresh instance per task: keep per-task state on ``self`` and persistent
    state in :mod:`ari.host` storage.
    """

    def initialize(self, config: bytes) -> None:
        """Called once per instance with the Agent's ``spec.config``."""

    def can_execute(self, task: Task) -> bool:
        return True

    def estimate(self, task: Task) -> Estimate:
        raise Unsupported("this agent gives no estimate")

    def execute(self, task: Task) -> Union[bytes, str]:
        raise NotImplementedError


def export(agent_class: type) -> type:
    """The class componentize-py exports (``Agent = ari.export(MyAgent)`` in ``app.py``)."""
    from componentize_py_types import Err
    from wit_world.exports import agent as wit
    from wit_world.imports import types

    def task_of(spec: "wit.TaskSpec") -> Task:
        return Task(spec.id, bytes(spec.input), list(spec.requirements), spec.deadline_seconds)

    def guarded(call):
        try:
            return call()
        except Err:
            raise
        except Exception as exc:  # every agent error leaves as an error-code, never a trap
            raise Err(to_error_code(exc)) from None

    # componentize-py makes a new `Exported` for each exported call, so the agent is kept here:
    # one per component instance, which the executor makes fresh for each task. Without this,
    # what `initialize` stored on `self` was gone by `execute`.
    held: list = []

    def the_agent():
        if not held:
            held.append(agent_class())
        return held[0]

    class Exported:
        @property
        def _agent(self):
            return the_agent()

        def initialize(self, config: bytes) -> None:
            guarded(lambda: self._agent.initialize(bytes(config)))

        def can_execute(self, task: "wit.TaskSpec") -> bool:
            try:
                return bool(self._agent.can_execute(task_of(task)))
            except Exception:
                return False

        def estimate(self, task: "wit.TaskSpec") -> "types.Estimation":
            e = guarded(lambda: self._agent.estimate(task_of(task)))
            return types.Estimation(e.fuel, e.duration_millis, e.memory_bytes)

        def execute(self, task: "wit.TaskSpec") -> "wit.ExecutionResult":
            out = guarded(lambda: self._agent.execute(task_of(task)))
            if isinstance(out, str):
                out = out.encode("utf-8")
            if not isinstance(out, (bytes, bytearray)):
                raise Err(types.ErrorCode_Failed(f"execute returned {type(out).__name__}, not bytes or str"))
            return wit.ExecutionResult(bytes(out), wit.ResourceUsage(0, 0, 0, 0), None)

    Exported.__name__ = "Agent"
    return Exported


__all__ = ["Agent", "Estimate", "Task", "export"]
