//! MCP tool servers declared as `ToolServer` resources (issue #42), the operator's half:
//!
//! * [`headers`] — a ToolServer's request headers from its Secrets (one GET per Secret, the
//!   values never printed): the reconciler's listing uses them, and so does a run start that
//!   copies them for the worker;
//! * [`reconcile`] — the reconciler: lists the server's tools with the MCP client and
//!   reports them with `Ready` (reasons `crds::toolserver::REASON_*`) and Events;
//! * [`usable`] — which ToolServers a Workflow in a namespace may use, and by which name
//!   (the tool catalog's rule).
//!
//! The controller is started by `app` on the leader, following the process's one watch of
//! ToolServers (`controller::Feed`), whose store the REST API's catalog also reads.

pub mod headers;
pub mod reconcile;
pub mod usable;

pub use headers::{HeaderError, HeaderValueBytes, ResolvedHeaders, resolve};
pub use reconcile::{ToolServerContext, ToolServerError, error_policy, reconcile_tool_server};
pub use usable::{is_ready, needs_labels, usable_in};
