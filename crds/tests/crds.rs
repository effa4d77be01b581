//! The committed CRD manifests match the Rust types, and the admission rules behave.

use kube::core::cel::{validate_cel, validate_cel_update};
use openwop_crds::{Run, Workflow};
use serde_json::{Value, json};

fn run(spec: Value) -> Run {
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1", "namespace": "default"},
        "spec": spec
    }))
    .expect("valid Run")
}

fn workflow(spec: Value) -> Workflow {
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "w1", "namespace": "default"},
        "spec": spec
    }))
    .expect("valid Workflow")
}

fn errors_of<E: std::fmt::Display>(r: Result<(), E>) -> String {
    match r {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn committed_yaml_is_up_to_date() {
    let generated = openwop_crds::crds_yaml().expect("CRDs serialize");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openwop.dev_crds.yaml");
    let committed = std::fs::read_to_string(path).expect("crds/openwop.dev_crds.yaml exists");
    assert!(
        committed == generated,
        "crds/openwop.dev_crds.yaml is stale: run `make crds` and commit it"
    );
}

#[test]
fn crds_have_names_columns_and_status_subresource() {
    let crds = openwop_crds::crds();
    assert_eq!(crds.len(), 3);
    for crd in &crds {
        assert_eq!(crd.spec.group, "openwop.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["openwop".to_string()][..])
        );
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
    let run = &crds[1];
    let cols: Vec<_> = run.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .expect("printer columns")
        .iter()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert!(cols.contains(&("Phase", ".status.phase")));
    assert!(cols.contains(&("Workflow", ".status.workflow")));
    assert!(cols.contains(&("Node", ".status.currentNode")));
    assert!(cols.contains(&("Age", ".metadata.creationTimestamp")));
    assert_eq!(
        run.spec.names.short_names.as_deref(),
        Some(&["owr".to_string(), "wfrun".to_string()][..])
    );
}

#[test]
fn free_form_fields_preserve_unknown_fields() {
    let yaml = openwop_crds::crds_yaml().unwrap();
    // Every free-form field must be structural: preserve-unknown-fields, never a bare `{}`.
    let docs: Vec<Value> = yaml
        .split("\n---\n")
        .filter(|d| d.contains("kind: CustomResourceDefinition"))
        .map(|d| serde_yaml::from_str(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 3);
    let wf = &docs[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(
        wf["nodes"]["items"]["properties"]["config"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    assert_eq!(
        wf["settings"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    let run = &docs[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(
        run["inputs"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    assert_eq!(
        run["configurable"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    assert_eq!(
        run["answers"]["items"]["properties"]["value"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
}

#[test]
fn workflow_ref_needs_exactly_one_of_name_or_id() {
    assert_eq!(
        errors_of(validate_cel(&run(json!({"workflowRef": {"name": "w"}})))),
        ""
    );
    assert_eq!(
        errors_of(validate_cel(&run(
            json!({"workflowRef": {"id": "my_flow"}})
        ))),
        ""
    );
    let both = errors_of(validate_cel(&run(
        json!({"workflowRef": {"name": "w", "id": "w"}}),
    )));
    assert!(both.contains("exactly one of workflowRef.name"), "{both}");
    let none = errors_of(validate_cel(&run(json!({"workflowRef": {}}))));
    assert!(none.contains("exactly one of workflowRef.name"), "{none}");
}

#[test]
fn workflow_ref_is_immutable_and_cancel_irrevocable() {
    let old = run(json!({"workflowRef": {"name": "w"}, "cancel": true}));
    let changed = run(json!({"workflowRef": {"name": "other"}, "cancel": true}));
    let e = errors_of(validate_cel_update(&changed, &old));
    assert!(e.contains("workflowRef is immutable"), "{e}");
    let uncancel = run(json!({"workflowRef": {"name": "w"}, "cancel": false}));
    let e = errors_of(validate_cel_update(&uncancel, &old));
    assert!(e.contains("cancel cannot be reverted"), "{e}");
    assert_eq!(errors_of(validate_cel_update(&old, &old)), "");
}

#[test]
fn answers_are_append_only_and_need_content() {
    let one = run(
        json!({"workflowRef": {"name": "w"}, "answers": [{"interruptId": "i1", "approved": true}]}),
    );
    let two = run(json!({"workflowRef": {"name": "w"}, "answers": [
        {"interruptId": "i1", "approved": true}, {"interruptId": "i2", "value": {"q1": "blue"}}]}));
    assert_eq!(errors_of(validate_cel_update(&two, &one)), "");
    let fewer =
        run(json!({"workflowRef": {"name": "w"}, "answers": [{"interruptId": "i2", "value": 1}]}));
    let e2 = errors_of(validate_cel_update(&fewer, &two));
    assert!(e2.contains("append-only"), "{e2}");
    let empty = run(json!({"workflowRef": {"name": "w"}, "answers": [{"interruptId": "i3"}]}));
    let e3 = errors_of(validate_cel(&empty));
    assert!(e3.contains("needs value"), "{e3}");
}

#[test]
fn edge_conditions_and_inputs_are_checked() {
    let base = json!({
        "id": "w", "name": "W", "version": "1",
        "nodes": [{"id": "a", "typeId": "core.identity",
                   "inputs": {"x": {"type": "connection", "nodeId": "b"}}}],
        "edges": [{"id": "e", "sourceNodeId": "a", "targetNodeId": "b",
                   "condition": {"type": "equals", "right": 1}}]
    });
    let e = errors_of(validate_cel(&workflow(base)));
    assert!(
        e.contains("a connection input needs nodeId and outputKey"),
        "{e}"
    );
    assert!(e.contains("every other operator needs left"), "{e}");
    let good = json!({
        "id": "w", "name": "W", "version": "1",
        "nodes": [{"id": "a", "typeId": "core.identity",
                   "inputs": {"x": {"type": "static", "value": {"any": ["json"]}}}}],
        "edges": [{"id": "e", "sourceNodeId": "a", "targetNodeId": "a",
                   "condition": {"type": "truthy", "left": "output.ok"}}]
    });
    assert_eq!(errors_of(validate_cel(&workflow(good))), "");
}

#[test]
fn definition_fills_wire_defaults_and_drops_kubernetes_fields() {
    let wf = workflow(json!({
        "id": "my_flow", "name": "My flow", "version": "1.0.0",
        "nodes": [{"id": "n1", "typeId": "core.identity"}],
        "providers": [{"provider": "openai", "secretRef": {"name": "s", "key": "k"}}]
    }));
    let d = wf.spec.definition.filled().to_value();
    assert_eq!(d["id"], "my_flow");
    assert_eq!(d["nodes"][0]["name"], "n1");
    assert_eq!(d["nodes"][0]["position"], json!({"x": 0.0, "y": 0.0}));
    assert_eq!(d["nodes"][0]["config"], json!({}));
    assert_eq!(d["nodes"][0]["inputs"], json!({}));
    for k in ["edges", "triggers", "variables"] {
        assert_eq!(d[k], json!([]), "{k}");
    }
    assert_eq!(d["settings"], json!({}));
    assert!(d.get("providers").is_none() && d.get("worker").is_none());
}

#[test]
fn provider_mocks_are_typed_and_need_exactly_one_program_shape() {
    let ok = run(json!({"workflowRef": {"name": "w"}, "providerMocks": {
        "q": {"responses": [{"stopReason": "stop", "content": {"type": "x", "payload": {}}, "delayMs": 500}]},
        "p": {"turns": [{"responses": [{"stopReason": "max_tokens", "content": "{\"a\":", "outputTokens": 64}]}]}
    }}));
    assert_eq!(errors_of(validate_cel(&ok)), "");
    let step = &ok.spec.provider_mocks["q"].responses.as_ref().unwrap()[0];
    assert_eq!(step.delay_ms, Some(500));
    assert_eq!(step.content, Some(json!({"type": "x", "payload": {}})));
    // Round trip: the operator copies exactly what the user wrote.
    let back = serde_json::to_value(&ok.spec).unwrap();
    assert_eq!(
        back["providerMocks"]["p"]["turns"][0]["responses"][0],
        json!({"stopReason": "max_tokens", "content": "{\"a\":", "outputTokens": 64})
    );
    let both = run(
        json!({"workflowRef": {"name": "w"}, "providerMocks": {"q": {
        "responses": [{"stopReason": "stop"}], "turns": [{"responses": [{"stopReason": "stop"}]}]}}}),
    );
    let e = errors_of(validate_cel(&both));
    assert!(e.contains("exactly one of responses"), "{e}");
    let neither = run(json!({"workflowRef": {"name": "w"}, "providerMocks": {"q": {}}}));
    assert!(errors_of(validate_cel(&neither)).contains("exactly one of responses"));
    // A misspelt field is refused by serde (and pruned/refused by the apiserver's schema).
    let bad = serde_json::from_value::<Run>(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1", "namespace": "default"},
        "spec": {"workflowRef": {"name": "w"}, "providerMocks": {"q": {"responses": [{"content": "x"}]}}}
    }));
    assert!(bad.unwrap_err().to_string().contains("stopReason"));
}

#[test]
fn provider_mocks_schema_is_structural_and_bounded() {
    let run_crd = &openwop_crds::crds()[1];
    let schema = serde_json::to_value(
        run_crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap();
    let pm = &schema["properties"]["spec"]["properties"]["providerMocks"];
    assert_eq!(pm["type"], "object");
    assert_eq!(pm["maxProperties"], 64);
    let step = &pm["additionalProperties"]["properties"]["responses"]["items"];
    assert_eq!(step["required"], json!(["stopReason"]));
    assert_eq!(
        step["properties"]["content"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    assert_eq!(step["properties"]["delayMs"]["type"], "integer");
    assert_eq!(step["properties"]["delayMs"]["maximum"], 3600000.0);
    assert_eq!(
        pm["additionalProperties"]["properties"]["turns"]["maxItems"],
        16
    );
}

/// `[[[…1…]]]`, `depth` levels deep: more than serde_json's 128-level limit, less than the
/// apiserver's 10,000.
fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn a_run_list_with_one_run_too_deep_to_decode_still_decodes_the_others() {
    let deep = nested(9000);
    let list = format!(
        r#"{{"apiVersion": "openwop.dev/v1alpha1", "kind": "RunList", "metadata": {{}}, "items": [
        {{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {{"name": "deep", "namespace": "default"}},
          "spec": {{"workflowRef": {{"name": "w"}}, "inputs": {{"x": {deep}}}}}}},
        {{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {{"name": "deep-option", "namespace": "default"}},
          "spec": {{"workflowRef": {{"name": "w"}}, "configurable": {{"escalationThreshold": 0.5, "x": {deep}}},
                   "answers": [{{"interruptId": "i", "value": {{"a": 1}}}}]}}}},
        {{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {{"name": "ok", "namespace": "default"}},
          "spec": {{"workflowRef": {{"name": "w"}}, "inputs": {{"topic": [1, {{"b": null}}]}},
                   "configurable": {{"escalationThreshold": 0.5, "model": "m"}}}}}}
    ]}}"#
    );
    let runs: kube::core::ObjectList<Run> = serde_json::from_str(&list).expect("the list decodes");
    let (path, why) = runs.items[0].spec.undecodable().expect("flagged");
    assert_eq!(path, "spec.inputs");
    assert!(why.contains("deeper than 128 levels"), "{why}");
    let (path, _) = runs.items[1].spec.undecodable().expect("flagged");
    assert_eq!(path, "spec.configurable.x");
    let c = runs.items[1].spec.configurable.as_ref().unwrap();
    assert_eq!(c.escalation_threshold, Some(0.5));
    let ok = &runs.items[2];
    assert_eq!(ok.spec.undecodable(), None);
    assert_eq!(ok.spec.inputs, Some(json!({"topic": [1, {"b": null}]})));
    let c = ok.spec.configurable.as_ref().unwrap();
    assert_eq!(
        (c.escalation_threshold, c.extra.get("model")),
        (Some(0.5), Some(&json!("m")))
    );
    // A normal Run serializes as written (the lenient reading changes nothing else).
    let back = serde_json::to_value(ok).unwrap();
    assert_eq!(
        back["spec"]["configurable"],
        json!({"escalationThreshold": 0.5, "model": "m"})
    );
    // A bad escalationThreshold is still an error naming the field.
    let bad = serde_json::from_value::<Run>(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1", "namespace": "default"},
        "spec": {"workflowRef": {"name": "w"}, "configurable": {"escalationThreshold": "high"}}
    }));
    assert!(bad.unwrap_err().to_string().contains("escalationThreshold"));
}

#[test]
fn a_workflow_with_a_node_config_too_deep_to_decode_is_flagged() {
    let deep = nested(9000);
    let list = format!(
        r#"{{"apiVersion": "openwop.dev/v1alpha1", "kind": "WorkflowList", "metadata": {{}}, "items": [
        {{"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {{"name": "deep", "namespace": "default"}},
          "spec": {{"id": "d", "name": "d", "version": "1", "nodes": [{{"id": "n", "typeId": "core.identity", "config": {{"x": {deep}}}}}]}}}},
        {{"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {{"name": "ok", "namespace": "default"}},
          "spec": {{"id": "o", "name": "o", "version": "1", "nodes": [{{"id": "n", "typeId": "core.identity", "config": {{"x": [1]}}}}]}}}}
    ]}}"#
    );
    let wfs: kube::core::ObjectList<Workflow> =
        serde_json::from_str(&list).expect("the list decodes");
    let (path, why) = wfs.items[0].spec.undecodable().expect("flagged");
    assert_eq!(path, "spec.nodes[n].config");
    assert!(why.contains("deeper than 128 levels"), "{why}");
    assert_eq!(wfs.items[1].spec.undecodable(), None);
    assert_eq!(
        wfs.items[1].spec.nodes[0]
            .config
            .as_ref()
            .map(|c| Value::Object(c.clone())),
        Some(json!({"x": [1]}))
    );
}

#[test]
fn a_watch_event_of_a_run_too_deep_to_decode_decodes() {
    let deep = format!("{}1{}", "{\"a\":".repeat(9000), "}".repeat(9000));
    let line = format!(
        r#"{{"type":"ADDED","object":{{"apiVersion":"openwop.dev/v1alpha1","kind":"Run","metadata":{{"name":"d","namespace":"n"}},"spec":{{"workflowRef":{{"name":"w"}},"inputs":{deep}}}}}}}"#
    );
    let ev: kube::core::WatchEvent<Run> = serde_json::from_str(&line).unwrap();
    let kube::core::WatchEvent::Added(run) = ev else {
        panic!("an ADDED event")
    };
    assert_eq!(run.spec.undecodable().unwrap().0, "spec.inputs");
}

/// A free-form object is atomic for server-side apply, so `metadata.managedFields` do not
/// mirror its content as deep as it nests (a 9,000-level value there failed the decoding of
/// the object's metadata, past what the lenient fields can help).
#[test]
fn free_form_objects_are_atomic_so_managed_fields_stay_shallow() {
    let run_crd = &openwop_crds::crds()[1];
    let schema = serde_json::to_value(&run_crd.spec.versions[0].schema).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(spec["inputs"]["x-kubernetes-map-type"], "atomic");
    assert_eq!(
        spec["answers"]["items"]["properties"]["value"]["x-kubernetes-map-type"],
        "atomic"
    );
}
