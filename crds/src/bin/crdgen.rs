//! Writes the Agent, Task, Plan, ModelConfig MCPServer and ExecutorPool CRD YAML (to a directory, default `crds/`), or
//! prints them.
//!
//! `cargo run -p ari-crds --bin crdgen` refreshes the checked-in files;
//! `cargo run -p ari-crds --bin crdgen -- --stdout` prints them as one multi-document stream.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agents = ari_crds::agent_crd_yaml()?;
    let tasks = ari_crds::task_crd_yaml()?;
    let plans = ari_crds::plan_crd_yaml()?;
    let model_configs = ari_crds::model_config_crd_yaml()?;
    let mcp_servers = ari_crds::mcp_server_crd_yaml()?;
    let pools = ari_crds::executor_pool_crd_yaml()?;
    let arg = std::env::args().nth(1);
    if arg.as_deref() == Some("--stdout") {
        print!("{agents}---\n{tasks}");
        print!("---\n{plans}");
        print!("---\n{model_configs}");
        print!("---\n{mcp_servers}");
        print!("---\n{pools}");
        return Ok(());
    }
    let dir = arg
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    std::fs::write(dir.join("ari.dev_agents.yaml"), agents)?;
    std::fs::write(dir.join("ari.dev_tasks.yaml"), tasks)?;
    std::fs::write(dir.join("ari.dev_plans.yaml"), plans)?;
    std::fs::write(dir.join("ari.dev_modelconfigs.yaml"), model_configs)?;
    std::fs::write(dir.join("ari.dev_mcpservers.yaml"), mcp_servers)?;
    std::fs::write(dir.join("ari.dev_executorpools.yaml"), pools)?;
    Ok(())
}
