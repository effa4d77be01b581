//! The local mini-cluster: the node agent (`openwop-node-agent`) and the helper tests use to
//! start or attach to the cluster (`cluster()`). See e2e/README.md.

pub mod agent;
pub mod cluster;

pub use cluster::{Cluster, ClusterError, ClusterOptions, cluster, cluster_with};
