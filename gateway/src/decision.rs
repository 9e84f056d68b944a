//! A person's decision about a call that waits for approval, as an A2A follow-up message on
//! the same task carries it (the task shows `TASK_STATE_INPUT_REQUIRED` and the call in its
//! metadata's `ari.dev/pendingApproval`).
//!
//! The decision is a data part in the shape kagent's `hitl/v1` clients send, so one client
//! answers both: `{"decision_type": "approve"}`, `{"decision_type": "reject" | "deny",
//! "rejection_reason": "..."}`, or a batch `{"decision_type": "batch", "decisions": {CALL:
//! "approve" | "deny"}, "rejection_reasons": {CALL: "..."}}`. ari adds an optional `"call"`: the
//! id the decision is for, which must then be the call the task waits on (a decision made
//! while looking at an older call never lands on a newer one). Text alone decides nothing:
//! "yes" in a chat is not an approval.

use ari_crds::Decision;
use serde_json::Value;

use crate::a2a::Message;
use crate::convert::cut;
use crate::error::Error;

/// Longest reason kept (the CRD's bound on `spec.approvals[].reason`).
const MAX_REASON: usize = 1024;

/// What the message decides about the waiting call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub decision: Decision,
    pub reason: Option<String>,
}

/// The decision `message` carries about `call`; an error that says how to send one when it
/// carries none, or one about another call.
pub fn answer(message: &Message, call: &str) -> Result<Answer, Error> {
    let mut found = None;
    for data in message.parts.iter().filter_map(|p| p.data.as_ref()) {
        if let Some(a) = from_data(data, call)? {
            if found.is_some() {
                return Err(Error::InvalidParams(
                    "a message carries one decision".into(),
                ));
            }
            found = Some(a);
        }
    }
    found.ok_or_else(|| {
        Error::InvalidParams(format!(
            "the task waits for a decision on call {call}: send a data part \
             {{\"decision_type\": \"approve\"}} or {{\"decision_type\": \"reject\", \
             \"rejection_reason\": \"...\"}}"
        ))
    })
}

/// Whether a `SendMessage` request's message carries a decision (a data part with a
/// `decision_type`), read before the request is parsed: deciding needs the right to update
/// Tasks, replying to a question only the right to create them.
pub fn carries_decision(params: &Value) -> bool {
    params
        .pointer("/message/parts")
        .and_then(Value::as_array)
        .is_some_and(|parts| {
            parts
                .iter()
                .any(|p| p.pointer("/data/decision_type").is_some())
        })
}

/// The decision one data part carries, if it carries one.
fn from_data(data: &Value, call: &str) -> Result<Option<Answer>, Error> {
    let Some(kind) = data.get("decision_type").and_then(Value::as_str) else {
        return Ok(None);
    };
    if let Some(named) = data.get("call")
        && named.as_str() != Some(call)
    {
        return Err(Error::InvalidParams(format!(
            "the decision is for call {:.64}, but the task waits on call {call}",
            named.as_str().unwrap_or("(not a string)")
        )));
    }
    let (word, reason) = match kind {
        "batch" => {
            let word = data.pointer(&format!("/decisions/{}", escape(call)));
            let Some(word) = word.and_then(Value::as_str) else {
                return Err(Error::InvalidParams(format!(
                    "the batch decides nothing about call {call}, the one the task waits on"
                )));
            };
            let reason = data.pointer(&format!("/rejection_reasons/{}", escape(call)));
            (word, reason)
        }
        word => (word, data.get("rejection_reason")),
    };
    let decision = match word {
        "approve" => Decision::Approved,
        "deny" | "reject" => Decision::Rejected,
        other => {
            return Err(Error::InvalidParams(format!(
                "decision_type {:.32} is not approve, reject, deny or batch",
                other
            )));
        }
    };
    let reason = reason
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| cut(r, MAX_REASON).to_owned());
    Ok(Some(Answer { decision, reason }))
}

/// `key` as one JSON Pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::Part;
    use serde_json::json;

    fn message(parts: Vec<Value>) -> Message {
        Message {
            parts: parts
                .into_iter()
                .map(|d| Part {
                    data: Some(d),
                    ..Part::default()
                })
                .collect(),
            ..Message::default()
        }
    }

    fn decided(parts: Vec<Value>) -> Result<Answer, Error> {
        answer(&message(parts), "c1")
    }

    #[test]
    fn kagent_shaped_approvals_and_rejections_decide_the_waiting_call() {
        let approved = decided(vec![json!({"decision_type": "approve"})]).expect("approve");
        assert_eq!(approved.decision, Decision::Approved);
        for word in ["reject", "deny"] {
            let no = decided(vec![
                json!({"decision_type": word, "rejection_reason": " too risky "}),
            ])
            .expect(word);
            assert_eq!(
                (no.decision, no.reason.as_deref()),
                (Decision::Rejected, Some("too risky"))
            );
        }
        let batch = decided(vec![json!({"decision_type": "batch",
            "decisions": {"c0": "approve", "c1": "deny"}, "rejection_reasons": {"c1": "no"}})])
        .expect("batch");
        assert_eq!(
            (batch.decision, batch.reason.as_deref()),
            (Decision::Rejected, Some("no"))
        );
    }

    #[test]
    fn a_message_without_a_decision_or_about_another_call_decides_nothing() {
        let text = Message {
            parts: vec![Part::text("yes, go ahead")],
            ..Message::default()
        };
        assert!(
            matches!(answer(&text, "c1"), Err(Error::InvalidParams(m)) if m.contains("decision_type"))
        );
        let other = decided(vec![json!({"decision_type": "approve", "call": "c0"})]);
        assert!(matches!(other, Err(Error::InvalidParams(m)) if m.contains("waits on call c1")));
        let batch = decided(vec![
            json!({"decision_type": "batch", "decisions": {"c0": "approve"}}),
        ]);
        assert!(batch.is_err());
        assert!(decided(vec![json!({"decision_type": "maybe"})]).is_err());
        let two = decided(vec![
            json!({"decision_type": "approve"}),
            json!({"decision_type": "deny"}),
        ]);
        assert!(two.is_err(), "two decisions in one message are refused");
    }

    #[test]
    fn a_long_reason_is_cut_to_what_the_task_keeps() {
        let long = "x".repeat(5000);
        let a = decided(vec![
            json!({"decision_type": "reject", "rejection_reason": long}),
        ])
        .expect("reject");
        assert_eq!(a.reason.map(|r| r.len()), Some(MAX_REASON));
    }
}
