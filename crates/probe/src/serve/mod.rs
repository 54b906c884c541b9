//! The engine in front of a service's own traffic, each behind a feature so that an embedder
//! that needs neither pulls in no tower or tonic:
//! - `grpc` (feature `grpc`): `grpc.health.v1` (`Check`, `Watch`) answered from the engine's
//!   verdicts and the readiness gate, for Kubernetes `grpc:` probes and gRPC load balancers;
//! - `balance` (feature `tower`): a client-side balancer layer over one of the engine's pools:
//!   weighted picks, fail-fast on open circuits, every outcome reported back, and retries on
//!   another member within a budget.

#[cfg(feature = "tower")]
pub mod balance;
#[cfg(feature = "grpc")]
pub mod grpc;
