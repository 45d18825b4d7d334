//! `sat`, the real binary, run as an operator and a connector author run
//! it: against the local stack (moto, the real function binaries, the
//! dispatcher), the project's fixture connector, the Python `mcp` SDK's
//! server and server-everything. One test executable: each links the SDK.

// A test stops where a set-up step failed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;

use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use serde_json::{Value, json};

mod check;
mod describe;
mod overdue;
mod redrive;
mod upgrade;
mod verify;

/// What a run of `sat` printed and how it ended.
#[derive(Debug)]
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
    pub status: i32,
}

impl Ran {
    /// The `--json` answer.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// Runs the `sat` binary with `args` and a clean `SAT_*` environment.
pub async fn sat(args: &[&str]) -> Ran {
    sat_in(args, None).await
}

/// Runs `sat --env-file <env>` with `args`.
pub async fn sat_with(env: &Path, args: &[&str]) -> Ran {
    sat_in(args, Some(env)).await
}

async fn sat_in(args: &[&str], env: Option<&Path>) -> Ran {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sat"));
    command.env_remove("SAT_STACK").env_remove("SAT_ENV_FILE");
    if let Some(env) = env {
        command.arg("--env-file").arg(env);
    }
    let out: Output = command.args(args).output().await.expect("sat runs");
    Ran {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        status: out.status.code().unwrap_or(-1),
    }
}

/// A local stack's environment file, as `infra/scripts/local.sh --serve`
/// writes it: the SDK's variables, the functions' and the stack's outputs,
/// and `extra`. Removed when dropped.
pub struct EnvFile(pub std::path::PathBuf);

impl EnvFile {
    pub fn write(aws: &local::LocalAws, stack: &local::Stack, extra: &[(&str, String)]) -> Self {
        let path = std::env::temp_dir().join(format!("sat-{}.env", uuid::Uuid::new_v4().simple()));
        let mut lines: Vec<(String, String)> = aws.sdk_env();
        lines.extend(stack.function_env().into_iter().map(|(k, v)| (k.to_owned(), v)));
        lines.extend(stack.outputs().into_iter().map(|(k, v)| (k.to_owned(), v)));
        lines.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        let text: String = lines.iter().map(|(k, v)| format!("{k}='{v}'\n")).collect();
        std::fs::write(&path, text).expect("write the environment file");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for EnvFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// SPEC §5's example marker, with `mutate` applied.
pub fn marker(mutate: impl FnOnce(&mut Value)) -> Value {
    let mut m = json!({"version": 1,
        "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
        "tools": ["list_issues", "post_summary"],
        "limits": {"max_turns": 8, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300},
        "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0},
        "needs": [{"id": "summary_channel", "description": "a chat channel to post the weekly summary in"}]});
    mutate(&mut m);
    m
}

/// The fixture connector declaring a good weekly summary and three bad
/// prompts, besides a plain one.
pub async fn fixture() -> McpFixture {
    let mut state = FixtureState {
        tools: vec![tool("list_issues"), tool("post_summary")],
        ..FixtureState::default()
    };
    state.prompts = vec![
        scheduled_prompt(
            "weekly_summary",
            marker(|_| {}),
            &[("team", true)],
            "Summarise the open issues of {{team}}.",
        ),
        scheduled_prompt(
            "foreign_tool",
            marker(|m| m["tools"] = json!(["list_issues", "github.create_issue"])),
            &[],
            "x",
        ),
        scheduled_prompt(
            "too_many_turns",
            marker(|m| m["limits"]["max_turns"] = json!(50)),
            &[],
            "x",
        ),
        scheduled_prompt(
            "on_event",
            marker(|m| m["trigger"] = json!({"event": "issue.opened"})),
            &[],
            "x",
        ),
    ];
    let mut plain = scheduled_prompt("plain", json!({}), &[], "hello");
    plain.meta = None;
    state.prompts.push(plain);
    McpFixture::start(state).await.expect("the fixture starts")
}

fn template() -> serde_yaml::Value {
    let text = std::fs::read_to_string(local::moto::repo_root().join("template.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// Every output `sat` reads is one the template has, and the local stack
/// writes it to its environment file too.
#[test]
fn sat_reads_only_outputs_the_template_and_the_local_stack_have() {
    let t = template();
    for (output, _) in sat::resources::OUTPUTS {
        assert!(
            !t["Outputs"][output]["Value"].is_null(),
            "template.yaml has no output {output}"
        );
        assert!(
            local::stack::OUTPUT_NAMES.contains(&output) || output == "CreateFunctionArn",
            "the local stack does not write {output}"
        );
    }
}

/// `check`'s defaults are the template's parameter defaults.
#[test]
fn check_s_defaults_are_the_template_s() {
    let t = template();
    let default = |name: &str| t["Parameters"][name]["Default"].as_str().unwrap().to_owned();
    let ceilings: shared::domain::task::limits::Limits = serde_json::from_str(&default("ScheduleCeilings")).unwrap();
    assert_eq!(ceilings, sat::check::DEFAULT_CEILINGS);
    assert_eq!(default("ModelId"), sat::check::DEFAULT_MODEL_ID);
    let prices: Value = serde_json::from_str(&default("ModelPrices")).unwrap();
    assert_eq!(
        prices,
        serde_json::from_str::<Value>(sat::check::DEFAULT_MODEL_PRICES).unwrap()
    );
}
