//! A fleet across machines: `phoenix plan` and `phoenix status --json` for 3 hosts × 50
//! agents over warm ssh connections (real sshd servers on loopback, started here), and what
//! one unreachable host adds (a stopped sshd; a listener that never speaks). Wall time per run
//! (median, p90, max). Run with `cargo bench --bench hosts`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../tests/it/support/sshd.rs"]
mod sshd;

const HOSTS: usize = 3;
const AGENTS_PER_HOST: usize = 50;
const RUNS: usize = 20;

fn main() {
    if !sshd::available() {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_phoenix");
    let tmp = tempfile::tempdir().expect("temp dir");
    let names: Vec<String> = (1..=HOSTS).map(|i| format!("gpu-{i}")).collect();
    let mut servers: Vec<sshd::Sshd> = names.iter().map(|n| sshd::Sshd::start(n)).collect();
    let refs: Vec<&sshd::Sshd> = servers.iter().collect();
    let ssh_config = sshd::write_config(&tmp.path().join("ssh_config"), &refs);
    let sockets: Vec<String> = names
        .iter()
        .map(|n| format!("phx-bench-{}-{n}", std::process::id()))
        .collect();
    let _servers = KillServers(sockets.clone());
    let mut toml = format!(
        "[fleet]\nname = \"bench\"\ntmux_socket = \"phx-bench-{}\"\nssh_config = \"{}\"\n\n",
        std::process::id(),
        ssh_config.display()
    );
    for (name, socket) in names.iter().zip(&sockets) {
        toml.push_str(&format!(
            "[[host]]\nname = \"{name}\"\nssh = \"{name}\"\ndir = \"{}\"\nphoenix = \"{exe}\"\ntmux_socket = \"{socket}\"\n\n",
            tmp.path().join(name).display()
        ));
        for i in 0..AGENTS_PER_HOST {
            toml.push_str(&format!(
                "[[agent]]\nname = \"{name}-agent-{i:02}\"\nhost = \"{name}\"\ncommand = \"phoenix demo-agent --interval 1h\"\n\n"
            ));
        }
    }
    let config = tmp.path().join("phoenix.toml");
    std::fs::write(&config, toml).unwrap();
    let phoenix = |args: &[&str]| {
        let started = Instant::now();
        let out = Command::new(exe)
            .arg("--config")
            .arg(&config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (started.elapsed(), out)
    };

    let (took, apply) = phoenix(&["apply", "--yes"]);
    assert!(
        apply.status.success(),
        "apply failed: {}",
        String::from_utf8_lossy(&apply.stderr)
    );
    let total = HOSTS * AGENTS_PER_HOST;
    println!("combined apply of {HOSTS} hosts × {AGENTS_PER_HOST} agents: {took:.2?}");
    wait_all_running(&phoenix, total);

    let measure = |what: &str, args: &[&str], goal: &str| {
        let mut times: Vec<Duration> = (0..RUNS)
            .map(|_| {
                let (took, out) = phoenix(args);
                assert!(
                    matches!(out.status.code(), Some(0)),
                    "{what}: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                took
            })
            .collect();
        times.sort();
        let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
        println!(
            "{what}, {HOSTS} hosts × {AGENTS_PER_HOST} agents, warm, {RUNS} runs: median {:.1?}  p90 {:.1?}  max {:.1?}  ({goal})",
            pct(0.5),
            pct(0.9),
            times[times.len() - 1]
        );
    };
    // The floor under every host read: one command over the same warm shared connection.
    // The remote user's login shell runs it (ssh has no other way), so its startup files
    // count here, and in every read below.
    let spec = phoenix::spec::load(&config).expect("the bench's phoenix.toml");
    let links = phoenix::hosts::fleet::links(&spec);
    let argvs: Vec<_> = links
        .iter()
        .map(|l| l.transport.argv(&["true"], false))
        .collect();
    let ssh_true = |argv: &Vec<std::ffi::OsString>| {
        let ok = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "ssh true failed");
    };
    let mut floor: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            ssh_true(&argvs[0]);
            started.elapsed()
        })
        .collect();
    floor.sort();
    println!(
        "ssh HOST true over the warm connection (the floor of every host read), {RUNS} runs: median {:.1?}  p90 {:.1?}",
        floor[RUNS / 2],
        floor[(RUNS - 1) * 9 / 10]
    );
    // Every host at once, as a fleet read asks them: here all the hosts' sshd and shells
    // share this machine's cores, which real hosts do not.
    let mut all: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            std::thread::scope(|s| {
                for argv in &argvs {
                    s.spawn(|| ssh_true(argv));
                }
            });
            started.elapsed()
        })
        .collect();
    all.sort();
    println!(
        "ssh HOST true on all {HOSTS} hosts at once (they share these cores), {RUNS} runs: median {:.1?}  p90 {:.1?}",
        all[RUNS / 2],
        all[(RUNS - 1) * 9 / 10]
    );
    measure("plan", &["plan"], "goal: ≤ 1 s");
    measure("status --json", &["status", "--json"], "goal: ≤ 300 ms");

    // One host gone: refused at once, and silent (connect timeout).
    close_masters(tmp.path(), &ssh_config);
    servers[HOSTS - 1].stop();
    let (refused, _) = phoenix(&["plan", "--skip-unreachable"]);
    println!("plan with one host's sshd stopped (connection refused): {refused:.1?}");
    let port = servers[HOSTS - 1].port;
    let silent = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the stopped port");
    let (blackhole, _) = phoenix(&["plan", "--skip-unreachable"]);
    println!(
        "plan with one host that accepts and never speaks: {blackhole:.1?} (its connect timeout is 5 s; never more)"
    );
    drop(silent);
    close_masters(tmp.path(), &ssh_config);
}

/// Until `status --json` shows `total` agents running.
fn wait_all_running(phoenix: &dyn Fn(&[&str]) -> (Duration, std::process::Output), total: usize) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (_, out) = phoenix(&["status", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let running = doc["agents"].as_array().map_or(0, |rows| {
            rows.iter().filter(|r| r["state"] == "running").count()
        });
        if running == total {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{running} of {total} running after 3 minutes"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The shared ssh connections the operator's phoenix keeps (ControlPersist).
fn close_masters(dir: &Path, ssh_config: &Path) {
    let control: PathBuf = phoenix::hosts::fleet::control_dir(&dir.join(".phoenix"));
    for entry in std::fs::read_dir(control).into_iter().flatten().flatten() {
        let _ = Command::new("ssh")
            .arg("-F")
            .arg(ssh_config)
            .arg("-o")
            .arg(format!("ControlPath={}", entry.path().display()))
            .args(["-O", "exit", "x"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

struct KillServers(Vec<String>);

impl Drop for KillServers {
    fn drop(&mut self) {
        for socket in &self.0 {
            let _ = Command::new("tmux")
                .args(["-L", socket, "kill-server"])
                .stderr(Stdio::null())
                .status();
        }
    }
}
