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

    /// The first `limit` distinct cycles a depth-first search meets, each as step names
    /// starting from its earliest-declared step and ending where it started (`a → b → a` is
    /// `[a, b, a]`). Deterministic: steps are visited in declaration order. The search stops
    /// at `limit`, so a graph with a back edge to every step costs one pass, not one per cycle.
    pub fn cycles(&self, limit: usize) -> Vec<Vec<&'a str>> {
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
        'roots: for root in 0..n {
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
                                if ordered.len() >= limit {
                                    break 'roots;
                                }
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
        let steps = self.steps;
        ordered
            .into_iter()
            .map(|c| {
                // Edges point from a step to what it waits for; a reader follows "waits for".
                let mut names: Vec<&'a str> = c.iter().map(|&i| steps[i].name.as_str()).collect();
                if let Some(first) = names.first().copied() {
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
        assert!(Graph::new(&steps).cycles(10).is_empty());
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
            Graph::new(&steps).cycles(10),
            [vec!["a", "c", "b", "a"], vec!["d", "d"]]
        );
        assert_eq!(Graph::new(&steps).cycles(1), [vec!["a", "c", "b", "a"]]);
    }

    #[test]
    fn a_chain_with_a_back_edge_to_every_step_stops_at_the_limit() {
        // s0 waits for s1, s1 for s2, …, and each also for s0: a ring at every depth, so an
        // unbounded search names n rings of up to n steps.
        let n = 5_000;
        let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
        let steps: Vec<Step> = (0..n)
            .map(|i| {
                let mut deps = vec![names[0].as_str()];
                if i + 1 < n {
                    deps.push(names[i + 1].as_str());
                }
                if i == 0 {
                    deps.remove(0);
                }
                step(&names[i], &deps)
            })
            .collect();
        let cycles = Graph::new(&steps).cycles(3);
        assert_eq!(
            cycles,
            [
                vec!["s0", "s1", "s0"],
                vec!["s0", "s1", "s2", "s0"],
                vec!["s0", "s1", "s2", "s3", "s0"]
            ]
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
