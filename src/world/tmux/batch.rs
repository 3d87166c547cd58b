//! Starting many agents with few tmux calls: the server is asked once which sessions exist,
//! then the windows are created as command sequences (`new-window … ; set-option … ; …`), as
//! many per call as a command line holds. Every value still goes as its own argument (made
//! inert by `Tmux::run`), never through a shell or a format.

use std::collections::BTreeSet;

use super::{PANE_START_DIR, Tmux, check, is_no_server, option};
use crate::text::sh_quote;
use crate::world::inert::format_literal;
use crate::world::{Launch, RuntimeError, Started, Tag};

/// A tmux client sends its command line to the server as one message of at most 16 KiB
/// (`command too long` beyond it); this leaves room for the message's own framing.
const CALL_BYTES: usize = 12 * 1024;

impl Tmux {
    /// The sessions the server has now; none when there is no server yet.
    fn sessions(&self) -> Result<BTreeSet<String>, RuntimeError> {
        match self.run(["list-sessions", "-F", "#{session_name}"]) {
            Ok(out) => Ok(out.lines().map(str::to_string).collect()),
            Err(e) if is_no_server(&e) => Ok(BTreeSet::new()),
            Err(e) => Err(e),
        }
    }

    /// Start every launch; see `Runtime::start_many`. One `list-sessions`, then one call per
    /// chunk of launches. A call that fails stops where tmux stopped: the launches before it
    /// have their panes (tmux printed their ids), the one it stopped at failed, the rest were
    /// not tried.
    pub(super) fn start_batch(&self, launches: &[Launch]) -> Vec<Started> {
        let mut sessions = match self.sessions() {
            Ok(s) => s,
            Err(e) => {
                let mut e = Some(e);
                return launches
                    .iter()
                    .map(|_| e.take().map_or(Started::NotTried, Started::Failed))
                    .collect();
            }
        };
        let mut out = Vec::with_capacity(launches.len());
        let mut chunk: Vec<Vec<String>> = Vec::new();
        let mut bytes = 0;
        for launch in launches {
            let commands = commands_for(launch, sessions.insert(launch.session.clone()));
            let size: usize = commands.iter().map(|a| a.len() + 2).sum();
            if !chunk.is_empty() && bytes + size > CALL_BYTES {
                out.extend(self.run_chunk(std::mem::take(&mut chunk)));
                bytes = 0;
            }
            bytes += size;
            chunk.push(commands);
        }
        if !chunk.is_empty() {
            out.extend(self.run_chunk(chunk));
        }
        out
    }

    /// Stop every pane of `panes`; see `Runtime::stop_many`. `kill-pane`s chained with `;`,
    /// as many per call as a command line holds (one client call per pane made `phoenix down`
    /// of 300 agents slower than applying them: issue 34). tmux stops a sequence at its first
    /// failing command without saying which, so the panes of a call that failed are stopped
    /// one by one (`stop`: a pane already gone is stopped).
    pub(super) fn stop_batch(&self, panes: &[&str]) -> Vec<Result<(), RuntimeError>> {
        let mut out = Vec::with_capacity(panes.len());
        let mut chunk: Vec<&str> = Vec::new();
        let mut bytes = 0;
        let flush = |chunk: &mut Vec<&str>, out: &mut Vec<Result<(), RuntimeError>>| {
            if chunk.is_empty() {
                return;
            }
            let mut args: Vec<&str> = Vec::with_capacity(chunk.len() * 4);
            for (i, pane) in chunk.iter().enumerate() {
                if i > 0 {
                    args.push(";");
                }
                args.extend(["kill-pane", "-t", pane]);
            }
            match self.run(&args) {
                Ok(_) => out.extend(chunk.iter().map(|_| Ok(()))),
                // The server went with the last pane, or was not there: every pane is gone.
                Err(e) if is_no_server(&e) => out.extend(chunk.iter().map(|_| Ok(()))),
                Err(_) => out.extend(chunk.iter().map(|pane| {
                    use crate::world::Runtime;
                    self.stop(pane)
                })),
            }
            chunk.clear();
        };
        for pane in panes {
            let size = pane.len() + "kill-pane -t ; ".len();
            if bytes + size > CALL_BYTES {
                flush(&mut chunk, &mut out);
                bytes = 0;
            }
            bytes += size;
            chunk.push(pane);
        }
        flush(&mut chunk, &mut out);
        out
    }

    /// One call for the launches of `chunk` (each given as its commands); what became of each.
    fn run_chunk(&self, chunk: Vec<Vec<String>>) -> Vec<Started> {
        let n = chunk.len();
        let mut args: Vec<String> = Vec::new();
        for (i, commands) in chunk.into_iter().enumerate() {
            if i > 0 {
                args.push(";".into());
            }
            args.extend(commands);
            if i == 0 {
                // Keep dead panes so exits can be observed and inspected; the server is ours
                // alone. Set once the server surely exists, in every call.
                args.extend([";", "set-option", "-g", "remain-on-exit", "on"].map(String::from));
            }
        }
        let (out, error) = match self.output(&args) {
            Ok(output) => {
                let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
                let described: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
                (stdout, check(output, &described).err())
            }
            Err(e) => (String::new(), Some(e)),
        };
        // `-P` prints each new pane's id as it is made: the first lines are the panes made,
        // and tmux stops a sequence at its first failing command.
        let made: Vec<&str> = out
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with('%'))
            .collect();
        let mut error = error;
        (0..n)
            .map(|i| match (made.get(i), &error) {
                (Some(pane), _) => Started::Pane(pane.to_string()),
                (None, Some(_)) if i == made.len() => {
                    Started::Failed(error.take().expect("checked just above"))
                }
                (None, Some(_)) => Started::NotTried,
                // The call succeeded without saying which pane it made (as `start` always said).
                (None, None) => Started::Failed(parse_error(&out)),
            })
            .collect()
    }
}

/// A call that succeeded without saying which pane it made.
fn parse_error(out: &str) -> RuntimeError {
    RuntimeError::Parse(format!(
        "expected a pane id from tmux, got `{}`",
        out.trim()
    ))
}

/// The commands that start `launch`: its window (and session, when `new`), then its tags, in
/// the same call, so that no other phoenix ever sees the pane untagged.
fn commands_for(launch: &Launch, new_session: bool) -> Vec<String> {
    let mut args: Vec<String> = if new_session {
        [
            "new-session",
            "-d",
            "-P",
            "-F",
            "#{pane_id}",
            "-x",
            "200",
            "-y",
            "50",
            "-s",
        ]
        .map(String::from)
        .to_vec()
    } else {
        vec![
            "new-window".into(),
            "-P".into(),
            "-F".into(),
            "#{pane_id}".into(),
            "-t".into(),
            format!("={}:", launch.session),
        ]
    };
    if new_session {
        args.push(launch.session.clone());
    }
    // tmux format-expands `-c`, so the agent's workdir never goes there: the wrapper changes
    // into it itself.
    args.extend([
        "-n".into(),
        launch.window.clone(),
        "-c".into(),
        PANE_START_DIR.into(),
    ]);
    args.extend(launch.argv.iter().cloned());
    // The new window is its session's current one (`new-window` without `-d` selects it), so
    // `=session:` names the new pane. Not the implicit target: after `new-session -d` that is
    // another session's pane.
    let target = format!("={}:", launch.session);
    args.extend(label_args(launch, &target));
    args.extend(tap_args(launch, &target));
    args
}

/// `set-option -p` of the fleet, agent and fingerprint tags on the pane `target`, each after a
/// `;`, and its phase unset: a pane starts with no phase (a respawned one kept its old
/// wrapper's), which reads as running once its agent is there, so a wrapper's first start
/// needs no tmux call of its own.
pub(super) fn label_args(launch: &Launch, target: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        ";",
        "set-option",
        "-p",
        "-u",
        "-t",
        target,
        option(Tag::Phase),
    ]
    .map(String::from)
    .to_vec();
    for (tag, value) in [
        (Tag::Fleet, launch.fleet.as_str()),
        (Tag::Agent, launch.agent.as_str()),
        (Tag::Fingerprint, launch.fingerprint.as_str()),
    ] {
        args.extend([";", "set-option", "-p", "-t", target].map(String::from));
        args.extend([option(tag).into(), value.into()]);
    }
    args
}

/// `pipe-pane` of the pane `target` into the launch's tap, after a `;`; nothing without one.
/// tmux runs the command through `sh -c` after format-expanding it: every word is quoted for
/// the shell and made a format literal (a path with `#(…)` in it stays a path), `exec`
/// replaces the shell, and the one format left, `#{pane_pid}`, gives the tap the pid of the
/// pane's own process (the wrapper it hands the pipe to). `pipe-pane` without `-o` replaces a
/// pipe already there (a respawned pane's, whose tap then sees its input end).
pub(super) fn tap_args(launch: &Launch, target: &str) -> Vec<String> {
    let Some(tap) = &launch.tap else {
        return Vec::new();
    };
    let words: Vec<String> = tap.iter().map(|w| sh_quote(w)).collect();
    let command = format!(
        "{} #{{pane_pid}}",
        format_literal(&format!("exec {}", words.join(" ")))
    );
    [";", "pipe-pane", "-t", target, &command]
        .map(String::from)
        .to_vec()
}
