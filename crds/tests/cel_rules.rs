//! The CEL rules in the CRDs, evaluated client-side with kube's CEL validator, and their cost.

use ari_crds::{Agent, Task};
use kube::CustomResourceExt;
use kube::core::cel::{WarningKind, compile_schema, estimate_rule_cost};
use serde_json::{Value, json};

fn agent(spec: Value) -> Agent {
    serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": "a", "namespace": "n"}, "spec": spec
    }))
    .expect("agent JSON")
}

fn task(spec: Value) -> Task {
    serde_json::from_value(json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": "t", "namespace": "n"}, "spec": spec
    }))
    .expect("task JSON")
}

fn agent_errors(spec: Value) -> String {
    match agent(spec).validate_cel() {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

fn task_errors(spec: Value) -> String {
    match task(spec).validate_cel() {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

const SHA: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[test]
fn agent_module_needs_exactly_one_source() {
    assert_eq!(
        agent_errors(json!({"module": {"configMap": {"name": "m", "key": "k"}}})),
        ""
    );
    // An empty module is left out when the Agent is written back, so the spec-level rule (a
    // module or a declaration) is the one that speaks here; the API server, seeing `{}`, also
    // applies the module's own rule.
    assert!(agent_errors(json!({"module": {}})).contains("exactly one of spec.module"));
    let both = json!({"module": {"configMap": {"name": "m", "key": "k"}, "url": "https://x/m.wasm", "sha256": SHA}});
    assert!(agent_errors(both).contains("exactly one of module.configMap"));
}

#[test]
fn agent_module_image_is_a_third_exclusive_source() {
    let image = "127.0.0.1:5000/agents/echo:v1";
    assert_eq!(agent_errors(json!({"module": {"image": image}})), "");
    assert_eq!(
        agent_errors(json!({"module": {"image": image, "imagePullSecrets": [{"name": "reg"}]}})),
        ""
    );
    let with_url = json!({"module": {"image": image, "url": "https://x/m.wasm", "sha256": SHA}});
    assert!(
        agent_errors(with_url)
            .contains("exactly one of module.configMap, module.url or module.image")
    );
    let with_cm = json!({"module": {"image": image, "configMap": {"name": "m", "key": "k"}}});
    assert!(agent_errors(with_cm).contains("exactly one of"));
}

#[test]
fn agent_pull_secrets_need_an_image() {
    let cm = json!({"name": "m", "key": "k"});
    let spec = json!({"module": {"configMap": cm, "imagePullSecrets": [{"name": "reg"}]}});
    assert!(agent_errors(spec).contains("imagePullSecrets is only for module.image"));
}

#[test]
fn only_primary_or_all_agents_can_be_exposed_over_a2a() {
    let cm = json!({"name": "m", "key": "k"});
    let exposed = json!({"exposed": true});
    for (mode, ok) in [
        (None, true),
        (Some("primary"), true),
        (Some("all"), true),
        (Some("subagent"), false),
    ] {
        let mut spec = json!({"module": {"configMap": cm}, "a2a": exposed});
        if let Some(m) = mode {
            spec["mode"] = json!(m);
        }
        let errors = agent_errors(spec);
        assert_eq!(errors.is_empty(), ok, "{mode:?}: {errors}");
    }
    let hidden =
        json!({"module": {"configMap": cm}, "mode": "subagent", "a2a": {"exposed": false}});
    assert_eq!(agent_errors(hidden), "");
}

#[test]
fn agent_url_needs_https_and_sha256() {
    assert_eq!(
        agent_errors(json!({"module": {"url": "https://x/m.wasm", "sha256": SHA}})),
        ""
    );
    assert!(
        agent_errors(json!({"module": {"url": "https://x/m.wasm"}})).contains("sha256 is required")
    );
    assert!(
        agent_errors(json!({"module": {"url": "http://x/m.wasm", "sha256": SHA}}))
            .contains("must be https")
    );
}

#[test]
fn task_needs_exactly_one_input_source() {
    let r = json!({"name": "echo"});
    assert_eq!(task_errors(json!({"agentRef": r, "input": "hi"})), "");
    assert_eq!(
        task_errors(json!({"agentRef": r, "inputBase64": "aGk="})),
        ""
    );
    assert!(task_errors(json!({"agentRef": r})).contains("exactly one of input"));
    assert!(
        task_errors(json!({"agentRef": r, "input": "x", "inputBase64": "eA=="}))
            .contains("exactly one of input")
    );
    let both_refs = json!({"agentRef": r, "inputFrom": {
        "configMapKeyRef": {"name": "c", "key": "k"}, "secretKeyRef": {"name": "s", "key": "k"}}});
    assert!(task_errors(both_refs).contains("exactly one of inputFrom"));
}

#[test]
fn a_task_of_items_takes_no_other_input_and_neither_continues_nor_replicates() {
    let r = json!({"name": "echo"});
    assert_eq!(task_errors(json!({"agentRef": r, "items": ["a", "b"]})), "");
    let both = task_errors(json!({"agentRef": r, "items": ["a"], "input": "x"}));
    assert!(
        both.contains("exactly one of input, inputBase64, inputFrom, items"),
        "{both}"
    );
    for extra in [
        json!({"continues": "earlier"}),
        json!({"verification": {"replicas": 2}}),
    ] {
        let mut spec = json!({"agentRef": r, "items": ["a"]});
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        assert!(task_errors(spec).contains("a Task of items cannot"));
    }
    let old = task(json!({"agentRef": r, "items": ["a"]}));
    let new = task(json!({"agentRef": r, "items": ["a", "b"]}));
    let err = new
        .validate_cel_update(&old)
        .expect_err("items are immutable");
    assert!(format!("{err:?}").contains("immutable"));
}

#[test]
fn task_spec_is_immutable() {
    let old = task(json!({"agentRef": {"name": "echo"}, "input": "a"}));
    let new = task(json!({"agentRef": {"name": "echo"}, "input": "b"}));
    let err = new
        .validate_cel_update(&old)
        .expect_err("spec change must be refused");
    assert!(format!("{err:?}").contains("immutable"));
    assert!(old.validate_cel_update(&old).is_ok());
}

/// Every rule compiles and stays within the apiserver's estimated cost budget, which it
/// enforces when the CRD is created (unbounded strings or lists inflate the estimate).
#[test]
fn every_rule_compiles_within_cost_budget() {
    fn walk(node: &Value, path: &str, found: &mut Vec<String>) {
        if let Some(rules) = node
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        {
            let compiled = compile_schema(node);
            assert!(
                compiled.compilation_errors().is_empty(),
                "{path}: {:?}",
                compiled.compilation_errors()
            );
            for rule in rules
                .iter()
                .filter_map(|r| r.get("rule").and_then(Value::as_str))
            {
                let warnings: Vec<_> = estimate_rule_cost(rule, &compiled)
                    .into_iter()
                    .filter(|w| matches!(w.kind, WarningKind::CostExceeded))
                    .collect();
                assert!(warnings.is_empty(), "{path}: {rule}: {warnings:?}");
                found.push(rule.to_owned());
            }
        }
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                walk(v, &format!("{path}.{k}"), found);
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), found);
        }
    }
    let mut found = Vec::new();
    for crd in [Agent::crd(), Task::crd()] {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema JSON");
        walk(&schema["openAPIV3Schema"], &crd.spec.names.kind, &mut found);
    }
    assert_eq!(found.len(), 20, "{found:?}");
}

/// A declarative Agent granted what its declaration names.
fn declarative(declaration: Value, capabilities: Value) -> Value {
    json!({"declarative": declaration, "capabilities": capabilities})
}

fn granted() -> Value {
    json!({
        "models": {"allowed": ["small"]},
        "tools": {"servers": [{"name": "tracker", "tools": ["search", "close"]}]},
        "delegation": {"agents": ["summarize", "expert"]}
    })
}

#[test]
fn a_declarative_agent_needs_no_module_and_may_not_have_one() {
    let d = json!({"instructions": "triage", "model": "small"});
    assert_eq!(agent_errors(declarative(d.clone(), granted())), "");
    let mut both = declarative(d, granted());
    both["module"] = json!({"configMap": {"name": "m", "key": "k"}});
    assert!(agent_errors(both).contains("exactly one of spec.module"));
    assert!(agent_errors(json!({})).contains("exactly one of spec.module"));
}

#[test]
fn a_declarations_instructions_come_from_exactly_one_place_and_it_takes_no_config() {
    let neither = json!({"model": "small"});
    assert!(agent_errors(declarative(neither, granted())).contains("instructionsFrom"));
    let both = json!({"model": "small", "instructions": "x",
                      "instructionsFrom": {"name": "prompts", "key": "triage"}});
    assert!(agent_errors(declarative(both, granted())).contains("instructionsFrom"));
    let mut with_config = declarative(json!({"instructions": "x", "model": "small"}), granted());
    with_config["config"] = json!("model=small");
    assert!(agent_errors(with_config).contains("spec.config is for a component"));
}

#[test]
fn a_declaration_names_only_granted_models_servers_and_agents() {
    let model = json!({"instructions": "x", "model": "large"});
    assert!(
        agent_errors(declarative(model, granted())).contains("declarative.model must be granted")
    );
    let no_models = json!({"tools": {"servers": [{"name": "tracker", "tools": ["*"]}]}});
    let small = json!({"instructions": "x", "model": "small"});
    assert!(agent_errors(declarative(small, no_models)).contains("declarative.model"));
    let server = json!({"instructions": "x", "model": "small",
                        "tools": [{"mcpServer": {"name": "wiki", "tools": ["read"]}}]});
    // An ungranted MCP server is not a CEL rule (over both lists it exceeded the API server's
    // cost budget): the operator refuses it, naming it.
    assert_eq!(agent_errors(declarative(server.clone(), granted())), "");
    let d: ari_model::Declaration = serde_json::from_value(server).expect("declaration");
    let grants: ari_model::GrantSet = serde_json::from_value(granted()).expect("grants");
    assert!(
        d.ungranted(&grants)
            .iter()
            .any(|m| m.contains("MCP server wiki"))
    );
    let agent_tool = json!({"instructions": "x", "model": "small",
                            "tools": [{"agent": {"name": "stranger"}}]});
    assert!(
        agent_errors(declarative(agent_tool, granted()))
            .contains("each Agent of declarative.tools must be granted")
    );
    let sub = json!({"instructions": "x", "model": "small", "subagents": [{"name": "stranger"}]});
    assert!(agent_errors(declarative(sub, granted())).contains("declarative.subagents"));
    let fine = json!({"instructions": "x", "model": "small",
                      "tools": [{"mcpServer": {"name": "tracker", "tools": ["search"],
                                               "requireApproval": ["search"]}},
                                {"agent": {"name": "summarize", "description": "summarises"}}],
                      "subagents": [{"name": "expert"}]});
    assert_eq!(agent_errors(declarative(fine, granted())), "");
}

#[test]
fn a_tool_entry_is_one_kind_and_a_schema_goes_with_json_schema_only() {
    let two = json!({"instructions": "x", "model": "small",
                     "tools": [{"agent": {"name": "summarize"},
                                "mcpServer": {"name": "tracker", "tools": ["search"]}}]});
    assert!(
        agent_errors(declarative(two, granted())).contains("exactly one of mcpServer and agent")
    );
    let schemaless = json!({"instructions": "x", "model": "small",
                            "responseFormat": {"type": "JsonSchema"}});
    assert!(agent_errors(declarative(schemaless, granted())).contains("responseFormat.schema"));
    let object = json!({"instructions": "x", "model": "small",
                        "responseFormat": {"type": "JsonObject"}});
    assert_eq!(agent_errors(declarative(object, granted())), "");
}

/// Every Agent of `examples/manifests/declarative`, which the docs tell users to copy.
fn declarative_examples() -> Vec<(String, Agent)> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/manifests/declarative");
    let mut agents = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the examples directory") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("read an example");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = <serde_yaml::Value as serde::Deserialize>::deserialize(doc).expect("YAML");
            if value.get("kind").and_then(serde_yaml::Value::as_str) == Some("Agent") {
                let agent: Agent = serde_yaml::from_value(value).expect("an Agent");
                agents.push((path.display().to_string(), agent));
            }
        }
    }
    agents
}

#[test]
fn the_declarative_examples_keep_the_rules_and_their_grants() {
    let agents = declarative_examples();
    assert!(agents.len() >= 2, "{agents:?}");
    for (path, agent) in agents {
        assert_eq!(
            agent.validate_cel().map_err(|e| format!("{e:?}")),
            Ok(()),
            "{path}"
        );
        let d = agent.spec.declarative.as_ref().expect("declarative");
        assert_eq!(
            d.ungranted(&agent.spec.capabilities),
            Vec::<String>::new(),
            "{path}"
        );
        assert_eq!(d.check(), Ok(()), "{path}");
    }
}

#[test]
fn approval_marks_only_granted_hosts_and_agents() {
    let cm = json!({"name": "m", "key": "k"});
    let network = |marked: Value| {
        json!({"module": {"configMap": cm}, "capabilities": {"network": {
            "allowedHosts": ["https://a.example", "https://b.example"],
            "approval": {"hosts": marked}}}})
    };
    assert_eq!(agent_errors(network(json!(["https://b.example"]))), "");
    assert!(
        agent_errors(network(json!(["https://c.example"])))
            .contains("network.approval.hosts must be entries of network.allowedHosts")
    );
    let delegation = |agents: Value, marked: Value| {
        json!({"module": {"configMap": cm}, "capabilities": {"delegation": {
            "agents": agents, "approval": {"agents": marked}}}})
    };
    assert_eq!(
        agent_errors(delegation(
            json!(["deployer", "reader"]),
            json!(["deployer"])
        )),
        ""
    );
    assert_eq!(
        agent_errors(delegation(json!(["deployer"]), json!(["*"]))),
        ""
    );
    assert_eq!(
        agent_errors(delegation(json!(["*"]), json!(["anyone"]))),
        ""
    );
    assert!(
        agent_errors(delegation(json!(["reader"]), json!(["deployer"])))
            .contains("delegation.approval.agents must be `*` or Agents of delegation.agents")
    );
}

#[test]
fn a_pooled_declarative_agent_is_accepted_with_its_subagents_and_agent_tools() {
    let declared = |declaration: Value, capabilities: Value| {
        agent_errors(
            json!({"declarative": declaration, "capabilities": capabilities,
                            "executor": {"pool": "shared"}}),
        )
    };
    let model = json!({"models": {"allowed": ["small"]},
                       "tools": {"servers": [{"name": "docs", "tools": ["search"]}]}});
    let plain = json!({"instructionsFrom": {"name": "prompts", "key": "triage"},
                       "model": "small",
                       "tools": [{"mcpServer": {"name": "docs", "tools": ["search"]}}]});
    assert_eq!(declared(plain, model), "");
    let delegating = json!({"models": {"allowed": ["small"]},
                            "delegation": {"agents": ["helper"]}});
    for delegates in [
        json!({"instructions": "x", "model": "small", "subagents": [{"name": "helper"}]}),
        json!({"instructions": "x", "model": "small", "tools": [{"agent": {"name": "helper"}}]}),
    ] {
        assert_eq!(
            declared(delegates.clone(), delegating.clone()),
            "",
            "{delegates}"
        );
    }
}

#[test]
fn a_pooled_agent_takes_its_pods_from_the_pool_and_may_be_granted_everything() {
    let module = json!({"url": "https://example.com/m.wasm", "sha256": format!("sha256:{SHA}")});
    let pooled = |executor: Value, capabilities: Value| {
        agent_errors(json!({"module": module, "executor": executor, "capabilities": capabilities}))
    };
    assert_eq!(
        pooled(json!({"pool": "shared", "concurrency": 2}), json!({})),
        ""
    );
    assert_eq!(
        pooled(
            json!({"pool": "shared"}),
            json!({"network": {"allowedHosts": ["example.com"]}})
        ),
        ""
    );
    let e = pooled(json!({"pool": "shared", "replicas": 3}), json!({}));
    assert!(e.contains("set replicas, resources"), "{e}");
    assert_eq!(
        pooled(
            json!({"pool": "shared"}),
            json!({"models": {"allowed": ["m"]},
                   "tools": {"servers": [{"name": "docs", "tools": ["search"]}]}})
        ),
        ""
    );
    // Its own signing key: the pool hands each Agent the key its secretRef names.
    assert_eq!(
        pooled(
            json!({"pool": "shared"}),
            json!({"signing": {"keyId": "k", "secretRef": {"name": "k", "key": "k"}}})
        ),
        ""
    );
    // Storage: every pool pod shares the operator's Redis (the operator says when it has none).
    assert_eq!(
        pooled(
            json!({"pool": "shared"}),
            json!({"storage": {"maxBytes": 1024}})
        ),
        ""
    );
    // Its children are bound to the pool (spec.parent.pool, the executor-writes policy).
    assert_eq!(
        pooled(
            json!({"pool": "shared"}),
            json!({"delegation": {"agents": ["b"]}})
        ),
        ""
    );
    // Its own pull secrets: the pool hands each Agent's worker only those it names.
    let pull_secret = json!({"module": {"image": "127.0.0.1:5000/agents/echo:v1",
                                        "imagePullSecrets": [{"name": "reg"}]},
                             "executor": {"pool": "shared"}});
    assert_eq!(agent_errors(pull_secret), "");
    // Without a pool, the same grants stand as before.
    assert_eq!(
        pooled(
            json!({"replicas": 3}),
            json!({"delegation": {"agents": ["b"]}})
        ),
        ""
    );
}
