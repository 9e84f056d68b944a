//! The dependency graph of a plan's steps: cycles (named, for the validator) and the steps a
//! failure takes down with it (for the operator).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::Step;

/// Steps by index, with edges to the known steps each one depends on (unknown names are the
/// validator's to report; they add no edge).
pub struct Graph<'a> {
    pub steps: &'a [Step],
    /// `deps[i]`: indices of the steps step `i` waits for, in declaration order.
    pub deps: Vec<Vec<usize>>,
}

impl<'a> Graph<'a> {
    pub fn new(steps: &'a [Step]) -> Self {
        // The first step of a name wins; duplicates are the validator's to report.
        let mut index = BTreeMap::new();
        for (i, s) in steps.iter().enumerate() {
            index.entry(s.name.as_str()).or_insert(i);
        }
        let deps = steps
            .iter()
            .map(|s| {
                s.dependencies()
                    .into_iter()
                    .filter_map(|d| index.get(d).copied())
                    .collect()
            })
            .collect();
        Graph { steps, deps }
    }

    /// Every distinct cycle a depth-first search meets, each as step names starting from its
    /// earliest-declared step and ending where it started (`a → b → a` is `[a, b, a]`).
    /// Deterministic: steps are visited in declaration order.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            OnPath,
            Done,
        }
        let n = self.steps.len();
        let mut mark = vec![Mark::New; n];
        let mut found: BTreeSet<Vec<usize>> = BTreeSet::new();
        let mut ordered: Vec<Vec<usize>> = Vec::new();
        for root in 0..n {
            if mark[root] != Mark::New {
                continue;
            }
            // Iterative DFS: (node, next edge to follow); `path` mirrors the stack.
            let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
            mark[root] = Mark::OnPath;
            while let Some(top) = stack.last_mut() {
                let node = top.0;
                if let Some(&next) = self.deps[node].get(top.1) {
                    top.1 += 1;
                    match mark[next] {
                        Mark::New => {
                            mark[next] = Mark::OnPath;
                            stack.push((next, 0));
                        }
                        Mark::OnPath => {
                            let start = stack.iter().position(|(s, _)| *s == next).unwrap_or(0);
                            let cycle = canonical(stack[start..].iter().map(|(s, _)| *s).collect());
                            if found.insert(cycle.clone()) {
                                ordered.push(cycle);
                            }
                        }
                        Mark::Done => {}
                    }
                } else {
                    mark[node] = Mark::Done;
                    stack.pop();
                }
            }
        }
        ordered
            .into_iter()
            .map(|c| {
                // Edges point from a step to what it waits for; a reader follows "waits for".
                let mut names: Vec<String> =
                    c.iter().map(|&i| self.steps[i].name.clone()).collect();
                if let Some(first) = names.first().cloned() {
                    names.push(first);
                }
                names
            })
            .collect()
    }

    /// Indices of every step that waits, directly or not, for step `failed`.
    pub fn dependants(&self, failed: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut frontier = vec![failed];
        while let Some(f) = frontier.pop() {
            for (i, deps) in self.deps.iter().enumerate() {
                if deps.contains(&f) && out.insert(i) {
                    frontier.push(i);
                }
            }
        }
        out
    }
}

/// A cycle rotated to start at its smallest index, so each is reported once.
fn canonical(cycle: Vec<usize>) -> Vec<usize> {
    let Some(min_at) = cycle
        .iter()
        .enumerate()
        .min_by_key(|(_, v)| **v)
        .map(|(i, _)| i)
    else {
        return cycle;
    };
    let mut out = cycle[min_at..].to_vec();
    out.extend_from_slice(&cycle[..min_at]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AgentRef;

    fn step(name: &str, deps: &[&str]) -> Step {
        Step {
            name: name.into(),
            agent_ref: AgentRef { name: "a".into() },
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_acyclic_graph_has_no_cycle() {
        let steps = [step("a", &[]), step("b", &["a"]), step("c", &["a", "b"])];
        assert!(Graph::new(&steps).cycles().is_empty());
    }

    #[test]
    fn each_cycle_is_named_once_from_its_first_declared_step() {
        let steps = [
            step("a", &["c"]),
            step("b", &["a"]),
            step("c", &["b"]),
            step("d", &["d"]),
            step("e", &[]),
        ];
        assert_eq!(
            Graph::new(&steps).cycles(),
            [vec!["a", "c", "b", "a"], vec!["d", "d"]]
        );
    }

    #[test]
    fn a_failure_takes_down_every_transitive_dependant_and_nothing_else() {
        let steps = [
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["b"]),
            step("d", &[]),
            step("e", &["c", "d"]),
        ];
        let g = Graph::new(&steps);
        assert_eq!(g.dependants(1), BTreeSet::from([2, 4]));
        assert_eq!(g.dependants(3), BTreeSet::from([4]));
        assert!(g.dependants(4).is_empty());
    }
}
