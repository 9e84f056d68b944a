//! Returns its input unchanged: the smallest useful agent, and the per-task overhead baseline.

use ari_sdk::{Agent, Error, Output, Task};

struct Echo;

impl Agent for Echo {
    fn execute(task: Task) -> Result<Output, Error> {
        Ok(Output::from(task.input))
    }
}

ari_sdk::export_agent!(Echo);
