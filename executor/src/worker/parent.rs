//! Whether a child Task's parent is real, asked before the child is claimed.
//!
//! The chart's admission policy lets only executors write `spec.parent`, but the policy may not
//! be installed, and a namespace user who could forge a parent would run a `subagent`-only
//! Agent, or escape the parent's depth and budget. So the executor that would run a child
//! reads the parent and its Agent and applies [`ari_crds::admit_child`].

use ari_crds::{Agent, Refusal, Task};
use kube::Api;

use super::Worker;

/// What reading the parent said.
pub enum ParentCheck {
    /// Not a child, or a child of a real parent: go on.
    Admitted,
    /// A forged or stale parent: the Task fails with this.
    Refused(Refusal),
}

impl Worker {
    pub(super) async fn check_parent(&self, task: &Task) -> Result<ParentCheck, kube::Error> {
        let Some(claimed) = &task.spec.parent else {
            return Ok(ParentCheck::Admitted);
        };
        let refused = |message: String| {
            Ok(ParentCheck::Refused(Refusal {
                reason: ari_crds::TaskReason::CapabilityDenied,
                message,
            }))
        };
        let Some(parent) = self.tasks.get_opt(&claimed.name).await? else {
            return refused(format!(
                "spec.parent names Task {}, which does not exist",
                claimed.name
            ));
        };
        let agents: Api<Agent> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let Some(parent_agent) = agents.get_opt(&claimed.agent).await? else {
            return refused(format!(
                "spec.parent names Agent {}, which does not exist",
                claimed.agent
            ));
        };
        Ok(
            match ari_crds::admit_child(task, &parent, &parent_agent.spec, &self.agent.spec) {
                Ok(()) => ParentCheck::Admitted,
                Err(refusal) => ParentCheck::Refused(refusal),
            },
        )
    }
}
