//! The properties the fuzz targets check (`shared/fuzz/`), one function per
//! target, each taking the fuzzer's raw bytes. The same functions replay the
//! committed corpus (`shared/fuzz/corpus/<target>/`) in this crate's unit
//! tests on the stable toolchain, so CI runs exactly the fuzz targets'
//! checks without nightly. A violated property panics with what broke.
//!
//! Each target goes through the public entry point a Lambda's input reaches
//! (the parsers and checks of the domain), with the clock fixed, and asserts
//! what the spec promises of whatever it accepts, not only that it answers.
//! Built for the unit tests and under the `fuzzing` feature only.

use std::collections::BTreeSet;
use std::str::FromStr;

use crate::domain::schedule::zone::Zone;
use arbitrary::Unstructured;
use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, SecondsFormat, TimeZone, Timelike, Utc};

use crate::domain::connector::declaration;
use crate::domain::connector::webhook::{Event, TOLERANCE_SECONDS, WebhookError, WebhookSecret};
use crate::domain::reminder::{self, CreateRequest, Rejection};
use crate::domain::run::occurrence::{RunMessage, occurrence_key};
use crate::domain::schedule::cron::Cron;
use crate::domain::schedule::preview::{self, instants};
use crate::domain::schedule::recurrence::Recurrence;
use crate::domain::schedule::{self, Expression, InstantError, Schedule};
use crate::domain::task::limits::Ceilings;
use crate::domain::task::{Task, TaskId, TaskKind};

/// One target's check: panics when a property breaks.
pub type Check = fn(&[u8]);

/// The fuzz targets, by name (the names of `shared/fuzz/fuzz_targets/*.rs`
/// and of the corpus directories).
pub const TARGETS: [(&str, Check); 7] = [
    ("instant", instant),
    ("create", create),
    ("declaration", declaration),
    ("cron", cron),
    ("webhook", webhook),
    ("run_message", run_message),
    ("schedule", schedule),
];

/// The fixed clock of every target, so a corpus replays the same way forever.
pub fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0)
        .single()
        .unwrap_or(DateTime::UNIX_EPOCH)
}

/// SPEC §9's example `SCHEDULE_CEILINGS`.
fn ceilings() -> Ceilings {
    Ceilings::new(crate::domain::task::limits::EXAMPLE_CEILINGS)
        .unwrap_or_else(|e| panic!("the example ceilings are valid: {e}"))
}

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// An accepted instant renders in UTC and parses back to itself; create's
/// window check never moves it earlier, lands on a whole second inside
/// (now, now + 366 days], and agrees with the plain parser.
pub fn instant(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let now = now();
    let parsed = schedule::parse_instant(text);
    let refused = schedule::parse_instant_or_refuse(text);
    match (&parsed, &refused) {
        (Some(a), Ok(b)) => assert_eq!(a, b, "the two parsers disagree on {text:?}"),
        (None, Err(InstantError::Naive(_) | InstantError::Invalid(_))) => {}
        _ => panic!("parse_instant {parsed:?} but parse_instant_or_refuse {refused:?} for {text:?}"),
    }
    let Some(at) = parsed else { return };
    let exact = at.to_rfc3339_opts(SecondsFormat::AutoSi, true);
    assert_eq!(
        schedule::parse_instant(&exact),
        Some(at),
        "{text:?} parsed to {exact}, which does not parse back"
    );
    let whole = whole_second(at);
    assert_eq!(
        schedule::parse_instant(&schedule::format_utc(at)),
        Some(whole),
        "{text:?}: its UTC rendering {} does not parse back",
        schedule::format_utc(at)
    );
    if let Ok(fires) = schedule::parse_future_instant(text, now) {
        // The first whole second not before the instant: itself, or the
        // next (a leap second `:60` is the one before the next minute).
        let rounds = if at.nanosecond() == 0 { 0 } else { 1 };
        assert_eq!(
            fires.timestamp(),
            at.timestamp() + rounds,
            "{text:?} ({at}) moved to {fires}"
        );
        assert_eq!(fires.nanosecond(), 0, "{text:?} fires off a whole second");
        assert!(fires > now, "{text:?} fires at {fires}, not after now");
        assert!(
            fires <= now + Duration::days(schedule::MAX_DAYS_AHEAD) + Duration::seconds(1),
            "{text:?} fires at {fires}, too far ahead"
        );
        assert_eq!(schedule::parse_instant(&schedule::format_utc(fires)), Some(fires));
        let expression = schedule::at_expression(fires).expression;
        assert_eq!(
            expression,
            format!("at({})", &schedule::format_utc(fires)[..19]),
            "{text:?}: the at() expression is not the UTC instant"
        );
    }
}

/// The instant to its second, as `format_utc` writes it. chrono holds a
/// leap second (`:60`, which it reads at any minute) as the 59th with a
/// second or more of nanoseconds, and writes it back as `:60`.
fn whole_second(at: DateTime<Utc>) -> DateTime<Utc> {
    at.with_nanosecond(at.nanosecond() / 1_000_000_000 * 1_000_000_000)
        .unwrap_or(at)
}

fn is_id(value: &str) -> bool {
    let len = value.chars().count();
    (1..=reminder::MAX_ID_CHARS).contains(&len)
        && !value.chars().any(|c| c.is_control() || c.is_whitespace() || c == '#')
}

fn is_text(value: &str, max: usize) -> bool {
    !value.trim().is_empty() && value.chars().count() <= max && !value.chars().any(char::is_control)
}

/// A create payload that is accepted keeps every rule of SPEC §4: the exact
/// scope, ids that can be keys, text within its limits, an approval, an
/// instant in the window, the empty scope set, limits no wider than the
/// agent's or the ceilings; and the task it becomes reads back as written.
/// A refused one has one of §4's codes.
pub fn create(data: &[u8]) {
    // As the handler decodes it: strictly, a repeated key anywhere is
    // refused before any rule is read.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(payload) = crate::domain::payload::Payload::parse(text) else {
        return;
    };
    if payload.duplicate_key.is_some() {
        return;
    }
    let Ok(request) = serde_json::from_value::<CreateRequest>(payload.value) else {
        return;
    };
    let now = now();
    let ceilings = ceilings();
    let answer = request
        .clone()
        .check(reminder::Surface::Tool)
        .and_then(|c| c.into_task(now, &ceilings));
    let (task, record) = match answer {
        Ok(accepted) => accepted,
        Err(rejection) => return refused_as_spec_says(&rejection),
    };
    accepted_request_keeps_the_rules(&request);
    accepted_task_is_the_request(&request, &task, now, &ceilings);
    assert_eq!(record.task_id, task.task_id);
    let stored = serde_json::to_value(&task).unwrap_or_else(|e| panic!("the task does not serialise: {e}"));
    let read: Task = serde_json::from_value(stored.clone())
        .unwrap_or_else(|e| panic!("the task as written does not read back: {e}: {stored}"));
    assert_eq!(read, task, "the task reads back changed");
}

/// A refused create names one of SPEC §4's codes, in words.
fn refused_as_spec_says(rejection: &Rejection) {
    let codes = [
        "scope_denied",
        "naive_instant",
        "invalid_instant",
        "instant_in_past",
        "instant_too_far",
        "invalid_request",
    ];
    assert!(
        codes.contains(&rejection.code()),
        "unexpected code {}",
        rejection.code()
    );
    assert!(!rejection.to_string().is_empty());
    if let Rejection::InvalidRequest(message) = rejection {
        assert!(!message.is_empty());
    }
}

/// An accepted request held the scope, ids that can be keys, an approval,
/// and text within its limits.
fn accepted_request_keeps_the_rules(request: &CreateRequest) {
    assert!(
        request.principal.holds(reminder::WRITE_SCOPE),
        "accepted without the scope"
    );
    for (field, value) in [
        ("principal.id", &request.principal.id),
        ("principal.workspace", &request.principal.workspace),
        ("idempotency_key", &request.idempotency_key),
        ("agent.id", &request.agent.id),
        ("agent.version", &request.agent.version),
        ("agent.policy_profile", &request.agent.policy_profile),
    ] {
        assert!(is_id(value), "accepted {field} {value:?}");
    }
    let approval = request
        .approval
        .as_ref()
        .unwrap_or_else(|| panic!("accepted without an approval"));
    assert!(is_id(&approval.id), "accepted approval.id {:?}", approval.id);
    assert!(
        is_text(&request.input.title, reminder::MAX_TITLE_CHARS),
        "accepted title {:?}",
        request.input.title
    );
    assert!(
        is_text(&request.input.instruction, reminder::MAX_INSTRUCTION_CHARS),
        "accepted instruction {:?}",
        request.input.instruction
    );
}

/// The task an accepted create makes: one-time at the input's instant, no
/// scopes or tools, limits within the agent's and the ceilings, its id
/// derived from the request.
fn accepted_task_is_the_request(request: &CreateRequest, task: &Task, now: DateTime<Utc>, ceilings: &Ceilings) {
    let Schedule::At { at } = task.spec.schedule else {
        panic!("a reminder that is not one-time: {:?}", task.spec.schedule)
    };
    assert_eq!(
        schedule::parse_future_instant(
            request
                .input
                .at
                .as_deref()
                .unwrap_or_else(|| panic!("a one-time reminder accepted without `at`")),
            now
        ),
        Ok(at),
        "the task's instant is not the input's"
    );
    assert!(
        task.spec.scopes.is_empty() && task.spec.tools.is_empty(),
        "a reminder with scopes or tools"
    );
    let limits = task.spec.limits;
    assert_eq!(
        limits.check_within(ceilings),
        Ok(()),
        "limits {limits:?} above the ceilings"
    );
    let asked = request.agent.limits;
    for (got, asked) in [
        (limits.max_turns, asked.max_turns),
        (limits.max_tool_calls, asked.max_tool_calls),
        (limits.max_output_tokens, asked.max_output_tokens),
        (limits.timeout_seconds, asked.timeout_seconds),
    ] {
        assert!(
            asked.is_none_or(|a| got <= a),
            "limit {got} above the agent's {asked:?}"
        );
    }
    assert_eq!(task.kind, TaskKind::Reminder);
    assert_eq!(task.workspace, request.principal.workspace);
    assert_eq!(
        task.task_id,
        TaskId::for_reminder(
            &request.principal.workspace,
            &request.principal.id,
            &request.idempotency_key
        )
    );
    assert!(TaskId::parse(task.task_id.as_str()).is_some());
}

/// The tools of the declaring server the declaration target checks against.
const SERVER_TOOLS: [&str; 3] = ["list_issues", "post_summary", "get_issue"];

/// An accepted declaration names only the server's own tools, stays within
/// the ceilings, has a positive budget no larger per run than per month,
/// needs with ids and words, and a schedule that converts to an EventBridge
/// expression the preview reads.
pub fn declaration(data: &[u8]) {
    let Ok(marker) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let tools: BTreeSet<String> = SERVER_TOOLS.iter().map(|t| (*t).to_owned()).collect();
    let ceilings = ceilings();
    let Ok(parsed) = declaration::parse(&marker, &tools, &ceilings) else {
        return;
    };
    assert!(
        parsed.tools.is_subset(&tools),
        "foreign tools accepted: {:?}",
        parsed.tools
    );
    assert_eq!(
        parsed.limits.check_within(&ceilings),
        Ok(()),
        "limits {:?} above the ceilings",
        parsed.limits
    );
    let budget = parsed.budget;
    assert!(
        budget.max_usd_per_run.is_finite() && budget.max_usd_per_run > 0.0,
        "budget per run {}",
        budget.max_usd_per_run
    );
    assert!(
        budget.max_usd_per_month.is_finite() && budget.max_usd_per_run <= budget.max_usd_per_month,
        "budget {budget:?}"
    );
    for (id, description) in &parsed.needs {
        assert!(
            !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "need id {id:?}"
        );
        assert!(!description.trim().is_empty(), "need {id:?} without words");
    }
    let object = marker
        .as_object()
        .unwrap_or_else(|| panic!("a declaration that is no object"));
    for key in ["trigger", "triggers", "event", "events", "on"] {
        assert!(!object.contains_key(key), "an event trigger `{key}` was accepted");
    }
    let expression = parsed
        .schedule
        .expression()
        .unwrap_or_else(|e| panic!("accepted schedule {:?} does not convert: {e}", parsed.schedule));
    match &parsed.schedule {
        Schedule::Cron { timezone, .. } => {
            assert!(Zone::from_str(timezone).is_ok(), "zone {timezone:?}");
            preview::cron_fires(&expression, now(), 3)
                .unwrap_or_else(|e| panic!("{} in {timezone} has no preview: {e}", expression.expression));
        }
        Schedule::Rate { every, .. } => assert!(*every >= 1),
        Schedule::At { .. } => panic!("a declaration with a one-time schedule"),
        Schedule::Calendar { .. } => panic!("a declaration with a reminder's calendar rule"),
    }
}

/// Zones with DST gaps and overlaps of an hour and of half an hour, and none.
const ZONES: [&str; 5] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
];

/// A Unix cron that converts gives an EventBridge expression the project's
/// preview reads, whose fires in the zone agree with croner's evaluation of
/// the declared Unix cron (under Vixie cron's day rule and Scheduler's DST
/// rule); one that does not convert is refused by the declaration too.
///
/// Input: a zone byte, two bytes of minutes after 2026-01-01 (times 16, so
/// two years are reached), then the cron text.
pub fn cron(data: &[u8]) {
    let [zone, hi, lo, rest @ ..] = data else { return };
    let Some(text) = text(rest) else { return };
    let zone_name = ZONES[usize::from(*zone) % ZONES.len()];
    let after = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::UNIX_EPOCH)
        + Duration::minutes(i64::from(u16::from_be_bytes([*hi, *lo])) * 16);
    let Ok(parsed) = Cron::parse(text) else { return };
    let expression = Expression::new(parsed.to_eventbridge(), zone_name);
    let fires = preview::cron_fires(&expression, after, 5)
        .unwrap_or_else(|e| panic!("{text:?} -> {}: the preview refuses it: {e}", expression.expression));
    let ours = instants(&fires);
    let zone = Zone::from_str(zone_name).unwrap_or(Zone::utc());
    let theirs = oracle(text, zone, after, ours.len());
    assert_eq!(
        ours, theirs,
        "{text:?} -> {} in {zone_name} after {after}",
        expression.expression
    );
}

/// croner on the declared Unix cron, local times mapped to instants with
/// Scheduler's DST rule (a skipped time does not fire, a repeated one fires
/// at the first). Vixie cron ANDs the day fields when either starts with
/// `*` and ORs them otherwise; croner counts only a bare `*` as a star, so
/// the day rule is passed to it explicitly.
pub(crate) fn oracle(text: &str, zone: Zone, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
    if count == 0 {
        return Vec::new();
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    let star = fields.get(2).is_some_and(|f| f.starts_with('*')) || fields.get(4).is_some_and(|f| f.starts_with('*'));
    // croner reads no `*` inside a list (`*,15`), which Vixie cron does: each
    // `*` becomes its field's range, and the day rule is given explicitly.
    let ranges = ["0-59", "0-23", "1-31", "1-12", "0-7"];
    let expanded: Vec<String> = fields
        .iter()
        .zip(ranges)
        .map(|(field, range)| {
            field
                .split(',')
                .map(|part| match part.strip_prefix('*') {
                    Some(step) => format!("{range}{step}"),
                    None => part.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let pattern = expanded.join(" ");
    let cron = croner::parser::CronParser::builder()
        .dom_and_dow(star)
        .sloppy_ranges(true)
        .build()
        .parse(&pattern)
        .unwrap_or_else(|e| panic!("croner refuses {pattern:?} (from {text:?}), which converted: {e}"));
    let start = after.with_timezone(&zone).naive_local() - Duration::hours(3);
    cron.iter_after(start)
        .filter_map(|local: NaiveDateTime| match zone.from_local_datetime(&local) {
            LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
            LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
            LocalResult::None => None,
        })
        .filter(|t| *t > after)
        .take(count)
        .collect()
}

/// Webhook verification accepts exactly what the secret signed: an honest
/// signature among others verifies, any change to the id, timestamp, body,
/// signature or key is refused, and hostile headers are refused without a
/// panic. Event bodies parse or are refused without a panic.
pub fn webhook(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = webhook_case(&mut u);
}

/// Hostile headers: whatever arrives is answered without a panic, and
/// accepted only with a signature this secret computed.
fn hostile_headers(u: &mut Unstructured<'_>, secret: &WebhookSecret, now: DateTime<Utc>) -> arbitrary::Result<()> {
    let id: Option<String> = u.arbitrary()?;
    let timestamp: Option<String> = u.arbitrary()?;
    let signatures: Option<String> = u.arbitrary()?;
    let body: Vec<u8> = u.arbitrary()?;
    let verdict = secret.verify(id.as_deref(), timestamp.as_deref(), signatures.as_deref(), &body, now);
    if verdict.is_ok() {
        let (Some(id), Some(timestamp), Some(signatures)) = (id, timestamp, signatures) else {
            panic!("accepted with a header missing");
        };
        let seconds: i64 = timestamp
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("accepted timestamp {timestamp:?}"));
        let honest = secret.sign(&id, seconds, &body);
        assert!(
            signatures.split_whitespace().any(|s| s == honest),
            "accepted a signature it did not compute"
        );
    }
    let _ = Event::parse(&body).map(|event| {
        assert!(!event.workspace().is_empty() && !event.workspace().contains('#'));
        assert!(!event.install_id().is_empty() && !event.install_id().contains('#'));
    });
    Ok(())
}

fn webhook_case(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let now = now();
    let key: Vec<u8> = u.arbitrary()?;
    let Some(secret) = WebhookSecret::parse(&format!("whsec_{}", base64_encode(&key))) else {
        assert!(key.is_empty(), "a non-empty key was refused");
        return Ok(());
    };
    let mode: u8 = u.arbitrary()?;
    if mode.is_multiple_of(4) {
        return hostile_headers(u, &secret, now);
    }
    // A sender's delivery: an id of Standard Webhooks' alphabet, a timestamp
    // inside the window, any body, the signature among other candidates.
    let id_len = u.int_in_range(1..=40)?;
    let id: String = (0..id_len)
        .map(|_| u.choose(ID_ALPHABET).map(|b| char::from(*b)))
        .collect::<arbitrary::Result<_>>()?;
    let skew = u.int_in_range(-TOLERANCE_SECONDS..=TOLERANCE_SECONDS)?;
    let timestamp = now.timestamp() + skew;
    let body: Vec<u8> = u.arbitrary()?;
    let honest = secret.sign(&id, timestamp, &body);
    let before: Vec<String> = (0..u.int_in_range(0..=2)?)
        .map(|_| junk_signature(u))
        .collect::<arbitrary::Result<_>>()?;
    let after: Vec<String> = (0..u.int_in_range(0..=2)?)
        .map(|_| junk_signature(u))
        .collect::<arbitrary::Result<_>>()?;
    let header = |signature: &str| {
        let mut all = before.clone();
        all.push(signature.to_owned());
        all.extend(after.iter().cloned());
        all.join(" ")
    };
    let ts = timestamp.to_string();
    let verify = |id: &str, ts: &str, signatures: &str, body: &[u8]| {
        secret.verify(Some(id), Some(ts), Some(signatures), body, now)
    };
    assert_eq!(
        verify(&id, &ts, &header(&honest), &body),
        Ok(()),
        "an honest delivery was refused"
    );
    let refused = |verdict: Result<(), WebhookError>, what: &str| {
        assert!(verdict.is_err(), "accepted with {what} changed");
    };
    // The id changed.
    let mut other_id = id.clone();
    other_id.push(char::from(*u.choose(ID_ALPHABET)?));
    refused(verify(&other_id, &ts, &header(&honest), &body), "the id");
    // The body changed: a byte flipped, or one added.
    let mut other_body = body.clone();
    match other_body.len() {
        0 => other_body.push(u.arbitrary()?),
        n => {
            let at = u.choose_index(n)?;
            other_body[at] ^= u.int_in_range(1..=255)?;
        }
    }
    refused(verify(&id, &ts, &header(&honest), &other_body), "the body");
    // Another timestamp, still inside the window.
    let other_skew = u.int_in_range(-TOLERANCE_SECONDS..=TOLERANCE_SECONDS)?;
    if other_skew != skew {
        let other_ts = (now.timestamp() + other_skew).to_string();
        refused(verify(&id, &other_ts, &header(&honest), &body), "the timestamp");
    }
    // The signature's bytes changed.
    let mut mac = base64_decode(&honest[3..]);
    let at = u.choose_index(mac.len())?;
    mac[at] ^= u.int_in_range(1..=255)?;
    let forged = format!("v1,{}", base64_encode(&mac));
    refused(verify(&id, &ts, &header(&forged), &body), "the signature");
    // Another key.
    let mut other_key = key.clone();
    let at = u.choose_index(other_key.len())?;
    other_key[at] ^= u.int_in_range(1..=255)?;
    if let Some(other) = WebhookSecret::parse(&format!("whsec_{}", base64_encode(&other_key))) {
        refused(
            verify(&id, &ts, &header(&other.sign(&id, timestamp, &body)), &body),
            "the key",
        );
    }
    // Outside the window: refused even with the honest signature.
    let late = now + Duration::seconds(TOLERANCE_SECONDS + u.int_in_range(1..=100_000)?);
    assert_eq!(
        secret.verify(
            Some(&id),
            Some(&ts),
            Some(&header(&honest)),
            &body,
            late + Duration::seconds(skew)
        ),
        Err(WebhookError::Stale)
    );
    Ok(())
}

const ID_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";

fn junk_signature(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let bytes: [u8; 32] = u.arbitrary()?;
    let scheme = *u.choose(&["v1,", "v1a,", "v2,", ""])?;
    Ok(format!("{scheme}{}", base64_encode(&bytes)))
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|e| panic!("our own signature is not base64: {e}"))
}

/// A runs-queue message that is accepted names a valid task id, a workspace
/// id and an instant, and re-serialises to a message that parses to the
/// same occurrence; the occurrence key is the instant in UTC.
pub fn run_message(data: &[u8]) {
    let Some(body) = text(data) else { return };
    let Ok(delivery) = RunMessage::parse(body) else {
        return;
    };
    assert!(TaskId::parse(delivery.task_id.as_str()).is_some());
    assert_eq!(delivery.task_id.as_str(), delivery.message.task_id);
    let workspace = &delivery.message.workspace;
    assert!(
        !workspace.is_empty() && !workspace.contains('#'),
        "workspace {workspace:?}"
    );
    assert_eq!(delivery.key, occurrence_key(delivery.scheduled));
    assert_eq!(delivery.key, schedule::format_utc(delivery.scheduled));
    let whole = whole_second(delivery.scheduled);
    assert_eq!(
        schedule::parse_instant(&delivery.key),
        Some(whole),
        "key {}",
        delivery.key
    );
    let again = serde_json::to_string(&delivery.message).unwrap_or_else(|e| panic!("does not serialise: {e}"));
    let reparsed = RunMessage::parse(&again).unwrap_or_else(|e| panic!("{again} does not parse again: {e}"));
    assert_eq!(reparsed, delivery, "{body:?} re-serialised as {again}");
}

/// The schedule fields of the owner's surface (SPEC §11): `daily`,
/// `weekly`, `monthly`, `yearly` (or `at`) and `until`, as create and
/// update read them. An accepted recurring schedule is one Scheduler
/// expression that Scheduler's cron rules allow (`preview::EbCron::parse`),
/// reads back as the recurrence it was made from, and is stated again by
/// its own view; it fires exactly at [`calendar_reference`]'s instants
/// (its rule applied to local days, Scheduler's DST rule, its `until`),
/// each an occurrence of it for the door, and never at or after its
/// `EndDate`; a create with an `until` has a run left. A refused one has a
/// code of §11. An update of a daily reminder with the same fields keeps
/// the same promises.
///
/// Input: two bytes of days after 2000-01-01 (times 3, so a whole
/// 400-year cycle is reached), then the JSON object of the fields.
pub fn schedule(data: &[u8]) {
    let [hi, lo, rest @ ..] = data else { return };
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice::<serde_json::Value>(rest) else {
        return;
    };
    let now = Utc
        .with_ymd_and_hms(2000, 1, 1, 10, 0, 0)
        .single()
        .unwrap_or(DateTime::UNIX_EPOCH)
        + Duration::days(i64::from(u16::from_be_bytes([*hi, *lo])) * 3);
    let codes = [
        "invalid_schedule",
        "invalid_request",
        "naive_instant",
        "invalid_instant",
        "instant_in_past",
        "instant_too_far",
    ];
    let mut input = serde_json::json!({"title": "t", "instruction": "i"});
    if let Some(object) = input.as_object_mut() {
        object.extend(fields.clone());
    }
    let request = serde_json::json!({
        "principal": {"id": "usr_1", "workspace": "ws_1", "scopes": [reminder::WRITE_SCOPE]},
        "idempotency_key": "k",
        "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard"},
        "input": input,
    });
    let Ok(request) = serde_json::from_value::<CreateRequest>(request) else {
        return;
    };
    let created = request
        .check(reminder::Surface::App)
        .and_then(|c| c.into_task(now, &ceilings()));
    match created {
        Ok((task, _)) => {
            if task.spec.schedule.until().is_some() {
                assert!(
                    !task.spec.schedule.is_over(now),
                    "created with an until that leaves no run: {:?}",
                    task.spec.schedule
                );
            }
            check_schedule(&task.spec.schedule, now);
        }
        Err(rejection) => assert!(codes.contains(&rejection.code()), "code {}", rejection.code()),
    }
    // The same fields as an update of a daily reminder.
    let Ok(update) = serde_json::from_value::<reminder::UpdateInput>(serde_json::Value::Object(fields)) else {
        return;
    };
    let mut task = crate::domain::task::tests_fixture(Schedule::Cron {
        cron: "0 9 * * *".into(),
        timezone: "Europe/Berlin".into(),
        until: None,
    });
    match update.check().and_then(|u| u.apply(&mut task, now)) {
        Ok(()) => check_schedule(&task.spec.schedule, now),
        Err(rejection) => assert!(codes.contains(&rejection.code()), "code {}", rejection.code()),
    }
}

/// The promises of an accepted reminder schedule (see [`schedule`]).
fn check_schedule(stored: &Schedule, now: DateTime<Utc>) {
    if stored.is_one_time() {
        return;
    }
    let recurrence = Recurrence::of(stored).unwrap_or_else(|| panic!("{stored:?} does not read back"));
    assert_eq!(&recurrence.to_schedule(), stored);
    let expression = stored
        .expression()
        .unwrap_or_else(|e| panic!("{stored:?} has no expression: {e}"));
    assert!(
        preview::EbCron::parse(&expression.expression).is_some(),
        "{} breaks Scheduler's cron rules",
        expression.expression
    );
    assert_eq!(
        expression.end_date,
        recurrence
            .until
            .map(|u| schedule::end_of_local_day(u, &recurrence.timezone))
    );
    // The view states the same schedule again.
    let view = serde_json::to_value(recurrence.view()).unwrap_or_default();
    let kind = ["daily", "weekly", "monthly", "yearly"]
        .into_iter()
        .find(|k| view.get(*k).is_some())
        .unwrap_or_else(|| panic!("a view without its kind: {view}"));
    let again = match kind {
        "daily" => Recurrence::daily(&view[kind]),
        "weekly" => Recurrence::weekly(&view[kind]),
        "monthly" => Recurrence::monthly(&view[kind]),
        _ => Recurrence::yearly(&view[kind]),
    }
    .unwrap_or_else(|e| panic!("its own view {view} is refused: {e}"));
    let until = view
        .get("until")
        .map(|u| crate::domain::schedule::recurrence::parse_until(u).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(Recurrence { until, ..again }, recurrence, "{view}");
    let ours = preview::upcoming(stored, now, 4);
    assert_eq!(ours, calendar_reference(&recurrence, now, 4), "{recurrence:?}");
    for at in &ours {
        assert!(
            crate::domain::schedule::preview::is_occurrence(stored, *at),
            "{at} is not its own"
        );
        assert!(expression.end_date.is_none_or(|end| *at < end), "{at} after its end");
    }
}

/// An independent reference for a recurrence's fire times: a walk over
/// local days that applies the owner's rule as the calendar says it (not
/// as a Scheduler expression), then Scheduler's DST rule (a local time that
/// does not exist is skipped, one that happens twice fires at the first),
/// and the `until` date. The fuzz target and `recurrence`'s property test
/// hold the preview to it.
pub fn calendar_reference(r: &Recurrence, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
    use crate::domain::schedule::calendar::MonthDay;
    use crate::domain::schedule::recurrence::Rule;
    use chrono::{Datelike, NaiveDate};
    let zone = Zone::from_str(&r.timezone).unwrap_or(Zone::utc());
    let weekday_of = |date: NaiveDate| date.weekday().num_days_from_monday() as u8;
    let same_weekday_so_far = |date: NaiveDate| {
        (1..=date.day())
            .filter_map(|d| NaiveDate::from_ymd_opt(date.year(), date.month(), d))
            .filter(|d| d.weekday() == date.weekday())
            .count() as u8
    };
    let month_of = |date: Option<NaiveDate>| date.map(|d| d.month());
    let matches = |date: NaiveDate| match &r.rule {
        Rule::Daily => true,
        Rule::Weekly(days) => days.contains(&weekday_of(date)),
        Rule::Monthly(MonthDay::Day(day)) => date.day() == u32::from(*day),
        Rule::Monthly(MonthDay::Last) => month_of(date.succ_opt()) != Some(date.month()),
        Rule::Monthly(MonthDay::Nth { weekday, nth }) => {
            weekday_of(date) == *weekday && same_weekday_so_far(date) == *nth
        }
        Rule::Monthly(MonthDay::LastWeekday { weekday }) => {
            weekday_of(date) == *weekday && month_of(date.checked_add_days(chrono::Days::new(7))) != Some(date.month())
        }
        Rule::Yearly { month, day } => date.month() == u32::from(*month) && date.day() == u32::from(*day),
    };
    let mut out = Vec::new();
    let mut date = after.with_timezone(&zone).date_naive() - Duration::days(1);
    let stop = date + Duration::days(366 * 45);
    while out.len() < count && date < stop && r.until.is_none_or(|until| date <= until) {
        if matches(date)
            && let Some(local) = date.and_hms_opt(u32::from(r.hour), u32::from(r.minute), 0)
        {
            let at = match zone.from_local_datetime(&local) {
                LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Some(t.with_timezone(&Utc)),
                LocalResult::None => None,
            };
            if let Some(at) = at.filter(|at| *at > after) {
                out.push(at);
            }
        }
        date += Duration::days(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays every committed corpus input through its target's checks:
    /// what `cargo fuzz run <target>` found stays fixed, on stable.
    #[test]
    fn the_committed_corpus_replays_clean() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        for (name, check) in TARGETS {
            let dir = root.join(name);
            let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let mut count = 0;
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| check(&data));
                assert!(outcome.is_ok(), "{name}: {} fails its check", path.display());
                count += 1;
            }
            assert!(count > 0, "{name} has no corpus");
        }
    }
}
