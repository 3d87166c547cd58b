//! The one conformance suite every `Runtime` must pass, the fake included: what phoenix
//! relies on of a runtime, verb by verb. Run against the real adapter on a private server
//! (`tmux.rs`) and against the fake (`fake.rs`), so a test on the fake means something.

use std::time::{Duration, Instant};

use super::{Launch, PaneObs, Runtime, Started, Tag};

/// The program every pane runs: it waits for one line and exits with it as its status, so
/// the suite can end it through the runtime's own keyboard.
pub(crate) const PROGRAM: [&str; 3] = ["sh", "-c", "read line; exit \"$line\""];

fn launch(agent: &str, window: &str, fingerprint: &str) -> Launch {
    Launch {
        fleet: "conformance-0123abcd".into(),
        agent: agent.into(),
        session: "conformance".into(),
        window: window.into(),
        workdir: "/".into(),
        argv: PROGRAM.map(String::from).to_vec(),
        fingerprint: fingerprint.into(),
        tap: None,
    }
}

/// Call `attempt` until what it returns is `done`, for up to 10 s (a real server is
/// asynchronous); the last thing it returned.
fn retry<T>(mut attempt: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = attempt();
        if done(&got) || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait (up to 10 s) until `pane` in the listing satisfies `ok`; the pane as it was then.
fn until(runtime: &dyn Runtime, pane: &str, what: &str, ok: impl Fn(&PaneObs) -> bool) -> PaneObs {
    let found = retry(
        || {
            let panes = runtime.list().ok().flatten().unwrap_or_default();
            panes.into_iter().find(|p| p.id == pane)
        },
        |found| found.as_ref().is_some_and(&ok),
    );
    match found {
        Some(p) if ok(&p) => p,
        other => panic!(
            "{}: pane {pane} never became {what}: {other:?} (its process: {:?})",
            runtime.name(),
            other
                .as_ref()
                .and_then(|p| std::fs::read_to_string(format!("/proc/{}/stat", p.pid)).ok())
        ),
    }
}

/// Run the suite on a fresh `runtime` (no server yet). `exited` is called after Enter is
/// pressed on a pane whose program got `code` on its line: a real program exits by itself,
/// the fake one is told to.
pub(crate) fn conforms(runtime: &dyn Runtime, exited: &dyn Fn(&str, i32)) {
    let name = runtime.name();
    // Nothing running yet: an empty world, not an error.
    assert_eq!(
        runtime.list().unwrap(),
        None,
        "{name}: a fresh runtime has no server"
    );
    let (one, two) = starts(runtime);
    tags(runtime, &one, &two);
    pastes(runtime, &one);
    // Enter ends the line; the program exits with it; the pane stays, dead, with the status.
    runtime.press_enter(&one).unwrap();
    exited(&one, 7);
    let dead = dies_with_its_status(runtime, &one);
    // respawn: the same pane, alive again, tagged with the new launch, the old wrapper's
    // phase gone (a wrapper's first start sets none: no phase reads as running).
    assert_eq!(dead.phase.as_deref(), Some("running"), "{name}");
    runtime
        .respawn(&one, &launch("one", "w-one", "fp-3"))
        .unwrap();
    let back = until(runtime, &one, "respawned", |p| !p.dead);
    assert_eq!(back.fingerprint.as_deref(), Some("fp-3"), "{name}");
    assert_eq!(
        back.phase, None,
        "{name}: a respawned pane starts with no phase"
    );
    assert_ne!(back.pid, dead.pid, "{name}: a new process");
    stops(runtime, &two);
    starts_many(runtime, &two);
    // This test runs in no pane of this runtime.
    assert_eq!(runtime.own_pane(), None, "{name}");
    // kill_server: nothing left, an empty world again.
    runtime.kill_server().unwrap();
    assert_eq!(runtime.list().unwrap(), None, "{name}: after kill_server");
    runtime.kill_server().unwrap();
}

/// start: pane ids, tags on from the first moment, one session for both; pids of the pane's
/// own process (a missing pane has none). The two panes' ids.
fn starts(runtime: &dyn Runtime) -> (String, String) {
    let name = runtime.name();
    let one = runtime.start(&launch("one", "w-one", "fp-1")).unwrap();
    let two = runtime.start(&launch("two", "w-two", "fp-2")).unwrap();
    assert!(
        one.starts_with('%') && two.starts_with('%') && one != two,
        "{name}: {one} {two}"
    );
    let p = until(runtime, &one, "alive", |p| !p.dead);
    assert_eq!(
        (
            p.agent.as_deref(),
            p.fleet.as_deref(),
            p.fingerprint.as_deref()
        ),
        (Some("one"), Some("conformance-0123abcd"), Some("fp-1")),
        "{name}: tags"
    );
    assert_eq!(
        (p.session.as_str(), p.window.as_str()),
        ("conformance", "w-one")
    );
    assert_eq!(p.phase, None, "{name}");
    let listed = runtime.list().unwrap().unwrap();
    assert_eq!(listed.len(), 2, "{name}: {listed:?}");
    assert_eq!(runtime.pane_pid(&one).unwrap(), Some(p.pid), "{name}");
    assert_eq!(runtime.pane_pid("%9999").unwrap(), None, "{name}");
    (one, two)
}

/// tags: set, read back, listed; another pane's are its own.
fn tags(runtime: &dyn Runtime, one: &str, two: &str) {
    let name = runtime.name();
    runtime.set_tag(one, Tag::Phase, "cooldown").unwrap();
    assert_eq!(
        runtime.tag(one, Tag::Phase).unwrap().as_deref(),
        Some("cooldown")
    );
    assert_eq!(runtime.tag(two, Tag::Phase).unwrap(), None, "{name}");
    runtime.set_phase(one, "running").unwrap();
    until(runtime, one, "tagged running", |p| {
        p.phase.as_deref() == Some("running")
    });
    assert_eq!(
        runtime.tag(one, Tag::Agent).unwrap().as_deref(),
        Some("one")
    );
}

/// paste: the text reaches the pane, made inert (the BEL is dropped: else the line would not
/// be a number and the status below not 7); capture reads it; a pane that cannot be read is
/// left out of capture_many, the others are not.
fn pastes(runtime: &dyn Runtime, one: &str) {
    let name = runtime.name();
    runtime.paste(one, "7\u{7}").unwrap();
    let screen = retry(|| runtime.capture(one, 10).unwrap(), |s| s.contains('7'));
    assert!(screen.contains('7'), "{name}: {screen:?}");
    assert!(runtime.capture("%9999", 10).is_err(), "{name}");
    let screens = runtime.capture_many(&[one.to_string(), "%9999".into()], 10);
    assert_eq!(screens.keys().collect::<Vec<_>>(), [&one], "{name}");
}

/// The pane listed dead, with the program's status. tmux lists the pane dead (its terminal
/// closed) before it has reaped the process and so has its status; seen in the parallel
/// unit-test run, tmux sometimes leaves the process an unreaped zombie for longer than this
/// waits. A status, when there is one, must be the program's.
fn dies_with_its_status(runtime: &dyn Runtime, one: &str) -> PaneObs {
    let name = runtime.name();
    let dead = retry(
        || until(runtime, one, "dead", |p| p.dead),
        |p| p.dead_status.is_some() || p.dead_signal.is_some(),
    );
    if dead.dead_status.is_none() && dead.dead_signal.is_none() {
        let zombie =
            std::fs::read_to_string(format!("/proc/{}/stat", dead.pid)).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            });
        assert!(
            zombie,
            "{name}: dead without a status, yet its process was reaped: {dead:?}"
        );
    } else {
        assert_eq!(dead.dead_status, Some(7), "{name}: {dead:?}");
    }
    dead
}

/// stop: the pane is gone, stopping it again is fine.
fn stops(runtime: &dyn Runtime, two: &str) {
    let name = runtime.name();
    runtime.stop(two).unwrap();
    let listed = runtime.list().unwrap().unwrap_or_default();
    assert!(listed.iter().all(|p| p.id != two), "{name}: {listed:?}");
    runtime.stop(two).unwrap();
}

/// start_many: each launch started once, in order, tagged, in its own session whether that
/// session exists already or is made by the same batch; a value ending in `;` does not split
/// the batch. Then stop_many: all of them stopped at once, with a pane already gone (`gone`)
/// among them (tmux ends a sequence at its first failing command: the others still stop).
fn starts_many(runtime: &dyn Runtime, gone: &str) {
    let name = runtime.name();
    let mut other = launch("four", "w-four", "fp-4");
    other.session = "conformance-2".into();
    let mut odd = launch("five", "w-five", "fp-5");
    odd.session = "conformance-2".into();
    odd.argv.extend(["#{pane_id}".into(), "x;".into()]);
    let launches = [launch("three", "w-three", "fp-3"), other, odd];
    let started = runtime.start_many(&launches);
    let panes: Vec<String> = started
        .into_iter()
        .map(|s| match s {
            Started::Pane(p) => p,
            other => panic!("{name}: {other:?}"),
        })
        .collect();
    assert_eq!(panes.len(), 3, "{name}");
    for (pane, l) in panes.iter().zip(&launches) {
        let p = until(runtime, pane, "alive", |p| !p.dead);
        assert_eq!(
            (
                p.agent.as_deref(),
                p.fingerprint.as_deref(),
                p.session.as_str()
            ),
            (
                Some(l.agent.as_str()),
                Some(l.fingerprint.as_str()),
                l.session.as_str()
            ),
            "{name}: {p:?}"
        );
    }
    let listed = runtime.list().unwrap().unwrap_or_default();
    let fives: Vec<&PaneObs> = listed
        .iter()
        .filter(|p| p.agent.as_deref() == Some("five"))
        .collect();
    assert_eq!(fives.len(), 1, "{name}: started once");
    let mut to_stop: Vec<&str> = panes.iter().map(String::as_str).collect();
    to_stop.insert(1, gone);
    let stopped = runtime.stop_many(&to_stop);
    assert_eq!(stopped.len(), 4, "{name}: one result per pane");
    assert!(stopped.iter().all(Result::is_ok), "{name}: {stopped:?}");
    let listed = runtime.list().unwrap().unwrap_or_default();
    assert!(
        listed.iter().all(|p| !panes.contains(&p.id)),
        "{name}: every pane stopped: {listed:?}"
    );
    assert!(runtime.stop_many(&[]).is_empty(), "{name}");
}
