//! The JSON Schemas the system validates with, embedded at compile time.
//!
//! Every document under `schemas/` is compiled into the binary with `include_str!`, parsed once,
//! registered by its `$id` in one shared [`Registry`] (so `$ref`s between our documents resolve
//! without network or filesystem), and compiled once into a cached validator per document, per
//! envelope kind and per run-event type — each on its first use, so a process compiles only
//! the schemas it validates with (a worker run uses a few of the fifty; compiling every one
//! of them was 93 % of the instructions of a two-node run).
//!
//! Validation failures are reported as [`ValidationIssue`]s whose `message` is built from the
//! failed keyword and the schema's own constants — never from jsonschema's `Display`, which
//! echoes instance values (model text, possibly secrets).

use std::fmt::Write as _;
use std::sync::{LazyLock, OnceLock};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Draft, Registry, ValidationError, ValidationOptions, Validator};
use serde_json::Value;

/// Base of every embedded schema's `$id`.
pub const SCHEMA_ID_BASE: &str = "https://openwop.dev/schemas/v1/";

/// Version advertised in `Capabilities.schemaVersions` for every kind with an embedded schema.
const KIND_SCHEMA_VERSION: u32 = 1;

/// At most this many issues are reported per validation; enough to correct a payload, bounded
/// so a hostile document cannot make the report arbitrarily large.
pub const MAX_ISSUES: usize = 32;

/// Deepest nesting accepted for an instance or a user-supplied schema. Checked iteratively
/// before the (recursive) validator runs, so hostile nesting yields an issue, not a stack overflow.
pub const MAX_DEPTH: usize = 128;

/// Longest property name quoted in a message; longer or non-identifier names are withheld.
const MAX_QUOTED_NAME: usize = 64;

/// Longest rendering of a schema constant (enum options, const value) inside a message.
const MAX_CONSTANT_CHARS: usize = 256;

/// One reason a document failed its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationIssue {
    /// JSON Pointer (RFC 6901) to the offending value; `""` is the document root.
    pub instance_path: String,
    /// The JSON Schema keyword that failed, e.g. `required`, `type`, `additionalProperties`.
    pub keyword: String,
    /// What was wrong, built from the keyword and schema constants; never contains instance values.
    pub message: String,
}

impl std::fmt::Display for ValidationIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.instance_path.is_empty() {
            "(root)"
        } else {
            &self.instance_path
        };
        write!(f, "{at}: {}", self.message)
    }
}

/// The top-level documents with an embedded schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Document {
    /// An inbound AI envelope (top level and `meta`; the payload is checked per kind).
    AiEnvelope,
    /// An outbound `RunEventDoc`, including its payload for the event types we emit.
    RunEvent,
    /// The discovery document served at `/.well-known/openwop`.
    Capabilities,
    /// An OpenWOP workflow definition.
    WorkflowDefinition,
    /// The closed config of the `core.conformance.mock-agent` node type (RFC 0023).
    MockAgentConfig,
}

impl Document {
    /// Every document, for iteration.
    pub const ALL: [Document; 5] = [
        Document::AiEnvelope,
        Document::RunEvent,
        Document::Capabilities,
        Document::WorkflowDefinition,
        Document::MockAgentConfig,
    ];

    /// Path of the document's schema under `schemas/`.
    pub fn schema_path(self) -> &'static str {
        match self {
            Document::AiEnvelope => "ai-envelope.schema.json",
            Document::RunEvent => "run-event.schema.json",
            Document::Capabilities => "capabilities.schema.json",
            Document::WorkflowDefinition => "workflow-definition.schema.json",
            Document::MockAgentConfig => "mock-agent-config.schema.json",
        }
    }

    /// The parsed schema of the document.
    pub fn schema(self) -> &'static Value {
        &embedded_by_path(self.schema_path()).value
    }
}

/// A user-supplied schema failed to compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaCompileError {
    /// The schema nests deeper than [`MAX_DEPTH`].
    #[error("schema nests deeper than {max_depth} levels; flatten it or move parts into $defs")]
    TooDeep { max_depth: usize },
    /// The schema is not a valid JSON Schema (checked against its draft's meta-schema).
    #[error(
        "schema is not a valid JSON Schema at {}: {message}",
        if pointer.is_empty() { "(root)" } else { pointer.as_str() }
    )]
    Invalid {
        /// JSON Pointer into the schema.
        pointer: String,
        keyword: String,
        message: String,
    },
    /// A `$ref` points outside the schema and the embedded OpenWOP schemas; nothing is fetched.
    #[error(
        "schema reference cannot be resolved ({detail}); references may only target the schema itself or the embedded OpenWOP schemas, nothing is fetched"
    )]
    UnresolvedReference { detail: String },
}

/// A compiled user-supplied schema (a workflow `outputSchema`, a vendor envelope schema).
pub struct CompiledSchema {
    validator: Validator,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema").finish_non_exhaustive()
    }
}

impl CompiledSchema {
    /// Validates `instance`; on failure returns at most [`MAX_ISSUES`] issues.
    pub fn validate(&self, instance: &Value) -> Result<(), Vec<ValidationIssue>> {
        run_validator(&self.validator, instance)
    }
}

/// Compiles a user-supplied schema. Remote and file references are never fetched; `$ref`s may
/// target the schema itself or any embedded OpenWOP schema by its `$id`. A schema without
/// `$schema` is read as draft 2020-12. Formats are asserted.
pub fn compile(schema: &Value) -> Result<CompiledSchema, SchemaCompileError> {
    if depth_exceeds(schema, MAX_DEPTH) {
        return Err(SchemaCompileError::TooDeep {
            max_depth: MAX_DEPTH,
        });
    }
    let validator = base_options()
        .with_registry(&REGISTRY)
        .build(schema)
        .map_err(|err| compile_error(&err))?;
    Ok(CompiledSchema { validator })
}

/// Validates a top-level document against its embedded schema.
pub fn validate(doc: Document, value: &Value) -> Result<(), Vec<ValidationIssue>> {
    let i = Document::ALL
        .iter()
        .position(|d| *d == doc)
        .expect("Document::ALL lists every document");
    run_validator(DOCUMENT_VALIDATORS.get(i), value)
}

/// Kinds with an embedded payload schema: the four universal kinds and `media.image|audio|file`.
pub fn known_kinds() -> &'static [&'static str] {
    KINDS
}

pub use crate::envelope::UNIVERSAL_KINDS;

/// Kinds with an embedded payload schema: the universal kinds, then the media kinds.
const KINDS: &[&str] = &{
    use crate::envelope::MEDIA_KINDS as M;
    let u = UNIVERSAL_KINDS;
    [u[0], u[1], u[2], u[3], M[0], M[1], M[2]]
};

/// The payload schema version advertised for `kind` in `Capabilities.schemaVersions`.
pub fn kind_schema_version(kind: &str) -> Option<u32> {
    KINDS.contains(&kind).then_some(KIND_SCHEMA_VERSION)
}

/// The embedded payload schema of `kind`, served at `/schemas/envelopes/{kind}.schema.json`.
pub fn kind_payload_schema(kind: &str) -> Option<&'static Value> {
    if !KINDS.contains(&kind) {
        return None;
    }
    Some(&embedded_by_path(&kind_schema_path(kind)).value)
}

/// Validates an envelope payload against its kind's schema; `None` when the kind has none.
pub fn validate_kind_payload(
    kind: &str,
    payload: &Value,
) -> Option<Result<(), Vec<ValidationIssue>>> {
    // Seven names: a scan is cheaper than hashing the kind.
    KINDS
        .iter()
        .position(|k| *k == kind)
        .map(|i| run_validator(KIND_VALIDATORS.get(i), payload))
}

/// Run-event types this project emits; each has `events/<type>.schema.json`.
pub const EVENT_TYPES: &[&str] = &[
    "run.started",
    "run.completed",
    "run.failed",
    "run.cancelled",
    "run.resumed",
    "run.paused",
    "node.started",
    "node.completed",
    "node.failed",
    "node.suspended",
    "node.resumed",
    "node.skipped",
    "variable.changed",
    "node.dispatched",
    "clarification.requested",
    "clarification.resolved",
    "interrupt.requested",
    "interrupt.resolved",
    "approval.requested",
    "approval.granted",
    "approval.rejected",
    "approval.received",
    "log.appended",
    "cap.breached",
    "prompt.composed",
    "provider.usage",
    "agent.reasoned",
    "agent.reasoning.delta",
    "agent.toolCalled",
    "agent.toolReturned",
    "agent.handoff",
    "agent.decided",
    "envelope.retry.attempted",
    "envelope.retry.exhausted",
    "envelope.refusal",
    "envelope.truncated",
    "envelope.nlToFormat.engaged",
    "envelope.recovery.applied",
    "replay.diverged",
];

/// The embedded payload schema of a run-event type.
pub fn event_payload_schema(event_type: &str) -> Option<&'static Value> {
    if !EVENT_TYPES.contains(&event_type) {
        return None;
    }
    Some(&embedded_by_path(&event_schema_path(event_type)).value)
}

/// Validates a run-event payload against its type's schema; `None` for a type we do not emit.
pub fn validate_event_payload(
    event_type: &str,
    payload: &Value,
) -> Option<Result<(), Vec<ValidationIssue>>> {
    let i = EVENT_TYPES.iter().position(|t| *t == event_type)?;
    Some(run_validator(EVENT_VALIDATORS.get(i), payload))
}

/// One embedded schema document.
#[derive(Debug)]
pub struct EmbeddedSchema {
    /// Path under `schemas/`, e.g. `envelopes/error.schema.json`.
    pub path: &'static str,
    /// The document's `$id`.
    pub id: String,
    /// The file text as shipped (for serving byte-exact with a stable ETag).
    pub text: &'static str,
    /// The parsed document.
    pub value: Value,
}

/// Every embedded schema, in a stable order.
pub fn embedded_schemas() -> &'static [EmbeddedSchema] {
    &EMBEDDED
}

/// Looks an embedded schema up by its `$id`.
pub fn embedded_schema_by_id(id: &str) -> Option<&'static EmbeddedSchema> {
    EMBEDDED.iter().find(|schema| schema.id == id)
}

/// Which schemas this build validates with: FNV-1a (64-bit) over every embedded schema's path
/// and text, computed at compile time. Two builds with the same digest validate a document
/// alike, so a document one of them checked need not be checked by the other: the operator
/// records it on each snapshot it checked (`RunSnapshot::workflow_checked`), and a worker of
/// the same schemas skips compiling the workflow-definition schema, most of a worker's
/// start-up CPU. Not a security boundary: whoever can write the snapshot can run anything.
pub const SCHEMAS_DIGEST: u64 = {
    let mut h = FNV_OFFSET;
    let mut i = 0;
    while i < SOURCES.len() {
        h = fnv1a(h, SOURCES[i].0.as_bytes());
        h = fnv1a(h, SOURCES[i].1.as_bytes());
        i += 1;
    }
    h
};

/// FNV-1a's 64-bit offset basis: the digest of nothing.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a (64-bit) of `bytes`, continuing from `h`: `const`, so [`SCHEMAS_DIGEST`] costs no
/// run time. A digest for telling versions apart, not against forgery.
pub(crate) const fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

macro_rules! embed {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../../schemas/", $path)))),*]
    };
}

const SOURCES: &[(&str, &str)] = embed!(
    "ai-envelope.schema.json",
    "envelopes/clarification.request.schema.json",
    "envelopes/schema.request.schema.json",
    "envelopes/schema.response.schema.json",
    "envelopes/error.schema.json",
    "envelopes/media.image.schema.json",
    "envelopes/media.audio.schema.json",
    "envelopes/media.file.schema.json",
    "run-event.schema.json",
    "events/run.started.schema.json",
    "events/run.completed.schema.json",
    "events/run.failed.schema.json",
    "events/run.cancelled.schema.json",
    "events/run.resumed.schema.json",
    "events/run.paused.schema.json",
    "events/node.started.schema.json",
    "events/node.completed.schema.json",
    "events/node.failed.schema.json",
    "events/node.suspended.schema.json",
    "events/node.resumed.schema.json",
    "events/node.skipped.schema.json",
    "events/variable.changed.schema.json",
    "events/node.dispatched.schema.json",
    "events/clarification.requested.schema.json",
    "events/clarification.resolved.schema.json",
    "events/interrupt.requested.schema.json",
    "events/interrupt.resolved.schema.json",
    "events/approval.requested.schema.json",
    "events/approval.granted.schema.json",
    "events/approval.rejected.schema.json",
    "events/approval.received.schema.json",
    "events/log.appended.schema.json",
    "events/cap.breached.schema.json",
    "events/prompt.composed.schema.json",
    "events/provider.usage.schema.json",
    "events/agent.reasoned.schema.json",
    "events/agent.reasoning.delta.schema.json",
    "events/agent.toolCalled.schema.json",
    "events/agent.toolReturned.schema.json",
    "events/agent.handoff.schema.json",
    "events/agent.decided.schema.json",
    "events/envelope.retry.attempted.schema.json",
    "events/envelope.retry.exhausted.schema.json",
    "events/envelope.refusal.schema.json",
    "events/envelope.truncated.schema.json",
    "events/envelope.nlToFormat.engaged.schema.json",
    "events/envelope.recovery.applied.schema.json",
    "events/replay.diverged.schema.json",
    "capabilities.schema.json",
    "workflow-definition.schema.json",
    "mock-agent-config.schema.json",
);

// The embedded files are part of this crate's source and are checked by its tests, so a parse
// failure here is a build defect, not bad input.
static EMBEDDED: LazyLock<Vec<EmbeddedSchema>> = LazyLock::new(|| {
    SOURCES
        .iter()
        .map(|&(path, text)| {
            let value: Value = serde_json::from_str(text)
                .unwrap_or_else(|err| panic!("embedded schema {path} is not valid JSON: {err}"));
            let id = value
                .get("$id")
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("embedded schema {path} has no string $id"))
                .to_owned();
            EmbeddedSchema {
                path,
                id,
                text,
                value,
            }
        })
        .collect()
});

static REGISTRY: LazyLock<Registry<'static>> = LazyLock::new(|| {
    Registry::new()
        .draft(Draft::Draft202012)
        .extend(
            EMBEDDED
                .iter()
                .map(|schema| (schema.id.as_str(), &schema.value)),
        )
        .and_then(|builder| builder.prepare())
        .unwrap_or_else(|err| panic!("embedded schemas do not form a valid registry: {err}"))
});

/// Path under `schemas/` of an envelope kind's payload schema.
fn kind_schema_path(kind: &str) -> String {
    format!("envelopes/{kind}.schema.json")
}

/// Path under `schemas/` of a run-event type's payload schema.
fn event_schema_path(event_type: &str) -> String {
    format!("events/{event_type}.schema.json")
}

/// One validator per entry of a list of embedded schemas, each compiled on its first use.
struct Validators<const N: usize> {
    /// Path under `schemas/` of entry `i`'s schema.
    path: fn(usize) -> String,
    slots: [OnceLock<Validator>; N],
}

impl<const N: usize> Validators<N> {
    const fn new(path: fn(usize) -> String) -> Self {
        Validators {
            path,
            slots: [const { OnceLock::new() }; N],
        }
    }

    /// The validator of entry `i`.
    fn get(&self, i: usize) -> &Validator {
        self.slots[i].get_or_init(|| build_embedded(&(self.path)(i)))
    }
}

/// One validator per entry of [`Document::ALL`], same order.
static DOCUMENT_VALIDATORS: Validators<{ Document::ALL.len() }> =
    Validators::new(|i| Document::ALL[i].schema_path().to_owned());

/// One validator per entry of [`KINDS`], same order.
static KIND_VALIDATORS: Validators<{ KINDS.len() }> =
    Validators::new(|i| kind_schema_path(KINDS[i]));

/// One validator per entry of [`EVENT_TYPES`], same order.
static EVENT_VALIDATORS: Validators<{ EVENT_TYPES.len() }> =
    Validators::new(|i| event_schema_path(EVENT_TYPES[i]));

fn embedded_by_path(path: &str) -> &'static EmbeddedSchema {
    EMBEDDED
        .iter()
        .find(|schema| schema.path == path)
        .unwrap_or_else(|| panic!("schema {path} is not embedded"))
}

/// Options shared by every validator: formats asserted, nothing ever fetched.
fn base_options() -> ValidationOptions<'static> {
    jsonschema::options()
        .should_validate_formats(true)
        .offline()
}

fn build_embedded(path: &str) -> Validator {
    let schema = embedded_by_path(path);
    base_options()
        .with_draft(Draft::Draft202012)
        .with_registry(&REGISTRY)
        .build(&schema.value)
        .unwrap_or_else(|err| {
            let err = compile_error(&err);
            panic!("embedded schema {path} does not compile: {err}")
        })
}

fn run_validator(validator: &Validator, instance: &Value) -> Result<(), Vec<ValidationIssue>> {
    if depth_exceeds(instance, MAX_DEPTH) {
        return Err(vec![ValidationIssue {
            instance_path: String::new(),
            keyword: "maxDepth".to_owned(),
            message: format!("document nests deeper than {MAX_DEPTH} levels and was not validated"),
        }]);
    }
    // Most documents are valid: the boolean walk is much cheaper than building
    // error objects, which are only collected when it fails.
    if validator.is_valid(instance) {
        return Ok(());
    }
    let issues: Vec<ValidationIssue> = validator
        .iter_errors(instance)
        .take(MAX_ISSUES)
        .map(|err| issue_from(&err))
        .collect();
    if issues.is_empty() {
        Ok(())
    } else {
        Err(issues)
    }
}

fn compile_error(err: &ValidationError<'_>) -> SchemaCompileError {
    match err.kind() {
        ValidationErrorKind::Referencing(inner) => SchemaCompileError::UnresolvedReference {
            detail: inner.to_string(),
        },
        _ => {
            let issue = issue_from(err);
            SchemaCompileError::Invalid {
                pointer: issue.instance_path,
                keyword: issue.keyword,
                message: issue.message,
            }
        }
    }
}

fn issue_from(err: &ValidationError<'_>) -> ValidationIssue {
    ValidationIssue {
        instance_path: err.instance_path().as_str().to_owned(),
        keyword: err.kind().keyword().to_owned(),
        message: describe(err.kind(), err.instance()),
    }
}

/// Builds the message for one failure. Only the instance's JSON *type* is read from the
/// instance; every other detail comes from the schema.
fn describe(kind: &ValidationErrorKind, instance: &Value) -> String {
    match kind {
        ValidationErrorKind::AdditionalItems { limit } => format!(
            "must have at most {limit} {}",
            plural(*limit as u64, "item", "items")
        ),
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            not_allowed_properties(unexpected)
        }
        ValidationErrorKind::UnevaluatedItems { .. } => {
            "has array items that no schema allows".to_owned()
        }
        ValidationErrorKind::AnyOf { .. } => {
            "does not match any of the allowed alternatives".to_owned()
        }
        ValidationErrorKind::OneOfNotValid { .. } => {
            "does not match any of the alternatives (exactly one must match)".to_owned()
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            "matches more than one of the alternatives (exactly one must match)".to_owned()
        }
        ValidationErrorKind::BacktrackLimitExceeded { .. }
        | ValidationErrorKind::RegexEngineFailure { .. } => {
            "could not be checked against its pattern (regular-expression engine limit)".to_owned()
        }
        ValidationErrorKind::Pattern { pattern } => {
            format!("must match the pattern {}", quote_constant(pattern))
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("must be exactly {}", render_constant(expected_value))
        }
        ValidationErrorKind::Contains => "must contain at least one matching item".to_owned(),
        ValidationErrorKind::ContentEncoding { content_encoding } => {
            format!("must be valid {content_encoding}-encoded content")
        }
        ValidationErrorKind::FromUtf8 { .. } => "decoded content is not valid UTF-8".to_owned(),
        ValidationErrorKind::ContentMediaType { content_media_type } => {
            format!("must be valid {content_media_type} content")
        }
        ValidationErrorKind::Custom { keyword, .. } => format!("failed the {keyword} check"),
        ValidationErrorKind::Enum { options } => {
            format!("must be one of: {}", render_options(options))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("must be less than {}", render_constant(limit))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("must be greater than {}", render_constant(limit))
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("must be at most {}", render_constant(limit))
        }
        ValidationErrorKind::Minimum { limit } => {
            format!("must be at least {}", render_constant(limit))
        }
        ValidationErrorKind::MultipleOf { multiple_of } => {
            format!("must be a multiple of {multiple_of}")
        }
        ValidationErrorKind::FalseSchema => "no value is allowed here".to_owned(),
        ValidationErrorKind::Format { format } => {
            format!("must be a valid {}", format_name(format))
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!(
                "must have at most {limit} {}",
                plural(*limit, "item", "items")
            )
        }
        ValidationErrorKind::MinItems { limit } => {
            format!(
                "must have at least {limit} {}",
                plural(*limit, "item", "items")
            )
        }
        ValidationErrorKind::MaxLength { limit } => format!(
            "must be at most {limit} {} long",
            plural(*limit, "character", "characters")
        ),
        ValidationErrorKind::MinLength { limit } => format!(
            "must be at least {limit} {} long",
            plural(*limit, "character", "characters")
        ),
        ValidationErrorKind::MaxProperties { limit } => format!(
            "must have at most {limit} {}",
            plural(*limit, "property", "properties")
        ),
        ValidationErrorKind::MinProperties { limit } => format!(
            "must have at least {limit} {}",
            plural(*limit, "property", "properties")
        ),
        ValidationErrorKind::Not { .. } => "must not match the excluded schema".to_owned(),
        ValidationErrorKind::PropertyNames { error } => format!(
            "has a property name that is not allowed: it {}",
            describe(error.kind(), error.instance())
        ),
        ValidationErrorKind::Required { property } => match property.as_str() {
            Some(name) => format!("missing required property {}", quote_constant(name)),
            None => "missing a required property".to_owned(),
        },
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(ty) => ty.to_string(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|ty| ty.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            format!(
                "expected type {expected}, found {}",
                json_type_name(instance)
            )
        }
        ValidationErrorKind::UniqueItems => "array items must be unique".to_owned(),
        ValidationErrorKind::Referencing(_) => {
            "could not be checked: a schema reference does not resolve".to_owned()
        }
    }
}

fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// Human names for the formats our schemas use; others are quoted as written in the schema.
fn format_name(format: &str) -> String {
    match format {
        "date-time" => "date-time (RFC 3339, e.g. 2026-01-31T12:00:00Z)".to_owned(),
        "uri" => "absolute URI".to_owned(),
        other => format!("{} value", quote_constant(other)),
    }
}

/// Unexpected property names come from the instance: quote only short identifier-like names
/// (a field name the author typed), withhold anything that could be free text or a secret.
fn not_allowed_properties(names: &[String]) -> String {
    let mut shown: Vec<String> = Vec::new();
    let mut withheld = 0usize;
    for name in names {
        if is_quotable_name(name) {
            shown.push(format!("\"{name}\""));
        } else {
            withheld += 1;
        }
    }
    let mut out = String::new();
    match shown.len() {
        0 => {}
        1 => {
            let _ = write!(out, "property {} is not allowed", shown[0]);
        }
        _ => {
            let _ = write!(out, "properties {} are not allowed", shown.join(", "));
        }
    }
    if withheld > 0 {
        if !out.is_empty() {
            out.push_str("; ");
        }
        let _ = write!(
            out,
            "{withheld} {}",
            plural(
                withheld as u64,
                "unexpected property (name withheld) is not allowed",
                "unexpected properties (names withheld) are not allowed"
            )
        );
    }
    if out.is_empty() {
        out.push_str("has properties that are not allowed");
    }
    out.push_str(" (the object is closed)");
    out
}

fn is_quotable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_QUOTED_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'$' | b'@'))
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn quote_constant(s: &str) -> String {
    truncate(format!("\"{s}\""))
}

fn truncate(s: String) -> String {
    crate::text::truncate(&s, MAX_CONSTANT_CHARS)
}

/// Enum options as `a, b, c`: strings bare, other values as JSON.
fn render_options(options: &Value) -> String {
    match options {
        Value::Array(items) => truncate(
            items
                .iter()
                .map(|item| match item {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", "),
        ),
        other => render_constant(other),
    }
}

fn render_constant(value: &Value) -> String {
    truncate(value.to_string())
}

/// True when `value` nests deeper than `max` containers. Iterative, so it is safe on any input.
fn depth_exceeds(value: &Value, max: usize) -> bool {
    // Recursion over containers only (leaves add no depth); it stops one level
    // past `max`, so the stack stays bounded, and nothing is allocated.
    fn deeper(v: &Value, depth: usize, max: usize) -> bool {
        match v {
            Value::Array(items) => depth > max || items.iter().any(|c| deeper(c, depth + 1, max)),
            Value::Object(map) => depth > max || map.values().any(|c| deeper(c, depth + 1, max)),
            _ => false,
        }
    }
    deeper(value, 1, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Validators compile on first use: every embedded schema still must compile (a broken
    /// one would otherwise surface only when its document first comes by).
    #[test]
    fn every_validator_compiles_and_compiles_once() {
        fn each<const N: usize>(validators: &Validators<N>, group: &str) {
            for i in 0..N {
                let first: *const Validator = validators.get(i);
                let again: *const Validator = validators.get(i);
                assert_eq!(first, again, "{group} {i} compiled twice");
            }
        }
        each(&DOCUMENT_VALIDATORS, "document");
        each(&KIND_VALIDATORS, "kind");
        each(&EVENT_VALIDATORS, "event type");
    }

    #[test]
    fn depth_guard_counts_containers_only() {
        assert!(!depth_exceeds(&json!("leaf"), 0));
        assert!(!depth_exceeds(&json!({"a": [1]}), 2));
        assert!(depth_exceeds(&json!({"a": [1]}), 1));
        let mut deep = json!(0);
        for _ in 0..(MAX_DEPTH + 1) {
            deep = json!([deep]);
        }
        assert!(depth_exceeds(&deep, MAX_DEPTH));
    }

    #[test]
    fn quotable_names_exclude_free_text() {
        assert!(is_quotable_name("questions"));
        assert!(is_quotable_name("x-host_1.a"));
        assert!(!is_quotable_name("secret:abc"));
        assert!(!is_quotable_name("has space"));
        assert!(!is_quotable_name(&"a".repeat(MAX_QUOTED_NAME + 1)));
        assert!(!is_quotable_name(""));
    }

    #[test]
    fn integer_and_number_are_named_apart() {
        assert_eq!(json_type_name(&json!(3)), "integer");
        assert_eq!(json_type_name(&json!(3.5)), "number");
        assert_eq!(json_type_name(&json!(null)), "null");
    }

    #[test]
    fn long_constants_are_truncated() {
        let long = "x".repeat(MAX_CONSTANT_CHARS * 2);
        let rendered = quote_constant(&long);
        assert_eq!(rendered.chars().count(), MAX_CONSTANT_CHARS + 1);
        assert!(rendered.ends_with('…'));
    }

    #[test]
    fn enum_options_render_strings_bare() {
        assert_eq!(render_options(&json!(["a", 1, null])), "a, 1, null");
    }

    #[test]
    fn withheld_names_are_counted_not_echoed() {
        let msg = not_allowed_properties(&["ok".to_owned(), "secret:value here".to_owned()]);
        assert!(msg.contains("\"ok\""), "{msg}");
        assert!(
            msg.contains("1 unexpected property (name withheld) is not allowed"),
            "{msg}"
        );
        assert!(!msg.contains("secret:value"), "{msg}");
    }
}
