//! The controller's passes on the fake runtime: one agent's failing start next to a healthy
//! agent, and an operator's restart handed to the controller.

use std::path::Path;
use std::time::{Duration, Instant};

use super::request::{REPLY, REQUEST};
use super::*;
use crate::world::fake::{Call, FakeRuntime};

fn controller(dir: &Path, fake: &FakeRuntime) -> Controller {
    let config = dir.join("phoenix.toml");
    let spec = crate::world::fake::unit_fleet(dir, &["broken", "healthy"]);
    FleetDir::new(&spec.fleet.state_dir).ensure().unwrap();
    Controller::new(&config, fake.shared(), spec, "/usr/bin/phoenix".into())
}

fn pane_of(fake: &FakeRuntime, agent: &str) -> Option<String> {
    fake.panes()
        .into_iter()
        .find(|p| p.tags.values().any(|v| v == agent))
        .map(|p| p.id)
}

fn tried(fake: &FakeRuntime, name: &str) -> usize {
    fake.changes()
        .iter()
        .filter(|c| matches!(c, Call::Start { agent, .. } | Call::Respawn { agent, .. } if agent == name))
        .count()
}

#[test]
fn one_agents_failing_start_neither_holds_back_nor_delays_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    fake.fail_starts_of("broken", Some("no space left on device"));
    let mut c = controller(tmp.path(), &fake);
    let interval = c.spec.fleet.reconcile_interval;
    let t0 = Instant::now();

    // The first pass starts both; `broken` fails (apply tries twice) and waits its own 2 s.
    // The pass itself is no error: the fleet is not put into backoff for one agent.
    let done = c
        .reconcile(t0)
        .expect("one agent's failure is not the pass's");
    let healthy = pane_of(&fake, "healthy").expect("healthy started");
    assert_eq!(tried(&fake, "broken"), 2);
    assert_eq!(done.requeue, requeue(Duration::from_secs(2).min(interval)));

    // The healthy agent's pane dies; the wake-up's pass restarts it without first retrying
    // the broken agent's start (which would cost apply's retry pause and a diagnosis).
    fake.exit(&healthy, 1);
    fake.clear_calls();
    let done = c.reconcile(t0 + Duration::from_millis(500)).unwrap();
    assert_eq!(
        fake.changes(),
        [Call::Respawn {
            agent: "healthy".into(),
            pane: healthy.clone()
        }],
        "only the healthy agent is touched while `broken` waits"
    );
    assert_eq!(
        done.requeue,
        requeue(Duration::from_millis(1500).min(interval)),
        "the loop comes back when `broken` is due, not later"
    );

    // Its wait over, `broken` is tried again and waits twice as long; `healthy` is left alone.
    fake.clear_calls();
    let done = c.reconcile(t0 + Duration::from_secs(2)).unwrap();
    assert_eq!(tried(&fake, "broken"), 2);
    assert_eq!(tried(&fake, "healthy"), 0);
    assert_eq!(done.requeue, requeue(Duration::from_secs(4).min(interval)));

    // Once it can start, it starts, and the loop is back to its interval.
    fake.fail_starts_of("broken", None);
    fake.clear_calls();
    let done = c.reconcile(t0 + Duration::from_secs(6)).unwrap();
    assert!(pane_of(&fake, "broken").is_some());
    assert_eq!(done.requeue, requeue(interval));
}

#[test]
fn an_operator_restart_handed_to_the_controller_is_carried_out_and_answered() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new();
    let mut c = controller(tmp.path(), &fake);
    let _ = c.reconcile(Instant::now()).unwrap();
    let pane = pane_of(&fake, "healthy").unwrap();
    fake.exit(&pane, 1);
    fake.clear_calls();
    let dir = FleetDir::new(&c.spec.fleet.state_dir).agent("healthy");
    std::fs::write(dir.file(REQUEST), r#"{"id":"7-1","fresh":true}"#).unwrap();
    // A poke of an undeclared name is no path into the state dir.
    c.poked.insert("../healthy".into());
    c.poked.insert("healthy".into());
    c.serve_requests();
    assert_eq!(
        fake.changes(),
        [Call::Respawn {
            agent: "healthy".into(),
            pane
        }]
    );
    assert!(
        !dir.file(REQUEST).exists(),
        "taken, so never carried out twice"
    );
    assert!(dir.has_marker(crate::state::FRESH));
    let reply = std::fs::read_to_string(dir.file(REPLY)).unwrap();
    assert!(
        reply.contains(r#""id":"7-1""#) && reply.contains(r#""via":"respawn""#),
        "{reply}"
    );
    // Nothing requested, nothing done.
    fake.clear_calls();
    c.poked.insert("healthy".into());
    c.serve_requests();
    assert!(fake.changes().is_empty());
}
