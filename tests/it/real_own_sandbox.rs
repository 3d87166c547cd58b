//! The CLIs' own sandboxes inside phoenix's: the real Claude Code, Codex, Gemini CLI and
//! Copilot CLI, each run inside an outer bubblewrap sandbox built here by hand the way phoenix
//! builds one (read-only root, its own user, pid and network namespaces, only the workdir,
//! HOME and a private /tmp writable), with their own sandbox switched on as a user would, and
//! with and without what phoenix sets for it (`agent_cli::own_sandbox::plan`). The model is a
//! scripted server on loopback, reached from inside through a Unix socket bridged by socat on
//! both sides, as phoenix's network proxy is reached.
//! Runs only with `PHOENIX_TEST_REAL_CLIS=1`; needs bwrap and socat (`.ci/run` installs them).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An outer sandbox for one run: the socat bridge outside, from a Unix socket in `dir` to the
/// model server's port (stopped on drop), and the `bwrap` command line, as the issue gives it
/// or `hardened` (no user namespaces inside).
struct Outer {
    bridge: Child,
    socket: PathBuf,
    port: u16,
    writable: Vec<PathBuf>,
    hardened: bool,
}

impl Outer {
    fn new(dir: &Path, base_url: &str, writable: Vec<PathBuf>, hardened: bool) -> Outer {
        let port: u16 = base_url
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .expect("the server's port");
        let socket = dir.join("model.sock");
        let bridge = Command::new("socat")
            .arg(format!("UNIX-LISTEN:{},fork", socket.display()))
            .arg(format!("TCP:127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("socat runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        Outer {
            bridge,
            socket,
            port,
            writable,
            hardened,
        }
    }

    /// `bwrap … -- bash -c 'socat <inside end of the bridge> & exec "$@"' bash argv…`, from `cwd`.
    fn command(&self, cwd: &Path, argv: &[String]) -> Command {
        let mut cmd = Command::new("bwrap");
        cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
            .args(["--tmpfs", "/tmp"]);
        for dir in &self.writable {
            cmd.arg("--bind").arg(dir).arg(dir);
        }
        cmd.arg("--bind").arg(&self.socket).arg(&self.socket);
        cmd.args(["--unshare-user"]);
        if self.hardened {
            // What a hardened profile adds: nothing inside may make a user namespace.
            cmd.arg("--disable-userns");
        }
        cmd.args([
            "--unshare-pid",
            "--unshare-net",
            "--die-with-parent",
        ])
        .arg("--chdir")
        .arg(cwd)
        .args(["--", "bash", "-c"])
        .arg(format!(
            "socat TCP-LISTEN:{},bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:{} & \
             i=0; while [ $i -lt 100 ] && ! (exec 3<>/dev/tcp/127.0.0.1/{}) 2>/dev/null; do i=$((i+1)); sleep 0.05; done; \
             exec \"$@\"",
            self.port,
            self.socket.display(),
            self.port
        ))
        .arg("bash")
        .args(argv);
        cmd
    }
}

impl Drop for Outer {
    fn drop(&mut self) {
        let _ = self.bridge.kill();
        let _ = self.bridge.wait();
    }
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn enabled() -> bool {
    if !support::opted_in(
        support::REAL_CLIS,
        "tests/it/real_own_sandbox.rs (the CLIs' own sandboxes inside phoenix's)",
        "npm and access to the npm registry",
    ) {
        return false;
    }
    assert!(
        have("bwrap") && have("socat"),
        "the own-sandbox suite needs bwrap and socat (.ci/run installs them)"
    );
    true
}

/// A directory for one run outside /tmp (the outer sandbox has a /tmp of its own, and Codex
/// makes no helper aliases for its sandbox under /tmp).
fn run_dir() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    tempfile::Builder::new()
        .prefix("own-sandbox-")
        .tempdir_in(target)
        .unwrap()
}

/// The two outer sandboxes every scenario runs in.
const OUTERS: [(bool, &str); 2] = [(false, "as the issue gives it"), (true, "hardened")];

/// One run of a CLI's scripted shell call inside an outer sandbox: did the call's file appear,
/// what went back to the model as its result, what the CLI printed.
struct Ran {
    wrote: bool,
    result: String,
    said: String,
}

// ---- Claude Code.

use crate::real_cli::{CLAUDE_CODE_PINNED, claude_bin, claude_command, prepared_home};
use phoenix::agent_cli::Version;
use phoenix::agent_cli::own_sandbox;
use phoenix::spec::Cli;
use support::model_server::{ModelServer, Turn};

/// The user's own settings, with Claude Code's sandbox turned on.
const CLAUDE_SANDBOX_ON: &str =
    r#"{"skipDangerousModePermissionPrompt": true, "sandbox": {"enabled": true}}"#;

fn claude_version() -> String {
    support::cli_version("claude", "@anthropic-ai/claude-code", CLAUDE_CODE_PINNED)
}

/// `claude -p` with a scripted Bash call, its sandbox on in the user's settings, inside an
/// outer sandbox; `phoenix`: with what `own_sandbox::plan` sets for it.
fn claude_in_outer(hardened: bool, phoenix: bool) -> Ran {
    let tmp = run_dir();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let key = "sk-ant-test-0123456789abcdefghijklmnop";
    let home = prepared_home(tmp.path(), &work, key);
    std::fs::write(home.join(".claude/settings.json"), CLAUDE_SANDBOX_ON).unwrap();
    let server = ModelServer::start(vec![
        Turn::bash("echo phoenix-nested > nested.txt && cat nested.txt"),
        Turn::text("All done."),
    ]);
    let outer = Outer::new(
        tmp.path(),
        &server.base_url(),
        vec![work.clone(), home.clone()],
        hardened,
    );
    let bin = claude_bin();
    let mut argv: Vec<String> = [
        bin.to_str().unwrap(),
        "-p",
        "--dangerously-skip-permissions",
    ]
    .map(str::to_string)
    .to_vec();
    if phoenix {
        let version = Version::parse(&claude_version());
        let set = own_sandbox::plan(Cli::Claude, true, argv, &|_| None, version);
        assert!(set.env.is_empty());
        assert!(set.note.is_some());
        argv = set.argv;
    }
    argv.push("write the file".into());
    let mut cmd = outer.command(&work, &argv);
    cmd.env_clear();
    let env = claude_command(&bin, &home, &server, key);
    for (k, v) in env.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let result = server
        .message_requests()
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["type"] == "tool_result")
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    Ran {
        wrote: std::fs::read_to_string(work.join("nested.txt"))
            .is_ok_and(|t| t.trim() == "phoenix-nested"),
        result,
        said: format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The user turned Claude Code's own sandbox on. Inside phoenix's sandbox, with what phoenix
/// sets, its Bash call runs and the output reaches the model, in both outer sandboxes. Without
/// it the call fails: in the hardened one in every version (its bwrap cannot make a user
/// namespace), and in the plain one from 2.1.332 on (`Can't mount proc`).
#[test]
fn real_claude_bash_runs_inside_phoenixs_sandbox_with_its_own_sandbox_off() {
    if !enabled() {
        return;
    }
    let version = claude_version();
    for (hardened, outer) in OUTERS {
        let ran = claude_in_outer(hardened, true);
        assert!(ran.wrote, "{outer}: the file was written\n{}", ran.said);
        assert!(
            ran.result.contains("phoenix-nested") && ran.result.contains("\"is_error\":false"),
            "{outer}: the Bash output reached the model: {}",
            ran.result
        );
        assert!(ran.said.contains("All done."), "{outer}: {}", ran.said);

        let without = claude_in_outer(hardened, false);
        let fails = hardened || Version::parse(&version) >= Some(Version(2, 1, 332));
        if fails {
            assert!(!without.wrote, "{outer}, {version}: {}", without.result);
            assert!(
                without.result.contains("\"is_error\":true") && without.result.contains("bwrap"),
                "{outer}, {version}: its own bwrap failed the call: {}",
                without.result
            );
            // 2.1.332 makes a user namespace (refused when hardened), 2.1.197 does not, and
            // neither may mount a /proc of its own inside phoenix's.
            let why = ["Creating new namespace failed", "Can't mount proc"];
            assert!(
                why.iter().any(|w| without.result.contains(w)),
                "{outer}, {version}: {}",
                without.result
            );
        } else {
            // 2.1.197 nests its bwrap where the outer sandbox allows user namespaces.
            assert!(without.wrote, "{outer}, {version}: {}", without.result);
        }
    }
}

// ---- Codex.

use crate::real_codex::CODEX_PINNED;
use support::openai_server::{self, exec};

fn codex_bin() -> PathBuf {
    support::npm_cli("codex", "@openai/codex", CODEX_PINNED, "codex")
}

fn codex_version() -> String {
    support::cli_version("codex", "@openai/codex", CODEX_PINNED)
}

/// `codex exec` with a scripted shell call, the user's config choosing Codex's
/// `workspace-write` sandbox, inside an outer sandbox; `phoenix`: with what
/// `own_sandbox::plan` sets for it.
fn codex_in_outer(hardened: bool, phoenix: bool) -> Ran {
    let tmp = run_dir();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let home = tmp.path().join("home");
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let server = openai_server::start(vec![
        exec("echo phoenix-nested > nested.txt && cat nested.txt"),
        Turn::text("All done."),
    ]);
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"gpt-5\"\nmodel_provider = \"scripted\"\ncheck_for_update_on_startup = false\n\
             sandbox_mode = \"workspace-write\"\n\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n\
             env_key = \"SCRIPTED_API_KEY\"\nrequest_max_retries = 0\nstream_max_retries = 0\n\n\
             [projects.\"{}\"]\ntrust_level = \"trusted\"\n",
            server.base_url(),
            work.display()
        ),
    )
    .unwrap();
    let outer = Outer::new(
        tmp.path(),
        &server.base_url(),
        vec![work.clone(), home.clone()],
        hardened,
    );
    let bin = codex_bin();
    let mut argv: Vec<String> = vec![bin.to_string_lossy().into_owned()];
    if phoenix {
        let version = Version::parse(&codex_version());
        let set = own_sandbox::plan(Cli::Codex, true, argv, &|_| None, version);
        assert!(set.env.is_empty());
        assert!(set.note.is_some());
        argv = set.argv;
    }
    argv.extend(["exec", "--skip-git-repo-check", "write the file"].map(str::to_string));
    let mut cmd = outer.command(&work, &argv);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("CODEX_HOME", &codex_home)
        .env("SCRIPTED_API_KEY", "sk-scripted-0123456789");
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let result = server
        .turn_requests()
        .iter()
        .flat_map(|r| r.body["input"].as_array().cloned().unwrap_or_default())
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].to_string())
        .collect::<Vec<_>>()
        .join("\n");
    Ran {
        wrote: std::fs::read_to_string(work.join("nested.txt"))
            .is_ok_and(|t| t.trim() == "phoenix-nested"),
        result,
        said: format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The user's config turns Codex's own `workspace-write` sandbox on. Inside phoenix's
/// sandbox, with what phoenix sets, its shell call runs and the output reaches the model, in
/// both outer sandboxes. Without it the call fails in the hardened one (Codex's bwrap cannot
/// make a user namespace); the plain one lets it nest.
#[test]
fn real_codex_shell_runs_inside_phoenixs_sandbox_with_its_own_sandbox_off() {
    if !enabled() {
        return;
    }
    let version = codex_version();
    for (hardened, outer) in OUTERS {
        let ran = codex_in_outer(hardened, true);
        assert!(
            ran.wrote,
            "{outer}, {version}: the file was written\n{}",
            ran.said
        );
        assert!(
            ran.result.contains("phoenix-nested") && ran.result.contains("exited with code 0"),
            "{outer}, {version}: the shell output reached the model: {}",
            ran.result
        );
        assert!(
            ran.said.contains("sandbox: danger-full-access"),
            "{}",
            ran.said
        );
        assert!(ran.said.contains("All done."), "{outer}: {}", ran.said);

        let without = codex_in_outer(hardened, false);
        assert!(
            without.said.contains("sandbox: workspace-write"),
            "{}",
            without.said
        );
        if hardened {
            assert!(!without.wrote, "{outer}, {version}: {}", without.result);
            assert!(
                without.result.contains("exited with code 1")
                    && without
                        .result
                        .contains("bwrap: Creating new namespace failed"),
                "{outer}, {version}: its own bwrap failed the call: {}",
                without.result
            );
        } else {
            assert!(without.wrote, "{outer}, {version}: {}", without.result);
        }
        eprintln!(
            "codex {version}, {outer}, without phoenix's flag: {}",
            without.result
        );
    }
}

// ---- Gemini CLI.

use crate::real_gemini::GEMINI_PINNED;
use support::gemini_server::{self, shell};

/// `gemini -p --yolo` with a scripted shell call, the user's settings turning Gemini CLI's own
/// sandbox on (`tools.sandbox`), inside the outer sandbox; `phoenix`: with what
/// `own_sandbox::plan` sets for it.
fn gemini_in_outer(phoenix: bool) -> Ran {
    let tmp = run_dir();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    let settings = serde_json::json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
        "privacy": {"usageStatisticsEnabled": false},
        "tools": {"sandbox": true},
    });
    std::fs::write(home.join(".gemini/settings.json"), settings.to_string()).unwrap();
    std::fs::write(
        home.join(".gemini/trustedFolders.json"),
        serde_json::json!({ work.to_string_lossy(): "TRUST_FOLDER" }).to_string(),
    )
    .unwrap();
    let server = gemini_server::start(vec![
        shell("echo phoenix-nested > nested.txt && cat nested.txt"),
        Turn::text("All done."),
    ]);
    let outer = Outer::new(
        tmp.path(),
        &server.base_url(),
        vec![work.clone(), home.clone()],
        false,
    );
    let bin = support::npm_cli("gemini", "@google/gemini-cli", GEMINI_PINNED, "gemini");
    let argv: Vec<String> = [bin.to_str().unwrap(), "-p", "write the file", "--yolo"]
        .map(str::to_string)
        .to_vec();
    let mut env = Vec::new();
    let argv = if phoenix {
        let version = Version::parse(&support::cli_version(
            "gemini",
            "@google/gemini-cli",
            GEMINI_PINNED,
        ));
        let set = own_sandbox::plan(Cli::Gemini, true, argv, &|_| None, version);
        env = set.env;
        set.argv
    } else {
        argv
    };
    let mut cmd = outer.command(&work, &argv);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GOOGLE_GEMINI_BASE_URL", server.base_url())
        .env("GEMINI_API_KEY", "scripted-gemini-key-0123456789")
        .envs(env);
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let result = server
        .turn_requests()
        .iter()
        .flat_map(|r| r.body["contents"].as_array().cloned().unwrap_or_default())
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.get("functionResponse").map(|f| f.to_string()))
        .collect::<Vec<_>>()
        .join("\n");
    Ran {
        wrote: std::fs::read_to_string(work.join("nested.txt"))
            .is_ok_and(|t| t.trim() == "phoenix-nested"),
        result,
        said: format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The user's settings turn Gemini CLI's container sandbox on: inside phoenix's sandbox it
/// cannot start one and stops before the model is asked anything; with what phoenix sets
/// (`GEMINI_SANDBOX=false`) its shell call runs and the output reaches the model.
#[test]
fn real_gemini_shell_runs_inside_phoenixs_sandbox_with_its_own_sandbox_off() {
    if !enabled() {
        return;
    }
    let ran = gemini_in_outer(true);
    assert!(ran.wrote, "the file was written\n{}", ran.said);
    assert!(
        ran.result.contains("phoenix-nested"),
        "the shell output reached the model: {}",
        ran.result
    );
    assert!(ran.said.contains("All done."), "{}", ran.said);

    let without = gemini_in_outer(false);
    assert!(!without.wrote, "{}", without.said);
    assert!(without.result.is_empty(), "{}", without.result);
    assert!(
        without.said.contains("FatalSandboxError"),
        "it says its sandbox is why: {}",
        without.said
    );
    eprintln!("gemini without phoenix's variable: {}", without.said.trim());
}

// ---- Copilot CLI.

use crate::real_copilot::{COPILOT_PINNED, bash, copilot_bin, pkg_cache, tool_results};
use support::chat_server;

/// `copilot -p --allow-all-tools` with a scripted shell call, the user's saved settings turning
/// Copilot CLI's own sandbox on, inside the outer sandbox; `phoenix`: with what
/// `own_sandbox::plan` sets for it.
fn copilot_in_outer(phoenix: bool) -> Ran {
    let tmp = run_dir();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".copilot")).unwrap();
    std::fs::write(
        home.join(".copilot/settings.json"),
        r#"{"sandbox": {"enabled": true}}"#,
    )
    .unwrap();
    let server = chat_server::start(vec![
        bash("echo phoenix-nested > nested.txt && cat nested.txt"),
        Turn::text("All done."),
    ]);
    let outer = Outer::new(
        tmp.path(),
        &server.base_url(),
        vec![work.clone(), home.clone()],
        false,
    );
    let bin = copilot_bin();
    let mut argv: Vec<String> = vec![bin.to_string_lossy().into_owned()];
    if phoenix {
        let version = Version::parse(&support::cli_version(
            "copilot",
            "@github/copilot",
            COPILOT_PINNED,
        ));
        let set = own_sandbox::plan(Cli::Copilot, true, argv, &|_| None, version);
        argv = set.argv;
    }
    argv.extend(["-p", "write the file", "--allow-all-tools"].map(str::to_string));
    let mut cmd = outer.command(&work, &argv);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("COPILOT_OFFLINE", "true")
        .env("COPILOT_AUTO_UPDATE", "false")
        .env(
            "COPILOT_PROVIDER_BASE_URL",
            format!("{}/v1", server.base_url()),
        )
        .env("COPILOT_PROVIDER_API_KEY", "sk-scripted-0123456789")
        .env("COPILOT_MODEL", chat_server::MODEL)
        .env("COPILOT_PKG_CACHE_HOME", pkg_cache(&bin));
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let result = server
        .turn_requests()
        .iter()
        .map(tool_results)
        .collect::<Vec<_>>()
        .join("\n");
    Ran {
        wrote: std::fs::read_to_string(work.join("nested.txt"))
            .is_ok_and(|t| t.trim() == "phoenix-nested"),
        result,
        said: format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The user's saved settings turn Copilot CLI's own sandbox on: inside phoenix's sandbox it
/// cannot set up its private network (no slirp4netns, no `/dev/net/tun`) and fails the shell
/// call; with what phoenix sets (`--no-sandbox`, which outranks the saved setting) the call
/// runs and its output reaches the model.
#[test]
fn real_copilot_shell_runs_inside_phoenixs_sandbox_with_its_own_sandbox_off() {
    if !enabled() {
        return;
    }
    let ran = copilot_in_outer(true);
    assert!(ran.wrote, "the file was written\n{}", ran.said);
    assert!(
        ran.result.contains("phoenix-nested") && ran.result.contains("exit code 0"),
        "the shell output reached the model: {}",
        ran.result
    );
    assert!(ran.said.contains("All done."), "{}", ran.said);

    let without = copilot_in_outer(false);
    assert!(!without.wrote, "{}", without.said);
    assert!(
        without.result.contains("Cannot start sandboxed command")
            && without.result.contains("exit code 1"),
        "its own sandbox failed the call: {}",
        without.result
    );
}
