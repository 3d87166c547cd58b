//! An in-memory runtime for tests: panes with ids, tags, pids, dead or alive, screens a test
//! sets, and a record of every call. It passes the same conformance suite as the real one
//! (`world::conformance`), so apply, the watchdog and recovery can be tested on it in
//! milliseconds, without a server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Check, Launch, PaneObs, ProcInfo, Runtime, RuntimeError, Tag};

/// Pids of fake panes: above any Linux `pid_max` (2^22), so /proc never has them and no real
/// process is ever taken for a fake pane's.
const FIRST_PID: u32 = 3_000_000_000;

/// One verb called on the runtime, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    List,
    Start {
        agent: String,
        pane: String,
    },
    Respawn {
        agent: String,
        pane: String,
    },
    Stop {
        pane: String,
    },
    Paste {
        pane: String,
        text: String,
    },
    Enter {
        pane: String,
    },
    Interrupt {
        pane: String,
    },
    Capture {
        pane: String,
    },
    Show {
        pane: String,
    },
    SetTag {
        pane: String,
        tag: Tag,
        value: String,
    },
    KillServer,
}

/// One fake pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePane {
    pub id: String,
    pub session: String,
    pub window: String,
    pub pid: u32,
    /// The agent the pane's wrapper runs (its child, leading its own process group), while
    /// it runs.
    pub agent_pid: Option<u32>,
    /// When the pane's process started (seconds since the epoch).
    pub started: i64,
    pub argv: Vec<String>,
    pub dead: bool,
    pub dead_status: Option<i32>,
    pub dead_signal: Option<i32>,
    pub tags: BTreeMap<Tag, String>,
    /// What `capture` returns: pasted text lands here, and a test may set it.
    pub screen: String,
    /// The tap its output streams to, if any (the launch's words).
    pub pipe: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    /// The "server": false until the first pane, and again once the last pane is gone (as a
    /// real server exits with its last session) or it is killed.
    running: bool,
    next: u32,
    panes: BTreeMap<u32, FakePane>,
    calls: Vec<Call>,
    own_pane: Option<String>,
    /// Every call fails with this, while set (a runtime that went away).
    failing: Option<String>,
    /// Starts and respawns of these agents fail with their stderr (one agent that cannot
    /// start, next to healthy ones).
    failing_agents: BTreeMap<String, String>,
}

/// The fake runtime. Cheap to clone: clones share their panes and their record.
#[derive(Debug, Clone, Default)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
}

impl FakeRuntime {
    pub fn new() -> FakeRuntime {
        FakeRuntime::default()
    }

    /// As a shared runtime, for a `FleetContext` or the daemon.
    pub fn shared(&self) -> super::SharedRuntime {
        Arc::new(self.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has failed already: its state is still
        // worth reading.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The calls that changed something (everything but list and capture).
    pub fn changes(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| !matches!(c, Call::List | Call::Capture { .. }))
            .collect()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The pane `id`, as it is now.
    pub fn pane(&self, id: &str) -> Option<FakePane> {
        let state = self.lock();
        number(id).and_then(|n| state.panes.get(&n).cloned())
    }

    /// Every pane, in creation order.
    pub fn panes(&self) -> Vec<FakePane> {
        self.lock().panes.values().cloned().collect()
    }

    /// Add a pane as something other than phoenix would (another fleet's, one made by hand).
    pub fn add_pane(&self, session: &str, window: &str, tags: &[(Tag, &str)]) -> String {
        let mut state = self.lock();
        let pane = new_pane(&mut state, session, window, Vec::new());
        let id = pane.id.clone();
        let n = number(&id).unwrap_or_default();
        let mut pane = pane;
        pane.tags = tags.iter().map(|(t, v)| (*t, v.to_string())).collect();
        state.panes.insert(n, pane);
        id
    }

    /// The agent under `pane`'s wrapper is gone; the wrapper (the pane) lives on.
    pub fn end_agent(&self, pane: &str) {
        self.with_pane(pane, |p| p.agent_pid = None);
    }

    /// The program in `pane` exits with `status` (the pane stays, dead, as with
    /// remain-on-exit).
    pub fn exit(&self, pane: &str, status: i32) {
        self.with_pane(pane, |p| {
            p.agent_pid = None;
            p.dead = true;
            p.dead_status = Some(status);
        });
    }

    /// The program in `pane` is killed by `signal`.
    pub fn kill(&self, pane: &str, signal: i32) {
        self.with_pane(pane, |p| {
            p.agent_pid = None;
            p.dead = true;
            p.dead_signal = Some(signal);
        });
    }

    /// What `capture` of `pane` returns from now on.
    pub fn set_screen(&self, pane: &str, text: &str) {
        self.with_pane(pane, |p| p.screen = text.to_string());
    }

    /// The pane this process runs in, as `own_pane` reports it.
    pub fn set_own_pane(&self, pane: Option<&str>) {
        self.lock().own_pane = pane.map(String::from);
    }

    /// Every call fails with `stderr` (a runtime gone away) until `None`.
    pub fn set_failing(&self, stderr: Option<&str>) {
        self.lock().failing = stderr.map(String::from);
    }

    fn with_pane(&self, pane: &str, f: impl FnOnce(&mut FakePane)) {
        let mut state = self.lock();
        if let Some(p) = number(pane).and_then(|n| state.panes.get_mut(&n)) {
            f(p);
        }
    }

    /// Starts and respawns of `agent` fail with `stderr` until `None`; the others go on.
    pub fn fail_starts_of(&self, agent: &str, stderr: Option<&str>) {
        let mut state = self.lock();
        match stderr {
            Some(e) => state.failing_agents.insert(agent.into(), e.into()),
            None => state.failing_agents.remove(agent),
        };
    }

    /// Record `call`, then run `f` on the state unless the runtime is failing.
    fn call<T>(
        &self,
        call: Call,
        f: impl FnOnce(&mut State) -> Result<T, RuntimeError>,
    ) -> Result<T, RuntimeError> {
        let mut state = self.lock();
        state.calls.push(call.clone());
        let agent_fails = match &call {
            Call::Start { agent, .. } | Call::Respawn { agent, .. } => {
                state.failing_agents.get(agent).cloned()
            }
            _ => None,
        };
        if let Some(stderr) = state.failing.clone().or(agent_fails) {
            return Err(RuntimeError::Failed {
                command: verb(&call).into(),
                stderr,
            });
        }
        f(&mut state)
    }
}

fn verb(call: &Call) -> &'static str {
    match call {
        Call::List => "list",
        Call::Start { .. } => "start",
        Call::Respawn { .. } => "respawn",
        Call::Stop { .. } => "stop",
        Call::Paste { .. } => "paste",
        Call::Enter { .. } => "enter",
        Call::Interrupt { .. } => "interrupt",
        Call::Capture { .. } => "capture",
        Call::Show { .. } => "show",
        Call::SetTag { .. } => "set_tag",
        Call::KillServer => "kill_server",
    }
}

/// `%12` → 12.
fn number(id: &str) -> Option<u32> {
    id.strip_prefix('%')?.parse().ok()
}

/// Two pids per process slot: the pane's and its agent's.
fn new_pids(state: &mut State) -> (u32, u32) {
    let n = state.next;
    state.next += 1;
    (FIRST_PID + 2 * n, FIRST_PID + 2 * n + 1)
}

fn new_pane(state: &mut State, session: &str, window: &str, argv: Vec<String>) -> FakePane {
    let n = state.next;
    let (pid, agent) = new_pids(state);
    state.running = true;
    FakePane {
        id: format!("%{n}"),
        session: session.into(),
        window: window.into(),
        pid,
        agent_pid: Some(agent),
        started: jiff::Timestamp::now().as_second(),
        argv,
        dead: false,
        dead_status: None,
        dead_signal: None,
        tags: BTreeMap::new(),
        screen: String::new(),
        pipe: None,
    }
}

fn no_pane(pane: &str) -> RuntimeError {
    RuntimeError::Failed {
        command: "fake".into(),
        stderr: format!("can't find pane: {pane}"),
    }
}

fn launch_tags(launch: &Launch) -> BTreeMap<Tag, String> {
    BTreeMap::from([
        (Tag::Fleet, launch.fleet.clone()),
        (Tag::Agent, launch.agent.clone()),
        (Tag::Fingerprint, launch.fingerprint.clone()),
    ])
}

impl State {
    fn pane_mut(&mut self, pane: &str) -> Result<&mut FakePane, RuntimeError> {
        number(pane)
            .and_then(|n| self.panes.get_mut(&n))
            .ok_or_else(|| no_pane(pane))
    }

    fn live_pane(&mut self, pane: &str) -> Result<&mut FakePane, RuntimeError> {
        let p = self.pane_mut(pane)?;
        if p.dead {
            return Err(RuntimeError::Failed {
                command: "fake".into(),
                stderr: format!("pane {pane} is dead"),
            });
        }
        Ok(p)
    }
}

impl Runtime for FakeRuntime {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn location(&self) -> String {
        "the fake runtime".into()
    }

    fn inspect_hint(&self) -> String {
        "the test's `FakeRuntime::panes()`".into()
    }

    fn diagnose(&self, _err: &RuntimeError) -> Option<String> {
        None
    }

    fn server_check(&self, fleet_id: &str, problem: Option<String>) -> Check {
        Check {
            check: "fake runtime".into(),
            ok: problem.is_none(),
            detail: format!("fleet `{fleet_id}`"),
            fix: problem,
        }
    }

    fn list(&self) -> Result<Option<Vec<PaneObs>>, RuntimeError> {
        self.call(Call::List, |state| {
            if !state.running {
                return Ok(None);
            }
            let tag = |p: &FakePane, t: Tag| p.tags.get(&t).cloned();
            Ok(Some(
                state
                    .panes
                    .values()
                    .map(|p| PaneObs {
                        id: p.id.clone(),
                        session: p.session.clone(),
                        window: p.window.clone(),
                        pid: p.pid,
                        dead: p.dead,
                        dead_status: p.dead_status,
                        dead_signal: p.dead_signal,
                        agent: tag(p, Tag::Agent),
                        fleet: tag(p, Tag::Fleet),
                        fingerprint: tag(p, Tag::Fingerprint),
                        phase: tag(p, Tag::Phase),
                        started: (!p.dead).then_some(p.started),
                        processes: p
                            .agent_pid
                            .filter(|_| !p.dead)
                            .map(|pid| ProcInfo {
                                pid,
                                ppid: p.pid,
                                comm: "agent".into(),
                                started: p.started,
                                pgid: pid,
                            })
                            .into_iter()
                            .collect(),
                    })
                    .collect(),
            ))
        })
    }

    fn start(&self, launch: &Launch) -> Result<String, RuntimeError> {
        let call = Call::Start {
            agent: launch.agent.clone(),
            pane: String::new(),
        };
        let id = self.call(call, |state| {
            let mut pane = new_pane(state, &launch.session, &launch.window, launch.argv.clone());
            pane.tags = launch_tags(launch);
            pane.pipe = launch.tap.as_ref().map(|t| t.join(" "));
            let id = pane.id.clone();
            state.panes.insert(number(&id).unwrap_or_default(), pane);
            Ok(id)
        })?;
        // The record names the pane it made.
        if let Some(Call::Start { pane, .. }) = self.lock().calls.last_mut() {
            *pane = id.clone();
        }
        Ok(id)
    }

    fn respawn(&self, pane: &str, launch: &Launch) -> Result<(), RuntimeError> {
        let call = Call::Respawn {
            agent: launch.agent.clone(),
            pane: pane.into(),
        };
        self.call(call, |state| {
            let (pid, agent) = new_pids(state);
            let p = state.pane_mut(pane)?;
            p.pid = pid;
            p.agent_pid = Some(agent);
            p.started = jiff::Timestamp::now().as_second();
            p.argv = launch.argv.clone();
            p.pipe = launch.tap.as_ref().map(|t| t.join(" "));
            p.dead = false;
            p.dead_status = None;
            p.dead_signal = None;
            p.screen.clear();
            // As tmux's respawn: the old wrapper's phase goes with it.
            p.tags.remove(&Tag::Phase);
            p.tags.extend(launch_tags(launch));
            Ok(())
        })
    }

    fn stop(&self, pane: &str) -> Result<(), RuntimeError> {
        self.call(Call::Stop { pane: pane.into() }, |state| {
            if let Some(n) = number(pane) {
                state.panes.remove(&n);
            }
            if state.panes.is_empty() {
                state.running = false;
            }
            Ok(())
        })
    }

    fn paste(&self, pane: &str, text: &str) -> Result<(), RuntimeError> {
        // Made inert as the real runtime makes it: what a test reads is what a pane would get.
        let text = super::inert::keyboard_text(text);
        let call = Call::Paste {
            pane: pane.into(),
            text: text.clone(),
        };
        self.call(call, |state| {
            state.live_pane(pane)?.screen.push_str(&text);
            Ok(())
        })
    }

    fn press_enter(&self, pane: &str) -> Result<(), RuntimeError> {
        self.call(Call::Enter { pane: pane.into() }, |state| {
            state.live_pane(pane)?.screen.push('\n');
            Ok(())
        })
    }

    fn interrupt(&self, pane: &str) -> Result<(), RuntimeError> {
        self.call(Call::Interrupt { pane: pane.into() }, |state| {
            state.live_pane(pane).map(drop)
        })
    }

    /// A fake pane has no history: all of its text is its visible screen, whatever `lines`.
    fn capture(&self, pane: &str, _lines: usize) -> Result<String, RuntimeError> {
        self.call(Call::Capture { pane: pane.into() }, |state| {
            let screen = &state.pane_mut(pane)?.screen;
            Ok(screen.lines().map(|l| format!("{l}\n")).collect())
        })
    }

    fn show(&self, pane: &str) -> Result<(), RuntimeError> {
        self.call(Call::Show { pane: pane.into() }, |state| {
            state.pane_mut(pane).map(drop)
        })
    }

    fn set_tag(&self, pane: &str, tag: Tag, value: &str) -> Result<(), RuntimeError> {
        let call = Call::SetTag {
            pane: pane.into(),
            tag,
            value: value.into(),
        };
        self.call(call, |state| {
            state.pane_mut(pane)?.tags.insert(tag, value.to_string());
            Ok(())
        })
    }

    fn tag(&self, pane: &str, tag: Tag) -> Result<Option<String>, RuntimeError> {
        let mut state = self.lock();
        Ok(state.pane_mut(pane)?.tags.get(&tag).cloned())
    }

    fn pane_pid(&self, pane: &str) -> Result<Option<u32>, RuntimeError> {
        let state = self.lock();
        Ok(number(pane)
            .and_then(|n| state.panes.get(&n))
            .map(|p| p.pid))
    }

    fn own_pane(&self) -> Option<String> {
        self.lock().own_pane.clone()
    }

    fn kill_server(&self) -> Result<(), RuntimeError> {
        self.call(Call::KillServer, |state| {
            state.panes.clear();
            state.running = false;
            Ok(())
        })
    }
}

/// A fleet of `agents` declared in `dir/phoenix.toml` (each a long `sleep`, nothing checked on
/// disk): what the unit tests of apply, restart, the watchdog and the controller run on the fake.
#[cfg(test)]
pub(crate) fn unit_fleet(dir: &std::path::Path, agents: &[&str]) -> crate::spec::Spec {
    let toml: String = agents
        .iter()
        .map(|a| format!("[[agent]]\nname = \"{a}\"\ncommand = \"sh -c 'sleep 1000'\"\n"))
        .collect();
    let source = format!("[fleet]\nname = \"unit\"\n{toml}");
    // On disk too, as a fleet's file is (an apply cuts each agent's part from it).
    let _ = std::fs::write(dir.join("phoenix.toml"), &source);
    crate::spec::parse(
        &source,
        &dir.join("phoenix.toml"),
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fake_conforms() {
        let fake = FakeRuntime::new();
        let exits = fake.clone();
        super::super::conformance::conforms(&fake, &move |pane, code| exits.exit(pane, code));
    }

    #[test]
    fn a_failing_fake_fails_every_call_and_records_it() {
        let fake = FakeRuntime::new();
        fake.set_failing(Some("no server running"));
        assert!(fake.list().is_err());
        assert_eq!(fake.calls(), [Call::List]);
    }
}
