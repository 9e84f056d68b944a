//! Requests the API server has served, from its own `/metrics` (`apiserver_request_total`).

use anyhow::Result;
use kube::Client;

/// Totals of `apiserver_request_total` at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Requests {
    /// Every request of every client.
    pub all: f64,
    /// Requests on Tasks (including `tasks/status`).
    pub tasks: f64,
    /// Writes (POST, PUT, PATCH, DELETE) on Tasks.
    pub task_writes: f64,
}

impl std::ops::Sub for Requests {
    type Output = Requests;
    fn sub(self, o: Requests) -> Requests {
        Requests {
            all: self.all - o.all,
            tasks: self.tasks - o.tasks,
            task_writes: self.task_writes - o.task_writes,
        }
    }
}

pub async fn scrape(client: &Client) -> Result<Requests> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    Ok(parse(&text))
}

fn parse(text: &str) -> Requests {
    let mut r = Requests::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(v) = value.trim().parse::<f64>() else {
            continue;
        };
        r.all += v;
        if labels.contains("resource=\"tasks\"") {
            r.tasks += v;
            if ["POST", "PUT", "PATCH", "DELETE"]
                .iter()
                .any(|verb| labels.contains(&format!("verb=\"{verb}\"")))
            {
                r.task_writes += v;
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_all_and_task_requests() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",group="ari.dev",resource="tasks",scope="resource",subresource="",verb="POST",version="v1alpha1"} 10
apiserver_request_total{code="200",component="apiserver",group="ari.dev",resource="tasks",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 20
apiserver_request_total{code="200",component="apiserver",group="ari.dev",resource="tasks",scope="namespace",subresource="",verb="WATCH",version="v1alpha1"} 3
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_duration_seconds_count{verb="GET"} 99
"#;
        let r = parse(text);
        assert_eq!(r.all, 40.0);
        assert_eq!(r.tasks, 33.0);
        assert_eq!(r.task_writes, 30.0);
    }
}
