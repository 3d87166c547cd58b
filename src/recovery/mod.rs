//! The recovery pipeline: an agent fails; phoenix decides; phoenix restarts it. Detectors
//! (the wrapper's exit path, the turn-failed hook through the wrapper, the watchdog's pass)
//! only build an [`Incident`]; [`decide`] alone turns it into a [`Recovery`] (with one
//! [`Start`]: resume, fresh or safe mode); [`execute`] alone writes what it leaves on disk (the
//! fresh-start intent, the recovery context, the stop request, quarantine, the crash-loop
//! event); [`record`] is the per-agent restart ledger and the session bookkeeping.

pub mod decide;
pub mod execute;
pub mod record;

pub use decide::{
    EndReason, ExitFacts, Facts, Incident, Inject, Notify, Recovery, Start, StopRequest, Unhealthy,
    decide,
};
