//! The conformance agent in Rust: one command per task, as `conformance/README.md` defines, so
//! every language's agent can be held to the same table (`conformance/cases.json`).

use ari_sdk::host::crypto::HashAlgorithm;
use ari_sdk::host::delegation::{self, Budget};
use ari_sdk::host::log::Level;
use ari_sdk::host::{clock, crypto, http, log, random, storage};
use ari_sdk::model::{
    self, ChatRequest, ChatResponse, EmbeddingRequest, Message, ModelError, Tool,
};
use ari_sdk::{Agent, Error, Output, Task, hex, tools};

struct Conformance;

impl Agent for Conformance {
    fn execute(task: Task) -> Result<Output, Error> {
        let line = task.input_str()?;
        // `must OP ...` passes a host error on as the task's error; otherwise it is printed.
        let (strict, line) = match line.strip_prefix("must ") {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        if let Some(rest) = line.strip_prefix("fail ") {
            return Err(failure(rest));
        }
        match command(line) {
            Ok(out) => Ok(Output::from(out)),
            Err(e) if strict => Err(e),
            Err(e @ Error::Unsupported(_)) => Err(e),
            Err(e) => {
                // Logged too: a task whose host call was denied ends `CapabilityDenied` even
                // when the agent carries on, and then only the log shows what the agent saw.
                let seen = format!("err:{}", kind(&e));
                // A child's failure names the child's reason, a rate limit its wait and a
                // provider's failure its status: the table checks each SDK keeps them.
                let seen = match &e {
                    Error::ChildFailed { reason, .. } => format!("{seen}:{reason}"),
                    Error::Model(ModelError::RateLimited {
                        retry_after_millis, ..
                    }) => match retry_after_millis {
                        Some(ms) => format!("{seen}:{ms}"),
                        None => format!("{seen}:-"),
                    },
                    Error::Model(ModelError::Provider { status, .. }) => {
                        format!("{seen}:{status}")
                    }
                    _ => seen,
                };
                log::warn(&seen);
                Ok(Output::from(seen))
            }
        }
    }
}

/// The error's kind as the protocol spells it.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::Denied(_) => "denied",
        Error::QuotaExceeded(_) => "quota-exceeded",
        Error::Invalid(_) => "invalid",
        Error::Unsupported(_) => "unsupported",
        Error::Failed(_) => "failed",
        Error::Unavailable(_) => "unavailable",
        Error::LimitReached(_) => "limit-reached",
        Error::BudgetExhausted(_) => "budget-exhausted",
        Error::ChildFailed { .. } => "child-failed",
        Error::Rejected(_) => "rejected",
        // A model error is spelt as the WIT's `model-error` case, a tools error as its
        // `tool-error` case.
        Error::Model(m) => m.kind(),
        Error::Tool(t) => t.kind(),
        // The SDK's error may grow with the contract.
        _ => "other",
    }
}

/// Splits off the first space-separated word; the rest may hold spaces.
fn word(s: &str) -> (&str, &str) {
    s.split_once(' ').unwrap_or((s, ""))
}

fn command(line: &str) -> Result<String, Error> {
    let (op, rest) = word(line);
    match op {
        "echo" => Ok(rest.to_string()),
        "log" => {
            let (level, message) = word(rest);
            let level = match level {
                "trace" => Level::Trace,
                "debug" => Level::Debug,
                "info" => Level::Info,
                "warn" => Level::Warn,
                "error" => Level::Error,
                other => return Err(Error::Invalid(format!("no log level {other:?}"))),
            };
            log::log(level, message);
            Ok("logged".into())
        }
        "storage" => {
            let (key, value) = word(rest);
            storage::set(key, value.as_bytes())?;
            let got = storage::get(key)?.ok_or("a value just set is missing")?;
            storage::delete(key)?;
            let after = if storage::get(key)?.is_some() {
                "some"
            } else {
                "none"
            };
            Ok(format!(
                "set:ok get:{} delete:ok after:{after}",
                String::from_utf8_lossy(&got)
            ))
        }
        "storage-fill" => {
            let (key, n) = word(rest);
            storage::set(key, &vec![b'x'; number(n)?])?;
            Ok("ok".into())
        }
        "random" => Ok(hex::encode(&random::bytes(number(rest)? as u32)?)),
        "hash" => {
            let (alg, data) = word(rest);
            let alg = match alg {
                "sha256" => HashAlgorithm::Sha256,
                "sha384" => HashAlgorithm::Sha384,
                "sha512" => HashAlgorithm::Sha512,
                other => return Err(Error::Invalid(format!("no hash algorithm {other:?}"))),
            };
            Ok(hex::encode(&crypto::digest(alg, data.as_bytes())))
        }
        "sign" => Ok(hex::encode(&crypto::sign(rest.as_bytes())?)),
        "sign-verify" => {
            let (public, message) = word(rest);
            let public = unhex(public)?;
            let signature = crypto::sign(message.as_bytes())?;
            let valid = crypto::verify(&public, message.as_bytes(), &signature);
            let tampered = crypto::verify(&public, format!("{message}!").as_bytes(), &signature);
            Ok(format!("valid:{valid} tampered:{tampered}"))
        }
        "verify" => {
            let (public, rest) = word(rest);
            let (signature, message) = word(rest);
            let ok = crypto::verify(&unhex(public)?, message.as_bytes(), &unhex(signature)?);
            Ok(ok.to_string())
        }
        "http" => {
            let (method, rest) = word(rest);
            let (url, body) = word(rest);
            let resp = http::Request::new(method, url).body(body).send()?;
            Ok(format!(
                "status:{} body:{}",
                resp.status,
                String::from_utf8_lossy(&resp.body)
            ))
        }
        "now" => {
            let first = clock::now()?;
            let second = clock::now()?;
            Ok(format!("delta:{}", second.saturating_sub(first)))
        }
        "delegate" => {
            let (agent, input) = word(rest);
            Ok(text(delegation::delegate(agent, input.as_bytes())?))
        }
        "delegate-budget" => {
            let (fuel, rest) = word(rest);
            let (millis, rest) = word(rest);
            let (agent, input) = word(rest);
            let budget = Budget {
                fuel: bound(fuel)?,
                timeout_millis: bound(millis)?,
            };
            Ok(text(delegation::delegate_with(
                agent,
                input.as_bytes(),
                budget,
            )?))
        }
        "fan" => {
            // Every child is started before the first is awaited, so they run side by side.
            let (agent, inputs) = word(rest);
            let children = inputs
                .split(" | ")
                .map(|input| delegation::start(agent, input.as_bytes(), Budget::default()))
                .collect::<Result<Vec<_>, _>>()?;
            let outputs = children
                .into_iter()
                .map(|child| child.wait().map(text))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(outputs.join(" | "))
        }
        "message" => {
            let (fuel, rest) = word(rest);
            let (agent, input) = word(rest);
            let budget = Budget {
                fuel: bound(fuel)?,
                timeout_millis: None,
            };
            delegation::send_message(agent, input.as_bytes(), budget)?;
            Ok("sent".into())
        }
        "await" => {
            // A raw handle, which the SDK's `Child` never lets an agent make up: the case is
            // about the host refusing one.
            let handle = u32::try_from(number(rest)?)
                .map_err(|_| Error::Invalid(format!("{rest:?} is not a u32")))?;
            let output = ari_sdk::bindings::ainur::ari::host::await_child(handle)?;
            Ok(text(output))
        }
        "models" => Ok(model::models().join(",")),
        "model-chat" => {
            let (name, text) = word(rest);
            let answer = ChatRequest::new(name).user(text).send()?;
            Ok(chat_line(&answer))
        }
        "model-tools" => {
            // A tool loop of one round: the model calls `lookup`, gets `42`, and answers.
            let (name, text) = word(rest);
            let mut request = ChatRequest::new(name)
                .user(text)
                .tool(Tool::new("lookup", LOOKUP_PARAMETERS).description("looks a word up"))
                .tool_choice(model::ToolChoice::Required);
            let first = request.send()?;
            let mut out = format!("finish:{}", first.finish_reason.as_str());
            for call in first.tool_calls() {
                out.push_str(&format!(
                    " call:{}:{}:{}",
                    call.id, call.name, call.arguments
                ));
            }
            request.push(first.message.clone());
            for call in first.tool_calls() {
                request.push(Message::tool_result(&call.id, "42"));
            }
            let last = request.send()?;
            out.push_str(&format!(
                " then:{} text:{}",
                last.finish_reason.as_str(),
                last.text().unwrap_or_default()
            ));
            Ok(out)
        }
        "model-embed" => {
            let (name, inputs) = word(rest);
            let answer = EmbeddingRequest::new(name, inputs.split(" | ")).send()?;
            let vector = |v: Option<&Vec<f32>>| {
                v.map(|v| {
                    v.iter()
                        .map(|x| format!("{x:.3}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default()
            };
            Ok(format!(
                "vectors:{} dims:{} first:{} last:{} in:{} model:{}",
                answer.embeddings.len(),
                answer.embeddings.first().map_or(0, Vec::len),
                vector(answer.embeddings.first()),
                vector(answer.embeddings.last()),
                answer.usage.input_tokens,
                answer.model
            ))
        }
        "tools" => Ok(tools::servers().join(",")),
        "tool-list" => Ok(tools::list(rest)?
            .iter()
            .map(|t| {
                let mut shown = t.name.clone();
                if t.hints.read_only == Some(true) {
                    shown.push_str(":read-only");
                }
                if t.hints.destructive == Some(true) {
                    shown.push_str(":destructive");
                }
                shown
            })
            .collect::<Vec<_>>()
            .join(",")),
        "tool-call" => {
            let (server, rest) = word(rest);
            let (tool, arguments) = word(rest);
            let r = tools::call(server, tool, arguments)?;
            Ok(format!("error:{} text:{}", r.is_error, r.text))
        }
        other => Err(Error::Unsupported(format!("unknown command {other:?}"))),
    }
}

/// The arguments of the conformance tool `lookup`, a JSON Schema.
const LOOKUP_PARAMETERS: &str =
    r#"{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}"#;

/// A chat answer as the protocol prints it (the text last: it may hold spaces).
fn chat_line(answer: &ChatResponse) -> String {
    format!(
        "finish:{} in:{} out:{} cached:{} model:{} text:{}",
        answer.finish_reason.as_str(),
        answer.usage.input_tokens,
        answer.usage.output_tokens,
        answer.usage.cached_input_tokens,
        answer.model,
        answer.text().unwrap_or_default()
    )
}

/// A child's output as text.
fn text(output: Vec<u8>) -> String {
    String::from_utf8_lossy(&output).into_owned()
}

/// A budget bound: a number, or `-` for the default share.
fn bound(text: &str) -> Result<Option<u64>, Error> {
    if text == "-" {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| Error::Invalid(format!("{text:?} is not a number or -")))
}

/// `fail KIND MESSAGE`: the error the agent returns.
fn failure(rest: &str) -> Error {
    let (kind, message) = word(rest);
    match kind {
        "denied" => Error::Denied(message.into()),
        "invalid" => Error::Invalid(message.into()),
        "unsupported" => Error::Unsupported(message.into()),
        _ => Error::Failed(message.into()),
    }
}

fn number(text: &str) -> Result<usize, Error> {
    text.parse()
        .map_err(|_| Error::Invalid(format!("{text:?} is not a number")))
}

fn unhex(text: &str) -> Result<Vec<u8>, Error> {
    if !text.len().is_multiple_of(2) {
        return Err(Error::Invalid("odd number of hex digits".into()));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .ok_or_else(|| Error::Invalid(format!("{text:?} is not hex")))
        })
        .collect()
}

ari_sdk::export_agent!(Conformance);
