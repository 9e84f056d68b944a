//! Signing: signs its input with the granted Ed25519 key and returns the hex signature.

use ari_sdk::host::crypto;
use ari_sdk::{Agent, Error, Output, Task, hex};

struct Signer;

impl Agent for Signer {
    fn execute(task: Task) -> Result<Output, Error> {
        let signature = crypto::sign(&task.input)?;
        Ok(Output::from(hex::encode(&signature)))
    }
}

ari_sdk::export_agent!(Signer);
