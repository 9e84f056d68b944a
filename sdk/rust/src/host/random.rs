//! Randomness from the task's seeded PRNG (capability `randomness`): replaying a task with the
//! same seed yields the same bytes.

use super::wit;
use crate::Error;

/// `len` random bytes.
pub fn bytes(len: u32) -> Result<Vec<u8>, Error> {
    let bytes = wit::random_bytes(len).map_err(Error::from)?;
    if bytes.len() != len as usize {
        return Err(Error::Invalid(format!(
            "host returned {} random bytes, asked for {len}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// A uniformly random `u64`.
pub fn u64() -> Result<u64, Error> {
    let b = bytes(8)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(&b);
    Ok(u64::from_le_bytes(word))
}

/// A uniformly random number in `0..bound` (rejection sampling, so no modulo bias).
pub fn below(bound: u64) -> Result<u64, Error> {
    uniform_below(bound, u64)
}

/// Rejection sampling over any source of random words; separate so it is testable natively.
fn uniform_below(bound: u64, mut next: impl FnMut() -> Result<u64, Error>) -> Result<u64, Error> {
    if bound == 0 {
        return Err(Error::Invalid(
            "random::below needs a bound above zero".into(),
        ));
    }
    // Largest multiple of `bound` that fits: words at or above it would bias the result.
    let zone = u64::MAX - (u64::MAX % bound);
    loop {
        let word = next()?;
        if word < zone {
            return Ok(word % bound);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_biased_words_and_zero_bound() {
        let mut words = [u64::MAX, 7].into_iter();
        assert_eq!(uniform_below(6, || Ok(words.next().unwrap_or(0))), Ok(1));
        assert!(matches!(uniform_below(0, || Ok(1)), Err(Error::Invalid(_))));
    }
}
