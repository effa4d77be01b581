//! Registration-time checks of a workflow definition, shared by the operator (Workflow
//! controller), the worker and `kubectl-openwop workflow check`.
//!
//! [`check_workflow`] runs, in order: the definition schema; graph integrity (unique node ids,
//! edges and connections naming existing nodes); known `typeId`s; each node's `config` against
//! its type's config schema (the RFC 0023 mock-agent config is closed); the RFC 0023 gate for
//! `core.conformance.mock-agent`; envelope contracts naming only kinds the host advertises or
//! the node declares; vendor envelope schemas compiled and walked for the Tier-1 subset under
//! the configured posture. Every problem names the node and a JSON Pointer into the definition.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize as _;
use serde_json::Value;

use crate::http;
use crate::schema::{self, CompiledSchema, Document, ValidationIssue};
use crate::tier1::{self, Tier1Posture};
use crate::workflow::{WorkflowDefinition, WorkflowError};

use crate::run::nodes::{MOCK_AGENT_TYPE_ID, mock_agent_allowed, mock_agent_refusal};

/// Most problems reported for one workflow; the rest are summarised by a count.
pub const MAX_PROBLEMS: usize = 50;

/// How a node type's `config` is checked.
#[derive(Debug)]
pub enum ConfigRule {
    /// Any JSON object.
    AnyObject,
    /// The closed RFC 0023 mock-agent config (`Document::MockAgentConfig`).
    MockAgent,
    /// A node-type-specific JSON Schema.
    Schema(CompiledSchema),
    /// The HTTP node's config ([`http::HttpConfig::parse`]).
    Http(http::Dialect),
}

/// One registered node type.
#[derive(Debug)]
pub struct NodeType {
    pub type_id: String,
    pub config: ConfigRule,
}

/// The node types a host can execute.
#[derive(Debug, Default)]
pub struct NodeRegistry {
    types: BTreeMap<String, NodeType>,
}

impl NodeRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The node types the worker executes ([`crate::run::nodes::BUILTIN_NODES`]).
    pub fn builtin() -> Self {
        use crate::run::nodes::{BUILTIN_NODES, ConfigCheck};
        let mut r = Self::new();
        for n in BUILTIN_NODES {
            r.register(NodeType {
                type_id: n.type_id.into(),
                config: match n.config {
                    ConfigCheck::AnyObject => ConfigRule::AnyObject,
                    ConfigCheck::MockAgent => ConfigRule::MockAgent,
                    ConfigCheck::Http(d) => ConfigRule::Http(d),
                    // Embedded documents; `nodes::tests` compiles every one.
                    ConfigCheck::Schema { doc, def } => ConfigRule::Schema(
                        schema_def(doc, def).expect("embedded node config schema compiles"),
                    ),
                },
            });
        }
        r
    }

    /// Adds or replaces a node type.
    pub fn register(&mut self, t: NodeType) {
        self.types.insert(t.type_id.clone(), t);
    }

    /// Registers a node type whose config must satisfy `config_schema`.
    pub fn register_with_schema(
        &mut self,
        type_id: &str,
        config_schema: &Value,
    ) -> Result<(), schema::SchemaCompileError> {
        let compiled = schema::compile(config_schema)?;
        self.register(NodeType {
            type_id: type_id.into(),
            config: ConfigRule::Schema(compiled),
        });
        Ok(())
    }

    /// Registered type ids, sorted.
    pub fn type_ids(&self) -> impl Iterator<Item = &str> {
        self.types.keys().map(String::as_str)
    }

    pub fn get(&self, type_id: &str) -> Option<&NodeType> {
        self.types.get(type_id)
    }
}

/// The schema document `doc` (JSON text), or its definition `def` under `$defs`, compiled.
pub fn schema_def(
    doc: &str,
    def: Option<&str>,
) -> Result<CompiledSchema, schema::SchemaCompileError> {
    let mut root: Value =
        serde_json::from_str(doc).map_err(|e| schema::SchemaCompileError::Invalid {
            pointer: String::new(),
            keyword: "$schema".into(),
            message: format!("not JSON: {e}"),
        })?;
    if let (Some(o), Some(def)) = (root.as_object_mut(), def) {
        o.insert("$ref".into(), Value::String(format!("#/$defs/{def}")));
    }
    schema::compile(&root)
}

/// What the host offers, against which a definition is checked.
#[derive(Debug)]
pub struct CheckOptions<'a> {
    pub registry: &'a NodeRegistry,
    /// Kinds in the host's `supportedEnvelopes` (universal kinds are always accepted).
    pub advertised_kinds: &'a BTreeSet<String>,
    pub tier1: Tier1Posture,
    /// The host opted in to the mock agent for this workflow's tenant
    /// (`conformance.mockAgent: true` and the namespace is allowed).
    pub mock_agent_opt_in: bool,
}

/// Kind of problem, as a stable machine-readable reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProblemCode {
    /// The definition does not match the workflow-definition schema.
    DefinitionInvalid,
    DuplicateNodeId,
    /// An edge or connection input names a node that does not exist.
    UnknownNodeReference,
    /// Edges and connection inputs make nodes depend on each other in a cycle.
    DependencyCycle,
    UnknownTypeId,
    NodeConfigInvalid,
    /// `core.conformance.mock-agent` outside a conformance workflow without host opt-in.
    MockAgentNotAllowed,
    /// An envelope contract names a kind the host does not advertise and the node does not declare.
    ContractKindNotAdvertised,
    /// A declared vendor envelope schema is malformed or does not compile.
    EnvelopeSchemaInvalid,
    /// A declared vendor envelope schema is outside the Tier-1 subset.
    EnvelopeSchemaNotTier1,
    /// An `expression` edge condition or port value: this host has no expression engine.
    ExpressionUnsupported,
    /// A condition or predicate that can never be evaluated (a regex that does not compile).
    ConditionInvalid,
    /// A variable node names a variable the workflow does not declare.
    UnknownVariable,
    /// A node writes a `sensitive` variable.
    SensitiveVariableWrite,
    /// More problems than [`MAX_PROBLEMS`].
    TooManyProblems,
}

impl ProblemCode {
    /// CamelCase reason, usable as a Kubernetes condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemCode::DefinitionInvalid => "DefinitionInvalid",
            ProblemCode::DuplicateNodeId => "DuplicateNodeId",
            ProblemCode::UnknownNodeReference => "UnknownNodeReference",
            ProblemCode::DependencyCycle => "DependencyCycle",
            ProblemCode::UnknownTypeId => "UnknownTypeId",
            ProblemCode::NodeConfigInvalid => "NodeConfigInvalid",
            ProblemCode::MockAgentNotAllowed => "MockAgentNotAllowed",
            ProblemCode::ContractKindNotAdvertised => "ContractKindNotAdvertised",
            ProblemCode::EnvelopeSchemaInvalid => "EnvelopeSchemaInvalid",
            ProblemCode::EnvelopeSchemaNotTier1 => "EnvelopeSchemaNotTier1",
            ProblemCode::ExpressionUnsupported => "ExpressionUnsupported",
            ProblemCode::ConditionInvalid => "ConditionInvalid",
            ProblemCode::UnknownVariable => "UnknownVariable",
            ProblemCode::SensitiveVariableWrite => "SensitiveVariableWrite",
            ProblemCode::TooManyProblems => "TooManyProblems",
        }
    }
}

/// One problem found in a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowProblem {
    pub code: ProblemCode,
    /// The node concerned, when there is one.
    pub node_id: Option<String>,
    /// JSON Pointer into the definition.
    pub pointer: String,
    /// What is wrong and what to do; never contains instance values other than ids and kinds.
    pub message: String,
}

impl fmt::Display for WorkflowProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "(root)"
        } else {
            &self.pointer
        };
        match &self.node_id {
            Some(n) => write!(f, "node {n:?} ({at}): {}", self.message),
            None => write!(f, "{at}: {}", self.message),
        }
    }
}

/// Result of [`check_workflow`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Problems that make the workflow invalid.
    pub errors: Vec<WorkflowProblem>,
    /// Problems reported but tolerated (Tier-1 under `warn`).
    pub warnings: Vec<WorkflowProblem>,
}

impl CheckReport {
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }

    fn error(&mut self, p: WorkflowProblem) {
        push_bounded(&mut self.errors, p);
    }

    fn warning(&mut self, p: WorkflowProblem) {
        push_bounded(&mut self.warnings, p);
    }
}

fn push_bounded(list: &mut Vec<WorkflowProblem>, p: WorkflowProblem) {
    match list.len() {
        n if n < MAX_PROBLEMS => list.push(p),
        n if n == MAX_PROBLEMS => list.push(WorkflowProblem {
            code: ProblemCode::TooManyProblems,
            node_id: None,
            pointer: String::new(),
            message: format!("more than {MAX_PROBLEMS} problems; fix the ones above first"),
        }),
        _ => {}
    }
}

/// Checks a workflow definition (the OpenWOP document, not the Kubernetes resource).
pub fn check_workflow(definition: &Value, opts: &CheckOptions<'_>) -> CheckReport {
    let mut report = CheckReport::default();
    if let Err(issues) = schema::validate(Document::WorkflowDefinition, definition) {
        for issue in issues {
            report.error(from_issue(ProblemCode::DefinitionInvalid, None, "", &issue));
        }
    }
    let workflow_id = definition.get("id").and_then(Value::as_str).unwrap_or("");
    let Some(nodes) = definition.get("nodes").and_then(Value::as_array) else {
        return report;
    };

    let mut ids = BTreeSet::new();
    for (i, node) in nodes.iter().enumerate() {
        if let Some(id) = node.get("id").and_then(Value::as_str)
            && !ids.insert(id)
        {
            report.error(WorkflowProblem {
                code: ProblemCode::DuplicateNodeId,
                node_id: Some(id.into()),
                pointer: format!("/nodes/{i}/id"),
                message: "node id is used by an earlier node; node ids must be unique".into(),
            });
        }
    }

    if let Some(edges) = definition.get("edges").and_then(Value::as_array) {
        for (i, edge) in edges.iter().enumerate() {
            for field in ["sourceNodeId", "targetNodeId"] {
                if let Some(target) = edge.get(field).and_then(Value::as_str)
                    && !ids.contains(target)
                {
                    report.error(WorkflowProblem {
                        code: ProblemCode::UnknownNodeReference,
                        node_id: None,
                        pointer: format!("/edges/{i}/{field}"),
                        message: format!("edge names node {target:?}, which does not exist"),
                    });
                }
            }
        }
    }

    for (i, node) in nodes.iter().enumerate() {
        check_node(i, node, workflow_id, &ids, opts, &mut report);
    }
    check_flow(definition, nodes, &mut report);
    // The order the worker executes in: only a structurally valid definition has one. The
    // schema was checked above, so the typed read needs no second validation.
    if report.is_valid()
        && let Ok(def) = WorkflowDefinition::deserialize(definition)
        && let Err(e @ WorkflowError::Cycle { .. }) = def.topological_order()
    {
        report.error(WorkflowProblem {
            code: ProblemCode::DependencyCycle,
            node_id: None,
            pointer: "/edges".into(),
            message: e.to_string(),
        });
    }
    report
}

fn check_node(
    i: usize,
    node: &Value,
    workflow_id: &str,
    ids: &BTreeSet<&str>,
    opts: &CheckOptions<'_>,
    report: &mut CheckReport,
) {
    let node_id = node.get("id").and_then(Value::as_str).map(str::to_owned);
    let base = format!("/nodes/{i}");

    if let Some(inputs) = node.get("inputs").and_then(Value::as_object) {
        for (port, src) in inputs {
            if src.get("type").and_then(Value::as_str) == Some("connection")
                && let Some(from) = src.get("nodeId").and_then(Value::as_str)
                && !ids.contains(from)
            {
                report.error(WorkflowProblem {
                    code: ProblemCode::UnknownNodeReference,
                    node_id: node_id.clone(),
                    pointer: format!("{base}/inputs/{}/nodeId", crate::text::escape_pointer(port)),
                    message: format!(
                        "input {port:?} is connected to node {from:?}, which does not exist"
                    ),
                });
            }
        }
    }

    let Some(type_id) = node.get("typeId").and_then(Value::as_str) else {
        return;
    };
    let empty = Value::Object(Default::default());
    let config = node.get("config").unwrap_or(&empty);
    match opts.registry.get(type_id) {
        None => {
            let known: Vec<&str> = opts.registry.type_ids().collect();
            report.error(WorkflowProblem {
                code: ProblemCode::UnknownTypeId,
                node_id: node_id.clone(),
                pointer: format!("{base}/typeId"),
                message: format!(
                    "unknown typeId {type_id:?}; this host runs: {}",
                    known.join(", ")
                ),
            });
        }
        Some(t) => {
            let result = match &t.config {
                ConfigRule::AnyObject if config.is_object() => Ok(()),
                ConfigRule::AnyObject => Err(vec![ValidationIssue {
                    instance_path: String::new(),
                    keyword: "type".into(),
                    message: "config must be an object".into(),
                }]),
                ConfigRule::MockAgent => schema::validate(Document::MockAgentConfig, config),
                ConfigRule::Schema(s) => s.validate(config),
                ConfigRule::Http(d) => http::HttpConfig::parse(*d, config).map(|_| ()),
            }
            .and_then(|()| llm_tool_members(type_id, config));
            if let Err(issues) = result {
                let at = format!("{base}/config");
                for issue in issues {
                    let mut p =
                        from_issue(ProblemCode::NodeConfigInvalid, node_id.clone(), &at, &issue);
                    p.message = format!("config of {type_id}: {}", p.message);
                    report.error(p);
                }
            }
        }
    }

    if type_id == MOCK_AGENT_TYPE_ID && !mock_agent_allowed(workflow_id, opts.mock_agent_opt_in) {
        report.error(WorkflowProblem {
            code: ProblemCode::MockAgentNotAllowed,
            node_id: node_id.clone(),
            pointer: format!("{base}/typeId"),
            message: mock_agent_refusal(),
        });
    }

    if let Some(contract) = node.get("envelopeContract") {
        check_contract(&base, node_id.as_deref(), contract, opts, report);
    }
}

/// An LLM node's tool members (`tools`, `maxToolRounds`) are the host's own contract, read by
/// the worker's tool loop: checked whatever config schema the node type has (an operator's
/// `nodeTypes[].configSchema` included).
fn llm_tool_members(type_id: &str, config: &Value) -> Result<(), Vec<ValidationIssue>> {
    use crate::run::nodes::{Executor, executor_of};
    match executor_of(type_id) {
        Some(Executor::Prompt) => crate::tools::ToolsConfig::parse(config).map(|_| ()),
        _ => Ok(()),
    }
}

/// The checks that make every condition and variable reference decidable before a run
/// starts: no `expression` (edge conditions, port values), regex patterns that compile, and
/// variable nodes that name a declared variable (a writer never a `sensitive` one: its value
/// would have to be recorded in the run's log to replay).
fn check_flow(definition: &Value, nodes: &[Value], report: &mut CheckReport) {
    use crate::graph::{Op, compile_regex};
    use crate::run::nodes::{Executor, executor_of};
    let problem = |code, node_id: Option<&str>, pointer: String, message: String| WorkflowProblem {
        code,
        node_id: node_id.map(str::to_owned),
        pointer,
        message,
    };
    let bad_regex = |v: Option<&Value>| {
        compile_regex(v.and_then(Value::as_str).unwrap_or_default())
            .err()
            .map(|e| e.to_string())
    };
    for (i, edge) in definition
        .get("edges")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(c) = edge.get("condition") else {
            continue;
        };
        match c.get("type").and_then(Value::as_str) {
            Some("expression") => report.error(problem(
                ProblemCode::ExpressionUnsupported,
                None,
                format!("/edges/{i}/condition/type"),
                "expression conditions are not supported by this host (no expression engine); use equals, notEquals, contains, regex, truthy or falsy".into(),
            )),
            Some("regex") => {
                if let Some(e) = bad_regex(c.get("right")) {
                    report.error(problem(
                        ProblemCode::ConditionInvalid,
                        None,
                        format!("/edges/{i}/condition/right"),
                        format!("{e}; fix the pattern"),
                    ));
                }
            }
            _ => {}
        }
    }
    let variables: BTreeMap<&str, bool> = definition
        .get("variables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let sensitive = v.get("sensitive").and_then(Value::as_bool) == Some(true);
            Some((v.get("name")?.as_str()?, sensitive))
        })
        .collect();
    for (i, node) in nodes.iter().enumerate() {
        let id = node.get("id").and_then(Value::as_str);
        let base = format!("/nodes/{i}");
        for (port, src) in node
            .get("inputs")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if src.get("type").and_then(Value::as_str) == Some("expression") {
                report.error(problem(
                    ProblemCode::ExpressionUnsupported,
                    id,
                    format!("{base}/inputs/{}/type", crate::text::escape_pointer(port)),
                    format!("input {port:?} is an expression; this host has no expression engine: use a static, connection or variable input"),
                ));
            }
        }
        let config = node.get("config");
        let executor = node
            .get("typeId")
            .and_then(Value::as_str)
            .and_then(executor_of);
        // Regex predicates: `config.predicate` (conditional), `config.routes[j].predicate` (router).
        let predicates: Vec<(String, &Value)> = match executor {
            Some(Executor::Conditional) => config
                .and_then(|c| c.get("predicate"))
                .map(|p| (format!("{base}/config/predicate"), p))
                .into_iter()
                .chain(
                    config
                        .and_then(|c| c.get("condition"))
                        .map(|c| (format!("{base}/config/condition"), c)),
                )
                .collect(),
            Some(Executor::Router) => config
                .and_then(|c| c.get("routes"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
                .filter_map(|(j, r)| {
                    Some((
                        format!("{base}/config/routes/{j}/predicate"),
                        r.get("predicate")?,
                    ))
                })
                .collect(),
            _ => Vec::new(),
        };
        for (at, p) in predicates {
            let (op, right) = match (p.get("op"), p.get("type")) {
                (Some(op), _) => (op, "value"),
                (None, Some(t)) => (t, "right"),
                _ => continue,
            };
            if op.as_str() == Some(Op::Regex.as_str())
                && let Some(e) = bad_regex(p.get(right))
            {
                report.error(problem(
                    ProblemCode::ConditionInvalid,
                    id,
                    format!("{at}/{right}"),
                    format!("{e}; fix the pattern"),
                ));
            }
        }
        // A sub-workflow's config is read the way the worker reads it, so what the worker
        // would refuse mid-run (a missing workflowId, a mapping that is not name → name,
        // fire-and-forget) is refused here, naming the node and field.
        if executor == Some(Executor::SubWorkflow)
            && let Err(e) = crate::run::waits::SubWorkflowConfig::parse(
                id.unwrap_or_default(),
                config.unwrap_or(&Value::Null),
            )
        {
            let field = e
                .details
                .as_ref()
                .and_then(|d| d.get("field"))
                .and_then(Value::as_str)
                .unwrap_or("config");
            // The pointer names node and field; the message keeps only what is wrong.
            let prefix = format!("node {}: {field}: ", id.unwrap_or_default());
            let message = e.message.strip_prefix(&prefix).unwrap_or(&e.message);
            report.error(problem(
                ProblemCode::NodeConfigInvalid,
                id,
                format!("{base}/{}", field.replace('.', "/")),
                message.to_owned(),
            ));
        }
        let writes = match executor {
            Some(Executor::SetVariable) => true,
            Some(Executor::GetVariable) => false,
            _ => continue,
        };
        let Some(name) = config.and_then(|c| c.get("name")).and_then(Value::as_str) else {
            continue; // the config schema reports a missing name
        };
        let at = format!("{base}/config/name");
        match variables.get(name) {
            None => {
                let declared: Vec<&str> = variables.keys().copied().collect();
                report.error(problem(
                    ProblemCode::UnknownVariable,
                    id,
                    at,
                    format!(
                        "variable {name:?} is not declared; declare it under variables (declared: {})",
                        if declared.is_empty() { "none".to_owned() } else { declared.join(", ") }
                    ),
                ));
            }
            Some(true) if writes => report.error(problem(
                ProblemCode::SensitiveVariableWrite,
                id,
                at,
                format!("variable {name:?} is sensitive: a node cannot write it (the value would be recorded in the run's log); pass it as a run input instead"),
            )),
            Some(_) => {}
        }
    }
}

fn check_contract(
    base: &str,
    node_id: Option<&str>,
    contract: &Value,
    opts: &CheckOptions<'_>,
    report: &mut CheckReport,
) {
    let declared = contract.get("schemas").and_then(Value::as_object);
    if let Some(schemas) = declared {
        for (kind, s) in schemas {
            let at = format!(
                "{base}/envelopeContract/schemas/{}",
                crate::text::escape_pointer(kind)
            );
            check_vendor_schema(&at, node_id, kind, s, opts.tier1, report);
        }
    }
    let Some(accepts) = contract.get("accepts").and_then(Value::as_array) else {
        return;
    };
    for (j, kind) in accepts.iter().enumerate() {
        let Some(kind) = kind.as_str() else { continue };
        let known = schema::UNIVERSAL_KINDS.contains(&kind)
            || opts.advertised_kinds.contains(kind)
            || declared.is_some_and(|d| d.contains_key(kind));
        if !known {
            let advertised: Vec<&str> = schema::UNIVERSAL_KINDS
                .iter()
                .copied()
                .chain(opts.advertised_kinds.iter().map(String::as_str))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            report.error(WorkflowProblem {
                code: ProblemCode::ContractKindNotAdvertised,
                node_id: node_id.map(str::to_owned),
                pointer: format!("{base}/envelopeContract/accepts/{j}"),
                message: format!(
                    "envelope contract accepts {kind:?}, which this host does not advertise; declare its payload schema under envelopeContract.schemas or use one of: {}",
                    advertised.join(", ")
                ),
            });
        }
    }
}

fn check_vendor_schema(
    at: &str,
    node_id: Option<&str>,
    kind: &str,
    s: &Value,
    posture: Tier1Posture,
    report: &mut CheckReport,
) {
    let problem = |code, pointer: String, message: String| WorkflowProblem {
        code,
        node_id: node_id.map(str::to_owned),
        pointer,
        message,
    };
    if !kind.starts_with("vendor.") || kind.split('.').count() < 3 {
        report.error(problem(
            ProblemCode::EnvelopeSchemaInvalid,
            at.to_owned(),
            format!("declared kind {kind:?} must be vendor-namespaced: vendor.<host>.<kind>"),
        ));
    }
    if let Err(e) = schema::compile(s) {
        report.error(problem(
            ProblemCode::EnvelopeSchemaInvalid,
            at.to_owned(),
            format!("payload schema of {kind:?} does not compile: {e}"),
        ));
        return;
    }
    if posture == Tier1Posture::Off {
        return;
    }
    for v in tier1::check(s) {
        let p = problem(
            ProblemCode::EnvelopeSchemaNotTier1,
            format!("{at}{}", v.pointer),
            format!(
                "payload schema of {kind:?} is outside the Tier-1 subset ({}): {}",
                v.rule, v.message
            ),
        );
        match posture {
            Tier1Posture::Strict => report.error(p),
            _ => report.warning(p),
        }
    }
}

fn from_issue(
    code: ProblemCode,
    node_id: Option<String>,
    prefix: &str,
    issue: &ValidationIssue,
) -> WorkflowProblem {
    WorkflowProblem {
        code,
        node_id,
        pointer: format!("{prefix}{}", issue.instance_path),
        message: issue.message.clone(),
    }
}

/// Problems of the Workflow's `spec.secrets` (`declared` names, in order) with `definition`'s
/// HTTP nodes, as registration problems: a name declared twice (both would mount at one
/// path), and a header secret (`{{secrets.NAME}}`) that is not declared, so a run never starts
/// that would fail for want of a secret. Configs that do not parse are left to the config
/// check.
pub fn secret_problems(definition: &Value, declared: &[&str]) -> Vec<WorkflowProblem> {
    let mut out = Vec::new();
    for (i, name) in declared.iter().enumerate() {
        if declared[..i].contains(name) {
            out.push(WorkflowProblem {
                code: ProblemCode::DefinitionInvalid,
                node_id: None,
                pointer: format!("/secrets/{i}/name"),
                message: format!("secret {name} is declared twice; give each entry its own name"),
            });
        }
    }
    let nodes = definition.get("nodes").and_then(Value::as_array);
    for (i, node) in nodes.into_iter().flatten().enumerate() {
        let dialect = match node.get("typeId").and_then(Value::as_str) {
            Some(http::FETCH_TYPE_ID) => http::Dialect::Fetch,
            Some(http::REQUEST_TYPE_ID) => http::Dialect::Request,
            _ => continue,
        };
        let Some(Ok(cfg)) = node
            .get("config")
            .map(|c| http::HttpConfig::parse(dialect, c))
        else {
            continue;
        };
        for (header, template) in &cfg.headers {
            let names = http::config::placeholders(template).unwrap_or_default();
            for name in names
                .iter()
                .filter_map(|p| p.strip_prefix(http::config::SECRET_PLACEHOLDER_PREFIX))
            {
                if declared.contains(&name) {
                    continue;
                }
                out.push(WorkflowProblem {
                    code: ProblemCode::NodeConfigInvalid,
                    node_id: node.get("id").and_then(Value::as_str).map(str::to_owned),
                    pointer: format!(
                        "/nodes/{i}/config/headers/{}",
                        crate::text::escape_pointer(header)
                    ),
                    message: format!(
                        "header {header} uses {{{{secrets.{name}}}}}, which spec.secrets does not declare: add {{name: {name}, secretRef: {{name: <Secret>, key: <key>}}}} to spec.secrets"
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts<'a>(reg: &'a NodeRegistry, kinds: &'a BTreeSet<String>) -> CheckOptions<'a> {
        CheckOptions {
            registry: reg,
            advertised_kinds: kinds,
            tier1: Tier1Posture::Warn,
            mock_agent_opt_in: false,
        }
    }

    fn wf(id: &str, nodes: Value) -> Value {
        json!({"id": id, "name": "W", "version": "1", "nodes": nodes, "edges": []})
    }

    fn codes(r: &CheckReport) -> Vec<ProblemCode> {
        r.errors.iter().map(|p| p.code).collect()
    }

    #[test]
    fn valid_workflow_passes() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let d = json!({"id": "hello", "name": "Hello", "version": "1",
            "nodes": [{"id": "a", "typeId": "core.identity", "config": {}},
                      {"id": "b", "typeId": "core.flow.noop",
                       "inputs": {"in": {"type": "connection", "nodeId": "a", "outputKey": "output"}}}],
            "edges": [{"id": "e1", "sourceNodeId": "a", "targetNodeId": "b"}]});
        let r = check_workflow(&d, &opts(&reg, &kinds));
        assert!(r.is_valid(), "{:?}", r.errors);
    }

    #[test]
    fn unknown_type_names_node_and_lists_registered_types() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let r = check_workflow(
            &wf("w", json!([{"id": "n1", "typeId": "core.nope"}])),
            &opts(&reg, &kinds),
        );
        assert_eq!(codes(&r), vec![ProblemCode::UnknownTypeId]);
        let msg = r.errors[0].to_string();
        assert!(
            msg.starts_with("node \"n1\" (/nodes/0/typeId): unknown typeId \"core.nope\""),
            "{msg}"
        );
        assert!(msg.contains("core.identity"), "{msg}");
    }

    #[test]
    fn dependency_cycles_through_edges_or_inputs_are_invalid() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let mut d = wf(
            "w",
            json!([{"id": "a", "typeId": "core.identity",
                    "inputs": {"in": {"type": "connection", "nodeId": "b", "outputKey": "output"}}},
                   {"id": "b", "typeId": "core.identity"}]),
        );
        d["edges"] = json!([{"id": "e", "sourceNodeId": "a", "targetNodeId": "b"}]);
        let r = check_workflow(&d, &opts(&reg, &kinds));
        assert_eq!(codes(&r), vec![ProblemCode::DependencyCycle]);
        let msg = r.errors[0].to_string();
        assert!(msg.contains("/edges") && msg.contains("b → a → b"), "{msg}");
        // Without the edge it is a plain chain.
        d["edges"] = json!([]);
        assert!(check_workflow(&d, &opts(&reg, &kinds)).is_valid());
    }

    #[test]
    fn duplicate_ids_and_dangling_edges_are_reported() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let mut d = wf(
            "w",
            json!([{"id": "a", "typeId": "core.identity"}, {"id": "a", "typeId": "core.identity"}]),
        );
        d["edges"] = json!([{"id": "e", "sourceNodeId": "a", "targetNodeId": "ghost"}]);
        let r = check_workflow(&d, &opts(&reg, &kinds));
        assert_eq!(
            codes(&r),
            vec![
                ProblemCode::DuplicateNodeId,
                ProblemCode::UnknownNodeReference
            ]
        );
        assert_eq!(r.errors[0].pointer, "/nodes/1/id");
        assert_eq!(r.errors[1].pointer, "/edges/0/targetNodeId");
    }

    #[test]
    fn mock_agent_gate_and_closed_config() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let node =
            json!([{"id": "m", "typeId": MOCK_AGENT_TYPE_ID, "config": {"mockConfidence": 0.9}}]);
        let r = check_workflow(&wf("support", node.clone()), &opts(&reg, &kinds));
        assert_eq!(codes(&r), vec![ProblemCode::MockAgentNotAllowed]);
        assert!(r.errors[0].message.contains("conformance-"));
        assert!(
            check_workflow(&wf("conformance-mock", node.clone()), &opts(&reg, &kinds)).is_valid()
        );
        let mut o = opts(&reg, &kinds);
        o.mock_agent_opt_in = true;
        assert!(check_workflow(&wf("support", node), &o).is_valid());

        let bad = json!([{"id": "m", "typeId": MOCK_AGENT_TYPE_ID, "config": {"mockConfidence": 0.9, "surprise": true}}]);
        let r = check_workflow(&wf("conformance-x", bad), &opts(&reg, &kinds));
        assert_eq!(codes(&r), vec![ProblemCode::NodeConfigInvalid]);
        assert!(
            r.errors[0].pointer.starts_with("/nodes/0/config"),
            "{}",
            r.errors[0].pointer
        );
        assert!(
            !r.errors[0].message.contains("true"),
            "no instance values: {}",
            r.errors[0].message
        );
    }

    #[test]
    fn contracts_must_name_advertised_or_declared_kinds() {
        let reg = NodeRegistry::builtin();
        let kinds: BTreeSet<String> = ["media.image".to_string()].into();
        let node = |accepts: Value, schemas: Value| {
            json!([{"id": "p", "typeId": "core.ai.callPrompt",
                    "envelopeContract": {"accepts": accepts, "schemas": schemas}}])
        };
        let ok = node(json!(["error", "media.image"]), json!({}));
        assert!(check_workflow(&wf("w", ok), &opts(&reg, &kinds)).is_valid());
        let bad = node(json!(["vendor.acme.plan"]), json!({}));
        let r = check_workflow(&wf("w", bad), &opts(&reg, &kinds));
        assert_eq!(codes(&r), vec![ProblemCode::ContractKindNotAdvertised]);
        assert_eq!(r.errors[0].pointer, "/nodes/0/envelopeContract/accepts/0");
        let schema = json!({"type": "object", "additionalProperties": false,
            "required": ["title"], "properties": {"title": {"type": "string"}}});
        let declared = node(
            json!(["vendor.acme.plan"]),
            json!({"vendor.acme.plan": schema}),
        );
        let r = check_workflow(&wf("w", declared), &opts(&reg, &kinds));
        assert!(r.is_valid() && r.warnings.is_empty(), "{r:?}");
    }

    #[test]
    fn tier1_posture_decides_error_warning_or_nothing() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let loose =
            json!({"type": "object", "properties": {"title": {"type": "string", "minLength": 3}}});
        let d = wf(
            "w",
            json!([{"id": "p", "typeId": "core.ai.callPrompt",
            "envelopeContract": {"accepts": ["vendor.acme.plan"], "schemas": {"vendor.acme.plan": loose}}}]),
        );
        let mut o = opts(&reg, &kinds);
        let warn = check_workflow(&d, &o);
        assert!(warn.is_valid());
        assert!(!warn.warnings.is_empty());
        assert!(
            warn.warnings
                .iter()
                .all(|p| p.code == ProblemCode::EnvelopeSchemaNotTier1)
        );
        assert!(
            warn.warnings[0]
                .pointer
                .starts_with("/nodes/0/envelopeContract/schemas/vendor.acme.plan")
        );
        o.tier1 = Tier1Posture::Strict;
        let strict = check_workflow(&d, &o);
        assert!(!strict.is_valid());
        o.tier1 = Tier1Posture::Off;
        let off = check_workflow(&d, &o);
        assert!(off.is_valid() && off.warnings.is_empty());
    }

    #[test]
    fn broken_vendor_schema_is_invalid_whatever_the_posture() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let d = wf(
            "w",
            json!([{"id": "p", "typeId": "core.ai.callPrompt",
            "envelopeContract": {"accepts": [], "schemas": {"plan": {"type": 12}}}}]),
        );
        let mut o = opts(&reg, &kinds);
        o.tier1 = Tier1Posture::Off;
        let r = check_workflow(&d, &o);
        assert_eq!(
            codes(&r),
            vec![
                ProblemCode::EnvelopeSchemaInvalid,
                ProblemCode::EnvelopeSchemaInvalid
            ]
        );
    }

    #[test]
    fn definition_schema_violations_are_reported_with_pointers() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let r = check_workflow(&json!({"id": "Bad Id", "nodes": []}), &opts(&reg, &kinds));
        assert!(!r.is_valid());
        assert!(
            r.errors
                .iter()
                .all(|p| p.code == ProblemCode::DefinitionInvalid)
        );
        assert!(
            r.errors.iter().any(|p| p.pointer == "/id"),
            "{:?}",
            r.errors
        );
    }

    #[test]
    fn flow_nodes_are_checked_at_registration_with_pointers() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let d = json!({"id": "w", "name": "W", "version": "1",
            "variables": [{"name": "count", "type": "number"},
                          {"name": "token", "type": "string", "sensitive": true}],
            "nodes": [
                {"id": "a", "typeId": "core.identity",
                 "inputs": {"x": {"type": "expression", "expression": "1 + 1"}}},
                {"id": "if", "typeId": "core.conditional",
                 "config": {"predicate": {"path": "s", "op": "regex", "value": "("}}},
                {"id": "route", "typeId": "core.parallel",
                 "config": {"routes": [{"label": "x", "predicate": {"path": "", "op": "regex", "value": "[a-"}}]}},
                {"id": "set", "typeId": "core.setVariable", "config": {"name": "cuont", "value": 1}},
                {"id": "leak", "typeId": "core.setVariable", "config": {"name": "token", "value": "t"}},
                {"id": "get", "typeId": "core.getVariable", "config": {"name": "token"}},
                {"id": "loop", "typeId": "core.loop", "config": {"every": 2}}],
            "edges": [
                {"id": "e1", "sourceNodeId": "a", "targetNodeId": "if", "condition": {"type": "expression", "expression": "x > 1"}},
                {"id": "e2", "sourceNodeId": "if", "targetNodeId": "set", "condition": {"type": "regex", "left": "branch", "right": "(("}}]});
        let r = check_workflow(&d, &opts(&reg, &kinds));
        let got: Vec<(ProblemCode, &str, Option<&str>)> = r
            .errors
            .iter()
            .map(|p| (p.code, p.pointer.as_str(), p.node_id.as_deref()))
            .collect();
        use ProblemCode::*;
        assert_eq!(
            got,
            vec![
                (NodeConfigInvalid, "/nodes/6/config", Some("loop")),
                (ExpressionUnsupported, "/edges/0/condition/type", None),
                (ConditionInvalid, "/edges/1/condition/right", None),
                (ExpressionUnsupported, "/nodes/0/inputs/x/type", Some("a")),
                (
                    ConditionInvalid,
                    "/nodes/1/config/predicate/value",
                    Some("if")
                ),
                (
                    ConditionInvalid,
                    "/nodes/2/config/routes/0/predicate/value",
                    Some("route")
                ),
                (UnknownVariable, "/nodes/3/config/name", Some("set")),
                (SensitiveVariableWrite, "/nodes/4/config/name", Some("leak")),
            ],
            "{:#?}",
            r.errors
        );
        assert!(
            r.errors[6].message.contains("declared: count, token"),
            "{}",
            r.errors[6].message
        );
        // A conditional needs exactly one of predicate / condition, and no expression.
        for bad in [
            json!({}),
            json!({"condition": {"type": "expression", "left": "x"}}),
            json!({"predicate": {"path": "x", "op": "eq"}, "condition": {"type": "truthy", "left": "x"}}),
        ] {
            let d = wf(
                "w",
                json!([{"id": "c", "typeId": "core.conditional", "config": bad}]),
            );
            let r = check_workflow(&d, &opts(&reg, &kinds));
            assert_eq!(codes(&r).first(), Some(&NodeConfigInvalid), "{bad}: {r:?}");
        }
        let ok = wf(
            "w",
            json!([{"id": "c", "typeId": "core.flow.if",
            "config": {"predicate": {"path": "x", "op": "starts-with", "value": "a"}}},
            {"id": "m", "typeId": "core.merge", "config": {"mode": "combine-by-key", "keyPath": "id"}}]),
        );
        assert!(check_workflow(&ok, &opts(&reg, &kinds)).is_valid());
        let no_key = wf(
            "w",
            json!([{"id": "m", "typeId": "core.flow.merge", "config": {"mode": "combine-by-key"}}]),
        );
        assert_eq!(
            codes(&check_workflow(&no_key, &opts(&reg, &kinds))),
            vec![NodeConfigInvalid]
        );
    }

    #[test]
    fn problem_count_is_bounded() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let nodes: Vec<Value> = (0..200)
            .map(|i| json!({"id": format!("n{i}"), "typeId": "core.nope"}))
            .collect();
        let r = check_workflow(&wf("w", Value::Array(nodes)), &opts(&reg, &kinds));
        assert_eq!(r.errors.len(), MAX_PROBLEMS + 1);
        assert_eq!(r.errors[MAX_PROBLEMS].code, ProblemCode::TooManyProblems);
    }

    #[test]
    fn custom_node_type_schema_is_enforced() {
        let mut reg = NodeRegistry::builtin();
        reg.register_with_schema(
            "vendor.acme.fetch",
            &json!({"type": "object", "required": ["url"],
            "properties": {"url": {"type": "string"}}, "additionalProperties": false}),
        )
        .unwrap();
        let kinds = BTreeSet::new();
        let r = check_workflow(
            &wf(
                "w",
                json!([{"id": "f", "typeId": "vendor.acme.fetch", "config": {}}]),
            ),
            &opts(&reg, &kinds),
        );
        assert_eq!(codes(&r), vec![ProblemCode::NodeConfigInvalid]);
        assert!(
            r.errors[0]
                .message
                .starts_with("config of vendor.acme.fetch:"),
            "{}",
            r.errors[0].message
        );
    }

    #[test]
    fn a_sub_workflow_config_is_checked_at_registration_naming_node_and_field() {
        let reg = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let call = |config: Value| {
            check_workflow(
                &wf(
                    "w",
                    json!([{"id": "call", "typeId": "core.subWorkflow", "config": config}]),
                ),
                &opts(&reg, &kinds),
            )
        };
        // The conformance fixtures' shape passes, inputMapping included.
        let r = call(json!({"workflowId": "child", "waitForCompletion": true,
                            "inputMapping": {"receivedPrdId": "currentPrdId"},
                            "outputMapping": {"childOutcome": "childResult"}}));
        assert!(r.is_valid(), "{:?}", r.errors);
        for (config, pointer, says) in [
            (json!({}), "/nodes/0/config/workflowId", "required"),
            (
                json!({"workflowId": "c", "inputMapping": {"a": 1}}),
                "/nodes/0/config/inputMapping",
                "variable name → variable name",
            ),
            (
                json!({"workflowId": "c", "inputMapping": ["a"]}),
                "/nodes/0/config/inputMapping",
                "variable name → variable name",
            ),
            (
                json!({"workflowId": "c", "outputMapping": {"a": null}}),
                "/nodes/0/config/outputMapping",
                "variable name → variable name",
            ),
            (
                json!({"workflowId": "c", "waitForCompletion": false}),
                "/nodes/0/config/waitForCompletion",
                "not supported",
            ),
            (
                json!({"workflowId": "c", "onChildFailure": "ignore"}),
                "/nodes/0/config/onChildFailure",
                "fail-parent or absorb",
            ),
        ] {
            let r = call(config.clone());
            assert_eq!(codes(&r), vec![ProblemCode::NodeConfigInvalid], "{config}");
            let p = &r.errors[0];
            assert_eq!(p.node_id.as_deref(), Some("call"), "{config}");
            assert_eq!(p.pointer, pointer, "{config}");
            assert!(p.message.contains(says), "{config}: {}", p.message);
            assert!(!p.message.starts_with("node "), "said once: {p}");
        }
    }

    #[test]
    fn header_secrets_must_be_declared_by_the_workflow() {
        let def = json!({"nodes": [
            {"id": "a", "typeId": "core.noop", "config": {"headers": {"X": "{{secrets.nope}}"}}},
            {"id": "b", "typeId": http::FETCH_TYPE_ID, "config": {"url": "https://x.example/",
                "headers": {"Authorization": "Bearer {{secrets.tok}}", "X-Other": "{{secrets.other}}"}}},
            {"id": "c", "typeId": http::REQUEST_TYPE_ID, "config": {"url": 1, "headers": {"X": "{{secrets.bad}}"}}}
        ]});
        let problems = secret_problems(&def, &["tok"]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].pointer, "/nodes/1/config/headers/X-Other");
        assert_eq!(problems[0].node_id.as_deref(), Some("b"));
        assert!(
            problems[0].message.contains("{{secrets.other}}"),
            "{}",
            problems[0].message
        );
        assert!(secret_problems(&def, &["tok", "other"]).is_empty());
        let twice = secret_problems(&def, &["tok", "other", "tok"]);
        assert_eq!(twice.len(), 1, "{twice:?}");
        assert_eq!(twice[0].pointer, "/secrets/2/name");
    }
}
