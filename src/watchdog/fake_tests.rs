//! The watchdog on the fake runtime: what a pass finds and does about dead panes and gone
//! agents, in milliseconds and without a server.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::*;
use crate::apply::testing::apply_once;
use crate::world::fake::{Call, FakeRuntime};

use crate::world::fake::unit_fleet as fleet_spec;

/// The fleet applied on `fake`: one live pane per agent, its state dir made.
fn applied(dir: &Path, agents: &[&str], fake: &FakeRuntime) -> Spec {
    let spec = fleet_spec(dir, agents);
    let report = apply_once(&spec, fake, false);
    assert_eq!(report.failed(), 0, "{report:?}");
    fake.clear_calls();
    spec
}

fn pane_of(fake: &FakeRuntime, agent: &str) -> String {
    fake.panes()
        .into_iter()
        .find(|p| p.tags.get(&world::Tag::Agent).map(String::as_str) == Some(agent))
        .unwrap()
        .id
}

fn report_of<'r>(report: &'r Report, agent: &str) -> &'r AgentReport {
    report.agents.iter().find(|a| a.agent == agent).unwrap()
}

#[test]
fn a_healthy_fleet_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    let spec = applied(tmp.path(), &["one", "two"], &fake);
    let report = Watchdog::new(&spec, &fake).pass();
    for a in &report.agents {
        assert_ne!(a.verdict, "unhealthy", "{a:?}");
        assert_eq!(a.action_taken, None, "{a:?}");
    }
    assert_eq!(fake.changes(), []);
}

#[test]
fn a_dead_pane_is_revived_in_place_and_only_it() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    let spec = applied(tmp.path(), &["gone", "fine"], &fake);
    let pane = pane_of(&fake, "gone");
    fake.kill(&pane, 9);
    let report = Watchdog::new(&spec, &fake).pass();
    let a = report_of(&report, "gone");
    assert_eq!(a.verdict, "unhealthy", "{a:?}");
    assert!(
        a.action_taken
            .as_deref()
            .is_some_and(|t| t.contains("pane restarted")),
        "{a:?}"
    );
    assert_eq!(
        fake.changes(),
        [Call::Respawn {
            agent: "gone".into(),
            pane: pane.clone()
        }]
    );
    assert!(!fake.pane(&pane).unwrap().dead);
    assert_eq!(report_of(&report, "fine").action_taken, None);
}

/// One owner of a restart: a dead pane someone else is restarting right now (their claim
/// holds) is theirs; the pass neither revives it nor spends a revival on it.
#[test]
fn an_agent_someone_else_restarts_is_left_to_them() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    let spec = applied(tmp.path(), &["gone"], &fake);
    let pane = pane_of(&fake, "gone");
    fake.kill(&pane, 9);
    let dir = FleetDir::new(&spec.fleet.state_dir).agent("gone");
    let claim = crate::state::claim::take(&dir, crate::state::claim::Owner::Operator)
        .unwrap()
        .unwrap();
    let report = Watchdog::new(&spec, &fake).pass();
    let a = report_of(&report, "gone");
    assert_eq!(a.verdict, "skipped", "{a:?}");
    assert!(
        a.skipped
            .as_deref()
            .is_some_and(|s| s.contains("being restarted by a person")),
        "{a:?}"
    );
    assert_eq!(fake.changes(), []);
    // Its restart over, the next pass sees the dead pane again.
    claim.release();
    let report = Watchdog::new(&spec, &fake).pass();
    assert_ne!(report_of(&report, "gone").verdict, "skipped");
}

#[test]
fn a_pass_of_a_stopping_daemon_revives_no_one_on_the_fake() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    let spec = applied(tmp.path(), &["gone"], &fake);
    let pane = pane_of(&fake, "gone");
    fake.kill(&pane, 9);
    let report = Watchdog::new(&spec, &fake)
        .stop_when(Arc::new(AtomicBool::new(true)))
        .pass();
    let a = report_of(&report, "gone");
    assert_eq!(a.verdict, "unhealthy", "{a:?}");
    assert_eq!(
        a.action_taken.as_deref(),
        Some("revival_skipped (stopping)"),
        "{a:?}"
    );
    assert_eq!(fake.changes(), []);
    assert!(fake.pane(&pane).unwrap().dead);
}

#[test]
fn a_runtime_that_cannot_be_observed_starts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    let spec = applied(tmp.path(), &["one"], &fake);
    fake.set_failing(Some("server exited unexpectedly"));
    let report = Watchdog::new(&spec, &fake).pass();
    // Every call after the failing list is a list or nothing: no start, no respawn.
    assert!(
        fake.changes()
            .iter()
            .all(|c| !matches!(c, Call::Start { .. } | Call::Respawn { .. })),
        "{:?} {report:?}",
        fake.changes()
    );
}
