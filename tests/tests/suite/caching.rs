//! Prompt caching (SPEC §9): the runner places Bedrock cache points after
//! the stable prefix and the growing conversation when they reach the
//! model's minimum, only when the model's price has cache prices; the
//! strict stand-in bills cache writes and reads as Bedrock reports them and
//! refuses the cache points Bedrock refuses; the run record carries the
//! cached tokens, charged at their own prices, never as free.

use std::collections::BTreeMap;

use local::converse::Reply;
use serde_json::{Value, json};
use shared::adapters::bedrock::BedrockModel;
use shared::domain::run::agent::{Block, CachePoints, MAX_CACHE_POINTS, Message, ModelRequest, Role};
use shared::domain::task::budget::{Price, Prices, Tokens};
use shared::ports::{Model, ModelErrorKind};
use tests::RunStack;
use tests::bench::caching::{TURNS, billed, six_turn_run, turn_input};

/// A model whose cache takes a prefix of 1,024 tokens.
const SONNET: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

fn cached_price() -> Price {
    Price {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
        cache_write_per_mtok: Some(3.75),
        cache_read_per_mtok: Some(0.3),
    }
}

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        system: "system".into(),
        messages,
        tools: vec![],
        max_tokens: 100,
        cache: CachePoints::default(),
    }
}

fn text(role: Role, text: &str) -> Message {
    Message {
        role,
        content: vec![Block::Text(text.into())],
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stand_in_bills_cache_writes_and_reads_and_refuses_what_bedrock_refuses() {
    let s = RunStack::start().await.unwrap();
    let model = BedrockModel::from_sdk(&s.model_sdk);
    // About 1,500 tokens: above Sonnet's minimum.
    let mut req = request(vec![text(Role::User, &"p".repeat(6000))]);
    req.cache.after_messages = vec![0];
    s.model
        .script([Reply::text("one", 2000, 5), Reply::text("two", 2000, 5)])
        .await;
    let first = model.converse(SONNET, &req).await.expect("a cache point Bedrock takes");
    assert!(first.cache_write_tokens >= 1024, "{first:?}");
    assert_eq!(first.cache_read_tokens, 0);
    assert_eq!(first.input_tokens + first.cache_write_tokens, 2000);
    let second = model.converse(SONNET, &req).await.unwrap();
    assert_eq!(
        second.cache_read_tokens, first.cache_write_tokens,
        "the same prefix is read"
    );
    assert_eq!(
        (second.cache_write_tokens, second.input_tokens),
        (0, first.input_tokens)
    );
    let body = &s.model.requests().await[0].1;
    assert_eq!(
        body["messages"][0]["content"][1],
        json!({"cachePoint": {"type": "default"}})
    );

    // A prefix under the minimum is not cached, and costs nothing more.
    let mut short = request(vec![text(Role::User, "short")]);
    short.cache.after_messages = vec![0];
    s.model.script([Reply::text("three", 50, 5)]).await;
    let reply = model.converse(SONNET, &short).await.unwrap();
    assert_eq!(
        (reply.input_tokens, reply.cache_write_tokens, reply.cache_read_tokens),
        (50, 0, 0)
    );

    // More than four points, and a point for a model without prompt caching.
    let mut five = request(vec![
        text(Role::User, "a"),
        text(Role::Assistant, "b"),
        text(Role::User, "c"),
        text(Role::Assistant, "d"),
        text(Role::User, "e"),
    ]);
    five.cache.after_messages = (0..=MAX_CACHE_POINTS).collect();
    let err = model.converse(SONNET, &five).await.expect_err("five cache points");
    assert_eq!(err.kind, ModelErrorKind::Other);
    assert!(
        err.message.contains("A maximum of 4 blocks with cache_control"),
        "{}",
        err.message
    );
    let err = model
        .converse(tests::MODEL, &req)
        .await
        .expect_err("a model without caching");
    assert!(err.message.starts_with("ValidationException"), "{}", err.message);
    assert_eq!(s.model.refused().await.len(), 2);
}

fn count_points(request: &Value) -> usize {
    request.to_string().matches("\"cachePoint\"").count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_six_turn_run_caches_its_prefix_and_is_charged_each_token_at_its_price() {
    let s = RunStack::start().await.unwrap();
    let price = cached_price();
    let prices = Prices::new(BTreeMap::from([(SONNET.to_owned(), price)])).unwrap();
    let (record, requests) = six_turn_run(&s, SONNET, prices, "weekly").await.unwrap();
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(requests.len(), TURNS as usize);
    for request in &requests {
        let points = count_points(request);
        assert!((1..=MAX_CACHE_POINTS).contains(&points), "{points} points");
    }
    let tokens = billed(&record);
    assert!(tokens.cache_write > 0 && tokens.cache_read > 0, "{}", record["usage"]);
    // Every input token the stand-in billed is on the record, once.
    let whole: u64 = (0..TURNS).map(turn_input).sum();
    assert_eq!(tokens.input + tokens.cache_write + tokens.cache_read, whole);
    let cost = record["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - price.cost(tokens)).abs() < 1e-9,
        "{cost} vs {}",
        price.cost(tokens)
    );
    // The billed input costs at most half what it would without the cache.
    let input_cost = |t: Tokens| price.cost(Tokens { output: 0, ..t });
    let uncached = input_cost(Tokens::plain(whole, 0));
    assert!(
        input_cost(tokens) <= uncached / 2.0,
        "{} with the cache, {uncached} without",
        input_cost(tokens)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_cache_prices_a_run_places_no_cache_point() {
    let s = RunStack::start().await.unwrap();
    let plain = Price::plain(3.0, 15.0);
    let prices = Prices::new(BTreeMap::from([(SONNET.to_owned(), plain)])).unwrap();
    let (record, requests) = six_turn_run(&s, SONNET, prices, "daily").await.unwrap();
    assert_eq!(record["status"], "succeeded", "{record}");
    assert!(requests.iter().all(|r| count_points(r) == 0));
    let tokens = billed(&record);
    assert_eq!((tokens.cache_write, tokens.cache_read), (0, 0));
    assert_eq!(tokens.input, (0..TURNS).map(turn_input).sum::<u64>());
    assert!((record["cost_usd"].as_f64().unwrap() - plain.cost(tokens)).abs() < 1e-9);
}
