//! The local stack (SPEC §10): moto on loopback standing in for AWS, the
//! resources of `template.yaml` created on it, and a Lambda Runtime API
//! emulator that runs the real function binaries. The README's main job and
//! the tests both stand on this crate.

pub mod aws;
pub mod backend;
pub mod conformance;
pub mod converse;
pub mod dispatcher;
pub mod everything;
pub mod faults;
pub mod handwritten;
pub mod invoke;
pub mod mcp_fixture;
pub mod moto;
pub mod otlp;
pub mod pipe;
pub mod python_mcp;
pub mod runtime;
pub mod stack;
pub mod strict;
pub mod tls;

pub use aws::{LocalAws, item_json, sdk_config};
pub use moto::{Moto, REGION};
pub use stack::{STACK, Stack, StackNames};
