//! The `Workflow` and `Run` custom resources (group `openwop.dev`, version `v1alpha1`).
