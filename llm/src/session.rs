//! A task's model calls: each one decided by the token budget, made live or served from a
//! record, charged and recorded. The runtime holds one per task.

use std::collections::BTreeMap;
use std::sync::Arc;

use ari_model::{ModelCalls, Prices, TokenUsage};
use serde::Serialize;
use tokio::time::Instant;

use crate::budget::{
    Budget, Estimator, OutputLimits, Refusal, admit, admit_input, estimate_inputs, estimate_prompt,
};
use crate::client::Client;
use crate::endpoint::Endpoint;
use crate::error::ModelError;
use crate::rate::RateLimiter;
use crate::record::{Call, CallRecord, Divergence, Outcome, Recording, Replayer};
use crate::types::{ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, Usage};

/// A model as a ModelConfig declares it: where, and the limits its calls get.
#[derive(Debug, Clone)]
pub struct Model {
    /// The ModelConfig's name: what the guest calls it by, and what usage is reported under.
    pub name: String,
    pub endpoint: Endpoint,
    pub output: OutputLimits,
    pub estimator: Estimator,
    /// The temperature a chat call is sent with when the guest sets none (it is then part of
    /// the request as recorded, so a replay that knows the default asks alike).
    pub default_temperature: Option<f32>,
    /// Prices per million tokens: the usage then carries an estimated cost.
    pub prices: Option<Prices>,
    /// The process's limiter of this model's requests and tokens per minute, shared by every
    /// task (each clone of the model holds the same one). None in a replay: its refusals are
    /// in the records.
    pub rate: Option<Arc<RateLimiter>>,
}

impl Model {
    /// A model with no defaults, prices or rate limits, and the default estimator.
    pub fn new(name: impl Into<String>, endpoint: Endpoint) -> Model {
        Model {
            name: name.into(),
            endpoint,
            output: OutputLimits::default(),
            estimator: Estimator::default(),
            default_temperature: None,
            prices: None,
            rate: None,
        }
    }
}

/// Where answers come from.
pub enum Source {
    /// The provider.
    Live(Client),
    /// A recorded run (`ari verify`): no model is contacted.
    Replay(Replayer),
}

/// Why a call returned no outcome for the guest.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The guest's error: the WIT's `model-error`.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A replay met a request its record does not hold: the replay has failed.
    #[error(transparent)]
    Diverged(#[from] Divergence),
}

pub struct Session {
    source: Source,
    budget: Budget,
    recording: Recording,
    usage: BTreeMap<String, ModelCalls>,
}

impl Session {
    /// `budget` tokens in all; records kept under `trace_ceiling` bytes.
    pub fn new(source: Source, budget: u64, trace_ceiling: usize) -> Session {
        Session {
            source,
            budget: Budget::new(budget),
            recording: Recording::new(trace_ceiling),
            usage: BTreeMap::new(),
        }
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Takes `tokens` out of the budget ahead: a child task's share, charged when it starts.
    pub fn reserve(&mut self, tokens: u64) {
        self.budget.charge(tokens);
    }

    /// Gives back what a child did not use of its share.
    pub fn refund(&mut self, tokens: u64) {
        self.budget.refund(tokens);
    }

    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// Calls and tokens so far, one entry per model called, by name.
    pub fn usage(&self) -> Vec<ModelCalls> {
        self.usage.values().cloned().collect()
    }

    /// Ends the session: its records, or the divergence of a replay that ended early.
    pub fn finish(self) -> Result<Vec<CallRecord>, Divergence> {
        if let Source::Replay(replayer) = &self.source {
            replayer.finish()?;
        }
        Ok(self.recording.into_records())
    }

    /// Decides a chat call without making it: the request as it would be sent (`max_tokens`
    /// clipped to what the budget has left) and the prompt's estimate, or why it is refused.
    /// A refusal leaves no record, live and in replay alike, so a host that serves records
    /// one at a time asks this before taking the next one.
    pub fn admit_chat(
        &self,
        model: &Model,
        request: ChatRequest,
    ) -> Result<(ChatRequest, u64), ModelError> {
        let temperature = request.temperature.or(model.default_temperature);
        if temperature.is_some_and(|t| !t.is_finite()) {
            return Err(ModelError::invalid("the temperature is not a number"));
        }
        let estimate = estimate_prompt(&request, model.estimator);
        let max_tokens = admit(
            self.budget.remaining(),
            estimate,
            request.max_tokens,
            model.output,
        )
        .map_err(refused)?;
        let sent = ChatRequest {
            max_tokens: Some(max_tokens),
            temperature,
            ..request
        };
        self.room_for(&sent)?;
        Ok((sent, estimate))
    }

    /// Decides an embedding call without making it: the inputs' estimate, or why it is
    /// refused (see [`Session::admit_chat`]).
    pub fn admit_embed(
        &self,
        model: &Model,
        request: &EmbeddingRequest,
    ) -> Result<u64, ModelError> {
        let estimate = estimate_inputs(&request.inputs, model.estimator);
        admit_input(self.budget.remaining(), estimate).map_err(refused)?;
        self.room_for(request)?;
        Ok(estimate)
    }

    /// Hands a replay session the next recorded call (a host whose trace holds the records
    /// passes them on one at a time, after [`Session::admit_chat`] admitted the call). A live
    /// session ignores it.
    pub fn queue_recorded(&mut self, record: CallRecord) {
        if let Source::Replay(replayer) = &mut self.source {
            replayer.push(record);
        }
    }

    /// The record of the last call made, as kept (what a host's trace should hold).
    pub fn last_record(&self) -> Option<&CallRecord> {
        self.recording.records().last()
    }

    /// One chat completion. `on_text` (if any) gets the text as it is generated.
    pub async fn chat(
        &mut self,
        model: &Model,
        request: ChatRequest,
        deadline: Instant,
        on_text: Option<&mut (dyn FnMut(&str) + Send)>,
    ) -> Result<ChatResponse, CallError> {
        let (sent, estimate) = self.admit_chat(model, request)?;
        let max_tokens = sent.max_tokens.unwrap_or(1);
        let endpoint = model.endpoint.id();
        let outcome = match &mut self.source {
            Source::Replay(replayer) => replayer.chat(&endpoint, &sent)?,
            Source::Live(client) => match pace(model, estimate, deadline).await {
                Err(refused) => Outcome::Error(refused),
                Ok(()) => {
                    let answer = match on_text {
                        Some(on_text) => {
                            client
                                .chat_streaming(
                                    &model.endpoint,
                                    &sent,
                                    max_tokens,
                                    deadline,
                                    on_text,
                                )
                                .await
                        }
                        None => {
                            client
                                .chat(&model.endpoint, &sent, max_tokens, deadline)
                                .await
                        }
                    };
                    let answer = answer.map(|(mut response, reported)| {
                        if !reported {
                            response.usage = upper_bound(estimate, max_tokens);
                        }
                        response
                    });
                    settle(model, estimate, answer.as_ref().ok().map(|r| r.usage));
                    Outcome::from(answer)
                }
            },
        };
        let kept = self.recording.push(CallRecord {
            endpoint,
            call: Call::Chat {
                request: sent,
                outcome,
            },
        });
        let Call::Chat { outcome, .. } = kept.call else {
            unreachable!("a chat record stays a chat record")
        };
        if let Outcome::Answer(response) = &outcome {
            self.charge(model, response.usage);
        }
        Ok(Result::from(outcome)?)
    }

    /// Vectors for `request.inputs`.
    pub async fn embed(
        &mut self,
        model: &Model,
        request: EmbeddingRequest,
        deadline: Instant,
    ) -> Result<EmbeddingResponse, CallError> {
        let estimate = self.admit_embed(model, &request)?;
        let endpoint = model.endpoint.id();
        let outcome = match &mut self.source {
            Source::Replay(replayer) => replayer.embed(&endpoint, &request)?,
            Source::Live(client) => match pace(model, estimate, deadline).await {
                Err(refused) => Outcome::Error(refused),
                Ok(()) => {
                    let answer = client.embed(&model.endpoint, &request, deadline).await.map(
                        |(mut response, reported)| {
                            if !reported {
                                response.usage = upper_bound(estimate, 0);
                            }
                            response
                        },
                    );
                    settle(model, estimate, answer.as_ref().ok().map(|r| r.usage));
                    Outcome::from(answer)
                }
            },
        };
        let kept = self.recording.push(CallRecord {
            endpoint,
            call: Call::Embed { request, outcome },
        });
        let Call::Embed { outcome, .. } = kept.call else {
            unreachable!("an embedding record stays one")
        };
        if let Outcome::Answer(response) = &outcome {
            self.charge(model, response.usage);
        }
        Ok(Result::from(outcome)?)
    }

    /// Refuses a call whose record could not fit in the trace, before it is made.
    fn room_for(&self, request: &impl Serialize) -> Result<(), ModelError> {
        let bytes = serde_json::to_vec(request).map_or(usize::MAX, |b| b.len());
        if self.recording.admits(bytes) {
            Ok(())
        } else {
            Err(ModelError::BudgetExhausted {
                message: format!(
                    "the task's trace has {} bytes left, too few to record this call",
                    self.recording.room()
                ),
            })
        }
    }

    fn charge(&mut self, model: &Model, usage: Usage) {
        self.budget.charge(usage.total());
        let entry = self
            .usage
            .entry(model.name.clone())
            .or_insert_with(|| ModelCalls {
                name: model.name.clone(),
                endpoint: model.endpoint.id().base_url,
                model: model.endpoint.model.clone(),
                usage: TokenUsage::default(),
                estimated_cost: None,
            });
        let totals = &mut entry.usage;
        totals.calls += 1;
        totals.input_tokens += u64::from(usage.input_tokens);
        totals.output_tokens += u64::from(usage.output_tokens);
        totals.cached_input_tokens += u64::from(usage.cached_input_tokens);
        // Of the totals, not summed per call: the arithmetic is exact, so both are the same.
        entry.estimated_cost = model.prices.as_ref().and_then(|p| p.cost(totals));
    }
}

/// Waits until the model's rate limits let a call of `tokens` (the prompt's estimate) go, or
/// refuses it `rate-limited` when that wait would not end before `deadline`. Dropping the
/// future (a cancelled task) abandons the wait. The refusal becomes the call's record like a
/// provider's 429, so a replay serves it without a limiter.
async fn pace(model: &Model, tokens: u64, deadline: Instant) -> Result<(), ModelError> {
    let Some(rate) = &model.rate else {
        return Ok(());
    };
    let now = Instant::now();
    match rate.reserve(now, tokens, deadline.saturating_duration_since(now)) {
        Ok(wait) => {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            Ok(())
        }
        Err(wait) => Err(ModelError::rate_limited(
            Some(wait),
            format!(
                "model `{}` is at its ModelConfig's rate limit, and the wait ends after the \
                 task's deadline",
                model.name
            ),
        )),
    }
}

/// Tells the model's limiter what a call paced by [`pace`] used (`None`: it failed, and keeps
/// the estimate it reserved, which the provider may have counted).
fn settle(model: &Model, estimate: u64, usage: Option<Usage>) {
    if let Some(rate) = &model.rate {
        rate.settle(estimate, usage.map_or(estimate, |u| u.total()));
    }
}

/// What a call that reported no usage is charged: the most it can have used.
fn upper_bound(estimate: u64, max_tokens: u32) -> Usage {
    Usage {
        input_tokens: u32::try_from(estimate).unwrap_or(u32::MAX),
        output_tokens: max_tokens,
        cached_input_tokens: 0,
    }
}

fn refused(refusal: Refusal) -> ModelError {
    match refusal {
        Refusal::PromptTooLarge { .. } => ModelError::BudgetExhausted {
            message: refusal.to_string(),
        },
        Refusal::ZeroMaxTokens | Refusal::ChildTooLarge { .. } => {
            ModelError::invalid(refusal.to_string())
        }
    }
}
