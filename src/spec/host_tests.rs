//! `[[host]]` and the agents' `host`, through `parse`.

use super::*;

const HOSTS: &str = r#"
[fleet]
name = "research"

[[host]]
name = "gpu-1"
ssh = "deploy@gpu-1.internal"

[[host]]
name = "gpu-2"
ssh = "ssh://deploy@gpu-2:2222"
dir = "~/phoenix/research"
phoenix = "~/.local/bin/phoenix"

[[agent]]
name = "here"
command = "sleep 100"

[[agent]]
name = "there"
command = "sleep 100"
host = "gpu-1"
workdir = "/only/on/gpu-1"

[[agent]]
name = "also-there"
command = "sleep 100"
host = "gpu-2"
tmux = { window = "here" }
enabled = false
"#;

#[test]
fn agents_of_other_hosts_are_kept_apart_and_not_checked_here() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("phoenix.toml");
    // The remote workdir does not exist here: checking the filesystem must not refuse it.
    let spec = parse(HOSTS, &file, LoadOptions::default()).unwrap();
    assert_eq!(spec.agent_names(), ["here"]);
    let remote: Vec<_> = spec
        .remote_agents
        .iter()
        .map(|a| (a.name.as_str(), a.host.as_str(), a.enabled))
        .collect();
    assert_eq!(
        remote,
        [("there", "gpu-1", true), ("also-there", "gpu-2", false)]
    );
    assert_eq!(spec.hosts[0].dir, "~/.phoenix-hosts/research");
    assert_eq!(spec.hosts[0].phoenix, "phoenix");
    assert_eq!(spec.hosts[1].ssh, "ssh://deploy@gpu-2:2222");
    assert_eq!(spec.hosts[1].dir, "~/phoenix/research");
}

#[test]
fn host_mistakes_are_each_reported_where_they_were_written() {
    let src = r#"
[defaults]
host = "gpu-1"

[[host]]
name = "gpu 1"
ssh = "-oProxyCommand=touch /tmp/pwned"

[[host]]
ssh = "a@b"

[[host]]
name = "gpu-2"

[[host]]
name = "gpu-3"
ssh = "a@b; rm -rf ~"
dir = "~/x\ny"

[[host]]
name = "gpu-3"
ssh = "c@d"

[[agent]]
name = "a"
command = "x"
host = "gpu-4"

[[host]]
name = "gpu-44"
ssh = "e@f"

[[host]]
name = "local"
ssh = "g@h"
"#;
    let errs = parse(
        src,
        std::path::Path::new("/nowhere/phoenix.toml"),
        LoadOptions {
            check_filesystem: false,
        },
    )
    .unwrap_err()
    .located();
    let said = |part: &str| {
        errs.iter()
            .find(|e| e.message.contains(part))
            .unwrap_or_else(|| panic!("{part}: {errs:#?}"))
    };
    assert_eq!(said("`host` is not allowed in [defaults]").line, 3);
    assert_eq!(said("host name `gpu 1` is not a valid name").line, 6);
    assert!(
        said("`ssh` starts with `-`")
            .hint
            .as_deref()
            .unwrap()
            .contains("~/.ssh/config")
    );
    assert_eq!(said("[[host]] has no `name`").line, 9);
    assert_eq!(said("host `gpu-2` has no `ssh`").line, 13);
    assert_eq!(said("host `gpu-3`: `ssh` contains ';'").line, 17);
    assert_eq!(
        said("host `gpu-3`: `dir` contains the control character").line,
        18
    );
    assert_eq!(said("duplicate host name `gpu-3`").line, 21);
    assert_eq!(said("host name `local` is reserved").line, 34);
    let undeclared = said("agent `a`: host `gpu-4` is not declared");
    assert_eq!(undeclared.line, 27);
    assert!(
        undeclared
            .hint
            .as_deref()
            .unwrap()
            .contains("did you mean `gpu-44`?")
    );
}

#[test]
fn a_window_is_taken_per_host_and_a_name_across_the_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("phoenix.toml");
    let base = "[[host]]\nname = \"h\"\nssh = \"a@b\"\n[[agent]]\nname = \"a\"\ncommand = \"x\"\n";
    // The same window on this machine and on a host: two tmux servers, no clash.
    parse(
        &format!("{base}[[agent]]\nname = \"b\"\ncommand = \"x\"\nhost = \"h\"\ntmux = {{ window = \"a\" }}\n"),
        &file,
        LoadOptions::default(),
    )
    .unwrap();
    // One name on two machines: a move is a change of `host`, never a second agent.
    let errs = parse(
        &format!("{base}[[agent]]\nname = \"a\"\ncommand = \"x\"\nhost = \"h\"\n"),
        &file,
        LoadOptions::default(),
    )
    .unwrap_err()
    .located();
    assert!(
        errs[0].message.contains("duplicate agent name `a`"),
        "{errs:?}"
    );
}
