//! Which Tasks are children of which parent, kept from the Task watch, so a parent that ends
//! finds its unfinished children without scanning every Task the operator caches.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use ari_crds::Task;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

/// Unfinished child Tasks by their parent's uid. One entry per unfinished child (a finished or
/// deleted child is dropped), so it is bounded by the Tasks the operator caches anyway. It only
/// wakes children early: each is decided on from the cache ([`super::decide::orphaned`]), and
/// a child the index misses (a parent ended while the operator relisted) is decided on when it
/// is reconciled itself.
#[derive(Default)]
pub struct ChildIndex(Mutex<HashMap<String, HashSet<ObjectRef<Task>>>>);

impl ChildIndex {
    /// Records what a watch event says about a child.
    pub fn observe(&self, event: &Event<Task>) {
        match event {
            Event::Apply(t) | Event::InitApply(t) => self.update(t, !t.is_finished()),
            Event::Delete(t) => self.update(t, false),
            Event::Init | Event::InitDone => {}
        }
    }

    fn update(&self, task: &Task, unfinished: bool) {
        let Some(parent) = &task.spec.parent else {
            return;
        };
        let Ok(mut map) = self.0.lock() else { return };
        let child = ObjectRef::from_obj(task);
        if unfinished {
            map.entry(parent.uid.clone()).or_default().insert(child);
        } else if let Some(set) = map.get_mut(&parent.uid) {
            set.remove(&child);
            if set.is_empty() {
                map.remove(&parent.uid);
            }
        }
    }

    /// The unfinished children of the parent with `uid`.
    pub fn of(&self, parent: &Task) -> Vec<ObjectRef<Task>> {
        let Some(uid) = parent.uid() else {
            return Vec::new();
        };
        self.0
            .lock()
            .map(|m| m.get(&uid).map(|s| s.iter().cloned().collect()))
            .ok()
            .flatten()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task(name: &str, uid: &str, parent: Option<&str>, phase: &str) -> Task {
        let mut t = json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": name, "namespace": "n", "uid": uid},
            "spec": {"agentRef": {"name": "a"}},
            "status": {"phase": phase},
        });
        if let Some(p) = parent {
            t["spec"]["parent"] =
                json!({"name": "p", "uid": p, "agent": "a", "depth": 1, "index": 0});
        }
        serde_json::from_value(t).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn keeps_unfinished_children_by_parent_uid_only() {
        let index = ChildIndex::default();
        let parent = task("p", "pu", None, "Failed");
        index.observe(&Event::InitApply(parent.clone()));
        index.observe(&Event::InitApply(task("c0", "c0u", Some("pu"), "Running")));
        index.observe(&Event::Apply(task("c1", "c1u", Some("pu"), "Pending")));
        index.observe(&Event::Apply(task("x", "xu", Some("other"), "Running")));
        let mut names: Vec<String> = index.of(&parent).into_iter().map(|r| r.name).collect();
        names.sort();
        assert_eq!(names, ["c0", "c1"]);
        // Finished or deleted children leave the index, and an empty parent with them.
        index.observe(&Event::Apply(task("c0", "c0u", Some("pu"), "Cancelled")));
        index.observe(&Event::Delete(task("c1", "c1u", Some("pu"), "Pending")));
        assert!(index.of(&parent).is_empty());
        assert_eq!(index.0.lock().map(|m| m.len()).unwrap_or(0), 1);
    }
}
