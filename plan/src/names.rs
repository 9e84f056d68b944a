//! The names of a Plan's Tasks. The operator names a step's Task `<plan>-<step>` (a retry:
//! `<plan>-<step>.<attempt>`); when a Task the Plan did not create already has that name, it
//! adds `.` and five random characters. A step name is a DNS label (no `.`), so no step's Task
//! name is another step's, and the operator records the uid of each Task it creates: a Task is
//! a step's result only when its uid is the recorded one, never by its name alone.

/// Longest Task name (a DNS subdomain).
pub const MAX_TASK_NAME: usize = 253;
/// Random characters of the suffix used when a name is taken.
pub const TAKEN_SUFFIX_CHARS: usize = 5;
/// What [`longest_step_task_name`] counts, for messages.
pub const SUFFIXES_EXPLAINED: &str = "`.<attempt>` when it has retries and `.xxxxx` in case a Task the Plan did not create holds the name";

/// The Task of attempt `attempt` (1 for the first) of a step: `<plan>-<step>`, then
/// `<plan>-<step>.2`, …
pub fn step_task_name(plan: &str, step: &str, attempt: u32) -> String {
    if attempt <= 1 {
        format!("{plan}-{step}")
    } else {
        format!("{plan}-{step}.{attempt}")
    }
}

/// `name` with the suffix used when a Task the Plan did not create has `name`.
pub fn taken_name(name: &str, random: &str) -> String {
    format!("{name}.{random}")
}

/// The longest name a Task of this step can get: with the retry suffix of its last attempt
/// (only when it has retries) and the suffix for a taken name.
pub fn longest_step_task_name(plan: &str, step: &str, retries: u32) -> usize {
    step_task_name(plan, step, retries + 1).len() + 1 + TAKEN_SUFFIX_CHARS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_tasks_are_named_by_plan_step_and_attempt() {
        assert_eq!(step_task_name("p", "count", 1), "p-count");
        assert_eq!(step_task_name("p", "count", 3), "p-count.3");
        assert_eq!(taken_name("p-count.3", "x7k2q"), "p-count.3.x7k2q");
    }

    #[test]
    fn a_retry_suffix_counts_only_for_a_step_with_retries() {
        assert_eq!(longest_step_task_name("p", "s", 0), "p-s.xxxxx".len());
        assert_eq!(longest_step_task_name("p", "s", 5), "p-s.6.xxxxx".len());
    }
}
