//! The condition evaluator on arbitrary JSON: `{"root": any, "predicate": {path, op, value}}`
//! or an edge condition `{"root": any, "condition": {type, left, right}}`. It must answer or
//! report a bad regex, never panic; negated operators must disagree.
//! Run: cd protocol/fuzz && cargo +nightly fuzz run -s none conditions -- -max_total_time=120
#![no_main]

use libfuzzer_sys::fuzz_target;
use openwop_protocol::graph::{Predicate, condition_holds, evaluate, lookup};
use openwop_protocol::workflow::EdgeCondition;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let root = doc.get("root").cloned().unwrap_or(Value::Null);
    if let Some(p) = doc.get("predicate")
        && let Ok(p) = serde_json::from_value::<Predicate>(p.clone())
    {
        let held = p.holds(&root);
        if let (Ok(a), Some(neg)) = (held, p.op.negation()) {
            let right = p.value.clone().unwrap_or(Value::Null);
            let b = evaluate(neg, lookup(&root, &p.path), &right);
            assert_eq!(b, Ok(!a));
        }
    }
    if let Some(c) = doc.get("condition")
        && let Ok(c) = serde_json::from_value::<EdgeCondition>(c.clone())
    {
        let _ = condition_holds(&c, &root);
    }
});
