//! A step's input from its dependencies' outputs, the one way the operator builds it and
//! `ari plan verify` re-derives it.
//!
//! - `input`: those bytes; neither `input` nor `inputFrom`: empty.
//! - One `inputFrom` without `key`: that output as it is, or its field (a JSON string field as
//!   its text, anything else as compact JSON).
//! - Several, or any `key`: a JSON object, one member per entry in order, whose value is the
//!   field, or the whole output as JSON when it is JSON, else as a string.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::model::{InputRef, Step};

/// Why an input could not be built from the outputs at hand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("step {0} has no output (yet)")]
    NoOutput(String),
    #[error("field {field} of step {step}: the output is not a JSON object")]
    NotAnObject { step: String, field: String },
    #[error("field {field} of step {step}: the output has no such field")]
    MissingField { step: String, field: String },
    #[error("the output of step {0} is not UTF-8, so it cannot go into a JSON input")]
    NotUtf8(String),
    #[error("the input would pass {0} bytes")]
    TooLarge(usize),
}

/// The input bytes of `step`, given the outputs of finished steps by name.
///
/// JSON values are copied as they appear in the outputs, never re-serialised, so the bytes do
/// not depend on how a JSON library orders object members.
pub fn compose_input(
    step: &Step,
    outputs: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<u8>, InputError> {
    match Shape::of(step) {
        Shape::Literal(bytes) => Ok(bytes.to_vec()),
        Shape::Single(one) => single(one, output(outputs, one)?),
        Shape::Object(many) => {
            let mut object = Object::new(usize::MAX);
            for r in many {
                object.push(r, output(outputs, r)?)?;
            }
            Ok(object.finish())
        }
    }
}

/// How a step's input is made: so a caller can fetch one output at a time.
pub enum Shape<'a> {
    /// The literal input (empty when the step has neither `input` nor `inputFrom`).
    Literal(&'a [u8]),
    /// One output (or one field of it) as it is.
    Single(&'a InputRef),
    /// A JSON object with one member per entry, in order.
    Object(&'a [InputRef]),
}

impl<'a> Shape<'a> {
    pub fn of(step: &'a Step) -> Shape<'a> {
        if let Some(literal) = &step.input {
            return Shape::Literal(literal.as_bytes());
        }
        match step.input_from.as_slice() {
            [] => Shape::Literal(&[]),
            [one] if one.key.is_none() => Shape::Single(one),
            many => Shape::Object(many),
        }
    }
}

/// The input made of one output (`r` has no key): the output, or its field.
pub fn single(r: &InputRef, output: &[u8]) -> Result<Vec<u8>, InputError> {
    match &r.field {
        None => Ok(output.to_vec()),
        Some(_) => {
            let raw = field(r, output)?;
            Ok(match serde_json::from_str::<String>(&raw) {
                Ok(text) => text.into_bytes(),
                Err(_) => raw.into_bytes(),
            })
        }
    }
}

/// A JSON object input built one member at a time, refused as soon as it passes `max` bytes.
pub struct Object {
    text: String,
    max: usize,
}

impl Object {
    pub fn new(max: usize) -> Self {
        Object {
            text: String::from("{"),
            max,
        }
    }

    /// Adds the member of `r`, taken from that step's `output`.
    pub fn push(&mut self, r: &InputRef, output: &[u8]) -> Result<(), InputError> {
        let value = match &r.field {
            Some(_) => field(r, output)?,
            None => whole(r, output)?,
        };
        if self.text.len() > 1 {
            self.text.push(',');
        }
        self.text
            .push_str(&serde_json::Value::from(r.key()).to_string());
        self.text.push(':');
        self.text.push_str(&value);
        if self.text.len() + 1 > self.max {
            return Err(InputError::TooLarge(self.max));
        }
        Ok(())
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.text.push('}');
        self.text.into_bytes()
    }
}

fn output<'a>(
    outputs: &'a BTreeMap<String, Vec<u8>>,
    r: &InputRef,
) -> Result<&'a [u8], InputError> {
    outputs
        .get(&r.step)
        .map(Vec::as_slice)
        .ok_or_else(|| InputError::NoOutput(r.step.clone()))
}

/// The field's JSON text, as it appears in the output.
fn field(r: &InputRef, bytes: &[u8]) -> Result<String, InputError> {
    let name = r.field.clone().unwrap_or_default();
    let Ok(mut object) = serde_json::from_slice::<BTreeMap<String, Box<RawValue>>>(bytes) else {
        return Err(InputError::NotAnObject {
            step: r.step.clone(),
            field: name,
        });
    };
    object
        .remove(&name)
        .map(|raw| raw.get().to_owned())
        .ok_or(InputError::MissingField {
            step: r.step.clone(),
            field: name,
        })
}

/// The whole output as JSON text: itself when it is JSON, else as a JSON string.
fn whole(r: &InputRef, bytes: &[u8]) -> Result<String, InputError> {
    let text = std::str::from_utf8(bytes).map_err(|_| InputError::NotUtf8(r.step.clone()))?;
    Ok(match serde_json::from_str::<&RawValue>(text) {
        Ok(raw) => raw.get().to_owned(),
        Err(_) => serde_json::Value::from(text).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(step: &str, field: Option<&str>, key: Option<&str>) -> InputRef {
        InputRef {
            step: step.into(),
            field: field.map(Into::into),
            key: key.map(Into::into),
        }
    }

    fn step(input_from: Vec<InputRef>) -> Step {
        Step {
            name: "s".into(),
            input_from,
            ..Default::default()
        }
    }

    fn outputs() -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            ("split".into(), br#"{"a":"one two","n":3}"#.to_vec()),
            ("plain".into(), b"hello".to_vec()),
            ("binary".into(), vec![0xff, 0xfe]),
        ])
    }

    #[test]
    fn a_literal_or_no_input_needs_no_output() {
        let mut s = step(vec![]);
        assert_eq!(compose_input(&s, &BTreeMap::new()), Ok(vec![]));
        s.input = Some("x".into());
        assert_eq!(compose_input(&s, &BTreeMap::new()), Ok(b"x".to_vec()));
    }

    #[test]
    fn one_whole_output_passes_through_byte_for_byte() {
        let s = step(vec![from("binary", None, None)]);
        assert_eq!(compose_input(&s, &outputs()), Ok(vec![0xff, 0xfe]));
    }

    #[test]
    fn one_field_gives_a_string_as_text_and_anything_else_as_json() {
        let s = step(vec![from("split", Some("a"), None)]);
        assert_eq!(compose_input(&s, &outputs()), Ok(b"one two".to_vec()));
        let s = step(vec![from("split", Some("n"), None)]);
        assert_eq!(compose_input(&s, &outputs()), Ok(b"3".to_vec()));
    }

    #[test]
    fn several_inputs_make_one_json_object_in_order() {
        let s = step(vec![
            from("split", Some("n"), None),
            from("plain", None, None),
            from("split", None, Some("all")),
        ]);
        let got = compose_input(&s, &outputs()).unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&got),
            r#"{"n":3,"plain":"hello","all":{"a":"one two","n":3}}"#
        );
    }

    #[test]
    fn an_object_input_is_refused_as_soon_as_it_passes_its_bound() {
        let big = format!("{{\"a\":\"{}\"}}", "x".repeat(600));
        let r = from("big", Some("a"), Some("k"));
        let mut object = Object::new(1_000);
        assert_eq!(object.push(&r, big.as_bytes()), Ok(()));
        assert_eq!(
            object.push(&r, big.as_bytes()),
            Err(InputError::TooLarge(1_000))
        );
    }

    #[test]
    fn a_missing_field_or_output_is_an_error_naming_the_step() {
        let s = step(vec![from("split", Some("zzz"), None)]);
        assert!(matches!(
            compose_input(&s, &outputs()),
            Err(InputError::MissingField { .. })
        ));
        let s = step(vec![from("plain", Some("a"), None)]);
        assert!(matches!(
            compose_input(&s, &outputs()),
            Err(InputError::NotAnObject { .. })
        ));
        let s = step(vec![from("nope", None, None)]);
        assert_eq!(
            compose_input(&s, &outputs()),
            Err(InputError::NoOutput("nope".into()))
        );
        let s = step(vec![from("binary", None, Some("k"))]);
        assert_eq!(
            compose_input(&s, &outputs()),
            Err(InputError::NotUtf8("binary".into()))
        );
    }
}
