use std::path::Path;

use serde_json::{Map, Value, json};

use super::*;

fn spec(body: &str) -> Spec {
    crate::spec::parse(
        &format!("[fleet]\nname = \"f\"\nstate_dir = \"/nonexistent/phoenix-mcp-test\"\n{body}"),
        Path::new("/fleet/phoenix.toml"),
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

const FLEET: &str = "[defaults]\ncli = \"claude\"\n\
                     [[agent]]\nname = \"lead\"\nmcp = { allow = [\"read\", \"message\", \"control\"] }\n\
                     [[agent]]\nname = \"worker\"\n\
                     [[agent]]\nname = \"mute\"\nmcp = { allow = [] }\n";

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[test]
fn the_caller_is_who_phoenix_started_and_must_be_declared() {
    let spec = spec(FLEET);
    assert_eq!(
        Caller::from_identity(&spec, None, None).unwrap(),
        Caller::Operator
    );
    assert_eq!(
        Caller::from_identity(&spec, Some("lead"), None).unwrap(),
        Caller::Agent("lead".into())
    );
    let e = Caller::from_identity(&spec, Some("leda"), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("names no agent") && e.contains("lead"), "{e}");
    let own = FleetDir::new(&spec.fleet.state_dir).agent("lead").path;
    assert!(Caller::from_identity(&spec, Some("lead"), Some(&own)).is_ok());
    let e = Caller::from_identity(&spec, Some("lead"), Some(Path::new("/elsewhere")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("another fleet"), "{e}");
}

#[test]
fn permissions_default_to_read_and_message_and_control_is_declared() {
    let spec = spec(FLEET);
    let worker = Caller::Agent("worker".into());
    let lead = Caller::Agent("lead".into());
    let mute = Caller::Agent("mute".into());
    let restart = || args(json!({"agent": "worker"}));
    assert!(authorize(&spec, &worker, "list_agents", Map::new()).is_ok());
    assert!(
        authorize(
            &spec,
            &worker,
            "send_message",
            args(json!({"agent": "lead", "text": "hi"}))
        )
        .is_ok()
    );
    let denied = authorize(&spec, &worker, "restart", restart()).unwrap_err();
    assert_eq!(denied.code(), "denied");
    assert!(denied.to_string().contains("`control`"), "{denied}");
    assert!(denied.hint().contains("mcp = { allow"), "{}", denied.hint());
    assert!(authorize(&spec, &lead, "restart", restart()).is_ok());
    assert!(authorize(&spec, &Caller::Operator, "stop", restart()).is_ok());
    assert_eq!(
        authorize(&spec, &mute, "list_agents", Map::new())
            .unwrap_err()
            .code(),
        "denied"
    );
    // Its own handoff is a message's worth; another's is control.
    let own = authorize(&spec, &worker, "save_handoff", Map::new()).unwrap();
    assert_eq!(own.target.as_deref(), Some("worker"));
    assert_eq!(
        authorize(
            &spec,
            &worker,
            "save_handoff",
            args(json!({"agent": "lead"}))
        )
        .unwrap_err()
        .code(),
        "denied"
    );
}

#[test]
fn unknown_agents_tools_and_a_forged_sender_are_told_apart() {
    let spec = spec(FLEET);
    let worker = Caller::Agent("worker".into());
    let e = authorize(
        &spec,
        &worker,
        "agent_status",
        args(json!({"agent": "wokrer"})),
    )
    .unwrap_err();
    assert_eq!(e.code(), "unknown_agent");
    assert!(e.hint().contains("worker"), "{}", e.hint());
    let e = authorize(&spec, &worker, "fly", Map::new()).unwrap_err();
    assert_eq!(e, ToolError::UnknownTool("fly".into()));
    assert_eq!(
        authorize(&spec, &worker, "agent_status", Map::new())
            .unwrap_err()
            .code(),
        "bad_arguments"
    );
    let call = authorize(
        &spec,
        &worker,
        "send_message",
        args(json!({"agent": "lead", "text": "done", "from": "lead"})),
    )
    .unwrap();
    assert_eq!(call.ignored, vec!["from".to_string()]);
}

#[test]
fn every_tool_is_listed_with_an_object_schema_naming_its_arguments() {
    assert_eq!(tools::TOOLS.len(), tools::NAMES.len());
    for (def, name) in tools::TOOLS.iter().zip(tools::NAMES) {
        assert_eq!(def.name, name);
        let schema = tools::input_schema(name);
        assert_eq!(schema["type"], "object");
        let props: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(props, def.arguments.iter().collect::<Vec<_>>(), "{name}");
        assert_eq!(
            def.needs_agent,
            schema["required"]
                .as_array()
                .unwrap()
                .contains(&json!("agent")),
            "{name}"
        );
    }
}

#[test]
fn an_unknown_permission_is_an_error_with_a_suggestion() {
    let e = crate::spec::parse(
        "[[agent]]\nname = \"a\"\ncli = \"claude\"\nmcp = { allow = [\"contrl\"] }\n",
        Path::new("/fleet/phoenix.toml"),
        crate::spec::LoadOptions {
            check_filesystem: false,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unknown mcp permission `contrl`") && e.contains("did you mean `control`"),
        "{e}"
    );
    assert!(e.contains("phoenix.toml:4"), "{e}");
}
