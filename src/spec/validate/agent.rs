//! Validation of one `[[agent]]` with `[defaults]` applied: each key is the agent's own
//! value, else the one in `[defaults]`, else phoenix's default.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::Validator;
use crate::diag::suggest;
use crate::spec::raw::{RawAgent, Spanned};
use crate::spec::{AgentSpec, Cli, Fleet, McpPermission, RestartSettings, SESSION_ID};

/// `[[agent]] env` and `[defaults] env`: variable names and values as written.
type RawEnv = BTreeMap<Spanned<String>, Spanned<String>>;

const UNBALANCED_HINT: &str =
    "the command is split like a shell would, but never run by one; close every quote";

impl Validator<'_> {
    /// The agent, or `None` once any of its values is reported.
    pub(super) fn agent(
        &mut self,
        raw: &RawAgent,
        span: Range<usize>,
        defaults: &RawAgent,
        fleet: &Fleet,
        default_restart: &RestartSettings,
    ) -> Option<AgentSpec> {
        let errors_before = self.diags.len();
        let Some(raw_name) = &raw.name else {
            self.error(
                "[[agent]] has no `name`".into(),
                Some(span.start..span.start + 1),
                "add `name = \"…\"` (letters, digits, `_`, `-`)",
            );
            return None;
        };
        let name = self.name(raw_name, "agent name");
        let cli = self.cli(raw.cli.as_ref().or(defaults.cli.as_ref()), &name);
        let command = raw.command.as_ref().or(defaults.command.as_ref());
        let (command, argv) = self
            .launch_command(command, cli, raw_name, &name)
            .unwrap_or_default();
        let resume = raw
            .resume_command
            .as_ref()
            .or(defaults.resume_command.as_ref());
        let (resume_command, resume_argv) = self.resume_command(resume, &name).unzip();
        let (workdir, workspace) = self.place(raw, defaults, &name);
        let env = self.env([defaults.env.as_ref(), raw.env.as_ref()], &name);
        let (session, window) = self.tmux_window(raw, defaults, &fleet.name, &name);
        let restart = self.restart(raw.restart.as_ref(), default_restart);
        let notify = raw.notify.as_ref().or(defaults.notify.as_ref());
        let notify = notify.map(|list| self.notify_channels(list, &name));
        let policy = raw.policy.as_ref().or(defaults.policy.as_ref());
        let policy = policy.and_then(|p| self.policy(p, &name));
        let budget = self.budget(raw.budget.as_ref(), defaults.budget.as_ref(), &name);
        let mcp_allow = self.mcp_allow(
            raw.mcp
                .as_ref()
                .and_then(|m| m.allow.as_ref())
                .or(defaults.mcp.as_ref().and_then(|m| m.allow.as_ref())),
            &name,
        );
        let state_dir = fleet.state_dir.join("agents").join(&name);
        let home = env.get("HOME").map(PathBuf::from);
        let sandbox = self.agent_sandbox(
            raw.sandbox.as_ref().or(defaults.sandbox.as_ref()),
            &name,
            &workdir,
            &state_dir,
            home.as_deref(),
        );
        if self.diags.len() > errors_before {
            return None;
        }
        Some(AgentSpec {
            name,
            cli: cli?,
            command,
            argv,
            resume_command,
            resume_argv,
            workdir,
            workspace,
            env,
            session,
            window,
            enabled: raw.enabled.or(defaults.enabled).unwrap_or(true),
            restart,
            guard_structured_files: raw
                .guard_structured_files
                .or(defaults.guard_structured_files)
                .unwrap_or(false),
            tap: raw.tap.or(defaults.tap).unwrap_or(true),
            notify,
            policy,
            budget,
            sandbox,
            origin: None,
            mcp_allow,
        })
    }

    /// `mcp = { allow = [...] }`: each a permission phoenix knows, default read and message.
    fn mcp_allow(&mut self, list: Option<&Spanned<Vec<String>>>, name: &str) -> Vec<McpPermission> {
        let Some(list) = list else {
            return McpPermission::DEFAULT.to_vec();
        };
        let mut allow = Vec::new();
        for word in list.get_ref() {
            match McpPermission::parse(word) {
                Some(p) => allow.push(p),
                None => self.error(
                    format!("agent `{name}`: unknown mcp permission `{word}`"),
                    Some(list.span()),
                    &suggest(word, &McpPermission::NAMES),
                ),
            }
        }
        allow.sort();
        allow.dedup();
        allow
    }

    /// The agent's CLI (`custom` when not written); `None` once an unknown one is reported.
    fn cli(&mut self, value: Option<&Spanned<String>>, name: &str) -> Option<Cli> {
        let Some(v) = value else {
            return Some(Cli::Custom);
        };
        let cli = Cli::parse(v.get_ref());
        if cli.is_none() {
            self.error(
                format!("agent `{name}`: unknown cli `{}`", v.get_ref()),
                Some(v.span()),
                &suggest(v.get_ref(), &Cli::NAMES),
            );
        }
        cli
    }

    /// The command as written and split; without one, the CLI's own program.
    fn launch_command(
        &mut self,
        value: Option<&Spanned<String>>,
        cli: Option<Cli>,
        raw_name: &Spanned<String>,
        name: &str,
    ) -> Option<(String, Vec<String>)> {
        let Some(c) = value else {
            // An unknown cli is already reported: "no command" would only be its echo.
            let program = cli?.default_command();
            let Some(program) = program else {
                self.error(
                    format!("agent `{name}` has no `command`"),
                    Some(raw_name.span()),
                    "a `custom` agent needs `command = \"…\"`",
                );
                return None;
            };
            return Some((program.to_string(), vec![program.to_string()]));
        };
        let hint = "the program to run, e.g. \"claude --model opus\"";
        let argv = self.split_command(c, name, "command", hint)?;
        Some((c.get_ref().clone(), argv))
    }

    /// The resume form as written and split; it must say where the session id goes.
    fn resume_command(
        &mut self,
        value: Option<&Spanned<String>>,
        name: &str,
    ) -> Option<(String, Vec<String>)> {
        let c = value?;
        let hint = "leave it out, or give the resume form, e.g. \"my-cli --resume {session_id}\"";
        let argv = self.split_command(c, name, "resume_command", hint)?;
        // Without the placeholder every "resume" would start a new session: the agent would
        // lose its conversation on each restart while phoenix said "resumed".
        if !argv.iter().any(|a| a.contains(SESSION_ID)) {
            self.error(
                format!("agent `{name}`: `resume_command` has no `{SESSION_ID}`"),
                Some(c.span()),
                &format!(
                    "phoenix puts the recorded session id where `{SESSION_ID}` stands, e.g. \"{} --resume {SESSION_ID}\"",
                    argv[0]
                ),
            );
            return None;
        }
        Some((c.get_ref().clone(), argv))
    }

    /// `key`'s command split like a shell would (it is never run by one); `None` once an
    /// empty command or an unbalanced quote is reported.
    fn split_command(
        &mut self,
        value: &Spanned<String>,
        name: &str,
        key: &str,
        empty_hint: &str,
    ) -> Option<Vec<String>> {
        let (problem, hint) = match shlex::split(value.get_ref()) {
            Some(argv) if !argv.is_empty() => return Some(argv),
            Some(_) => ("is empty", empty_hint),
            None => ("has unbalanced quotes", UNBALANCED_HINT),
        };
        self.error(
            format!("agent `{name}`: `{key}` {problem}"),
            Some(value.span()),
            hint,
        );
        None
    }

    /// Where the agent runs; without a `workdir`, next to phoenix.toml.
    pub(super) fn workdir(&mut self, value: Option<&Spanned<String>>, name: &str) -> PathBuf {
        let Some(w) = value else {
            return self.dir.to_path_buf();
        };
        let path = self.path(w.get_ref());
        if !self.options.check_filesystem {
            return path;
        }
        if !path.exists() {
            self.missing(name, "workdir", &path, w, "directory");
        } else if !path.is_dir() {
            self.error(
                format!(
                    "agent `{name}`: workdir `{}` is not a directory",
                    path.display()
                ),
                Some(w.span()),
                "point `workdir` at a directory",
            );
        }
        path
    }

    /// Reports that the `key` path of agent `name` is not there.
    pub(super) fn missing(
        &mut self,
        name: &str,
        key: &str,
        path: &Path,
        at: &Spanned<String>,
        kind: &str,
    ) {
        self.error(
            format!("agent `{name}`: {key} `{}` does not exist", path.display()),
            Some(at.span()),
            &format!(
                "create the {kind} or fix the path (relative paths are relative to phoenix.toml)"
            ),
        );
    }

    /// The environment of `[defaults]` with the agent's own on top.
    fn env(&mut self, tables: [Option<&RawEnv>; 2], name: &str) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for (k, v) in tables.into_iter().flatten().flatten() {
            let key = k.get_ref();
            if !super::is_env_name(key) {
                self.error(
                    format!("agent `{name}`: `{key}` is not a valid environment variable name"),
                    Some(k.span()),
                    "use letters, digits and `_`, not starting with a digit",
                );
            }
            if v.get_ref().contains('\0') {
                self.error(
                    format!("agent `{name}`: env `{key}` contains a NUL byte"),
                    Some(v.span()),
                    "remove it",
                );
            }
            env.insert(key.clone(), v.get_ref().clone());
        }
        env
    }

    /// The tmux session (inherited; default the fleet's name) and window (the agent's own;
    /// default its name).
    fn tmux_window(
        &mut self,
        raw: &RawAgent,
        defaults: &RawAgent,
        fleet_name: &str,
        name: &str,
    ) -> (String, String) {
        let session = [raw, defaults]
            .iter()
            .find_map(|a| a.tmux.as_ref()?.session.as_ref());
        let session = match session {
            Some(s) => self.name(s, "tmux session"),
            None => fleet_name.to_string(),
        };
        let window = match raw.tmux.as_ref().and_then(|t| t.window.as_ref()) {
            Some(w) => self.name(w, "tmux window"),
            None => name.to_string(),
        };
        (session, window)
    }

    /// The `[notify]` channels named in the agent's `notify` list.
    fn notify_channels(&mut self, list: &Spanned<Vec<String>>, name: &str) -> Vec<String> {
        const CHANNELS: [&str; 4] = ["github", "webhook", "command", "ntfy"];
        let unknown = list
            .get_ref()
            .iter()
            .find(|c| !CHANNELS.contains(&c.as_str()));
        if let Some(bad) = unknown {
            self.error(
                format!("agent `{name}`: unknown notify channel `{bad}`"),
                Some(list.span()),
                &format!(
                    "{} (channels are configured in [notify])",
                    suggest(bad, &CHANNELS)
                ),
            );
        }
        list.get_ref().clone()
    }

    /// The agent's own Lua policy file.
    fn policy(&mut self, value: &Spanned<String>, name: &str) -> Option<PathBuf> {
        if value.get_ref().trim().is_empty() {
            self.error(
                format!("agent `{name}`: `policy` is empty"),
                Some(value.span()),
                "a Lua file, e.g. \"policies/careful.lua\"; leave it out for policies/recovery.lua",
            );
            return None;
        }
        let path = self.path(value.get_ref());
        if self.options.check_filesystem && !path.is_file() {
            self.missing(name, "policy", &path, value, "file");
        }
        Some(path)
    }
}
