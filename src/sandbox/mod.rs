//! Sandboxed agents: the network of `network = "allow"` (the proxy outside, the relay inside).

pub mod proxy;
pub mod relay;
