//! The library's one error type: what went wrong, the exit code it means and a hint. Every
//! library entry point the CLI calls returns it; `cli/` prints it in exactly one place.
//!
//! The layers keep their own enums (`spec::LoadError`, `world::RuntimeError`, …) as precise
//! sources; they convert into [`Error`] with `From`, so `?` works across layers. This module
//! sits at the bottom: it names only the bottom layers' enums, and the upper layers convert
//! their own errors in their own files (else every room would import every other).

use std::error::Error as StdError;
use std::fmt;

/// The exit codes `phoenix --help` documents.
pub mod exit {
    /// Success, or nothing to do.
    pub const OK: i32 = 0;
    /// An error: invalid config, a failed step, a failed check.
    pub const ERROR: i32 = 1;
    /// `plan`: changes pending.
    pub const CHANGES_PENDING: i32 = 2;
    /// `status`: a declared agent is down, stopped or in safe mode.
    pub const NOT_RUNNING: i32 = 3;
    /// sysexits.h's EX_USAGE: not 2, which `plan` uses for "changes pending", so a script can
    /// tell a typo in its own command line from a fleet that needs an apply.
    pub const USAGE: i32 = 64;
}

/// A boxed error from another crate or layer, kept whole as the source of a [`Error::Context`].
pub type Source = Box<dyn StdError + Send + Sync + 'static>;

/// The error enum, its transparent wrapping of each layer's own error and the `From` of that
/// error, from one list of the layers (so a layer is added in one place).
macro_rules! errors_of_layers {
    ($($(#[$doc:meta])* $variant:ident($ty:ty)),* $(,)?) => {
        #[derive(Debug)]
        pub enum Error {
            $($(#[$doc])* $variant($ty),)*
            /// An upper layer's own error (`continuity::inject::InjectError`, …), kept whole:
            /// its module converts it (this one stays at the bottom of the imports).
            Layer(Source),
            /// A step failed; `message` says what, `hint` what to do about it.
            Failed {
                message: String,
                hint: Option<String>,
            },
            /// The command line asks for something that cannot be: a usage error.
            Usage {
                message: String,
            },
            /// `context` is what was being done when `source` happened.
            Context {
                context: String,
                source: Source,
            },
        }

        impl Error {
            /// The layer's own error a wrapping variant stands for (its message and sources
            /// are that error's: the wrapper is transparent).
            fn inner(&self) -> Option<&(dyn StdError + 'static)> {
                Some(match self {
                    $(Error::$variant(e) => e,)*
                    Error::Layer(e) => &**e,
                    Error::Failed { .. } | Error::Usage { .. } | Error::Context { .. } => {
                        return None;
                    }
                })
            }
        }

        $(impl From<$ty> for Error {
            fn from(e: $ty) -> Error {
                Error::$variant(e)
            }
        })*
    };
}

errors_of_layers!(
    /// phoenix.toml could not be read or is invalid (diagnostics with file:line:column).
    Load(crate::spec::LoadError),
    /// The runtime the agents run in failed.
    Runtime(crate::world::RuntimeError),
    State(crate::state::store::StateError),
    Lock(crate::state::lock::LockError),
    Read(crate::state::bounded::ReadError),
    Store(crate::store::StoreError),
    Render(crate::render::Error),
    Policy(crate::policy::Error),
    Io(std::io::Error),
    Json(serde_json::Error),
);

/// `{}` is this error's own message (anyhow walks the sources itself); `{:#}` is the whole
/// chain, outer to inner, as anyhow prints it.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f.write_str(&chain(self));
        }
        match self {
            Error::Failed { message, .. } | Error::Usage { message } => f.write_str(message),
            Error::Context { context, .. } => f.write_str(context),
            other => match other.inner() {
                Some(inner) => fmt::Display::fmt(inner, f),
                None => Ok(()),
            },
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Context { source, .. } => Some(&**source),
            other => other.inner().and_then(StdError::source),
        }
    }
}

impl From<nix::Error> for Error {
    fn from(e: nix::Error) -> Error {
        Error::Layer(Box::new(e))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failed step with a message and no hint.
    pub fn msg(message: impl fmt::Display) -> Error {
        Error::Failed {
            message: message.to_string(),
            hint: None,
        }
    }

    /// A failed step with a message and a hint.
    pub fn with_hint(message: impl fmt::Display, hint: impl fmt::Display) -> Error {
        Error::Failed {
            message: message.to_string(),
            hint: Some(hint.to_string()),
        }
    }

    /// The process exit code this error means (see [`exit`]).
    pub fn code(&self) -> i32 {
        match self {
            Error::Usage { .. } => exit::USAGE,
            Error::Context { source, .. } => source
                .downcast_ref::<Error>()
                .map_or(exit::ERROR, Error::code),
            _ => exit::ERROR,
        }
    }

    /// What the person can do about it, where phoenix knows.
    pub fn hint(&self) -> Option<String> {
        match self {
            Error::Load(e) => e.hint(),
            Error::Failed { hint, .. } => hint.clone(),
            Error::Context { source, .. } => source.downcast_ref::<Error>().and_then(Error::hint),
            _ => None,
        }
    }

    /// The spec-load error at the root of this one, if that is what it is: `cli/` prints its
    /// diagnostics as they are (file:line:column, carets), not as one line.
    pub fn load(&self) -> Option<&crate::spec::LoadError> {
        match self {
            Error::Load(e) => Some(e),
            Error::Context { source, .. } => source.downcast_ref::<Error>().and_then(Error::load),
            _ => None,
        }
    }
}

/// `.context(…)` and `.with_context(|| …)` on results and options, as anyhow has them, for the
/// library's own [`Error`].
pub trait Context<T> {
    fn context<C: fmt::Display>(self, context: C) -> Result<T>;
    fn with_context<C: fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T>;
}

impl<T, E: StdError + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context<C: fmt::Display>(self, context: C) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context.to_string(),
            source: Box::new(e),
        })
    }

    fn with_context<C: fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: f().to_string(),
            source: Box::new(e),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context<C: fmt::Display>(self, context: C) -> Result<T> {
        self.ok_or_else(|| Error::msg(context))
    }

    fn with_context<C: fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.ok_or_else(|| Error::msg(f()))
    }
}

/// Return early with an [`Error::Failed`] built like `format!`.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::msg(format!($($arg)*)))
    };
}

/// The chain of `err` as `{:#}` prints it in anyhow: each cause after a `: `.
pub fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_config_is_exit_1_with_the_init_hint() {
        let err: Error = crate::spec::load(std::path::Path::new("/nonexistent/phoenix.toml"))
            .unwrap_err()
            .into();
        assert_eq!(err.code(), exit::ERROR);
        assert!(
            err.hint().unwrap().contains("phoenix init"),
            "{:?}",
            err.hint()
        );
        assert!(err.load().is_some());
    }

    #[test]
    fn a_usage_error_is_exit_64_even_under_context() {
        let err = Error::Usage {
            message: "no such verb".into(),
        };
        assert_eq!(err.code(), exit::USAGE);
        let wrapped = Err::<(), _>(err)
            .context("parsing the request")
            .unwrap_err();
        assert_eq!(wrapped.code(), exit::USAGE);
        assert_eq!(wrapped.hint(), None);
    }

    #[test]
    fn a_hint_survives_context_and_the_chain_reads_outer_to_inner() {
        let err = Err::<(), _>(Error::with_hint(
            "the runtime is gone",
            "run `phoenix doctor`",
        ))
        .context("cannot observe the fleet")
        .unwrap_err();
        assert_eq!(err.code(), exit::ERROR);
        assert_eq!(err.hint().as_deref(), Some("run `phoenix doctor`"));
        assert_eq!(chain(&err), "cannot observe the fleet: the runtime is gone");
        assert_eq!(
            format!("{err:#}"),
            "cannot observe the fleet: the runtime is gone"
        );
        assert_eq!(format!("{err}"), "cannot observe the fleet");
    }

    #[test]
    fn runtime_and_io_errors_are_exit_1_without_a_hint() {
        let err: Error = crate::world::RuntimeError::NotInstalled.into();
        assert_eq!((err.code(), err.hint()), (exit::ERROR, None));
        let err: Error = std::io::Error::other("disk on fire").into();
        assert_eq!((err.code(), err.hint()), (exit::ERROR, None));
        assert_eq!(err.to_string(), "disk on fire");
    }

    #[test]
    fn a_missing_option_becomes_the_message() {
        let err = None::<u8>.context("`x` is no longer declared").unwrap_err();
        assert_eq!(err.to_string(), "`x` is no longer declared");
        assert_eq!(err.code(), exit::ERROR);
    }
}
