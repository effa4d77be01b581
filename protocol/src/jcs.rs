//! RFC 8785 JSON Canonicalization Scheme (JCS): one byte form per JSON value, so a hash of a
//! value is the same on every host that follows the RFC (RFC 0064's `argsHash`, the
//! `replay.md` invocation-key recipe).
//!
//! The rules: object members sorted by their names' UTF-16 code units, no whitespace,
//! strings escaped minimally (`\"`, `\\`, `\b \f \n \r \t`, other controls as lowercase
//! `\u00xx`, nothing else), numbers as ECMAScript's `Number.prototype.toString` prints the
//! IEEE-754 double they denote (`1e+30`, `0.002`, `-0` as `0`). This crate's `serde_json`
//! keeps members in insertion order (`preserve_order`), so its own output is not canonical.

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// The canonical text of `value`.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// SHA-256 of [`canonical`]`(value)`, as 64 lowercase hex digits.
pub fn sha256_hex(value: &Value) -> String {
    hex::encode(Sha256::digest(canonical(value).as_bytes()))
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| utf16_order(a.0, b.0));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// Member order: by UTF-16 code units, which differs from Rust's (code point) order for
/// characters above U+FFFF against U+E000..U+FFFF.
fn utf16_order(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// `serde_json` escapes exactly what JCS does (the two short forms, `\b \f \n \r \t`, other
/// controls as lowercase `\u00xx`, nothing above U+001F), so its string form is canonical.
fn write_string(out: &mut String, s: &str) {
    // A string always serializes.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

fn write_number(out: &mut String, n: &Number) {
    // JCS reads every number as the IEEE-754 double it denotes, integers included.
    let f = match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => i as f64,
        (None, Some(u)) => u as f64,
        _ => n.as_f64().unwrap_or(0.0),
    };
    write_f64(out, f);
}

/// ECMAScript `Number::toString(x)` for a finite double (JSON has no others).
fn write_f64(out: &mut String, f: f64) {
    if f == 0.0 {
        // Both zeros print as `0`.
        out.push('0');
        return;
    }
    if f < 0.0 {
        out.push('-');
    }
    // Rust's `{:e}` gives the shortest digits that round-trip, as ECMAScript requires:
    // `d[.ddd]e<exp>`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    // The decimal point sits after `n` digits.
    let n = exp + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn num(text: &str) -> String {
        canonical(&serde_json::from_str::<Value>(text).unwrap())
    }

    /// RFC 8785 §3.2.2's example, parsed from its source text.
    #[test]
    fn the_rfc_example_canonicalizes_as_published() {
        let source = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        let v: Value = serde_json::from_str(source).unwrap();
        assert_eq!(
            canonical(&v),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    /// ECMAScript's number forms at each boundary (RFC 8785 Appendix B values).
    #[test]
    fn numbers_print_as_ecmascript_does() {
        for (text, want) in [
            ("0", "0"),
            ("-0.0", "0"),
            ("1", "1"),
            ("-1", "-1"),
            ("100", "100"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345678901", "123456789012345680000"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("1.5e-7", "1.5e-7"),
            ("9007199254740993", "9007199254740992"),
            ("4.35", "4.35"),
            ("0.1", "0.1"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("5e-324", "5e-324"),
            ("-1.25e25", "-1.25e+25"),
            ("295147905179352830000", "295147905179352830000"),
        ] {
            assert_eq!(num(text), want, "{text}");
        }
    }

    #[test]
    fn members_sort_by_utf16_code_units_at_every_depth() {
        // U+1F600 (surrogates D83D DE00) sorts before U+FB33 in UTF-16, after it by code point.
        let v = json!({"\u{fb33}": 1, "\u{1f600}": 2, "b": {"z": [3, {"y": 1, "x": 2}], "a": null}, "a": true});
        assert_eq!(
            canonical(&v),
            "{\"a\":true,\"b\":{\"a\":null,\"z\":[3,{\"x\":2,\"y\":1}]},\"\u{1f600}\":2,\"\u{fb33}\":1}"
        );
    }

    #[test]
    fn insertion_order_does_not_change_the_hash() {
        let a: Value =
            serde_json::from_str(r#"{"q": "x", "n": 1.0, "o": {"b": 1, "a": 2}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"o": {"a": 2, "b": 1}, "n": 1, "q": "x"}"#).unwrap();
        assert_eq!(sha256_hex(&a), sha256_hex(&b));
        assert_eq!(sha256_hex(&a).len(), 64);
        assert_ne!(sha256_hex(&a), sha256_hex(&json!({"q": "y"})));
        // sha256 of `{}`, computed with coreutils' sha256sum.
        assert_eq!(
            sha256_hex(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
