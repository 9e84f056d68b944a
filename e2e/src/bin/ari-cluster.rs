//! `ari-cluster`: a local Kubernetes control plane (built from Go modules) with the ari node
//! agent, for trying ari without a cluster of your own. Runs until Ctrl-C, then cleans up.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ari_e2e::{Cluster, NodeAgent, ari_images, build_bin_dir, repo_root};
use clap::Parser;

/// Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a node agent that
/// runs pods as host processes, installs ari's CRDs and prints the KUBECONFIG to use.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Extra image mappings, `PREFIX=BINARY` (repeatable); ari's own images map to
    /// target/{debug,release}/{ari,ari-operator} when built.
    #[arg(long = "image", value_name = "PREFIX=BINARY")]
    images: Vec<String>,
    /// Also copy the admin kubeconfig to this path.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Skip installing crds/*.yaml (implies --no-operator).
    #[arg(long)]
    no_crds: bool,
    /// Skip deploying the operator from deploy/operator.yaml.
    #[arg(long)]
    no_operator: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut images = ari_images();
    for spec in &args.images {
        let (prefix, bin) = spec
            .split_once('=')
            .with_context(|| format!("--image {spec:?}: expected PREFIX=BINARY"))?;
        images.insert(prefix.to_string(), PathBuf::from(bin));
    }
    report_images(&images);

    eprintln!("ari-cluster: control plane binaries (builds them on first use, ~20-40 min)...");
    let bin_dir = tokio::task::spawn_blocking(build_bin_dir).await??;
    let t0 = Instant::now();
    let cluster = Cluster::start_with(bin_dir.clone()).await?;
    let node = tokio::task::block_in_place(|| NodeAgent::start(&cluster, images.clone()))?;
    eprintln!(
        "ari-cluster: ready in {:.1}s; node {} ; files in {}",
        t0.elapsed().as_secs_f64(),
        node.name(),
        cluster.dir().display()
    );

    let mut gateway = None;
    if !args.no_crds {
        install_crds(&cluster)?;
        if !args.no_operator {
            install_operator(&cluster)?;
            // No port-forward and no Service routing here: callers use the pod's address.
            gateway = Some(ari_e2e::scenario::gateway_url(&cluster.client()).await?);
        }
    }
    let kubeconfig = match &args.kubeconfig {
        Some(p) => {
            std::fs::copy(cluster.kubeconfig_path(), p)
                .with_context(|| format!("copying kubeconfig to {}", p.display()))?;
            p.clone()
        }
        None => cluster.kubeconfig_path().to_path_buf(),
    };
    println!("export KUBECONFIG={}", kubeconfig.display());
    // `ari` too (e.g. `ari plan validate` in the README), when built, and `kubectl ari`: the
    // plugin is the same binary linked as `kubectl-ari` beside it.
    if let Some(ari) = images.get(ari_e2e::EXECUTOR_IMAGE) {
        let link = ari.with_file_name("kubectl-ari");
        if !link.exists()
            && let Err(e) = std::os::unix::fs::symlink("ari", &link)
        {
            eprintln!("ari-cluster: cannot link {}: {e}", link.display());
        }
    }
    let ari_dir = images
        .get(ari_e2e::EXECUTOR_IMAGE)
        .and_then(|p| p.parent())
        .map(|d| format!("{}:", d.display()))
        .unwrap_or_default();
    println!(
        "export PATH={}:{ari_dir}$PATH   # kubectl and helm v1.35.4 / v3, ari, kubectl ari",
        bin_dir.display()
    );
    if let Some(url) = gateway {
        println!("export ARI_GATEWAY={url}   # the A2A gateway (README, \"A2A\")");
    }
    eprintln!("ari-cluster: running; Ctrl-C stops and removes everything");

    wait_for_signal().await?;
    eprintln!("ari-cluster: stopping");
    drop(node);
    drop(cluster);
    Ok(())
}

fn report_images(images: &HashMap<String, PathBuf>) {
    for (image, bin) in images {
        eprintln!("ari-cluster: image {image}* -> {}", bin.display());
    }
    for image in [ari_e2e::EXECUTOR_IMAGE, ari_e2e::OPERATOR_IMAGE] {
        if !images.contains_key(image) {
            eprintln!("ari-cluster: {image} not mapped (build it with `cargo build --bins`)");
        }
    }
}

/// Deploys the operator and the A2A gateway as pods, as a user would, and waits until the
/// operator is available.
fn install_operator(cluster: &Cluster) -> Result<()> {
    let manifest = repo_root().join("deploy").join("operator.yaml");
    let steps: [Vec<std::ffi::OsString>; 2] = [
        vec!["apply".into(), "-f".into(), manifest.into_os_string()],
        [
            "wait",
            "-n",
            "ari-system",
            "--for=condition=Available",
            "--timeout=120s",
            "deployment/ari-operator",
        ]
        .iter()
        .map(|s| s.into())
        .collect(),
    ];
    for args in steps {
        let out = cluster.kubectl(&args)?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(std::ffi::OsStr::new(" ")).to_string_lossy(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        eprint!("ari-cluster: {}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(())
}

fn install_crds(cluster: &Cluster) -> Result<()> {
    let dir = repo_root().join("crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"));
    files.sort();
    for f in &files {
        let out = cluster.kubectl([std::ffi::OsStr::new("apply"), "-f".as_ref(), f.as_os_str()])?;
        if !out.status.success() {
            bail!(
                "kubectl apply -f {}: {}",
                f.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        eprint!("ari-cluster: {}", String::from_utf8_lossy(&out.stdout));
    }
    if !files.is_empty() {
        let out = cluster.kubectl([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])?;
        if !out.status.success() {
            bail!(
                "CRDs not established: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(())
}

async fn wait_for_signal() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
