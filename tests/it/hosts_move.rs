//! Moving agents between machines (`phoenix move`): over real OpenSSH servers on loopback,
//! each host a real phoenix with its own tmux server, the demo agent standing in for a CLI.
//! The agent's workdir is relative (`work`): on each host it is the host's own, so a host can
//! lack it while the other has it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use phoenix::hosts::carry::AgentContext;
use phoenix::hosts::fleet::{self, APPLY_TIMEOUT, Link, READ_TIMEOUT};
use phoenix::hosts::moves::{self, Move, Place};
use phoenix::hosts::protocol::Call;
use phoenix::state::fence::Fence;

use crate::support::hosts::{Host, HostedFleet};
use crate::support::{read_jsonl, wait_until};

const WAIT: Duration = Duration::from_secs(30);

/// The demo agent `name` on `host`, working in `work` next to that machine's phoenix.toml.
pub(crate) fn agent(name: &str, host: &str) -> String {
    format!(
        "{}workdir = \"work\"\n",
        HostedFleet::demo_agent(name, Some(host))
    )
}

fn link<'a>(links: &'a [Link], host: &str) -> &'a Link {
    links.iter().find(|l| l.name() == host).expect("a link")
}

/// Start `host`'s slice there, as the combined apply will.
pub(crate) fn start_on(net: &HostedFleet, host: &str) {
    let spec = net.fleet.spec();
    let links = fleet::links(&spec);
    let link = link(&links, host);
    let reply = link
        .ask(
            Call::Apply {
                dir: link.host.dir.clone(),
                slice: fleet::slice(&spec, host).unwrap(),
                files: Default::default(),
                agents: vec![],
                prune: Default::default(),
            },
            APPLY_TIMEOUT,
        )
        .unwrap();
    assert_eq!(reply.result["code"], 0, "{}", reply.result);
}

pub(crate) fn row(host: &Host, agent: &str) -> serde_json::Value {
    host.status()
        .into_iter()
        .find(|r| r["agent"] == agent)
        .unwrap_or_default()
}

pub(crate) fn wait_running(host: &Host, agent: &str) -> u64 {
    let mut pid = 0;
    wait_until(WAIT, &format!("`{agent}` running on {}", host.name), || {
        let r = row(host, agent);
        pid = r["pid"].as_u64().unwrap_or(0);
        r["state"] == "running"
    });
    pid
}

/// What the agent's pane on `host` shows.
fn screen(host: &Host, agent: &str) -> String {
    let pane = row(host, agent)["pane"].as_str().unwrap_or("").to_string();
    let out = Command::new("tmux")
        .args(["-L", &host.socket, "capture-pane", "-p", "-J", "-S", "-500"])
        .args(["-t", &pane])
        .env_remove("TMUX")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Wait for the agent's fresh session on `host` to get its startup context through the
/// session-start hook; what its pane shows then.
pub(crate) fn startup_context(host: &Host, agent: &str) -> String {
    wait_until(
        WAIT,
        &format!("`{agent}`'s startup context on {}", host.name),
        || {
            read_jsonl(&host.agent_dir(agent).join("ops.jsonl"))
                .iter()
                .any(|o| o["event"] == "session_start" && o["injected"] == true)
        },
    );
    let mut text = String::new();
    wait_until(WAIT, "the context on the screen", || {
        text = screen(host, agent);
        text.contains("[end of context]")
    });
    text
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn mkdir(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
}

#[test]
fn an_agent_moves_between_hosts_with_its_handoff_and_back_home() {
    let Some(net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    for host in &net.hosts {
        mkdir(&host.dir.join("work"));
    }
    mkdir(&net.fleet.path().join("work"));
    net.toml(&agent("trades", "gpu-1"));
    start_on(&net, "gpu-1");
    let (gpu1, gpu2) = (net.host("gpu-1"), net.host("gpu-2"));
    wait_running(gpu1, "trades");
    gpu1.run(&["loop", "add", "trades", "ship-parser", "ship the parser"])
        .status(0);
    gpu1.run(&["send", "trades", "rebase onto main first", "--from", "ci"])
        .status(0);

    let report = net
        .run(&["move", "trades", "--to", "gpu-2", "--json"])
        .status(0)
        .json();
    let moved = &report["move"];
    assert_eq!(
        (&moved["from"], &moved["to"], &moved["generation"]),
        (&"gpu-1".into(), &"gpu-2".into(), &1.into()),
        "{report}"
    );
    let handoff = moved["handoff"].as_str().unwrap().to_string();
    assert_eq!(moved["carried"]["latest_handoff"]["id"], handoff.as_str());
    assert_eq!(moved["spec_written"], true);

    // The new session on gpu-2 started fresh with the move handoff and the open loop.
    wait_running(gpu2, "trades");
    let text = startup_context(gpu2, "trades");
    assert!(
        text.contains(&format!("--- latest handoff ({handoff}, move) ---")),
        "{text}"
    );
    assert!(text.contains("ship the parser"), "{text}");
    // Its inbox came along: the message is there (delivered on gpu-1 before the move, or
    // pending when it left and given to the new session).
    let inbox = gpu2.run(&["inbox", "trades", "--json"]).status(0).json();
    let texts: Vec<&serde_json::Value> = ["pending", "delivered"]
        .iter()
        .flat_map(|k| inbox[*k].as_array().into_iter().flatten())
        .map(|m| &m["text"])
        .collect();
    assert_eq!(texts, ["rebase onto main first"], "{inbox}");
    // gpu-1 no longer runs it, was sent its slice without it (the move ends converged),
    // and refuses to start it again.
    let left = row(gpu1, "trades");
    assert!(
        left["pid"].is_null() && left["state"] != "running",
        "{left}"
    );
    let slice = std::fs::read_to_string(gpu1.config()).unwrap();
    assert!(!slice.contains("\"trades\""), "{slice}");
    gpu1.run(&["start", "trades"]).status(1);
    // phoenix.toml says where it runs now, and the record agrees.
    let toml = std::fs::read_to_string(net.fleet.config()).unwrap();
    assert!(toml.contains("host = \"gpu-2\""), "{toml}");
    let placements: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(net.fleet.state_dir().join("hosts/placements.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(placements["agents"]["trades"]["place"], "gpu-2");

    // Home to the operator's machine: the same steps, in-process on this side.
    let home = net.run(&["move", "trades", "--to", "local"]);
    assert!(!home.stdout().contains("warning"), "{}", home.stdout());
    home.status(0)
        .stdout_has("✓ agent `trades` moved gpu-2 → local (generation 2)")
        .stdout_has("phoenix.toml now declares it on this machine");
    net.fleet.wait_running(&["trades"]);
    let left = row(gpu2, "trades");
    assert!(
        left["pid"].is_null() && left["state"] != "running",
        "{left}"
    );
    let toml = std::fs::read_to_string(net.fleet.config()).unwrap();
    assert!(!toml.contains("host = \"gpu-2\""), "{toml}");
    net.run(&["move", "trades", "--to", "local"])
        .status(0)
        .stdout_has("placed on local already");
    // And out again, to where it was fenced off before: the newer generation lifts it.
    net.run(&["move", "trades", "--to", "gpu-1"]).status(0);
    wait_running(gpu1, "trades");
    // Not declared here any more, and not running.
    let here = net.fleet.status();
    assert!(
        here.iter()
            .all(|r| r["agent"] != "trades" || !r["host"].is_null()),
        "{here:?}"
    );
    // Each move is one of the fleet's events, for whoever asks later where it went.
    let events = net
        .run(&["events", "--event", "agent_moved", "--json"])
        .status(0)
        .json();
    let moves: Vec<(String, String)> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["host"].is_null() || e["host"] == "local")
        .map(|e| {
            let place = |k: &str| e["details"][k].as_str().unwrap_or_default().to_string();
            (place("from"), place("to"))
        })
        .collect();
    let hops = [("gpu-1", "gpu-2"), ("gpu-2", "local"), ("local", "gpu-1")];
    assert_eq!(
        moves,
        hops.map(|(a, b)| (a.to_string(), b.to_string())),
        "{events}"
    );
    net.run(&["events", "--event", "agent_moved"])
        .status(0)
        .stdout_has("AGE")
        .stdout_has("moved from");
}

#[test]
fn a_move_to_a_host_without_the_workdir_refuses_before_stopping_anything() {
    let Some(net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    let work = net.host("gpu-1").dir.join("work");
    mkdir(&work);
    // A commit no remote has, where git is installed: the move warns about it.
    let committed = git(&work, &["init", "-q"])
        && git(
            &work,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "x",
            ],
        );
    net.toml(&agent("trades", "gpu-1"));
    start_on(&net, "gpu-1");
    let gpu1 = net.host("gpu-1");
    let pid = wait_running(gpu1, "trades");
    let before = std::fs::read_to_string(net.fleet.config()).unwrap();

    net.run(&["move", "trades", "--to", "gpu-2"])
        .status(1)
        .stderr_has("cannot move `trades` to gpu-2: workdir")
        .stderr_has("missing there; nothing was stopped");
    assert_eq!(row(gpu1, "trades")["pid"], pid, "the agent was touched");
    assert!(
        !gpu1.agent_dir("trades").join("handoffs").exists(),
        "a move handoff was saved"
    );
    assert_eq!(std::fs::read_to_string(net.fleet.config()).unwrap(), before);
    assert!(!net.fleet.state_dir().join("hosts/placements.json").exists());
    // What the combined plan shows for this move: the problem, and the source's context.
    let planned = Move {
        agent: "trades".into(),
        from: Place::Host("gpu-1".into()),
        to: Place::Host("gpu-2".into()),
    };
    let preview = moves::preview(&net.fleet.spec(), &planned).unwrap();
    assert!(preview.problems[0].contains("workdir"), "{preview:?}");
    assert!(
        preview.line().starts_with("move gpu-1 → gpu-2 ("),
        "{}",
        preview.line()
    );
    assert_eq!(
        preview.warnings.len(),
        usize::from(committed),
        "{preview:?}"
    );
    // An unknown target is named with what there is.
    net.run(&["move", "trades", "--to", "gpu-3"])
        .status(1)
        .stderr_has("no host `gpu-3`")
        .stderr_has("did you mean `gpu-1`?");
}

/// The target takes the checks but fails to take the context (its state dir holds a file
/// where the agent's dir goes): the agent starts again on the source, nothing is lost, and
/// once the target is fixed the move goes through.
#[test]
fn a_move_that_fails_after_the_stop_starts_the_agent_again_where_it_was() {
    let Some(net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    for host in &net.hosts {
        mkdir(&host.dir.join("work"));
    }
    net.toml(&agent("trades", "gpu-1"));
    start_on(&net, "gpu-1");
    let (gpu1, gpu2) = (net.host("gpu-1"), net.host("gpu-2"));
    let pid = wait_running(gpu1, "trades");
    let blocker = gpu2.agent_dir("trades");
    mkdir(blocker.parent().unwrap());
    std::fs::write(&blocker, "not a directory").unwrap();
    let before = std::fs::read_to_string(net.fleet.config()).unwrap();

    net.run(&["move", "trades", "--to", "gpu-2"])
        .status(1)
        .stderr_has("moving `trades` to gpu-2 failed: ")
        .stderr_has("it was started again on gpu-1");
    let again = wait_running(gpu1, "trades");
    assert_ne!(again, pid, "it was never stopped");
    assert_eq!(std::fs::read_to_string(net.fleet.config()).unwrap(), before);
    let handoffs = gpu1.run(&["handoff", "list", "trades", "--json"]).json();
    let triggers: Vec<&str> = handoffs["handoffs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["trigger_reason"].as_str())
        .collect();
    assert!(triggers.contains(&"move"), "{handoffs}");

    std::fs::remove_file(&blocker).unwrap();
    let report = net
        .run(&["move", "trades", "--to", "gpu-2", "--json"])
        .status(0)
        .json();
    assert_eq!(report["move"]["generation"], 2, "{report}");
    wait_running(gpu2, "trades");
    let left = row(gpu1, "trades");
    assert!(
        left["pid"].is_null() && left["state"] != "running",
        "{left}"
    );
}

/// Close the operator's shared ssh connections: a stopped sshd keeps the sessions it
/// already serves, a gone host would not.
pub(crate) fn drop_connections(net: &HostedFleet) {
    crate::support::hosts::close_shared_connections(&net.fleet.state_dir(), &net.ssh_config);
}

#[test]
fn a_dead_hosts_agent_starts_elsewhere_from_the_mirror_and_its_stale_copy_is_stopped() {
    let Some(mut net) = HostedFleet::start(&["gpu-1", "gpu-2"]) else {
        return;
    };
    for host in &net.hosts {
        mkdir(&host.dir.join("work"));
    }
    net.toml(&agent("trades", "gpu-1"));
    start_on(&net, "gpu-1");
    wait_running(net.host("gpu-1"), "trades");
    net.host("gpu-1")
        .run(&["handoff", "save", "trades", "--no-input"])
        .status(0);
    let mirrored = net.run(&["hosts", "mirror", "--json"]).status(0).json();
    assert_eq!(mirrored["hosts"][0]["agents"][0], "trades", "{mirrored}");
    assert_eq!(mirrored["hosts"][0]["new_handoffs"], 1, "{mirrored}");

    // gpu-1 drops off the network; its agent goes on running there.
    net.host_mut("gpu-1").sshd.stop();
    drop_connections(&net);
    net.run(&["move", "trades", "--to", "gpu-2"])
        .status(1)
        .stderr_has("nothing was stopped")
        .stderr_has("--from-unreachable");
    let report = net
        .run(&[
            "move",
            "trades",
            "--to",
            "gpu-2",
            "--from-unreachable",
            "--json",
        ])
        .status(0)
        .json();
    assert_eq!(report["move"]["owed_fences"][0], "gpu-1", "{report}");
    assert!(report["move"]["carried"]["mirrored_at"].is_string());
    let gpu2 = net.host("gpu-2");
    wait_running(gpu2, "trades");
    let text = startup_context(gpu2, "trades");
    assert!(text.contains("--- latest handoff ("), "{text}");
    assert!(text.contains(", manual) ---"), "{text}");

    // gpu-1 comes back with its stale copy: reported, stopped, and refused from then on.
    net.host_mut("gpu-1").sshd.restart();
    let gpu1 = net.host("gpu-1");
    assert_eq!(row(gpu1, "trades")["state"], "running");
    let cleanup = net.run(&["move", "--cleanup", "--json"]).status(0).json();
    let stale = &cleanup["cleanup"]["stale"][0];
    assert_eq!(
        (&stale["agent"], &stale["on"]),
        (&"trades".into(), &"gpu-1".into())
    );
    // Its first contact with gpu-1 (the look at what runs there) delivered the fence gpu-1
    // was owed and stopped the copy: it no longer runs when looked at.
    assert_eq!(stale["running"], false, "{cleanup}");
    assert_eq!(
        cleanup["cleanup"]["settled"][0]["fenced"]["stopped"][0], "trades",
        "{cleanup}"
    );
    let left = row(gpu1, "trades");
    assert_eq!(left["state"], "moved", "{left}");
    assert_eq!(row(net.host("gpu-2"), "trades")["state"], "running");
    gpu1.run(&["start", "trades"])
        .status(1)
        .stderr_has("moved to gpu-2 (generation 1)");
    // gpu-1's own plan (what its daemon reconciles with) starts nothing.
    let plan = gpu1.run(&["plan", "--json"]).json();
    assert!(plan["changes"].as_array().unwrap().is_empty(), "{plan}");
    assert_eq!(plan["attention"][0]["state"], "moved", "{plan}");
    net.run(&["move", "--cleanup"])
        .status(0)
        .stdout_has("no stale copies");
    // The move off the dead host and the fence it was owed are events of the fleet.
    let events = net.run(&["events", "--json"]).status(0).json();
    let names: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["agent"] == "trades")
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert!(
        names.contains(&"agent_moved_off_unreachable_host"),
        "{names:?}"
    );
    assert!(names.contains(&"fence_delivered"), "{names:?}");
}

#[test]
fn hostile_agent_names_in_move_requests_are_refused_and_write_nothing() {
    let Some(net) = HostedFleet::start(&["gpu-1"]) else {
        return;
    };
    net.toml(&agent("trades", "gpu-1"));
    let spec = net.fleet.spec();
    let links = fleet::links(&spec);
    let link = link(&links, "gpu-1");
    let dir = link.host.dir.clone();
    let pwned = net.fleet.path().join("pwned");
    let fence = Fence {
        generation: 1,
        here: true,
        runs_on: "gpu-1".into(),
        since: String::new(),
    };
    for name in [
        "../../../pwned".to_string(),
        format!("$(touch {})", pwned.display()),
        "a/b".into(),
        "trades\n".into(),
        String::new(),
    ] {
        let context = AgentContext {
            agent: name.clone(),
            files: [("brief.md".to_string(), "x".to_string())].into(),
            left_out: vec![],
        };
        for call in [
            Call::Export {
                dir: dir.clone(),
                agent: name.clone(),
            },
            Call::Context {
                dir: dir.clone(),
                agent: name.clone(),
            },
            Call::Import {
                dir: dir.clone(),
                agent: name.clone(),
                context,
                fence: fence.clone(),
            },
            Call::Fence {
                dir: dir.clone(),
                fences: [(name.clone(), fence.clone())].into(),
            },
            Call::Mirror {
                dir: dir.clone(),
                agents: [(name.clone(), None)].into(),
            },
        ] {
            let err = link.ask(call.clone(), READ_TIMEOUT).unwrap_err();
            assert!(
                err.to_string().contains("is not an agent name"),
                "{call:?}: {err}"
            );
        }
    }
    // A carried file that is not one is refused too, whatever the agent.
    let escape = AgentContext {
        agent: "trades".into(),
        files: [("handoffs/../../../pwned.md".to_string(), "x".to_string())].into(),
        left_out: vec![],
    };
    let err = link
        .ask(
            Call::Import {
                dir: dir.clone(),
                agent: "trades".into(),
                context: escape,
                fence,
            },
            READ_TIMEOUT,
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not a file an agent's context carries"),
        "{err}"
    );
    assert!(!pwned.exists());
    assert!(!net.host("gpu-1").state_dir().join("agents").exists());
    net.run(&["move", "../trades", "--to", "gpu-1"])
        .status(1)
        .stderr_has("no agent `../trades`");
}
