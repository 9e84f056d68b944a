//! Key-value storage (capability `storage`). Transactional per task: reads see the state at
//! task start plus this task's own writes, and writes commit only if the task succeeds.

use super::wit;
use crate::Error;

/// Reads `key`; `None` when it does not exist.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, Error> {
    wit::storage_get(key).map_err(Error::from)
}

/// Writes `value` under `key`; fails when the storage quota would be exceeded.
pub fn set(key: &str, value: &[u8]) -> Result<(), Error> {
    wit::storage_set(key, value).map_err(Error::from)
}

/// Deletes `key`; deleting a missing key is not an error.
pub fn delete(key: &str) -> Result<(), Error> {
    wit::storage_delete(key).map_err(Error::from)
}

/// Reads `key` as UTF-8 text.
pub fn get_string(key: &str) -> Result<Option<String>, Error> {
    get(key)?.map(decode_string).transpose()
}

/// Writes `value` as UTF-8 text.
pub fn set_string(key: &str, value: &str) -> Result<(), Error> {
    set(key, value.as_bytes())
}

/// Reads `key` as an unsigned integer stored in decimal text (readable in state dumps).
pub fn get_u64(key: &str) -> Result<Option<u64>, Error> {
    get_string(key)?.map(|s| decode_u64(&s)).transpose()
}

/// Writes `value` as decimal text.
pub fn set_u64(key: &str, value: u64) -> Result<(), Error> {
    set_string(key, &value.to_string())
}

fn decode_string(bytes: Vec<u8>) -> Result<String, Error> {
    String::from_utf8(bytes).map_err(|e| Error::Invalid(format!("stored value is not UTF-8: {e}")))
}

fn decode_u64(text: &str) -> Result<u64, Error> {
    text.trim()
        .parse()
        .map_err(|e| Error::Invalid(format!("stored value {text:?} is not a u64: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_typed_values() {
        assert_eq!(decode_u64(" 42\n"), Ok(42));
        assert!(matches!(decode_u64("x"), Err(Error::Invalid(_))));
        assert_eq!(decode_string(b"hi".to_vec()), Ok("hi".to_string()));
        assert!(matches!(decode_string(vec![0xff]), Err(Error::Invalid(_))));
    }
}
