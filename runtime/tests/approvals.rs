//! Approval of delegations and requests through the real runtime (issue 30, item 2): a
//! delegation to an Agent the delegation grant marks, or a request to a host the network grant
//! marks, waits for a person's decision before anything is started or sent, exactly as a
//! marked tool call does (`tools.rs`), and replays from the trace without anyone deciding.

use ari_testkit::runtime as common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ari_model::approval::{AgentsApproval, CallSubject, Decision, HostsApproval};
use ari_runtime::cancel::CancelToken;
use ari_runtime::capability::{
    ApprovalRequest, Approver, Decided, DelegationGrant, Grants, Waited,
};
use ari_runtime::local::{LocalAgent, LocalDelegator};
use ari_runtime::model::grant::{GrantSet, NetworkGrant};
use ari_runtime::{
    FailureKind, Limits, RunReport, TaskOutcome, VerifyOptions, verify_report, verify_tree,
};
use common::{agent, agent_bytes, http, key, output, request, runtime};

/// Decides every call it is asked about as `decision` says, as `alice`, and remembers what it
/// was asked. `None`: nobody answers, and the wait lasts until the task's deadline (a real
/// approver's wait in the cluster ends the same way).
struct Person {
    decision: Option<Decision>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Person {
    fn new(decision: Option<Decision>) -> Arc<Self> {
        Arc::new(Self {
            decision,
            asked: Mutex::default(),
        })
    }

    fn asked(&self) -> Vec<ApprovalRequest> {
        self.asked.lock().expect("lock").clone()
    }
}

impl Approver for Person {
    fn decide(&self, request: &ApprovalRequest, until: Instant, _: &CancelToken) -> Waited {
        self.asked.lock().expect("lock").push(request.clone());
        match self.decision {
            Some(decision) => Waited::Decided(Decided {
                decision,
                approver: "alice".into(),
                reason: Some("checked it".into()),
            }),
            None => {
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
                Waited::Deadline
            }
        }
    }
}

/// The network granted for `hosts`, the requests to `marked` waiting for approval.
fn network(hosts: &[&str], marked: &[&str]) -> Grants {
    let grant = NetworkGrant {
        allowed_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        approval: Some(HostsApproval {
            hosts: marked.iter().map(|h| (*h).to_owned()).collect(),
        }),
    };
    Grants::load(
        GrantSet {
            network: Some(grant),
            ..GrantSet::default()
        },
        None,
    )
    .expect("grants")
}

/// Delegation to `agents` granted, delegations to `marked` waiting for approval.
fn delegating(agents: &[&str], marked: &[&str]) -> Grants {
    let grant = DelegationGrant {
        approval: Some(AgentsApproval {
            agents: marked.iter().map(|a| (*a).to_owned()).collect(),
        }),
        ..DelegationGrant::new(agents.iter().map(|a| (*a).to_owned()).collect(), 1, 8)
    };
    Grants::load(
        GrantSet {
            delegation: Some(grant),
            ..GrantSet::default()
        },
        None,
    )
    .expect("grants")
}

/// `wordcount`, the Agent the delegations call.
fn others() -> LocalDelegator {
    let agents = BTreeMap::from([(
        "wordcount".to_owned(),
        LocalAgent {
            agent: agent("wordcount"),
            grants: Grants::default(),
            limits: Limits::default(),
            config: Vec::new(),
        },
    )]);
    LocalDelegator::new(agents, key())
}

/// `component` run on `input` under `grants`, decided by `person`, calling `others`.
fn run(
    component: &str,
    input: &str,
    grants: Grants,
    person: &Arc<Person>,
    others: Option<&LocalDelegator>,
    timeout: Option<Duration>,
) -> TaskOutcome {
    let mut req = request(input, grants);
    req.approver = Some(person.clone() as Arc<dyn Approver>);
    req.delegation = others.map(LocalDelegator::root_context);
    if let Some(timeout) = timeout {
        req.limits.timeout = timeout;
    }
    agent(component).run(req)
}

/// Replays a run of `component` that started no child, with no one to ask.
fn replay(component: &str, outcome: TaskOutcome, input: &str) -> Result<(), String> {
    let report = RunReport::new(outcome, input.as_bytes(), &[]);
    let opts = VerifyOptions {
        accept_embedded_key: true,
        ..Default::default()
    };
    verify_report(runtime(), &report, &agent_bytes(component), &opts)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn a_request_to_a_marked_host_waits_is_sent_once_approved_and_replays_without_anyone() {
    let server = http::Server::start();
    let input = format!("must http POST {}/hello the body", server.base);
    let alice = Person::new(Some(Decision::Approved));
    let outcome = run(
        "conformance",
        &input,
        network(&[&server.base, "https://api.example.com"], &[&server.base]),
        &alice,
        None,
        None,
    );
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(
        output(&outcome),
        "status:200 body:hello from the test server"
    );
    assert_eq!(server.hits(), 1);
    let asked = alice.asked();
    let [request] = &asked[..] else {
        panic!("asked once: {asked:?}")
    };
    assert_eq!(
        request.subject,
        CallSubject::Network {
            method: "POST".into(),
            url: format!("{}/hello", server.base),
        }
    );
    assert_eq!(request.arguments, "the body");
    assert!(request.call.starts_with("0-"), "{}", request.call);
    let attested = outcome
        .attestation
        .verify(None)
        .expect("verifies")
        .predicate;
    let [decided] = &attested.approvals[..] else {
        panic!("one decision attested: {:?}", attested.approvals)
    };
    assert_eq!(
        (
            decided.approver.as_str(),
            decided.decision,
            &decided.subject
        ),
        ("alice", Decision::Approved, &request.subject)
    );
    drop(server);
    replay("conformance", outcome, &input).expect("replays with the recorded decision");
}

#[test]
fn a_request_to_a_host_the_rule_does_not_name_is_sent_without_asking() {
    let server = http::Server::start();
    let input = format!("must http GET {}/hello", server.base);
    let alice = Person::new(Some(Decision::Approved));
    let outcome = run(
        "conformance",
        &input,
        network(
            &[&server.base, "https://api.example.com"],
            &["https://api.example.com"],
        ),
        &alice,
        None,
        None,
    );
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(server.hits(), 1);
    assert!(alice.asked().is_empty(), "{:?}", alice.asked());
}

#[test]
fn a_rejected_request_is_the_guests_error_and_the_server_receives_nothing() {
    let server = http::Server::start();
    let input = format!("must http POST {}/hello secret plans", server.base);
    let bob = Person::new(Some(Decision::Rejected));
    let outcome = run(
        "conformance",
        &input,
        network(&[&server.base], &[&server.base]),
        &bob,
        None,
        None,
    );
    let failure = outcome.failure.clone().expect("the guest gave up");
    // Not a denial and not a host failure: a person said no, and the guest chose to stop.
    assert_eq!(failure.kind, FailureKind::AgentError, "{}", failure.message);
    assert!(
        failure.message.contains("rejected: alice rejected call 0-")
            && failure.message.contains("checked it"),
        "{}",
        failure.message
    );
    assert_eq!(server.hits(), 0, "a rejected request was sent");
    assert_eq!(outcome.resources_used.network_bytes, 0);
    assert_eq!(bob.asked().len(), 1);
    replay("conformance", outcome, &input).expect("a rejection replays");

    // A guest that carries on sees `http-error.rejected`.
    let input = format!("http GET {}/hello", server.base);
    let outcome = run(
        "conformance",
        &input,
        network(&[&server.base], &[&server.base]),
        &bob,
        None,
        None,
    );
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(output(&outcome), "err:rejected");
    assert_eq!(server.hits(), 0, "a rejected request was sent");
    replay("conformance", outcome, &input).expect("the typed rejection replays");
}

#[test]
fn a_request_nobody_decides_ends_the_task_at_its_deadline_and_replays_so() {
    let server = http::Server::start();
    let input = format!("must http GET {}/hello", server.base);
    let nobody = Person::new(None);
    let outcome = run(
        "conformance",
        &input,
        network(&[&server.base], &[&server.base]),
        &nobody,
        None,
        Some(Duration::from_millis(300)),
    );
    let failure = outcome.failure.clone().expect("deadline");
    assert_eq!(
        failure.kind,
        FailureKind::DeadlineExceeded,
        "{}",
        failure.message
    );
    assert_eq!(server.hits(), 0);
    replay("conformance", outcome, &input).expect("the deadline replays");
}

#[test]
fn a_delegation_to_a_marked_agent_starts_its_child_only_once_approved_and_the_tree_replays() {
    let others = others();
    let input = "alpha beta\ngamma\n";
    let alice = Person::new(Some(Decision::Approved));
    let outcome = run(
        "fanout",
        input,
        delegating(&["wordcount"], &["wordcount"]),
        &alice,
        Some(&others),
        None,
    );
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(output(&outcome), r#"{"parts":2,"words":3}"#);
    // Each child asked once, about its own input, named by its place and content.
    let asked = alice.asked();
    let seen: Vec<_> = asked
        .iter()
        .map(|r| (r.subject.clone(), r.arguments.as_str()))
        .collect();
    let wordcount = CallSubject::Delegation {
        agent: "wordcount".into(),
    };
    assert_eq!(
        seen,
        [
            (wordcount.clone(), "alpha beta"),
            (wordcount.clone(), "gamma")
        ]
    );
    assert!(asked[0].call.starts_with("0-") && asked[1].call.starts_with("1-"));
    let attested = outcome
        .attestation
        .verify(None)
        .expect("verifies")
        .predicate;
    assert_eq!(attested.approvals.len(), 2);
    assert!(
        attested
            .approvals
            .iter()
            .all(|a| a.approver == "alice" && a.subject == wordcount)
    );
    // The replay reads both decisions from the trace: nobody is asked, no child runs.
    let report = RunReport::tree(outcome, input.as_bytes(), &[], others.finish());
    let opts = VerifyOptions {
        trusted_key: Some(key().verifying_key()),
        ..Default::default()
    };
    let modules =
        |name: &str| (name == "wordcount").then(|| (agent_bytes("wordcount"), Vec::new()));
    let verified = verify_tree(runtime(), &report, &agent_bytes("fanout"), &modules, &opts)
        .expect("the whole tree verifies");
    assert_eq!(verified, 3);
}

#[test]
fn a_rejected_delegation_starts_no_child_and_the_guest_is_told_who_rejected_it() {
    let others = others();
    let bob = Person::new(Some(Decision::Rejected));
    let input = "must delegate wordcount one two three";
    let outcome = run(
        "conformance",
        input,
        delegating(&["wordcount"], &["*"]),
        &bob,
        Some(&others),
        None,
    );
    let failure = outcome.failure.clone().expect("the guest gave up");
    assert_eq!(failure.kind, FailureKind::AgentError, "{}", failure.message);
    assert!(
        failure.message.contains("rejected: alice rejected call 0-")
            && failure.message.contains("delegation to Agent `wordcount`")
            && failure.message.contains("checked it"),
        "{}",
        failure.message
    );
    assert!(outcome.children.is_empty(), "{:?}", outcome.children);
    assert!(others.finish().is_empty(), "a rejected child ran");
    replay("conformance", outcome, input).expect("a rejection replays");

    // A guest that carries on sees `delegation-error.rejected`: nothing ran.
    let input = "delegate wordcount one two three";
    let outcome = run(
        "conformance",
        input,
        delegating(&["wordcount"], &["wordcount"]),
        &bob,
        Some(&others),
        None,
    );
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert_eq!(output(&outcome), "err:rejected");
    assert!(others.finish().is_empty(), "a rejected child ran");
    replay("conformance", outcome, input).expect("the typed rejection replays");
}

#[test]
fn a_delegation_nobody_decides_ends_the_task_at_its_deadline_and_replays_so() {
    let others = others();
    let nobody = Person::new(None);
    let input = "must delegate wordcount one two three";
    let outcome = run(
        "conformance",
        input,
        delegating(&["wordcount"], &["wordcount"]),
        &nobody,
        Some(&others),
        Some(Duration::from_millis(300)),
    );
    let failure = outcome.failure.clone().expect("deadline");
    assert_eq!(
        failure.kind,
        FailureKind::DeadlineExceeded,
        "{}",
        failure.message
    );
    assert!(others.finish().is_empty(), "a child ran without a decision");
    replay("conformance", outcome, input).expect("the deadline replays");
}

#[test]
fn a_delegation_to_an_agent_the_rule_does_not_name_runs_without_asking() {
    let others = others();
    let alice = Person::new(Some(Decision::Approved));
    let outcome = run(
        "conformance",
        "must delegate wordcount one two",
        delegating(&["wordcount", "other"], &["other"]),
        &alice,
        Some(&others),
        None,
    );
    assert_eq!(outcome.failure, None, "{:?}", outcome.failure);
    assert!(alice.asked().is_empty(), "{:?}", alice.asked());
    assert_eq!(others.finish().len(), 1);
}
