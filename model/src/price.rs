//! Prices per million tokens and the estimated cost of a model's usage, in exact decimal
//! arithmetic: no floating point in money.
//!
//! A price is a decimal string of at most 9 integer and 9 fraction digits (the ModelConfig's
//! pattern), held as an integer count of 10⁻⁹ currency units per million tokens. A cost is
//! tokens × price / 10⁶, which therefore has at most 15 fraction digits: it is held as an
//! integer count of 10⁻¹⁵ units in a `u128` and is exact, never rounded. The largest price
//! (≈10⁹ per million, 10¹⁸ in nano-units) times the largest count (`u64::MAX`, ≈1.8·10¹⁹) is
//! ≈1.8·10³⁷, and three such terms stay under `u128::MAX` (≈3.4·10³⁸).
//!
//! Why not a decimal crate: `rust_decimal`'s 96-bit mantissa (≈7.9·10²⁸) cannot hold that
//! product at 15 fraction digits, so it would have to round or fail on large counts; the
//! arithmetic needed here is three multiplications and a sum, which `u128` does exactly.

use serde::{Deserialize, Serialize};

use crate::usage::TokenUsage;

/// Fraction digits of a price.
const PRICE_DIGITS: usize = 9;
/// Fraction digits of a cost: a price's, plus six for "per million".
const COST_DIGITS: usize = 15;
/// The currency when a ModelConfig names none.
pub const DEFAULT_CURRENCY: &str = "USD";

/// Why a price is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("price {0:?} is not a decimal of at most 9 integer and 9 fraction digits")]
pub struct BadPrice(pub String);

/// One price per million tokens, in 10⁻⁹ currency units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price(u64);

impl Price {
    /// Parses `9.99`, `0.150`, `3`: digits, an optional point and fraction; no sign, exponent
    /// or spaces.
    pub fn parse(text: &str) -> Result<Price, BadPrice> {
        let bad = || BadPrice(text.chars().take(32).collect());
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty()
            || int.len() > 9
            || frac.len() > PRICE_DIGITS
            || (text.contains('.') && frac.is_empty())
            || !digits(int)
            || !digits(frac)
        {
            return Err(bad());
        }
        let mut nanos: u64 = int.parse().map_err(|_| bad())?;
        for i in 0..PRICE_DIGITS {
            let d = frac.as_bytes().get(i).map_or(0, |b| u64::from(b - b'0'));
            nanos = nanos * 10 + d;
        }
        Ok(Price(nanos))
    }

    /// `tokens` at this price, in 10⁻¹⁵ units.
    fn of(self, tokens: u64) -> u128 {
        u128::from(tokens) * u128::from(self.0)
    }
}

/// A ModelConfig's prices, as a run was held to them (in `limitsApplied`, so `ari verify`
/// computes the same cost). The decimal strings are kept as written: the signed body holds no
/// floating point.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Prices {
    /// ISO 4217 code.
    #[cfg_attr(feature = "schema", schemars(length(max = 8)))]
    pub currency: String,
    /// Per million input tokens (cached ones excepted when `cachedInputPerMillion` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 20)))]
    pub input_per_million: Option<String>,
    /// Per million input tokens served from the provider's prompt cache; the input price when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 20)))]
    pub cached_input_per_million: Option<String>,
    /// Per million output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 20)))]
    pub output_per_million: Option<String>,
}

impl Prices {
    /// Checks every price parses (a ModelConfig's pattern admits only such strings).
    pub fn check(&self) -> Result<(), BadPrice> {
        for p in [
            &self.input_per_million,
            &self.cached_input_per_million,
            &self.output_per_million,
        ]
        .into_iter()
        .flatten()
        {
            Price::parse(p)?;
        }
        Ok(())
    }

    /// The estimated cost of `usage`: input tokens not served from cache at the input price,
    /// cached ones at the cached price (else the input price), output tokens at the output
    /// price. `None` when no price is set (there is then nothing to estimate), or when a price
    /// does not parse.
    pub fn cost(&self, usage: &TokenUsage) -> Option<Cost> {
        let parse = |p: &Option<String>| p.as_deref().map(Price::parse).transpose();
        let input = parse(&self.input_per_million).ok()?;
        let cached = parse(&self.cached_input_per_million).ok()?.or(input);
        let output = parse(&self.output_per_million).ok()?;
        if input.is_none() && cached.is_none() && output.is_none() {
            return None;
        }
        let zero = Price(0);
        let cached_tokens = usage.cached_input_tokens.min(usage.input_tokens);
        let femto = input.unwrap_or(zero).of(usage.input_tokens - cached_tokens)
            + cached.unwrap_or(zero).of(cached_tokens)
            + output.unwrap_or(zero).of(usage.output_tokens);
        Some(Cost {
            amount: decimal(femto),
            currency: self.currency.clone(),
        })
    }
}

/// An estimated cost: what the provider's prices say the usage costs. An estimate because the
/// provider bills by its own figures and tariffs (batch, cache writes, tiers), not by these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Exact decimal, at most 15 fraction digits, no trailing zeros (`0.00042`, `12`).
    #[cfg_attr(feature = "schema", schemars(length(max = 64)))]
    pub amount: String,
    /// ISO 4217 code.
    #[cfg_attr(feature = "schema", schemars(length(max = 8)))]
    pub currency: String,
}

impl Cost {
    /// The sum of two costs in one currency (`None` across currencies, or for an amount that
    /// is not a cost's decimal): what runs of one Task's items cost together.
    pub fn plus(&self, other: &Cost) -> Option<Cost> {
        if self.currency != other.currency {
            return None;
        }
        let sum = femto(&self.amount)?.checked_add(femto(&other.amount)?)?;
        Some(Cost {
            amount: decimal(sum),
            currency: self.currency.clone(),
        })
    }
}

/// A cost's decimal (`decimal`'s output) back in 10⁻¹⁵ units.
fn femto(amount: &str) -> Option<u128> {
    let (int, frac) = amount.split_once('.').unwrap_or((amount, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || (amount.contains('.') && !digits(frac)) || frac.len() > COST_DIGITS {
        return None;
    }
    let mut units: u128 = int.parse().ok()?;
    for i in 0..COST_DIGITS {
        let d = frac.as_bytes().get(i).map_or(0, |b| u128::from(b - b'0'));
        units = units.checked_mul(10)?.checked_add(d)?;
    }
    Some(units)
}

/// `femto` 10⁻¹⁵ units as a decimal string without trailing zeros.
fn decimal(femto: u128) -> String {
    let scale = 10u128.pow(COST_DIGITS as u32);
    let (int, frac) = (femto / scale, femto % scale);
    if frac == 0 {
        return int.to_string();
    }
    let frac = format!("{frac:0width$}", width = COST_DIGITS);
    format!("{int}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_in_one_currency_add_up_exactly_and_across_currencies_not_at_all() {
        let c = |amount: &str, currency: &str| Cost {
            amount: amount.into(),
            currency: currency.into(),
        };
        let sum = c("0.000000000000001", "USD").plus(&c("12.999999999999999", "USD"));
        assert_eq!(sum, Some(c("13", "USD")));
        assert_eq!(c("0.5", "USD").plus(&c("2", "USD")), Some(c("2.5", "USD")));
        assert_eq!(c("1", "USD").plus(&c("1", "EUR")), None);
        assert_eq!(c("1.", "USD").plus(&c("1", "USD")), None);
        assert_eq!(c("-1", "USD").plus(&c("1", "USD")), None);
    }

    fn prices(input: Option<&str>, cached: Option<&str>, output: Option<&str>) -> Prices {
        Prices {
            currency: DEFAULT_CURRENCY.into(),
            input_per_million: input.map(Into::into),
            cached_input_per_million: cached.map(Into::into),
            output_per_million: output.map(Into::into),
        }
    }

    fn usage(input: u64, cached: u64, output: u64) -> TokenUsage {
        TokenUsage {
            calls: 1,
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: cached,
        }
    }

    #[test]
    fn prices_parse_only_as_the_modelconfig_writes_them() {
        for (text, nanos) in [
            ("0", 0),
            ("3", 3_000_000_000),
            ("0.15", 150_000_000),
            ("0.000000001", 1),
            ("999999999.999999999", 999_999_999_999_999_999),
        ] {
            assert_eq!(Price::parse(text), Ok(Price(nanos)), "{text}");
        }
        for bad in [
            "",
            ".",
            "1.",
            ".5",
            "-1",
            "+1",
            "1e3",
            " 1",
            "1,5",
            "0.0000000001",
            "1000000000",
            "１",
        ] {
            assert!(Price::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cost_is_exact_to_fifteen_digits_and_never_rounded() {
        // What, prices (input, cached, output), usage (input, cached, output), cost.
        #[rustfmt::skip]
        let cases: &[(&str, Prices, TokenUsage, &str)] = &[
            ("gpt-4o-mini's prices",     prices(Some("0.15"), Some("0.075"), Some("0.6")), usage(1_000, 200, 500), "0.000435"),
            ("one token at the least",   prices(Some("0.000000001"), None, None), usage(1, 0, 0), "0.000000000000001"),
            ("whole units",              prices(Some("2"), None, Some("8")), usage(1_000_000, 0, 500_000), "6"),
            ("cached at the input price", prices(Some("1"), None, None), usage(10, 4, 0), "0.00001"),
            ("output only",              prices(None, None, Some("10")), usage(99, 0, 3), "0.00003"),
            ("nothing used",             prices(Some("1"), None, Some("1")), usage(0, 0, 0), "0"),
            ("cached beyond input is capped", prices(Some("1"), Some("0"), None), usage(5, 9, 0), "0"),
        ];
        for (what, p, u, want) in cases {
            let cost = p.cost(u).expect("priced");
            assert_eq!(cost.amount, *want, "{what}");
            assert_eq!(cost.currency, "USD");
        }
    }

    #[test]
    fn huge_counts_at_the_highest_prices_do_not_overflow() {
        let top = "999999999.999999999";
        let p = prices(Some(top), Some(top), Some(top));
        let cost = p
            .cost(&usage(u64::MAX, u64::MAX / 2, u64::MAX))
            .expect("priced");
        // 2 × (2⁶⁴ − 1) tokens × (10⁹ − 10⁻⁹) per million, worked out apart (Python's
        // decimal module at 80 digits).
        assert_eq!(cost.amount, "36893488147419103193106.51185258089677");
    }

    #[test]
    fn no_prices_no_cost() {
        assert_eq!(prices(None, None, None).cost(&usage(10, 0, 10)), None);
        let broken = prices(Some("1.2.3"), None, None);
        assert!(broken.check().is_err());
        assert_eq!(broken.cost(&usage(10, 0, 10)), None);
    }
}
