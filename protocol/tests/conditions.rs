//! The one condition evaluator (`graph::evaluate`) under arbitrary JSON: it never panics,
//! negated operators always disagree, the edge-condition vocabulary decides exactly as the
//! predicate vocabulary it maps onto, and a table of the `core.openwop.flow` operators.

use openwop_protocol::graph::{
    ConditionError, Op, Predicate, condition_holds, edge_operator, evaluate, lookup,
};
use openwop_protocol::workflow::{ConditionKind, EdgeCondition};
use proptest::prelude::*;
use serde_json::{Value, json};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-c]{0,3}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop::sample::select(Op::ALL.to_vec())
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-c]{1,2}",
        "[a-c]{1,2}\\.[a-c0-2]{1,2}",
    ]
}

const KINDS: [ConditionKind; 6] = [
    ConditionKind::Equals,
    ConditionKind::NotEquals,
    ConditionKind::Contains,
    ConditionKind::Regex,
    ConditionKind::Truthy,
    ConditionKind::Falsy,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any operator, any operands: an answer or (regex only) a pattern error, never a panic.
    #[test]
    fn evaluation_is_total(op in op(), root in json_value(), p in path(), right in json_value()) {
        let r = evaluate(op, lookup(&root, &p), &right);
        if op != Op::Regex {
            prop_assert!(r.is_ok(), "{op:?} {r:?}");
        }
    }

    /// `eq`/`neq`, `exists`/`not-exists`, `truthy`/`falsy` split every input in two.
    #[test]
    fn negated_operators_disagree(op in op(), root in json_value(), p in path(), right in json_value()) {
        if let Some(neg) = op.negation() {
            let left = lookup(&root, &p);
            prop_assert_ne!(evaluate(op, left, &right).unwrap(), evaluate(neg, left, &right).unwrap());
        }
    }

    /// An edge condition and the predicate it maps to decide the same for the same path.
    #[test]
    fn both_vocabularies_decide_alike(
        kind in prop::sample::select(KINDS.to_vec()),
        root in json_value(),
        p in "[a-c]{1,2}",
        right in json_value(),
    ) {
        let c = EdgeCondition { kind, left: Some(p.clone()), right: Some(right.clone()), expression: None };
        let pred = Predicate { path: p, op: edge_operator(kind).unwrap(), value: Some(right) };
        prop_assert_eq!(condition_holds(&c, &root), pred.holds(&root));
    }

    /// Ordered comparisons are consistent: exactly one of lt, eq-by-order, gt for two
    /// numbers; lte is lt or equal.
    #[test]
    fn numbers_are_totally_ordered(a in -1e9f64..1e9, b in -1e9f64..1e9) {
        let (l, r) = (Value::from(a), Value::from(b));
        let lt = evaluate(Op::Lt, Some(&l), &r).unwrap();
        let gt = evaluate(Op::Gt, Some(&l), &r).unwrap();
        let lte = evaluate(Op::Lte, Some(&l), &r).unwrap();
        prop_assert!(!(lt && gt));
        prop_assert_eq!(lte, lt || a == b);
        prop_assert_eq!(evaluate(Op::Eq, Some(&l), &r).unwrap(), a == b);
    }
}

#[test]
fn the_flow_operators_table() {
    let root = json!({"score": 0.7, "n": 3, "name": "alpha-beta", "tags": ["x", "y"],
                      "empty": "", "none": null, "obj": {"k": 1}});
    let row = |path: &str, op: Op, right: Value| {
        Predicate {
            path: path.into(),
            op,
            value: Some(right),
        }
        .holds(&root)
    };
    let table = [
        ("score", Op::Gte, json!(0.5), true),
        ("score", Op::Lt, json!(0.5), false),
        ("n", Op::Eq, json!(3.0), true),
        ("n", Op::Lte, json!(3), true),
        ("n", Op::Gt, json!("2"), false),
        ("name", Op::Gt, json!("alpha"), true),
        ("name", Op::StartsWith, json!("alpha"), true),
        ("name", Op::EndsWith, json!("beta"), true),
        ("name", Op::EndsWith, json!(1), false),
        ("name", Op::Regex, json!("^al.*-b"), true),
        ("name", Op::In, json!(["alpha-beta", "z"]), true),
        ("name", Op::In, json!("xx alpha-beta xx"), true),
        ("n", Op::In, json!([1, 2, 3.0]), true),
        ("tags", Op::Contains, json!("y"), true),
        ("obj", Op::Contains, json!("k"), true),
        ("none", Op::Exists, Value::Null, false),
        ("missing", Op::NotExists, Value::Null, true),
        ("empty", Op::Falsy, Value::Null, true),
        ("tags", Op::Truthy, Value::Null, true),
        ("tags.1", Op::Eq, json!("y"), true),
        ("", Op::Exists, Value::Null, true),
    ];
    for (path, op, right, want) in table {
        assert_eq!(
            row(path, op, right.clone()),
            Ok(want),
            "{path} {op:?} {right}"
        );
    }
    assert!(matches!(
        row("name", Op::Regex, json!("(")),
        Err(ConditionError::BadRegex(_))
    ));
    // The wire names round-trip through serde.
    for op in Op::ALL {
        let v = serde_json::to_value(op).unwrap();
        assert_eq!(v, json!(op.as_str()));
        assert_eq!(serde_json::from_value::<Op>(v).unwrap(), op);
    }
    // A predicate config is closed.
    assert!(
        serde_json::from_value::<Predicate>(json!({"path": "a", "op": "eq", "extra": 1})).is_err()
    );
}
