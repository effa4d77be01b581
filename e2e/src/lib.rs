//! Local mini-cluster helpers for tests.
