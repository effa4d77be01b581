//! The correlation rule of `core.interrupt` kind `external-event`
//! (`interrupt-profiles.md` §openwop-interrupt-external-event; `interrupt.md` leaves exact vs
//! subset matching open as gap I3): the event must carry every key of the interrupt's
//! `data.correlation` with an equal value, and may carry more. One rule for the REST surfaces
//! (checked before an answer is recorded, through `PendingInterrupt::check_answer`) and for
//! the worker's gate (`gate::Gate::resolve`), so they never disagree.

use serde_json::{Map, Value};

/// The error code of an external event whose body does not match the interrupt's
/// `correlation` (`interrupt-profiles.md`; 422 on the REST surfaces).
pub const CORRELATION_MISMATCH: &str = "correlation_mismatch";

/// The member of INT's `ExternalEventResume` (`{eventPayload}`) that holds the event.
pub const EVENT_PAYLOAD: &str = "eventPayload";

/// The event an external-event resume value carries: INT's `{eventPayload: {...}}` form, or
/// the event body itself (what the conformance scenarios send).
pub fn external_event(resume_value: &Value) -> &Value {
    match resume_value.get(EVENT_PAYLOAD) {
        Some(inner) if inner.is_object() => inner,
        _ => resume_value,
    }
}

/// The member of an external event that names it. Ingestion is idempotent by it (the
/// profile's `(correlationId, eventId)`, the interrupt being the correlation): the same event
/// delivered again to the interrupt it resolved is answered as the first delivery was, and
/// nothing is recorded twice.
pub const EVENT_ID: &str = "eventId";

/// The `eventId` of the event a resume value carries (a non-empty string), if any.
pub fn event_id(resume_value: &Value) -> Option<&str> {
    external_event(resume_value)
        .get(EVENT_ID)?
        .as_str()
        .filter(|id| !id.is_empty())
}

/// Whether `resume_value` delivers again the event `recorded` (the resume value an answer
/// already holds): both name the same `eventId`. Without an `eventId` nothing is a
/// re-delivery.
pub fn redelivers(recorded: Option<&Value>, resume_value: &Value) -> bool {
    matches!((recorded.and_then(event_id), event_id(resume_value)), (Some(a), Some(b)) if a == b)
}

/// The keys of `correlation` the `event` does not carry with an equal value (deep JSON
/// equality: numbers by value, objects key by key, arrays in order), sorted; empty when the
/// event matches. Keys of the event that `correlation` does not name are allowed.
pub fn correlation_mismatch(correlation: &Map<String, Value>, event: &Value) -> Vec<String> {
    let mut keys: Vec<String> = correlation
        .iter()
        .filter(|(k, want)| {
            !event
                .get(k.as_str())
                .is_some_and(|got| json_equal(want, got))
        })
        .map(|(k, _)| k.clone())
        .collect();
    keys.sort();
    keys
}

/// JSON equality: `1` and `1.0` are the same number (serde_json's `==` tells them apart).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || matches!((x.as_f64(), y.as_f64()), (Some(x), Some(y)) if x == y)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_same_event_id_is_a_redelivery_in_either_form() {
        use serde_json::json;
        let first = json!({"orderId": "o-1", "eventId": "evt-9"});
        assert!(redelivers(
            Some(&first),
            &json!({"eventPayload": {"eventId": "evt-9"}})
        ));
        assert!(!redelivers(Some(&first), &json!({"eventId": "evt-10"})));
        // Without ids (either side, or empty) nothing counts as delivered before.
        assert!(!redelivers(
            Some(&json!({"orderId": "o-1"})),
            &json!({"orderId": "o-1"})
        ));
        assert!(!redelivers(
            Some(&json!({"eventId": ""})),
            &json!({"eventId": ""})
        ));
        assert!(!redelivers(None, &first));
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn correlation_is_deep_equality_per_key_with_extra_keys_allowed() {
        let c = |v: Value| v.as_object().unwrap().clone();
        let want =
            c(json!({"orderId": "o-1", "amount": 10, "ship": {"to": ["a", "b"], "fast": true}}));
        let ok = json!({"orderId": "o-1", "amount": 10.0, "ship": {"fast": true, "to": ["a", "b"]}, "extra": 1});
        assert!(correlation_mismatch(&want, &ok).is_empty());
        // A missing key, a different scalar, a nested object with an extra or missing member,
        // an array in another order: each names its key (sorted).
        let bad = json!({"amount": "10", "ship": {"to": ["b", "a"], "fast": true}});
        assert_eq!(
            correlation_mismatch(&want, &bad),
            ["amount", "orderId", "ship"]
        );
        let nested_extra = json!({"orderId": "o-1", "amount": 10, "ship": {"to": ["a", "b"], "fast": true, "x": 1}});
        assert_eq!(correlation_mismatch(&want, &nested_extra), ["ship"]);
        // null is a value like any other: present-and-null is not missing, and vice versa.
        let nul = c(json!({"ref": null}));
        assert!(correlation_mismatch(&nul, &json!({"ref": null})).is_empty());
        assert_eq!(correlation_mismatch(&nul, &json!({})), ["ref"]);
        // An empty correlation matches any event; a non-object event matches no key.
        assert!(correlation_mismatch(&Map::new(), &json!(7)).is_empty());
        assert_eq!(
            correlation_mismatch(&c(json!({"a": 1})), &json!([1])),
            ["a"]
        );
    }

    #[test]
    fn the_event_is_the_resume_value_or_its_event_payload() {
        let body = json!({"orderId": "x"});
        assert_eq!(external_event(&body), &body);
        assert_eq!(
            external_event(&json!({"eventPayload": body.clone()})),
            &body
        );
        // A non-object eventPayload is part of the body, not the INT wrapper.
        let odd = json!({"eventPayload": "text", "orderId": "x"});
        assert_eq!(external_event(&odd), &odd);
    }
}
