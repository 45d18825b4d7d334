//! The main job, locally (README; SPEC §10): starts moto, creates the stack,
//! runs the real `create` binary under the Lambda Runtime API emulator, and
//! walks a chat backend's reminder through it, printing what it leaves in the
//! table and in EventBridge Scheduler.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use chrono::{FixedOffset, SecondsFormat, Utc};
use local::LocalAws;
use local::runtime::{FunctionProcess, RuntimeApi};
use serde_json::{Value, json};

const CEILINGS: &str = r#"{"max_turns": 10, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300}"#;

fn step(text: &str) {
    println!("\n== {text}");
}

fn show(label: &str, value: &Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    println!("{label}:\n{text}");
}

/// The function binaries are built beside this one.
fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    anyhow::ensure!(
        path.exists(),
        "{} is missing: build with `cargo build --workspace --bins`",
        path.display()
    );
    Ok(path)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    step("Starting the local AWS (moto on loopback) and creating the stack");
    let (aws, stack) = LocalAws::with_stack("local").await?;
    println!("moto: {} (pid {})", aws.moto.endpoint(), aws.moto.pid());
    println!(
        "table {}, runs queue {}, schedule group {}",
        stack.names.table, stack.names.runs_queue, stack.names.schedule_group
    );

    step("Starting the real `create` binary under the Lambda Runtime API emulator");
    let api = RuntimeApi::start("create", Duration::from_secs(30)).await?;
    let mut env = aws.sdk_env();
    env.extend(stack.function_env().into_iter().map(|(k, v)| (k.to_owned(), v)));
    env.extend(
        [
            ("AGENT_SCHEDULE_API_ENABLED", "true"),
            ("AGENT_SCHEDULE_WORKER_ENABLED", "true"),
            ("SCHEDULE_CEILINGS", CEILINGS),
            ("RUST_LOG", "warn"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let _create = FunctionProcess::spawn(&binary("create")?, &api, "create", &env, None)?;
    println!("runtime API on {}", api.address());

    step("A chat backend asks for the tool descriptor");
    let describe = api.invoke_ok(&json!({"op": "describe"})).await?;
    show("descriptor.classification", &describe["descriptor"]["classification"]);

    step("The user approved \"remind me in ten seconds\"; the chat backend calls create");
    let now = Utc::now();
    let berlin = FixedOffset::east_opt(3600).context("offset")?;
    let at = (now + chrono::Duration::seconds(10)).with_timezone(&berlin);
    let request = json!({
        "op": "create",
        "principal": {"id": "usr_123", "workspace": "ws_1", "scopes": ["schedule.write"]},
        "idempotency_key": format!("call_{}", now.timestamp()),
        "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard",
                  "limits": {"max_turns": 6, "max_tool_calls": 0, "max_output_tokens": 2000, "timeout_seconds": 120}},
        "approval": {"id": "apr_9", "approved_at": now.to_rfc3339_opts(SecondsFormat::Secs, true)},
        "input": {"title": "Call mom", "instruction": "Remind me to call mom about Sunday.",
                  "at": at.to_rfc3339_opts(SecondsFormat::Secs, false)}
    });
    show("request.input", &request["input"]);
    let created = api.invoke_ok(&request).await?;
    show("response", &created);
    anyhow::ensure!(created["ok"] == true, "create refused the request");
    let task_id = created["task"]["task_id"].as_str().context("task id")?.to_owned();

    step("The chat backend retries the same call (a lost response)");
    let replayed = api.invoke_ok(&request).await?;
    println!(
        "ok: {}, replayed: {}, same task: {}",
        replayed["ok"],
        replayed["replayed"],
        replayed["task"]["task_id"] == task_id
    );

    step("A model that forgot the time zone is refused, and nothing is written");
    let mut naive = request.clone();
    naive["idempotency_key"] = json!("call_naive");
    naive["input"]["at"] = json!(at.naive_local().format("%Y-%m-%dT%H:%M:%S").to_string());
    let refused = api.invoke_ok(&naive).await?;
    show("response", &refused);

    step("The task item in DynamoDB");
    let dynamo = aws_sdk_dynamodb::Client::new(&aws.sdk);
    let items = dynamo.scan().table_name(&stack.names.table).send().await?;
    println!(
        "{} items in the table (the task and its idempotency record)",
        items.items().len()
    );
    let item = dynamo
        .get_item()
        .table_name(&stack.names.table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("WS#ws_1".into()))
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S(format!("TASK#{task_id}")),
        )
        .send()
        .await?
        .item
        .map(local::item_json)
        .context("the task item")?;
    show(&format!("WS#ws_1 / TASK#{task_id}"), &item);

    step("Its one-time schedule in EventBridge Scheduler");
    let schedule = aws_sdk_scheduler::Client::new(&aws.sdk)
        .get_schedule()
        .group_name(&stack.names.schedule_group)
        .name(&task_id)
        .send()
        .await?;
    let target = schedule.target();
    show(
        &format!("schedule {}/{task_id}", stack.names.schedule_group),
        &json!({
            "expression": schedule.schedule_expression(),
            "timezone": schedule.schedule_expression_timezone(),
            "flexible_time_window": schedule.flexible_time_window().map(|w| w.mode().as_str()),
            "action_after_completion": schedule.action_after_completion().map(|a| a.as_str()),
            "state": schedule.state().map(|s| s.as_str()),
            "target": target.map(|t| t.arn()),
            "role": target.map(|t| t.role_arn()),
            "dead_letter_queue": target.and_then(|t| t.dead_letter_config()).and_then(|d| d.arn()),
            "retry_policy": target.and_then(|t| t.retry_policy()).map(|r| json!({
                "maximum_event_age_in_seconds": r.maximum_event_age_in_seconds(),
                "maximum_retry_attempts": r.maximum_retry_attempts(),
            })),
            "input": target.and_then(|t| t.input()).and_then(|i| serde_json::from_str::<Value>(i).ok()),
        }),
    );

    if std::env::args().any(|a| a == "--serve") {
        return serve(&env).await;
    }

    println!(
        "\nmoto stores schedules but never fires them. The runner and the local dispatcher that \
         delivers due schedules to it are the next step of the project; until then the run itself \
         is not part of this walk-through."
    );
    Ok(())
}

/// Keeps the stack up and writes the functions' environment to a file that
/// `cargo lambda watch --env-file` reads, until Ctrl-C.
async fn serve(env: &[(String, String)]) -> anyhow::Result<()> {
    let path = local::moto::repo_root().join("target/local.env");
    let text: String = env
        .iter()
        .filter(|(k, _)| k != "RUST_LOG")
        .map(|(k, v)| format!("{k}='{v}'\n"))
        .collect();
    std::fs::write(&path, text)?;
    step("Serving until Ctrl-C");
    println!("The functions' environment is in {}. In another shell:", path.display());
    println!("  cargo lambda watch -A 127.0.0.1 --env-file {}", path.display());
    println!("  cargo lambda invoke create --data-file infra/events/create-reminder.json");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
