//! One fleet as the commands see it: its spec, its runtime, its state dir and its templates,
//! built once where a command starts (`cli/`) and passed down, so no module below rebuilds
//! them (or picks its own runtime).

use std::path::{Path, PathBuf};

use crate::render::Templates;
use crate::spec::Spec;
use crate::state::FleetDir;
use crate::world::{self, Runtime, SharedRuntime};

pub struct FleetContext {
    /// The phoenix.toml the spec was loaded from.
    pub config: PathBuf,
    pub spec: Spec,
    pub runtime: SharedRuntime,
    pub dir: FleetDir,
    pub templates: Templates,
}

impl FleetContext {
    /// The fleet of `spec` on its own runtime.
    pub fn new(config: &Path, spec: Spec) -> FleetContext {
        let runtime = world::runtime_for(&spec);
        FleetContext::with_runtime(config, spec, runtime)
    }

    /// The fleet of `spec` on `runtime` (the fake one, in tests).
    pub fn with_runtime(config: &Path, spec: Spec, runtime: SharedRuntime) -> FleetContext {
        FleetContext {
            config: config.to_path_buf(),
            dir: FleetDir::new(&spec.fleet.state_dir),
            templates: Templates::for_spec(&spec),
            runtime,
            spec,
        }
    }

    pub fn runtime(&self) -> &dyn Runtime {
        &*self.runtime
    }
}
