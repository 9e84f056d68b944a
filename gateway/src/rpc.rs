//! JSON-RPC 2.0 framing: the request envelope, method names (v1.0 and pre-1.0), responses.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// The A2A methods the gateway serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
}

impl Method {
    /// The method a name means; pre-1.0 clients still send the slash-separated names.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "SendMessage" | "message/send" => Self::SendMessage,
            "SendStreamingMessage" | "message/stream" => Self::SendStreamingMessage,
            "GetTask" | "tasks/get" => Self::GetTask,
            "ListTasks" | "tasks/list" => Self::ListTasks,
            "CancelTask" | "tasks/cancel" => Self::CancelTask,
            "SubscribeToTask" | "tasks/resubscribe" => Self::SubscribeToTask,
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig"
            | "tasks/pushNotificationConfig/set"
            | "tasks/pushNotificationConfig/get"
            | "tasks/pushNotificationConfig/list"
            | "tasks/pushNotificationConfig/delete" => return Err(Error::PushNotSupported),
            "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => {
                return Err(Error::Unsupported("there is no extended agent card".into()));
            }
            other => return Err(Error::MethodNotFound(cut(other, 64))),
        })
    }

    /// Its v1.0 name (the metric label).
    pub fn name(self) -> &'static str {
        match self {
            Self::SendMessage => "SendMessage",
            Self::SendStreamingMessage => "SendStreamingMessage",
            Self::GetTask => "GetTask",
            Self::ListTasks => "ListTasks",
            Self::CancelTask => "CancelTask",
            Self::SubscribeToTask => "SubscribeToTask",
        }
    }

    pub fn streams(self) -> bool {
        matches!(self, Self::SendStreamingMessage | Self::SubscribeToTask)
    }
}

/// A request as sent; `id` is echoed back whatever its JSON type.
#[derive(Deserialize, Debug)]
pub struct Request {
    #[serde(default)]
    pub jsonrpc: Option<String>,
    #[serde(default)]
    pub id: Value,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Value,
}

/// Whether a method name is a pre-1.0 one (its client expects 0.3-shaped answers).
pub fn is_legacy_name(name: &str) -> bool {
    name.contains('/')
}

/// A parsed request: its id, method, params, and whether it used a pre-1.0 name.
pub struct Parsed {
    pub id: Value,
    pub method: Method,
    pub params: Value,
    pub legacy: bool,
}

/// The request in `body`, checked as far as the envelope goes. On error the id is returned
/// when it could be read, so the error response can carry it.
pub fn parse(body: &[u8]) -> std::result::Result<Parsed, (Value, Error)> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| (Value::Null, Error::Parse(cut(&e.to_string(), 200))))?;
    if value.is_array() {
        return Err((
            Value::Null,
            Error::InvalidRequest("batches are not supported".into()),
        ));
    }
    let req: Request = serde_json::from_value(value)
        .map_err(|e| (Value::Null, Error::InvalidRequest(cut(&e.to_string(), 200))))?;
    if req.jsonrpc.as_deref() != Some("2.0") {
        return Err((
            req.id,
            Error::InvalidRequest("jsonrpc must be \"2.0\"".into()),
        ));
    }
    let Some(name) = req.method.as_deref() else {
        return Err((req.id, Error::InvalidRequest("no method".into())));
    };
    match Method::parse(name) {
        Ok(method) => Ok(Parsed {
            legacy: is_legacy_name(name),
            id: req.id,
            method,
            params: req.params,
        }),
        Err(e) => Err((req.id, e)),
    }
}

/// `params` as `T`, or `InvalidParams` saying why.
pub fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T> {
    serde_json::from_value(params).map_err(|e| Error::InvalidParams(cut(&e.to_string(), 200)))
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn error(id: &Value, e: &Error) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": e.rpc_error()})
}

/// At most `max` bytes of `s` (on a char boundary): caller text in errors stays short.
fn cut(s: &str, max: usize) -> String {
    crate::convert::cut(s, max).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::code;

    #[test]
    fn both_method_generations_are_understood() {
        assert_eq!(Method::parse("SendMessage").ok(), Some(Method::SendMessage));
        assert_eq!(
            Method::parse("message/send").ok(),
            Some(Method::SendMessage)
        );
        assert_eq!(
            Method::parse("tasks/resubscribe").ok(),
            Some(Method::SubscribeToTask)
        );
        assert!(matches!(
            Method::parse("Nope"),
            Err(Error::MethodNotFound(_))
        ));
        assert!(matches!(
            Method::parse("CreateTaskPushNotificationConfig"),
            Err(Error::PushNotSupported)
        ));
    }

    #[test]
    fn broken_envelopes_get_their_json_rpc_codes() {
        let code_of = |body: &str| parse(body.as_bytes()).err().map(|(_, e)| e.rpc_code());
        assert_eq!(code_of("{"), Some(code::PARSE_ERROR));
        assert_eq!(code_of("[]"), Some(code::INVALID_REQUEST));
        assert_eq!(
            code_of(r#"{"id":1,"method":"GetTask"}"#),
            Some(code::INVALID_REQUEST)
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1,"method":"Nope"}"#),
            Some(code::METHOD_NOT_FOUND)
        );
        let p =
            parse(br#"{"jsonrpc":"2.0","id":"x","method":"GetTask","params":{}}"#).expect("valid");
        assert_eq!(
            (p.id, p.method, p.legacy),
            (Value::String("x".into()), Method::GetTask, false)
        );
        let p =
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}"#).expect("valid");
        assert!(p.legacy);
    }
}
