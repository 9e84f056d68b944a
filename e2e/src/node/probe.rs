//! Readiness probes (httpGet, tcpSocket) against the pod's own IP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerPort, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::{Kind, PodRun};
use crate::http;

/// Whether the agent can run this probe; other kinds (exec, grpc) count as "no probe".
pub(crate) fn supported(p: &Probe) -> bool {
    p.http_get.is_some() || p.tcp_socket.is_some()
}

/// Probes one container for as long as the pod runs, flipping its ready flag.
pub(crate) async fn run(run: Arc<PodRun>, idx: usize, probe: Probe, ports: Vec<ContainerPort>) {
    let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
    let initial = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    let mut last: Option<(Instant, Instant)> = None; // (container start, probe time)
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let since = run.with_container(Kind::Main, idx, |c| c.running_since);
        let Some(since) = since else {
            continue;
        };
        let due = match last {
            Some((s, at)) if s == since => at.elapsed() >= period,
            _ => true,
        };
        if since.elapsed() < initial || !due {
            continue;
        }
        last = Some((since, Instant::now()));
        let ok = check(&probe, &ports, &run.pod_ip, timeout).await;
        run.update_container(Kind::Main, idx, |c| {
            let changed = c.running_since == Some(since) && c.probe_ok != ok;
            if changed {
                c.probe_ok = ok;
            }
            changed
        });
    }
}

async fn check(probe: &Probe, ports: &[ContainerPort], pod_ip: &str, timeout: Duration) -> bool {
    let port = |p: &IntOrString| -> Option<i32> {
        match p {
            IntOrString::Int(n) => Some(*n),
            IntOrString::String(name) => ports
                .iter()
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .map(|cp| cp.container_port),
        }
    };
    if let Some(h) = &probe.http_get {
        let Some(p) = port(&h.port) else { return false };
        let host = h.host.clone().unwrap_or_else(|| pod_ip.to_string());
        let path = h.path.clone().unwrap_or_else(|| "/".into());
        let url = format!("http://{host}:{p}{path}");
        matches!(http::get(&url, timeout).await, Ok((code, _)) if (200..400).contains(&code))
    } else if let Some(t) = &probe.tcp_socket {
        let Some(p) = port(&t.port) else { return false };
        let host = t.host.clone().unwrap_or_else(|| pod_ip.to_string());
        matches!(
            tokio::time::timeout(
                timeout,
                tokio::net::TcpStream::connect((host.as_str(), p as u16))
            )
            .await,
            Ok(Ok(_))
        )
    } else {
        true
    }
}
