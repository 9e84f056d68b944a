//! Answers for pre-1.0 clients (A2A 0.3: `message/send`, `tasks/get`, ...): the same objects in
//! the 0.3 JSON shape: `kind` on every object and part, lowercase state names, `user`/`agent`
//! roles, `file`/`data` parts, `final` on status updates, and results not wrapped in their case
//! name. The gateway computes v1.0 answers and converts them here, at the edge.

use serde_json::{Map, Value, json};

/// A `message/send` result: the task itself.
pub fn send_result(v1: Value) -> Value {
    match v1 {
        Value::Object(mut m) => m.remove("task").map(task).unwrap_or(Value::Null),
        other => other,
    }
}

/// A stream item: the task, or an event with its `kind` (and `final` for status updates).
pub fn stream_item(v1: Value) -> Value {
    let Value::Object(mut m) = v1 else {
        return v1;
    };
    if let Some(t) = m.remove("task") {
        return task(t);
    }
    if let Some(Value::Object(mut e)) = m.remove("statusUpdate") {
        let terminal = e
            .get("status")
            .and_then(|s| s.get("state"))
            .and_then(Value::as_str)
            .is_some_and(|s| {
                matches!(
                    s,
                    "TASK_STATE_COMPLETED"
                        | "TASK_STATE_FAILED"
                        | "TASK_STATE_CANCELED"
                        | "TASK_STATE_REJECTED"
                )
            });
        if let Some(s) = e.remove("status") {
            e.insert("status".into(), status(s));
        }
        e.insert("kind".into(), json!("status-update"));
        e.insert("final".into(), json!(terminal));
        return Value::Object(e);
    }
    if let Some(Value::Object(mut e)) = m.remove("artifactUpdate") {
        if let Some(a) = e.remove("artifact") {
            e.insert("artifact".into(), artifact(a));
        }
        e.insert("kind".into(), json!("artifact-update"));
        return Value::Object(e);
    }
    Value::Object(m)
}

/// A task (`tasks/get`, `tasks/cancel`).
pub fn task(v1: Value) -> Value {
    let Value::Object(mut t) = v1 else {
        return v1;
    };
    t.insert("kind".into(), json!("task"));
    if let Some(s) = t.remove("status") {
        t.insert("status".into(), status(s));
    }
    map_array(&mut t, "artifacts", artifact);
    map_array(&mut t, "history", message);
    Value::Object(t)
}

fn status(v1: Value) -> Value {
    let Value::Object(mut s) = v1 else {
        return v1;
    };
    if let Some(Value::String(state)) = s.get("state") {
        let legacy = state
            .strip_prefix("TASK_STATE_")
            .unwrap_or(state)
            .to_ascii_lowercase()
            .replace('_', "-");
        s.insert("state".into(), Value::String(legacy));
    }
    if let Some(m) = s.remove("message") {
        s.insert("message".into(), message(m));
    }
    Value::Object(s)
}

fn message(v1: Value) -> Value {
    let Value::Object(mut m) = v1 else {
        return v1;
    };
    m.insert("kind".into(), json!("message"));
    if let Some(Value::String(role)) = m.get("role") {
        let legacy = match role.as_str() {
            "ROLE_AGENT" => "agent",
            _ => "user",
        };
        m.insert("role".into(), json!(legacy));
    }
    map_array(&mut m, "parts", part);
    Value::Object(m)
}

fn artifact(v1: Value) -> Value {
    let Value::Object(mut a) = v1 else {
        return v1;
    };
    map_array(&mut a, "parts", part);
    Value::Object(a)
}

fn part(v1: Value) -> Value {
    let Value::Object(p) = v1 else {
        return v1;
    };
    let mut out = Map::new();
    if let Some(meta) = p.get("metadata") {
        out.insert("metadata".into(), meta.clone());
    }
    if let Some(text) = p.get("text") {
        out.insert("kind".into(), json!("text"));
        out.insert("text".into(), text.clone());
    } else if let Some(data) = p.get("data") {
        out.insert("kind".into(), json!("data"));
        // 0.3 data parts are objects.
        let data = if data.is_object() {
            data.clone()
        } else {
            json!({"value": data})
        };
        out.insert("data".into(), data);
    } else if let Some(raw) = p.get("raw") {
        out.insert("kind".into(), json!("file"));
        let mut file = Map::new();
        file.insert("bytes".into(), raw.clone());
        if let Some(mt) = p.get("mediaType") {
            file.insert("mimeType".into(), mt.clone());
        }
        out.insert("file".into(), Value::Object(file));
    }
    Value::Object(out)
}

fn map_array(obj: &mut Map<String, Value>, key: &str, f: fn(Value) -> Value) {
    if let Some(Value::Array(items)) = obj.remove(key) {
        obj.insert(key.into(), Value::Array(items.into_iter().map(f).collect()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_takes_the_0_3_shape() {
        let v1 = json!({"task": {
            "id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "hi", "mediaType": "text/plain"}]}],
            "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"raw": "aGk=", "mediaType": "application/octet-stream"}]}]
        }});
        let t = send_result(v1);
        assert_eq!(t["kind"], "task");
        assert_eq!(t["status"]["state"], "input-required");
        assert_eq!(
            t["artifacts"][0]["parts"][0],
            json!({"kind": "text", "text": "hi"})
        );
        assert_eq!(t["history"][0]["role"], "user");
        assert_eq!(t["history"][0]["parts"][0]["file"]["bytes"], "aGk=");
    }

    #[test]
    fn a_terminal_status_update_is_final() {
        let ev = stream_item(json!({"statusUpdate": {
            "taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}
        }}));
        assert_eq!(ev["kind"], "status-update");
        assert_eq!(ev["final"], true);
        assert_eq!(ev["status"]["state"], "completed");
        let working = stream_item(json!({"statusUpdate": {
            "taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}
        }}));
        assert_eq!(working["final"], false);
    }
}
