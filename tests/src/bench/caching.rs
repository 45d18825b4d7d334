//! Prompt caching's bench line (SPEC §9): a six-turn connector run whose
//! prompt is about 3,000 tokens (five tool calls answered with about 600
//! tokens each, then the summary), through the real runner, the fixture
//! server and the strict Converse stand-in, which bills cache writes and
//! reads as Bedrock reports them. Each row is the run's billed input cost
//! with the model's cache prices, and the same tokens at the plain input
//! price (the run without caching).

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use local::converse::Reply;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::{Value, json};
use shared::domain::run::agent::offered_name;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::budget::{Budget, Price, Prices, Tokens};
use shared::domain::task::install::InstallScope;

use crate::{RunStack, connector_task, install, run_message, run_settings};

/// The run's turns.
pub const TURNS: u64 = 6;
/// The input tokens the stand-in bills for turn `turn` (from 0): the
/// prefix, and what each earlier turn added (a tool call and its result).
pub fn turn_input(turn: u64) -> u64 {
    3_000 + 650 * turn
}

/// Runs the six turns of `prompt` on `model` priced by `prices`; answers
/// the run record and the Converse requests the stand-in received.
pub async fn six_turn_run(
    s: &RunStack,
    model: &str,
    prices: Prices,
    prompt: &str,
) -> anyhow::Result<(Value, Vec<Value>)> {
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            prompt,
            json!({"version": 1}),
            &[],
            &"The board. ".repeat(1100),
        )],
        tools: vec![tool("lookup")],
        tool_answers: BTreeMap::from([(
            "lookup".to_owned(),
            CallToolResult::success(vec![ContentBlock::text("an issue, ".repeat(240))]),
        )]),
        ..Default::default()
    })
    .await?;
    s.store()
        .put_install(&install("ins_1", "board", &fixture.url(), InstallScope::Workspace))
        .await?;
    let mut task = connector_task("board", prompt, &["lookup"], &[]);
    task.spec.limits.max_tool_calls = 5;
    task.spec.limits.max_turns = TURNS as u32;
    task.spec.budget = Some(Budget {
        max_usd_per_run: 1.0,
        max_usd_per_month: 100.0,
    });
    s.insert(&task).await;
    let lookup = offered_name("board", "lookup");
    let mut replies: Vec<Reply> = (0..TURNS - 1)
        .map(|turn| Reply::tool(&lookup, json!({}), turn_input(turn), 20))
        .collect();
    replies.push(Reply::text("Reported.", turn_input(TURNS - 1), 40));
    s.model.script(replies).await;
    let mut settings = run_settings(true);
    settings.model_id = model.to_owned();
    settings.prices = prices;
    let at = Utc::now() - Duration::seconds(5);
    s.runner_on(s.store(), settings)
        .deliver("m1", &run_message(&task, at, "e1"), Utc::now(), crate::deadline())
        .await?;
    let record = s
        .run_record(&task.task_id, &occurrence_key(at))
        .await
        .ok_or_else(|| anyhow::anyhow!("no run record"))?;
    let requests = s.model.requests().await.into_iter().map(|(_, r)| r).collect();
    Ok((record, requests))
}

/// The record's tokens, as billed.
pub fn billed(record: &Value) -> Tokens {
    let field = |name: &str| record["usage"][name].as_u64().unwrap_or(0);
    Tokens {
        input: field("input_tokens"),
        output: field("output_tokens"),
        cache_write: field("cache_write_input_tokens"),
        cache_read: field("cache_read_input_tokens"),
    }
}

#[derive(Debug, Serialize)]
pub struct CacheRow {
    pub model: String,
    /// The smallest prefix the model's cache takes.
    pub cache_minimum: u64,
    pub turns: u64,
    pub input_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_read_tokens: u64,
    /// The run's billed input, USD: with the cache, and the same tokens
    /// all at the plain input price.
    pub input_usd_cached: f64,
    pub input_usd_uncached: f64,
    pub ratio: f64,
}

/// The models of the bench line and their prices (USD per million tokens:
/// input, output, cache write, cache read), as Bedrock lists them.
pub const MODELS: [(&str, [f64; 4]); 2] = [
    (
        "global.anthropic.claude-haiku-4-5-20251001-v1:0",
        [1.0, 5.0, 1.25, 0.10],
    ),
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", [3.0, 15.0, 3.75, 0.30]),
];

pub async fn measure() -> anyhow::Result<Vec<CacheRow>> {
    let mut rows = Vec::new();
    for (model, [input, output, write, read]) in MODELS {
        eprintln!("bench: a six-turn run with prompt caching on {model} ...");
        let s = RunStack::start().await?;
        let price = Price {
            input_per_mtok: input,
            output_per_mtok: output,
            cache_write_per_mtok: Some(write),
            cache_read_per_mtok: Some(read),
        };
        let prices = Prices::new(BTreeMap::from([(model.to_owned(), price)]))?;
        let (record, _) = six_turn_run(&s, model, prices, "weekly").await?;
        let tokens = billed(&record);
        let input_cost = |t: Tokens| price.cost(Tokens { output: 0, ..t });
        let whole = tokens.input + tokens.cache_write + tokens.cache_read;
        let cached = input_cost(tokens);
        let uncached = input_cost(Tokens::plain(whole, 0));
        rows.push(CacheRow {
            model: model.to_owned(),
            cache_minimum: shared::domain::run::model::cache_minimum(model).unwrap_or_default(),
            turns: TURNS,
            input_tokens: tokens.input,
            cache_write_tokens: tokens.cache_write,
            cache_read_tokens: tokens.cache_read,
            input_usd_cached: cached,
            input_usd_uncached: uncached,
            ratio: if uncached > 0.0 { cached / uncached } else { 1.0 },
        });
    }
    Ok(rows)
}
