//! Validation of one `[[agent]]` with `[defaults]` applied.

use std::collections::BTreeMap;

use super::Validator;
use crate::diag::suggest;
use crate::spec::raw::RawAgent;
use crate::spec::{AgentSpec, Cli, Fleet, RestartSettings, SESSION_ID};

impl Validator<'_> {
    pub(super) fn agent(
        &mut self,
        raw: &RawAgent,
        span: std::ops::Range<usize>,
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

        let cli_value = raw.cli.as_ref().or(defaults.cli.as_ref());
        let cli = match cli_value {
            None => Cli::Custom,
            Some(v) => match Cli::parse(v.get_ref()) {
                Some(c) => c,
                None => {
                    self.error(
                        format!("agent `{name}`: unknown cli `{}`", v.get_ref()),
                        Some(v.span()),
                        &suggest(v.get_ref(), &Cli::NAMES),
                    );
                    Cli::Custom
                }
            },
        };

        let command_value = raw.command.as_ref().or(defaults.command.as_ref());
        let (command, argv) = match command_value {
            Some(c) => match shlex::split(c.get_ref()) {
                Some(argv) if !argv.is_empty() => (c.get_ref().clone(), argv),
                Some(_) => {
                    self.error(
                        format!("agent `{name}`: `command` is empty"),
                        Some(c.span()),
                        "the program to run, e.g. \"claude --model opus\"",
                    );
                    (String::new(), Vec::new())
                }
                None => {
                    self.error(format!("agent `{name}`: `command` has unbalanced quotes"), Some(c.span()), "the command is split like a shell would, but never run by one; close every quote");
                    (String::new(), Vec::new())
                }
            },
            None => match cli.default_command() {
                Some(c) => (c.to_string(), vec![c.to_string()]),
                None => {
                    self.error(
                        format!("agent `{name}` has no `command`"),
                        Some(raw_name.span()),
                        "a `custom` agent needs `command = \"…\"`",
                    );
                    (String::new(), Vec::new())
                }
            },
        };

        let resume_value = raw
            .resume_command
            .as_ref()
            .or(defaults.resume_command.as_ref());
        let (resume_command, resume_argv) = match resume_value {
            None => (None, None),
            Some(c) => match shlex::split(c.get_ref()) {
                Some(argv) if argv.iter().any(|a| a.contains(SESSION_ID)) => {
                    (Some(c.get_ref().clone()), Some(argv))
                }
                // Without the placeholder every "resume" would start a new session: the
                // agent would lose its conversation on each restart while phoenix said
                // "resumed".
                Some(argv) if !argv.is_empty() => {
                    self.error(
                        format!("agent `{name}`: `resume_command` has no `{SESSION_ID}`"),
                        Some(c.span()),
                        &format!(
                            "phoenix puts the recorded session id where `{SESSION_ID}` stands, e.g. \"{} --resume {SESSION_ID}\"",
                            argv[0]
                        ),
                    );
                    (None, None)
                }
                Some(_) => {
                    self.error(
                        format!("agent `{name}`: `resume_command` is empty"),
                        Some(c.span()),
                        "leave it out, or give the resume form, e.g. \"my-cli --resume {session_id}\"",
                    );
                    (None, None)
                }
                None => {
                    self.error(
                        format!("agent `{name}`: `resume_command` has unbalanced quotes"),
                        Some(c.span()),
                        "the command is split like a shell would, but never run by one; close every quote",
                    );
                    (None, None)
                }
            },
        };

        let workdir = match raw.workdir.as_ref().or(defaults.workdir.as_ref()) {
            Some(w) => {
                let path = self.path(w.get_ref());
                if self.options.check_filesystem {
                    if !path.exists() {
                        self.error(
                            format!("agent `{name}`: workdir `{}` does not exist", path.display()),
                            Some(w.span()),
                            "create the directory or fix the path (relative paths are relative to phoenix.toml)",
                        );
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
                }
                path
            }
            None => self.dir.to_path_buf(),
        };

        let mut env = BTreeMap::new();
        for table in [defaults.env.as_ref(), raw.env.as_ref()]
            .into_iter()
            .flatten()
        {
            for (k, v) in table {
                let key = k.get_ref();
                let valid = !key.is_empty()
                    && !key.starts_with(|c: char| c.is_ascii_digit())
                    && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !valid {
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
        }

        let tmux_default = defaults.tmux.as_ref();
        let session = match raw
            .tmux
            .as_ref()
            .and_then(|t| t.session.as_ref())
            .or(tmux_default.and_then(|t| t.session.as_ref()))
        {
            Some(s) => self.name(s, "tmux session"),
            None => fleet.name.clone(),
        };
        let window = match raw.tmux.as_ref().and_then(|t| t.window.as_ref()) {
            Some(w) => self.name(w, "tmux window"),
            None => name.clone(),
        };
        let enabled = raw.enabled.or(defaults.enabled).unwrap_or(true);
        let restart = self.restart(raw.restart.as_ref(), default_restart);
        let tap = raw.tap.or(defaults.tap).unwrap_or(true);
        let notify = match raw.notify.as_ref().or(defaults.notify.as_ref()) {
            Some(list) => {
                const CHANNELS: [&str; 3] = ["github", "webhook", "command"];
                let unknown: Vec<&String> = list
                    .get_ref()
                    .iter()
                    .filter(|c| !CHANNELS.contains(&c.as_str()))
                    .collect();
                if let Some(bad) = unknown.first() {
                    self.error(
                        format!("agent `{name}`: unknown notify channel `{bad}`"),
                        Some(list.span()),
                        &format!(
                            "{} (channels are configured in [notify])",
                            suggest(bad, &CHANNELS)
                        ),
                    );
                }
                Some(list.get_ref().clone())
            }
            None => None,
        };
        let guard_structured_files = raw
            .guard_structured_files
            .or(defaults.guard_structured_files)
            .unwrap_or(false);
        let policy = match raw.policy.as_ref().or(defaults.policy.as_ref()) {
            Some(p) if p.get_ref().trim().is_empty() => {
                self.error(
                    format!("agent `{name}`: `policy` is empty"),
                    Some(p.span()),
                    "a Lua file, e.g. \"policies/careful.lua\"; leave it out for policies/recovery.lua",
                );
                None
            }
            Some(p) => {
                let path = self.path(p.get_ref());
                if self.options.check_filesystem && !path.is_file() {
                    self.error(
                        format!(
                            "agent `{name}`: policy `{}` does not exist",
                            path.display()
                        ),
                        Some(p.span()),
                        "create the file or fix the path (relative paths are relative to phoenix.toml)",
                    );
                }
                Some(path)
            }
            None => None,
        };

        if self.diags.len() > errors_before {
            return None;
        }
        Some(AgentSpec {
            name,
            cli,
            command,
            argv,
            resume_command,
            resume_argv,
            workdir,
            env,
            session,
            window,
            enabled,
            restart,
            guard_structured_files,
            tap,
            notify,
            policy,
        })
    }
}
