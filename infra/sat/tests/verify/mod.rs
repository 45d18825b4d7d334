//! `sat verify`, the deploy check, against the local stack: the real
//! create and runner binaries under their Runtime API emulators, the
//! Lambda Invoke API in front of them, and the dispatcher doing what
//! Scheduler, the event source and the pipe do, on a short due time.

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use local::converse::Reply;
use local::dispatcher::Dispatcher;
use local::invoke::{InvokeApi, function_arn};
use local::otlp::OtlpEndpoint;
use local::runtime::Launch;
use tests::RunStack;

use crate::{EnvFile, Ran, sat_with};

const MODEL: &str = "global.anthropic.claude-haiku-4-5-20251001-v1:0";

/// A function binary of the workspace, built beside `sat`
/// (`cargo test --workspace` builds them).
fn binary(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_sat")).with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: build with `cargo build --workspace --bins`",
        path.display()
    );
    path
}

/// Runs `sat` while the dispatcher fires due schedules, feeds the runs
/// queue to the runner and carries settled runs to the bus, as AWS would.
async fn while_dispatching(dispatch: &Dispatcher<'_>, sat: impl std::future::Future<Output = Ran>) -> Ran {
    while_dispatching_recursing(dispatch, None, sat).await
}

/// [`while_dispatching`], feeding the reconcile queue to the reconcile
/// function too, with its `RecursiveLoop` as given (`None`: as
/// `template.yaml` sets it).
async fn while_dispatching_recursing(
    dispatch: &Dispatcher<'_>,
    recursion: Option<bool>,
    sat: impl std::future::Future<Output = Ran>,
) -> Ran {
    tokio::pin!(sat);
    loop {
        tokio::select! {
            ran = &mut sat => return ran,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                dispatch.fire_due(Utc::now()).await.unwrap();
                dispatch.drain_runs().await.unwrap();
                dispatch.notify().await.unwrap();
                dispatch.drain_reconcile_recursing(recursion).await.unwrap();
            }
        }
    }
}

/// The stack `verify` walks: create, the runner and reconcile under their
/// emulators, create behind the Invoke API, create and the runner sending
/// spans to the OTLP stand-in, which keeps them in `aws/spans`.
struct Walked {
    s: RunStack,
    _create: local::runtime::Function,
    runner: local::runtime::Function,
    reconcile: local::runtime::Function,
    invoke: InvokeApi,
    spans: OtlpEndpoint,
}

impl Walked {
    async fn start() -> Self {
        let s = RunStack::start().await.unwrap();
        let spans = OtlpEndpoint::with_transaction_search(&s.t.aws.sdk).await.unwrap();
        let create = Launch::new("create", &s.t.aws, &s.t.stack)
            .unwrap()
            .set("TRACES_ENDPOINT", spans.url())
            .start(&binary("create"))
            .await
            .unwrap();
        let runner = Launch::new("runner", &s.t.aws, &s.t.stack)
            .unwrap()
            .model(&s.model.endpoint(), MODEL, 1.0, 5.0)
            .set("TRACES_ENDPOINT", spans.url())
            .start(&binary("runner"))
            .await
            .unwrap();
        let reconcile = Launch::new("reconcile", &s.t.aws, &s.t.stack)
            .unwrap()
            .start(&binary("reconcile"))
            .await
            .unwrap();
        let invoke = InvokeApi::start([create.api.invoker()]).await.unwrap();
        Self {
            s,
            _create: create,
            runner,
            reconcile,
            invoke,
            spans,
        }
    }

    fn env(&self) -> EnvFile {
        EnvFile::write(
            &self.s.t.aws,
            &self.s.t.stack,
            &[
                ("CreateFunctionArn", function_arn("create")),
                ("AWS_ENDPOINT_URL_LAMBDA", self.invoke.endpoint()),
                ("TRACES_ENDPOINT", self.spans.url()),
            ],
        )
    }

    fn dispatcher(&self) -> Dispatcher<'_> {
        Dispatcher {
            sdk: &self.s.t.aws.sdk,
            stack: &self.s.t.stack,
            runner: &self.runner.api,
            reconcile: &self.reconcile.api,
        }
    }
}

/// A step of a `--json` report, by name.
fn step_of<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {report}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_is_created_run_recorded_and_notified_end_to_end() {
    let w = Walked::start().await;
    let s = &w.s;
    let env = w.env();
    s.model.script([Reply::text("ok", 60, 2)]).await;
    let dispatch = w.dispatcher();
    // Someone else's notification waits on the queue: it must stay there.
    let sqs = aws_sdk_sqs::Client::new(&s.t.aws.sdk);
    sqs.send_message()
        .queue_url(&s.t.stack.run_finished.url)
        .message_body(r#"{"detail-type": "Scheduled run finished", "detail": {"task_id": "rem_other"}}"#)
        .send()
        .await
        .unwrap();

    let ran = while_dispatching(
        &dispatch,
        sat_with(env.path(), &["verify", "--due-in", "3s", "--wait", "60s"]),
    )
    .await;
    assert_eq!(ran.status, 0, "{ran:?}");
    let text = &ran.stdout;
    assert!(text.contains("Verified end to end"), "{text}");
    assert!(text.contains("create answered ok"), "{text}");
    assert!(text.contains("succeeded"), "{text}");
    assert!(text.contains("on the bus: run"), "{text}");
    assert!(text.contains("on RunFinishedQueue: run"), "{text}");
    assert!(text.contains("ids and status only"), "{text}");
    assert!(text.contains("a chain past loop detection, traces"), "{text}");
    assert!(
        ran.stderr.contains("waiting for its event on the bus"),
        "progress: {ran:?}"
    );

    // Its own event was taken; the other one is still there.
    let left = sqs
        .receive_message()
        .queue_url(&s.t.stack.run_finished.url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let bodies: Vec<&str> = left.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert!(bodies[0].contains("rem_other"));

    // The machine form names every step; the model was called once.
    s.model.script([Reply::text("ok", 60, 2)]).await;
    let report = while_dispatching(
        &dispatch,
        sat_with(env.path(), &["--json", "verify", "--due-in", "2s", "--wait", "60s"]),
    )
    .await
    .json();
    assert_eq!(report["verified"], true, "{report}");
    let steps: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["create", "run", "bus", "queue", "pass", "traces"]);
    let verdicts: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts, ["verified"; 6],
        "nobody else consumes the queue here: {report}"
    );
    let said = step_of(&report, "pass")["detail"].as_str().unwrap();
    assert!(said.contains("a chain of 20 messages"), "{said}");
    assert!(said.contains("came to its end"), "{said}");
    let said = step_of(&report, "traces")["detail"].as_str().unwrap();
    assert!(said.contains("from create, runner: the endpoint accepted"), "{said}");
    assert_eq!(s.model.requests().await.len(), 2);
    // Its own subscription is gone: only the stack's rules remain on the bus.
    let rules = aws_sdk_eventbridge::Client::new(&s.t.aws.sdk)
        .list_rules()
        .event_bus_name(&s.t.stack.names.event_bus)
        .send()
        .await
        .unwrap();
    assert!(
        rules
            .rules()
            .iter()
            .all(|r| !r.name().unwrap_or_default().starts_with("sat-verify")),
        "{rules:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_the_stack_cannot_find_or_refuses_is_said() {
    let s = RunStack::start().await.unwrap();
    let create = Launch::new("create", &s.t.aws, &s.t.stack)
        .unwrap()
        .set("AGENT_SCHEDULE_WORKER_ENABLED", "false")
        .start(&binary("create"))
        .await
        .unwrap();
    let invoke = InvokeApi::start([create.api.invoker()]).await.unwrap();
    // No such function: Lambda's ResourceNotFoundException, an error.
    let env = EnvFile::write(
        &s.t.aws,
        &s.t.stack,
        &[
            ("CreateFunctionArn", function_arn("nope")),
            ("AWS_ENDPOINT_URL_LAMBDA", invoke.endpoint()),
        ],
    );
    let ran = sat_with(env.path(), &["verify", "--due-in", "2s", "--wait", "5s"]).await;
    assert_eq!(ran.status, 1, "{ran:?}");
    assert!(ran.stderr.contains("Function not found"), "{ran:?}");
    // The create function refuses (its worker flag is off): not verified.
    let env = EnvFile::write(
        &s.t.aws,
        &s.t.stack,
        &[
            ("CreateFunctionArn", function_arn("create")),
            ("AWS_ENDPOINT_URL_LAMBDA", invoke.endpoint()),
        ],
    );
    let ran = sat_with(env.path(), &["verify", "--due-in", "2s", "--wait", "5s"]).await;
    assert_eq!(ran.status, 3, "{ran:?}");
    assert!(ran.stdout.contains("failed"), "{}", ran.stdout);
    assert!(ran.stdout.contains("feature_disabled"), "{}", ran.stdout);
    assert!(ran.stdout.contains("NOT verified"), "{}", ran.stdout);
}

/// A stack as AWS's defaults would have it, and as a role without the
/// traces' permission leaves it: Lambda cuts the probe chain at hop 16,
/// and the OTLP endpoint refuses every export, so `aws/spans` holds none of
/// the reminder's spans. Both steps fail and say where to look; the
/// reminder itself was run and notified.
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_cut_by_loop_detection_and_refused_traces_are_said() {
    let w = Walked::start().await;
    let env = w.env();
    w.s.model.script([Reply::text("ok", 60, 2)]).await;
    w.spans.deny_next(10_000);
    let dispatch = w.dispatcher();
    let ran = while_dispatching_recursing(
        &dispatch,
        Some(false),
        sat_with(env.path(), &["--json", "verify", "--due-in", "2s", "--wait", "20s"]),
    )
    .await;
    assert_eq!(ran.status, 3, "{ran:?}");
    let report = ran.json();
    assert_eq!(report["verified"], false, "{report}");
    for ok in ["create", "run", "bus"] {
        assert_eq!(step_of(&report, ok)["verdict"], "verified", "{report}");
    }
    let pass = step_of(&report, "pass");
    assert_eq!(pass["verdict"], "failed", "{report}");
    let said = pass["detail"].as_str().unwrap();
    assert!(said.contains("stopped at hop 16"), "{said}");
    assert!(said.contains("RecursiveLoop: Allow"), "{said}");
    let traces = step_of(&report, "traces");
    assert_eq!(traces["verdict"], "failed", "{report}");
    let said = traces["detail"].as_str().unwrap();
    assert!(said.contains("no span of the runner's"), "{said}");
    assert!(said.contains("xray:PutSpans"), "{said}");
    assert!(w.spans.spans().is_empty(), "every export refused");
}
