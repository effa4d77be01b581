//! Control-flow and variable nodes (node-library.md §3.8–§3.12): `core.conditional` /
//! `core.flow.if`, `core.loop` / `core.flow.iterator`, `core.parallel` / `core.flow.router`,
//! `core.merge`, `core.flow.merge`, `core.setVariable`, `core.getVariable`. Each is a pure
//! function of the node's config, its resolved inputs and what the scheduler knows (upstream
//! states, the variables the node sees), so a replay computes the same outputs; none emits
//! `agent.*`. Routing itself happens on the outgoing edges (their conditions read these
//! outputs) and in `protocol::schedule` (skips cascade through trigger rules).

use std::collections::BTreeMap;

use openwop_protocol::events::ErrorInfo;
use openwop_protocol::graph::{Graph, Node, Predicate, condition_holds, lookup};
use openwop_protocol::run::variables::{kind_name, matches_kind};
use openwop_protocol::schedule::NodeState;
use openwop_protocol::workflow::EdgeCondition;
use serde_json::{Map, Value, json};

use super::outcome::error;

/// Most combinations `multiplex` builds (the product of the array lengths).
pub const MAX_MULTIPLEX: usize = 10_000;

/// What a variable write changes (for `variable.changed`).
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub name: String,
    pub previous: Option<Value>,
    pub next: Value,
}

/// A node's result; the error boxed (it is large and rare).
pub type NodeResult<T> = Result<T, Box<ErrorInfo>>;

fn invalid(node: &Node, message: impl std::fmt::Display) -> Box<ErrorInfo> {
    failure("validation_error", node, message)
}

fn failure(code: &str, node: &Node, message: impl std::fmt::Display) -> Box<ErrorInfo> {
    Box::new(error(code, format!("node {}: {message}", node.id), false))
}

/// The node's subject value: input port `value`, else `input` (an edge's default port).
fn subject(inputs: &Value) -> Option<&Value> {
    inputs.get("value").or_else(|| inputs.get("input"))
}

/// `core.conditional`: `{branch: "then" | "else", matched, value}`.
pub fn conditional(node: &Node, inputs: &Value) -> NodeResult<Value> {
    let value = subject(inputs).cloned().ok_or_else(|| {
        invalid(
            node,
            "needs an input `value` (wire a port or an edge into it)",
        )
    })?;
    let cfg = &node.config;
    let held = if let Some(p) = cfg.get("predicate") {
        let p: Predicate = serde_json::from_value(p.clone())
            .map_err(|e| invalid(node, format_args!("config.predicate: {e}")))?;
        p.holds(&value)
    } else if let Some(c) = cfg.get("condition") {
        let c: EdgeCondition = serde_json::from_value(c.clone())
            .map_err(|e| invalid(node, format_args!("config.condition: {e}")))?;
        condition_holds(&c, &value)
    } else {
        return Err(invalid(node, "config needs `predicate` or `condition`"));
    };
    let matched = held.map_err(|e| failure("condition_invalid", node, e))?;
    Ok(json!({"branch": if matched { "then" } else { "else" }, "matched": matched, "value": value}))
}

/// `core.loop`: `{items: [{item, index, total}], total}` for the input `array`.
pub fn iterator(node: &Node, inputs: &Value) -> NodeResult<Value> {
    let items = inputs
        .get("array")
        .or_else(|| subject(inputs))
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(node, "input `array` must be an array"))?;
    let total = items.len();
    let items: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(index, item)| json!({"item": item, "index": index, "total": total}))
        .collect();
    Ok(json!({"items": items, "total": total}))
}

/// `core.parallel`: `{branches: [label], value}` — the first route whose predicate holds
/// (`first-match`, the default) or every one (`all-match`); `defaultLabel` when none does.
pub fn router(node: &Node, inputs: &Value) -> NodeResult<Value> {
    let value = subject(inputs).cloned().unwrap_or(Value::Null);
    let cfg = &node.config;
    let all = cfg.get("mode").and_then(Value::as_str) == Some("all-match");
    let mut branches = Vec::new();
    for (j, route) in cfg
        .get("routes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let label = route
            .get("label")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(node, format_args!("config.routes[{j}] needs a label")))?;
        let holds = match route.get("predicate") {
            None => true,
            Some(p) => serde_json::from_value::<Predicate>(p.clone())
                .map_err(|e| invalid(node, format_args!("config.routes[{j}].predicate: {e}")))?
                .holds(&value)
                .map_err(|e| {
                    failure(
                        "condition_invalid",
                        node,
                        format_args!("route {label}: {e}"),
                    )
                })?,
        };
        if holds {
            branches.push(Value::String(label.to_owned()));
            if !all {
                break;
            }
        }
    }
    if branches.is_empty()
        && let Some(d) = cfg.get("defaultLabel").and_then(Value::as_str)
    {
        branches.push(Value::String(d.to_owned()));
    }
    Ok(json!({"branches": branches, "value": value}))
}

/// The outputs of each succeeded source of `node`'s incoming edges, one per source, in the
/// order of the edges' definition.
fn sources<'s>(
    graph: &Graph,
    node: &Node,
    states: &'s BTreeMap<String, NodeState>,
) -> Vec<(String, &'s Value)> {
    let mut out: Vec<(String, &Value)> = Vec::new();
    for e in graph.incoming(&node.id) {
        if out.iter().any(|(s, _)| *s == e.source) {
            continue;
        }
        if let Some(NodeState::Succeeded(o)) = states.get(&e.source) {
            out.push((e.source.clone(), o));
        }
    }
    out
}

/// `core.merge`: `{inputs: {<source>: outputs}}`, plus `merged` (the `core.flow.merge`
/// combine of the sources' `output` ports) when `config.mode` is set.
pub fn merge(
    graph: &Graph,
    node: &Node,
    states: &BTreeMap<String, NodeState>,
) -> NodeResult<Value> {
    let sources = sources(graph, node, states);
    let mut out = Map::new();
    let by_source: Map<String, Value> = sources
        .iter()
        .map(|(s, o)| (s.clone(), (*o).clone()))
        .collect();
    if node.config.get("mode").is_some() {
        let arrays: Vec<(String, Value)> = sources
            .iter()
            .filter_map(|(s, o)| Some((s.clone(), o.get("output")?.clone())))
            .collect();
        out.insert("merged".into(), combine(node, &arrays)?);
    }
    out.insert("inputs".into(), Value::Object(by_source));
    Ok(Value::Object(out))
}

/// `core.flow.merge`: `{merged}` of the input `inputs` (an array of arrays), else of the
/// sources' `output` ports in edge order.
pub fn array_merge(
    graph: &Graph,
    node: &Node,
    inputs: &Value,
    states: &BTreeMap<String, NodeState>,
) -> NodeResult<Value> {
    let arrays: Vec<(String, Value)> = match inputs.get("inputs") {
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v.clone()))
            .collect(),
        Some(_) => return Err(invalid(node, "input `inputs` must be an array of arrays")),
        None => sources(graph, node, states)
            .into_iter()
            .filter_map(|(s, o)| Some((s, o.get("output")?.clone())))
            .collect(),
    };
    Ok(json!({"merged": combine(node, &arrays)?}))
}

fn items(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    }
}

/// Shallow merge of objects (later keys win); a non-object later value replaces.
fn overlay(into: &mut Value, v: &Value) {
    match (into, v) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, x) in b {
                a.insert(k.clone(), x.clone());
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// The `core.openwop.flow` merge modes over `(source, value)` pairs (a non-array value is
/// one item).
fn combine(node: &Node, arrays: &[(String, Value)]) -> NodeResult<Value> {
    let cfg = &node.config;
    let mode = cfg.get("mode").and_then(Value::as_str).unwrap_or("append");
    Ok(match mode {
        "append" => Value::Array(arrays.iter().flat_map(|(_, v)| items(v)).collect()),
        "combine-by-position" => {
            let lists: Vec<Vec<Value>> = arrays.iter().map(|(_, v)| items(v)).collect();
            let len = lists.iter().map(Vec::len).max().unwrap_or(0);
            Value::Array(
                (0..len)
                    .map(|i| {
                        let mut acc = Value::Object(Map::new());
                        for l in &lists {
                            if let Some(v) = l.get(i) {
                                overlay(&mut acc, v);
                            }
                        }
                        acc
                    })
                    .collect(),
            )
        }
        "combine-by-key" => {
            let path = cfg
                .get("keyPath")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(node, "mode combine-by-key needs config.keyPath"))?;
            // Items in order of their key's first appearance; items without the key stay
            // apart, in place.
            let mut merged: Vec<Value> = Vec::new();
            let mut at: BTreeMap<String, usize> = BTreeMap::new();
            for item in arrays.iter().flat_map(|(_, v)| items(v)) {
                match lookup(&item, path).map(Value::to_string) {
                    Some(k) => match at.get(&k) {
                        Some(&i) => overlay(&mut merged[i], &item),
                        None => {
                            at.insert(k, merged.len());
                            merged.push(item);
                        }
                    },
                    None => merged.push(item),
                }
            }
            Value::Array(merged)
        }
        "multiplex" => {
            let lists: Vec<Vec<Value>> = arrays.iter().map(|(_, v)| items(v)).collect();
            let count = lists
                .iter()
                .try_fold(1usize, |acc, l| acc.checked_mul(l.len()))
                .filter(|c| *c <= MAX_MULTIPLEX)
                .ok_or_else(|| {
                    invalid(
                        node,
                        format_args!("multiplex would build more than {MAX_MULTIPLEX} combinations; narrow the inputs"),
                    )
                })?;
            let combos = if lists.is_empty() { 0 } else { count };
            Value::Array(
                (0..combos)
                    .map(|mut i| {
                        // Mixed radix, the last list varying fastest.
                        let mut combo = vec![Value::Null; lists.len()];
                        for (slot, l) in lists.iter().enumerate().rev() {
                            combo[slot] = l[i % l.len()].clone();
                            i /= l.len();
                        }
                        Value::Array(combo)
                    })
                    .collect(),
            )
        }
        "choose-branch" => {
            let branch = cfg
                .get("branch")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(node, "mode choose-branch needs config.branch"))?;
            arrays
                .iter()
                .find(|(s, _)| s == branch)
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Null)
        }
        other => {
            return Err(invalid(
                node,
                format_args!("merge mode {other:?} is not supported by this host"),
            ));
        }
    })
}

/// `core.setVariable`: the write (`{name, value}` outputs): input `value`, else
/// `config.value`, type-checked against the declared variable.
pub fn set_variable(graph: &Graph, node: &Node, inputs: &Value, bag: &Value) -> NodeResult<Write> {
    let name = node
        .config
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(node, "config.name is required"))?;
    let declared = graph
        .variables
        .iter()
        .find(|v| v.name == name)
        .ok_or_else(|| {
            invalid(
                node,
                format_args!("variable `{name}` is not declared in the workflow's variables"),
            )
        })?;
    if declared.sensitive {
        return Err(invalid(
            node,
            format_args!("variable `{name}` is sensitive: a node cannot write it"),
        ));
    }
    let (value, from) = match (inputs.get("value"), node.config.get("value")) {
        (Some(v), _) => (v.clone(), "input `value`"),
        (None, Some(v)) => (v.clone(), "config.value"),
        (None, None) => {
            return Err(invalid(
                node,
                "nothing to write: wire the input `value` or set config.value",
            ));
        }
    };
    if !matches_kind(declared.kind, &value) {
        return Err(invalid(
            node,
            format_args!(
                "{from} must be {} to write variable `{name}`",
                kind_name(declared.kind)
            ),
        ));
    }
    Ok(Write {
        name: name.to_owned(),
        previous: bag.get(name).cloned(),
        next: value,
    })
}

/// `core.getVariable`: `{value}` of the variable as this node sees it (`null` when unset).
pub fn get_variable(node: &Node, bag: &Value) -> NodeResult<Value> {
    let name = node
        .config
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(node, "config.name is required"))?;
    Ok(json!({"value": bag.get(name).cloned().unwrap_or(Value::Null)}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(type_id: &str, config: Value) -> Node {
        let g = Graph::parse(&json!({"id": "w", "nodes": [{"id": "n", "typeId": type_id, "config": config}],
            "variables": [{"name": "count", "type": "number"}, {"name": "key", "type": "string", "sensitive": true}]}))
        .unwrap();
        g.nodes[0].clone()
    }

    #[test]
    fn conditional_takes_both_vocabularies() {
        let pred = node(
            "core.conditional",
            json!({"predicate": {"path": "score", "op": "gte", "value": 0.5}}),
        );
        let out = conditional(&pred, &json!({"value": {"score": 0.7}})).unwrap();
        assert_eq!(
            out,
            json!({"branch": "then", "matched": true, "value": {"score": 0.7}})
        );
        let out = conditional(&pred, &json!({"input": {"score": 0.2}})).unwrap();
        assert_eq!(
            (out["branch"].clone(), out["matched"].clone()),
            (json!("else"), json!(false))
        );
        let cond = node(
            "core.conditional",
            json!({"condition": {"type": "equals", "left": "kind", "right": "a"}}),
        );
        assert_eq!(
            conditional(&cond, &json!({"value": {"kind": "a"}})).unwrap()["matched"],
            true
        );
        let e = conditional(&pred, &json!({})).unwrap_err();
        assert_eq!(e.code, "validation_error");
        assert!(e.message.contains("input `value`"), "{}", e.message);
        let bad = node(
            "core.conditional",
            json!({"predicate": {"path": "", "op": "regex", "value": "("}}),
        );
        assert_eq!(
            conditional(&bad, &json!({"value": "x"})).unwrap_err().code,
            "condition_invalid"
        );
    }

    #[test]
    fn iterator_annotates_and_router_selects() {
        let it = node("core.loop", json!({}));
        assert_eq!(
            iterator(&it, &json!({"array": ["a", "b"]})).unwrap(),
            json!({"items": [{"item": "a", "index": 0, "total": 2}, {"item": "b", "index": 1, "total": 2}], "total": 2})
        );
        assert_eq!(
            iterator(&it, &json!({"array": {}})).unwrap_err().code,
            "validation_error"
        );
        let routes = json!([{"label": "big", "predicate": {"path": "n", "op": "gt", "value": 10}},
                            {"label": "even", "predicate": {"path": "n", "op": "in", "value": [2, 4, 12]}}]);
        let first = node(
            "core.parallel",
            json!({"routes": routes, "defaultLabel": "other"}),
        );
        let all = node(
            "core.parallel",
            json!({"routes": routes, "mode": "all-match"}),
        );
        assert_eq!(
            router(&first, &json!({"value": {"n": 12}})).unwrap()["branches"],
            json!(["big"])
        );
        assert_eq!(
            router(&all, &json!({"value": {"n": 12}})).unwrap()["branches"],
            json!(["big", "even"])
        );
        assert_eq!(
            router(&first, &json!({"value": {"n": 3}})).unwrap()["branches"],
            json!(["other"])
        );
        assert_eq!(
            router(&all, &json!({"value": {"n": 3}})).unwrap()["branches"],
            json!([])
        );
    }

    fn merged(mode: Value, arrays: &[(&str, Value)]) -> NodeResult<Value> {
        let n = node("core.flow.merge", mode);
        let arrays: Vec<(String, Value)> = arrays
            .iter()
            .map(|(s, v)| ((*s).to_owned(), v.clone()))
            .collect();
        combine(&n, &arrays)
    }

    #[test]
    fn merge_modes() {
        let a = json!([{"id": 1, "x": "a"}, {"id": 2, "x": "b"}]);
        let b = json!([{"id": 2, "y": "B"}, {"id": 3, "y": "C"}]);
        let ab = [("a", a.clone()), ("b", b.clone())];
        assert_eq!(merged(json!({}), &ab).unwrap().as_array().unwrap().len(), 4);
        assert_eq!(
            merged(json!({"mode": "combine-by-key", "keyPath": "id"}), &ab).unwrap(),
            json!([{"id": 1, "x": "a"}, {"id": 2, "x": "b", "y": "B"}, {"id": 3, "y": "C"}])
        );
        assert_eq!(
            merged(json!({"mode": "combine-by-position"}), &ab).unwrap(),
            json!([{"id": 2, "x": "a", "y": "B"}, {"id": 3, "x": "b", "y": "C"}])
        );
        assert_eq!(
            merged(
                json!({"mode": "multiplex"}),
                &[("a", json!([1, 2])), ("b", json!(["x", "y"]))]
            )
            .unwrap(),
            json!([[1, "x"], [1, "y"], [2, "x"], [2, "y"]])
        );
        let huge: Vec<(&str, Value)> = (0..5)
            .map(|_| ("s", json!((0..10).collect::<Vec<_>>())))
            .collect();
        assert_eq!(
            merged(json!({"mode": "multiplex"}), &huge)
                .unwrap_err()
                .code,
            "validation_error"
        );
        assert_eq!(
            merged(json!({"mode": "choose-branch", "branch": "b"}), &ab).unwrap(),
            b
        );
        assert_eq!(
            merged(json!({"mode": "sql-query"}), &ab).unwrap_err().code,
            "validation_error"
        );
    }

    #[test]
    fn variables_are_declared_typed_and_never_sensitive() {
        let g = Graph::parse(&json!({"id": "w", "nodes": [
                {"id": "set", "typeId": "core.setVariable", "config": {"name": "count", "value": 1}},
                {"id": "typo", "typeId": "core.setVariable", "config": {"name": "cuont", "value": 1}},
                {"id": "secret", "typeId": "core.setVariable", "config": {"name": "key", "value": "k"}},
                {"id": "get", "typeId": "core.getVariable", "config": {"name": "count"}}],
            "variables": [{"name": "count", "type": "number"}, {"name": "key", "type": "string", "sensitive": true}]}))
        .unwrap();
        let n = |id: &str| g.node(id).unwrap();
        let bag = json!({"count": 0});
        let w = set_variable(&g, n("set"), &json!({}), &bag).unwrap();
        assert_eq!(
            w,
            Write {
                name: "count".into(),
                previous: Some(json!(0)),
                next: json!(1)
            }
        );
        let w = set_variable(&g, n("set"), &json!({"value": 7}), &bag).unwrap();
        assert_eq!(w.next, json!(7), "the input port wins over config.value");
        let e = set_variable(&g, n("set"), &json!({"value": "seven"}), &bag).unwrap_err();
        assert_eq!(
            e.message,
            "node set: input `value` must be a number to write variable `count`"
        );
        assert!(
            set_variable(&g, n("typo"), &json!({}), &bag)
                .unwrap_err()
                .message
                .contains("not declared")
        );
        assert!(
            set_variable(&g, n("secret"), &json!({}), &bag)
                .unwrap_err()
                .message
                .contains("sensitive")
        );
        assert_eq!(get_variable(n("get"), &bag).unwrap(), json!({"value": 0}));
        assert_eq!(
            get_variable(n("get"), &json!({})).unwrap(),
            json!({"value": null})
        );
    }
}
