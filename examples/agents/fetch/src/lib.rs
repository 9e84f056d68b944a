//! Network: GETs the URL given as input and returns `<status>\n<body>`.

use ari_sdk::host::{http, log};
use ari_sdk::{Agent, Error, Output, Task};

struct Fetch;

impl Agent for Fetch {
    fn execute(task: Task) -> Result<Output, Error> {
        let url = task.input_str()?.trim();
        log::info(&format!("fetching {url}"));
        let resp = http::get(url)?;
        let mut out = format!("{}\n", resp.status).into_bytes();
        out.extend_from_slice(&resp.body);
        Ok(Output::from(out))
    }
}

ari_sdk::export_agent!(Fetch);
