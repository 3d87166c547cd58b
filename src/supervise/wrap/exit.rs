//! After an exit: build the incident, let the recovery pipeline decide, keep the evidence,
//! record the one reason, and wait out the cooldown.

use super::*;

/// What an exit's bookkeeping needs, owned: it runs on a thread of its own.
pub(super) struct Books {
    pub(super) spec: Spec,
    pub(super) agent: AgentSpec,
    pub(super) fleet: FleetDir,
    pub(super) dir: AgentDir,
}

/// An exit's bookkeeping, under way on its thread.
#[must_use = "the bookkeeping must be finished before anything else happens"]
pub(super) struct Aftermath(Option<std::thread::JoinHandle<()>>);

impl Aftermath {
    /// Run `job` on a thread; here and now if no thread can be had.
    fn start(job: impl FnOnce() + Send + 'static) -> Aftermath {
        let job = std::sync::Arc::new(std::sync::Mutex::new(Some(job)));
        let on_thread = job.clone();
        let spawned = std::thread::Builder::new()
            .name("exit bookkeeping".into())
            .spawn(move || {
                let job = on_thread.lock().ok().and_then(|mut j| j.take());
                if let Some(job) = job {
                    job();
                }
            });
        match spawned {
            Ok(t) => Aftermath(Some(t)),
            Err(_) => {
                let job = job.lock().ok().and_then(|mut j| j.take());
                if let Some(job) = job {
                    job();
                }
                Aftermath(None)
            }
        }
    }

    /// Wait until all of it is written.
    pub(super) fn finish(self) {
        if let Some(t) = self.0 {
            let _ = t.join();
        }
    }
}

impl Wrapper {
    /// The exit is an incident: build it with its facts, let the recovery pipeline decide
    /// (the policy, and the Clinic for a crash it can name) and answer at once; what cannot
    /// change the answer — keeping the evidence, the handoff, the executor's writes, the one
    /// recorded reason — goes on meanwhile (`Aftermath`), to be finished before the next start.
    pub(super) fn after_exit(
        &mut self,
        run: &Run,
        requested: Option<recovery::StopRequest>,
    ) -> (Recovery, Aftermath) {
        let saved = record::load(&self.dir);
        let facts = Facts {
            recent_crashes: saved.recent_crash_times(),
            last_work: saved.last_work,
            ..Facts::new(AgentInfo::from_spec(&self.spec, &self.agent))
        };
        let (code, signal) = status_parts(run.status);
        // The session a restart would resume: the resumed one, else the one this run recorded
        // if it got as far as a turn. Without one, a restart is no resume.
        let session_id = run.session_id.clone().or_else(|| {
            record::recorded_session(&self.dir)
                .map(|s| s.id)
                .filter(|id| record::session_has_turn(&self.dir, id))
        });
        let exit = ExitFacts {
            code,
            signal,
            runtime_ms: run.runtime.as_millis() as u64,
            mode: run.mode,
            session_id: session_id.clone(),
            showed_life: run.showed_life,
            resume_refused: run.resume_refused,
            worked: did_work(&self.dir, run.runtime),
            fresh_requested: self.dir.has_marker(state::FRESH),
            trust_question: run.trust_question.clone(),
            requested,
            now: jiff::Timestamp::now().as_second(),
        };
        let incident = Incident::Exit(exit.clone());
        let pane_tail = self.crash_evidence(&incident, run.screen.as_deref());
        // Lua is loaded here, after an exit, never on a hook's path, and kept for the next
        // exit while no policy file changes (a crash loop does not load it once a crash).
        // Stops requested on purpose need no policy.
        let policies = exit.requested.is_none().then(|| self.policies());
        let policies = policies.as_deref();
        let templates = Templates::for_spec(&self.spec);
        let decision = recovery::decide(&incident, &facts, policies, |shown| {
            let clinic = Clinic {
                policies: policies?,
                templates: &templates,
                settings: &self.spec.clinic,
                fleet: self.fleet.clone(),
                spent: saved.recoveries.clone(),
            };
            clinic.after_crash(&TriageInput {
                agent: AgentInfo::from_spec(&self.spec, &self.agent),
                dir: &self.dir,
                exit: shown.cloned(),
                transcript: None,
                output: pane_tail.as_deref().map(without_our_lines),
                session: crate::clinic::triage::Session::Latest,
            })
        });
        // The sessions a fresh start leaves behind: the one this run resumed and the one
        // its hooks recorded last.
        let sessions: Vec<String> = run
            .session_id
            .iter()
            .cloned()
            .chain(record::recorded_session(&self.dir).map(|s| s.id))
            .collect();
        // A quarantine written before this stop (the watchdog's stop for a person) is what
        // comes next, whatever the stop itself would start.
        let quarantined = record::load(&self.dir).safe_mode.map(|q| q.reason);
        self.announce(&decision, session_id.is_some(), quarantined.as_deref());
        let books = self.books();
        let run = run.clone();
        let answer = decision.clone();
        let job = move || books.keep(&run, &exit, &answer, pane_tail, &sessions);
        (decision, Aftermath::start(job))
    }

    /// The fleet's policies, loaded at the first exit that needs them and kept while their
    /// files stay as they were.
    fn policies(&mut self) -> std::rc::Rc<Policies> {
        let now = Policies::sources(&self.spec);
        match &self.policies {
            Some((sources, kept)) if *sources == now => kept.clone(),
            _ => {
                let fresh = std::rc::Rc::new(Policies::for_spec(&self.spec));
                self.policies = Some((now, fresh.clone()));
                fresh
            }
        }
    }

    /// The evidence of a crash, from the pane as the exit left it: only what this session
    /// printed (the scrollback above its start is another's), its last `EVIDENCE_LINES`.
    fn crash_evidence(&self, incident: &Incident, screen: Option<&str>) -> Option<String> {
        let screen = screen.filter(|_| incident.is_crash())?;
        let text = crate::clinic::triage::this_session(screen, &self.agent.name);
        let lines: Vec<&str> = text.trim_end().lines().collect();
        Some(lines[lines.len().saturating_sub(EVIDENCE_LINES)..].join("\n"))
    }
}

impl Books {
    /// Everything an exit leaves on disk once decided, in the order it always had: the
    /// crash's evidence, the handoff, the executor's writes, the one recorded reason; then
    /// the controller is woken.
    fn keep(
        &self,
        run: &Run,
        exit: &ExitFacts,
        decision: &Recovery,
        pane_tail: Option<String>,
        sessions: &[String],
    ) {
        if exit.worked {
            let _ = record::update(&self.dir, |l| l.last_work = Some(exit.now));
        }
        if decision.counts_as_crash {
            self.keep_crash(decision, run, exit, pane_tail);
        }
        self.hand_off(decision);
        for problem in recovery::execute::after_exit(
            &self.fleet,
            &self.dir,
            &self.agent,
            decision,
            (exit.code, exit.signal),
            sessions,
        ) {
            say(&problem);
        }
        self.record_end(
            run,
            decision.reason,
            json!({
                "action": decision.start, "delay_ms": decision.delay_ms(),
                "explain": decision.explain, "counts_as_crash": decision.counts_as_crash,
                "decided_by": decision.decided_by,
            }),
        );
        crate::state::daemon::poke(&self.fleet, &self.agent.name);
    }

    /// The crash record and the ledger entry of a crash.
    fn keep_crash(
        &self,
        decision: &Recovery,
        run: &Run,
        exit: &ExitFacts,
        pane_tail: Option<String>,
    ) {
        let (code, signal) = (exit.code, exit.signal);
        let crash = CrashRecord {
            ts: state::now_rfc3339(),
            agent: self.agent.name.clone(),
            reason: decision.reason,
            code,
            signal,
            runtime_ms: exit.runtime_ms,
            mode: run.mode,
            session_id: run.session_id.clone(),
            argv: run.argv.clone(),
            decision: decision.explain.clone(),
            pane_tail,
        };
        let entry = CrashEntry {
            ts: exit.now,
            reason: decision.reason,
            code,
            signal,
            mode: run.mode,
        };
        let window = self.agent.restart.crash_window.as_secs() as i64;
        recovery::execute::keep_evidence(&self.dir, &crash, entry, window);
    }

    /// Clear, don't compact: what this session knew is saved before the next one starts. A
    /// clean exit was a person's choice, and one at the trust question never began; anything
    /// else gets a handoff.
    fn hand_off(&self, decision: &Recovery) {
        if !matches!(
            decision.reason,
            EndReason::CleanExit | EndReason::TrustDeclined
        ) {
            let trigger = if decision.context_cleared || decision.reason == EndReason::PlannedCycle
            {
                crate::continuity::Trigger::ContextLimit
            } else if decision.counts_as_crash {
                crate::continuity::Trigger::Crash
            } else {
                crate::continuity::Trigger::AutoRestart
            };
            if let Err(e) = crate::continuity::auto_handoff(&self.spec, &self.agent, trigger, None)
            {
                let _ = self
                    .dir
                    .record_op(Op::HandoffFailed, json!({"error": e.to_string()}));
            }
        }
    }

    /// The one `agent_exit` line for this run: the supervisor's single reason for the end of
    /// the session (the CLI's own SessionEnd hook may log its view separately).
    pub(super) fn record_end(&self, run: &Run, reason: EndReason, extra: serde_json::Value) {
        let (code, signal) = status_parts(run.status);
        let mut fields = json!({
            "reason": reason, "code": code, "signal": signal,
            "runtime_ms": run.runtime.as_millis() as u64, "mode": run.mode,
            "session_id": run.session_id, "showed_life": run.showed_life,
        });
        if run.resume_refused {
            fields["resume_refused"] = json!(true);
        }
        if let (Some(f), serde_json::Value::Object(x)) = (fields.as_object_mut(), extra) {
            f.extend(x);
        }
        let _ = self.dir.record_op(Op::AgentExit, fields);
    }
}

impl Wrapper {
    /// Say in the pane how the run ended and what comes next.
    fn announce(&self, decision: &Recovery, resumable: bool, quarantined: Option<&str>) {
        let delay = decision.delay;
        let again = if resumable { "resuming" } else { "restarting" };
        let next = match (decision.start, quarantined) {
            (_, Some(why)) => format!("safe mode ({why})"),
            (Some(Start::SafeMode) | None, None) => "safe mode".to_string(),
            (Some(Start::Resume), None) if delay.is_zero() => format!("{again} now"),
            (Some(Start::Fresh), None) if delay.is_zero() => "starting fresh now".to_string(),
            (Some(Start::Resume), None) => format!("{again} in {}", spec::duration::format(delay)),
            (Some(Start::Fresh), None) => {
                format!("starting fresh in {}", spec::duration::format(delay))
            }
        };
        say(&format!(
            "`{}` ended ({}): {} → {next}",
            self.agent.name,
            decision.reason.as_str(),
            decision.explain
        ));
    }

    /// Wait until `until` before the next start; false if the wrapper was told to stop
    /// meanwhile.
    pub(super) fn cooldown(&self, until: Instant) -> bool {
        while Instant::now() < until {
            if term::stop_signal().is_some() {
                return false;
            }
            collect_orphans();
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
        term::stop_signal().is_none()
    }
}

/// Whether the run that ended now, after `runtime`, did work: a turn it finished (its
/// turn-end hook) or a tool call it made (tool_use.jsonl written since it started).
fn did_work(dir: &AgentDir, runtime: Duration) -> bool {
    let Some(started) = SystemTime::now().checked_sub(runtime) else {
        return false;
    };
    let tool_call = std::fs::metadata(dir.file(state::TOOL_USE))
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= started);
    let since = jiff::Timestamp::try_from(started).ok();
    tool_call
        || state::op::tail(&dir.file(state::OPS_LOG)).iter().any(|op| {
            matches!(op.op, Op::TurnComplete(_))
                && op.time().zip(since).is_some_and(|(t, s)| t >= s)
        })
}

pub(super) fn status_parts(status: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
    match status {
        Some(s) => (s.code(), s.signal()),
        None => (None, None),
    }
}
