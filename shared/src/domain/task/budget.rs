//! Budget: what a run may cost and what it did cost (SPEC §7.3, §7.6, §9).
//!
//! Invariants: a run never starts on a model without a price (it would run
//! unaccounted); a connector task reserves its per-run maximum against its
//! monthly budget before the run and settles to the actual cost after; the
//! agent loop never asks the model for more output tokens than the rest of
//! the per-run budget can pay for. Periods are UTC calendar months of the
//! occurrence's scheduled time.
//!
//! A reservation's life, each step and where it happens (the sums are
//! DynamoDB update expressions, so each step is one atomic write; the
//! simulation checks the invariant after every seed, `tests/src/sim.rs`):
//! 1. **Reserve**, at the claim (`app::run::claim` ->
//!    `adapters::runs` `claim`): `budget_used[period] += reservation`, on the
//!    condition `budget_used[period] <= threshold` ([`reservation`],
//!    [`threshold`]); a claim that does not fit is refused and the
//!    occurrence skipped `budget_exhausted`.
//! 2. **Take over** a dead claim (`adapters::runs` `take_over`): the
//!    crashed attempt's reservation stays committed as `crashed_usd`, and
//!    the new attempt reserves again within the same condition.
//! 3. **Settle** (`app::run::settle` -> `adapters::runs` `settle`, one
//!    transaction with the run record and the account):
//!    `budget_used[period] += cost - reservation`, the account charged
//!    `cost` ([`Account`]); the plan is `domain::run::settlement::plan`.
//! 4. **Release** (a run given back for load, `adapters::runs` `release`):
//!    `budget_used[period] -= reservation`, less what crashed attempts
//!    committed, which stays (`claim::Claim::committed`).
//! 5. **Pay a dead claim** a skip finds (`app::run::settle`
//!    `pay_dead_claim`, `adapters::runs` `record_over_dead`): what it
//!    committed (`Claim::committed`) becomes the skip record's cost and is
//!    charged to the account, since a crash may have spent it.
//!
//! The invariant (docs/design.md, "The budget invariant"): a period's
//! `budget_used` is its run records' costs plus what its claims hold
//! (`Claim::committed`).
//!
//! The workspace's month ([`WorkspaceBudget`]) moves in the same
//! transaction as each of these: +reservation at a claim and a take-over
//! (refused while the month is reached: `budget_reached`), the record's
//! cost less what the claim held there (`Claim::workspace_usd`) at a
//! settle and at a skip paying a dead claim, what is carried less what
//! was held at a release. Its invariant: a month's `committed_usd` is its
//! records' costs plus what its claims hold there; for claims made since
//! workspaces were budgeted, the sum of its tasks' `budget_used`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A task's spending bounds in US dollars (`spec.budget`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub max_usd_per_run: f64,
    pub max_usd_per_month: f64,
}

/// USD per million tokens, as `MODEL_PRICES` gives them. With both cache
/// prices the runner uses prompt caching (SPEC §9): every token Bedrock
/// bills is charged at its own price; without them it places no cache
/// point, and a cached token Bedrock reports anyway is charged at the input
/// price, never as free.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
}

/// `MODEL_PRICES`: model id -> price.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Prices(BTreeMap<String, Price>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    #[error("model {0} has no price in MODEL_PRICES: a run is never started unaccounted")]
    Unpriced(String),
    #[error("the price of model {0} is negative or not finite")]
    Invalid(String),
}

impl Prices {
    pub fn new(prices: BTreeMap<String, Price>) -> Result<Self, PriceError> {
        for (model, p) in &prices {
            let ok = |v: f64| v.is_finite() && v >= 0.0;
            let cache_ok = |v: Option<f64>| v.is_none_or(ok);
            if !ok(p.input_per_mtok)
                || !ok(p.output_per_mtok)
                || !cache_ok(p.cache_write_per_mtok)
                || !cache_ok(p.cache_read_per_mtok)
            {
                return Err(PriceError::Invalid(model.clone()));
            }
        }
        Ok(Self(prices))
    }

    pub fn of(&self, model: &str) -> Result<Price, PriceError> {
        self.0
            .get(model)
            .copied()
            .ok_or_else(|| PriceError::Unpriced(model.to_owned()))
    }
}

/// Tokens a run consumed so far: uncached input, output, and the input
/// Bedrock wrote to or read from its prompt cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    #[serde(default)]
    pub cache_write: u64,
    #[serde(default)]
    pub cache_read: u64,
}

impl Tokens {
    /// Input and output only (no cache).
    pub fn plain(input: u64, output: u64) -> Self {
        Self {
            input,
            output,
            ..Self::default()
        }
    }
}

impl Price {
    /// Plain input and output prices, no cache prices.
    pub fn plain(input_per_mtok: f64, output_per_mtok: f64) -> Self {
        Self {
            input_per_mtok,
            output_per_mtok,
            cache_write_per_mtok: None,
            cache_read_per_mtok: None,
        }
    }

    /// Whether runs on this model may use prompt caching: both cache prices are known.
    pub fn caches(&self) -> bool {
        self.cache_write_per_mtok.is_some() && self.cache_read_per_mtok.is_some()
    }

    pub fn cost(&self, tokens: Tokens) -> f64 {
        let write = self.cache_write_per_mtok.unwrap_or(self.input_per_mtok);
        let read = self.cache_read_per_mtok.unwrap_or(self.input_per_mtok);
        (tokens.input as f64 * self.input_per_mtok
            + tokens.output as f64 * self.output_per_mtok
            + tokens.cache_write as f64 * write
            + tokens.cache_read as f64 * read)
            / 1_000_000.0
    }

    /// The most one input token may cost: a cache write can cost more than
    /// plain input, so a call's input is reserved at the higher price.
    fn input_at_most(&self) -> f64 {
        match self.cache_write_per_mtok {
            Some(write) if self.caches() => self.input_per_mtok.max(write),
            _ => self.input_per_mtok,
        }
    }

    /// How many output tokens `usd` pays for, given that the next call will
    /// also be charged for `next_input` input tokens (at the most an input
    /// token may cost).
    pub fn affordable_output(&self, usd: f64, next_input: u64) -> u64 {
        let left = usd - next_input as f64 * self.input_at_most() / 1_000_000.0;
        if left <= 0.0 {
            return 0;
        }
        if self.output_per_mtok <= 0.0 {
            return u64::MAX;
        }
        (left * 1_000_000.0 / self.output_per_mtok).floor() as u64
    }
}

/// The month an occurrence is charged to: `YYYY-MM` in UTC.
pub fn period(scheduled: DateTime<Utc>) -> String {
    scheduled.format("%Y-%m").to_string()
}

/// How many months a workspace's budget item keeps what each held: a
/// year past the month, as its accounts' charges are kept.
pub const MONTHS_KEPT: u32 = 12;

/// The months a write to a workspace's budget item in `period` removes:
/// those from [`MONTHS_KEPT`] + 1 to twice that before it, so the item
/// holds at most two years of months whatever months pass without a run.
pub fn stale_periods(period: &str) -> Vec<String> {
    let Ok(first) = chrono::NaiveDate::parse_from_str(&format!("{period}-01"), "%Y-%m-%d") else {
        return Vec::new();
    };
    (MONTHS_KEPT + 1..=2 * MONTHS_KEPT)
        .filter_map(|back| first.checked_sub_months(chrono::Months::new(back)))
        .map(|month| month.format("%Y-%m").to_string())
        .collect()
}

/// What a run reserves before it starts: the task's per-run maximum, or
/// nothing for a task without a budget (reminders are bounded by their limits
/// and charged to their principal's account after the run).
pub fn reservation(budget: Option<Budget>) -> f64 {
    budget.map_or(0.0, |b| b.max_usd_per_run)
}

/// What a reminder's run may cost at most, and so what it reserves in its
/// workspace's month: the agent loop holds the run to it as a connector
/// task's run is held to its `max_usd_per_run` (a reminder has no budget
/// of its own), so a workspace's cap holds for reminders too.
pub const REMINDER_MAX_USD_PER_RUN: f64 = 0.25;

/// The most a run of `task` may cost: its budget's per-run maximum, a
/// reminder's [`REMINDER_MAX_USD_PER_RUN`], or none (a connector task
/// without a budget).
pub fn run_ceiling(task: &crate::domain::task::Task) -> Option<f64> {
    match (task.spec.budget, task.kind) {
        (Some(b), _) => Some(b.max_usd_per_run),
        (None, crate::domain::task::TaskKind::Reminder) => Some(REMINDER_MAX_USD_PER_RUN),
        (None, crate::domain::task::TaskKind::Connector) => None,
    }
}

/// What a run of `task` holds in its workspace's month from its claim to
/// its settle ([`admits`]): its [`run_ceiling`].
pub fn workspace_reservation(task: &crate::domain::task::Task) -> f64 {
    run_ceiling(task).unwrap_or(0.0)
}

/// The highest committed amount at which a reservation still fits:
/// committed + per-run <= monthly  <=>  committed <= monthly - per-run.
/// Stored on the task item so the claim's condition can compare attributes:
/// that condition is the rule, not code here.
pub fn threshold(budget: Option<Budget>) -> Option<f64> {
    budget.map(|b| b.max_usd_per_month - b.max_usd_per_run)
}

/// A workspace's monthly budget in US dollars and what one month of it
/// holds (SPEC §9). An admin sets the limit (`set_budget`, with the
/// expected version); none is unlimited. Every occurrence of the
/// workspace, connector tasks and reminders alike, reserves against it in
/// the same transaction as against its task's budget, and settles, releases
/// and pays a dead claim there too (`Claim::workspace_usd`): a month's
/// `committed_usd` is its records' costs plus what its claims hold.
///
/// A run is admitted only if its reservation ([`workspace_reservation`])
/// fits under the limit ([`admits`]): the month holding what it held plus
/// the reservation stays at or below the limit, and a run costs at most
/// what it reserved, so the month never spends past it at any concurrency.
/// Reached is `committed_usd >= limit_usd`: the month is spent. A raise
/// takes effect at the next claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceBudget {
    pub workspace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_usd: Option<f64>,
    /// 0 before any admin set it.
    pub version: u64,
    /// The month read (`period`).
    pub period: String,
    pub committed_usd: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
}

/// Whether a workspace's month holding `held` under `limit` admits a run
/// reserving `reservation` (SPEC §9): `held + reservation <= limit`, and
/// something left (`held < limit`: a run that reserves nothing is admitted
/// only below the limit, and a limit of 0 admits nothing). The claim's
/// condition is this rule on the item (`adapters::budgets`), fenced on the
/// limit it read.
pub fn admits(limit: f64, held: f64, reservation: f64) -> bool {
    held < limit && held <= most_held(limit, reservation)
}

/// The most a month may hold for `reservation` to fit under `limit`, to a
/// billionth of a cent so the stored decimals compare as written (`0.2545 -
/// 0.25` is `0.0045`, not `0.004499999999999997`).
pub fn most_held(limit: f64, reservation: f64) -> f64 {
    ((limit - reservation) * 1e11).round() / 1e11
}

impl WorkspaceBudget {
    /// Whether the month is spent: no occurrence of the workspace claims.
    pub fn reached(&self) -> bool {
        self.limit_usd.is_some_and(|limit| self.committed_usd >= limit)
    }
}

/// Which budget above a task a month reached (SPEC §15): the workspace's,
/// which an admin sets, or a person's cap on their own reminders
/// (`PERSON_MONTHLY_USD`), a deployment's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetLevel {
    Workspace,
    Person,
}

/// The highest workspace budget an admin may set.
pub const MAX_WORKSPACE_BUDGET_USD: f64 = 1_000_000.0;

/// Why a workspace budget cannot be set to a value.
pub fn workspace_limit_error(limit: Option<f64>) -> Option<String> {
    let limit = limit?;
    (!limit.is_finite() || !(0.0..=MAX_WORKSPACE_BUDGET_USD).contains(&limit)).then(|| {
        format!("budget.max_usd_per_month must be a number from 0 to {MAX_WORKSPACE_BUDGET_USD}; a null budget is none")
    })
}

/// The account a task's runs are charged to: the install's account for a
/// connector task, the principal's in its workspace for a reminder (a
/// principal id is unique only within its workspace: `usr_1` of two
/// workspaces are two people). Two namespaces: an install's account (a
/// string the platform gives) can never name a principal's, whatever it
/// holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Account {
    Principal { workspace: String, principal: String },
    Install(String),
}

pub fn account_of_principal(workspace: &str, principal: &str) -> Account {
    Account::Principal {
        workspace: workspace.to_owned(),
        principal: principal.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn price() -> Price {
        Price::plain(3.0, 15.0)
    }

    fn cached() -> Price {
        Price {
            cache_write_per_mtok: Some(3.75),
            cache_read_per_mtok: Some(0.3),
            ..price()
        }
    }

    #[test]
    fn a_workspace_admits_a_run_only_if_its_reservation_fits() {
        // A limit below one run's reservation admits none.
        assert!(!admits(0.2, 0.0, 0.25));
        // Exactly to the limit, in the decimals the item stores.
        assert!(admits(0.2545, 0.0045, 0.25));
        assert!(!admits(0.2544, 0.0045, 0.25));
        assert_eq!(most_held(0.2545, 0.25), 0.0045);
        // Nothing reserved: admitted below the limit only; 0 admits nothing.
        assert!(admits(1.0, 0.99, 0.0));
        assert!(!admits(1.0, 1.0, 0.0));
        assert!(!admits(0.0, 0.0, 0.0));
    }

    proptest! {
        /// However runs are admitted one after another, what they hold
        /// never passes the limit.
        #[test]
        fn admitted_reservations_never_pass_the_limit(
            limit in 0.0f64..10.0,
            reservations in proptest::collection::vec(0.0f64..1.0, 0..60),
        ) {
            let mut held = 0.0;
            for r in reservations {
                let r = (r * 1e4).round() / 1e4;
                if admits(limit, held, r) {
                    held = ((held + r) * 1e11).round() / 1e11;
                    prop_assert!(r == 0.0 || held <= limit + 1e-9, "{held} > {limit}");
                }
            }
        }
    }

    #[test]
    fn cost_is_per_million_tokens() {
        let c = price().cost(Tokens::plain(1_000_000, 100_000));
        assert!((c - 4.5).abs() < 1e-9);
    }

    #[test]
    fn cached_tokens_are_charged_at_their_own_price_and_never_free() {
        let tokens = Tokens {
            input: 1_000_000,
            output: 0,
            cache_write: 1_000_000,
            cache_read: 1_000_000,
        };
        assert!((cached().cost(tokens) - (3.0 + 3.75 + 0.3)).abs() < 1e-9);
        // Without cache prices, a cached token Bedrock reports costs plain input.
        assert!((price().cost(tokens) - 9.0).abs() < 1e-9);
        assert!(cached().caches() && !price().caches());
        // A call's input is reserved at the cache write price, the higher one.
        assert_eq!(cached().affordable_output(3.75 / 1_000_000.0 * 1000.0, 1000), 0);
        assert!(price().affordable_output(3.75 / 1_000_000.0 * 1000.0, 1000) > 0);
    }

    #[test]
    fn unpriced_and_invalid_models_are_refused() {
        let prices = Prices::new(BTreeMap::from([("m".to_owned(), price())])).unwrap();
        assert_eq!(prices.of("m"), Ok(price()));
        assert_eq!(prices.of("other"), Err(PriceError::Unpriced("other".into())));
        let bad = BTreeMap::from([("m".to_owned(), Price::plain(-1.0, 1.0))]);
        assert_eq!(Prices::new(bad), Err(PriceError::Invalid("m".into())));
        let bad = BTreeMap::from([(
            "m".to_owned(),
            Price {
                cache_read_per_mtok: Some(f64::NAN),
                ..cached()
            },
        )]);
        assert_eq!(Prices::new(bad), Err(PriceError::Invalid("m".into())));
    }

    #[test]
    fn a_month_is_removed_from_thirteen_to_twenty_four_months_on() {
        let stale = stale_periods("2027-01");
        assert_eq!(stale.len(), 12);
        assert_eq!(stale.first().map(String::as_str), Some("2025-12"));
        assert_eq!(stale.last().map(String::as_str), Some("2025-01"));
        assert!(!stale.contains(&"2026-01".to_owned()), "a year back is kept");
        assert!(stale_periods("not a month").is_empty());
    }

    #[test]
    fn periods_are_utc_months() {
        use chrono::TimeZone;
        assert_eq!(
            period(Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap()),
            "2026-12"
        );
    }

    proptest! {
        /// Spending the affordable output never exceeds the money left.
        #[test]
        fn affordable_output_never_overspends(usd in 0.0f64..10.0, next_input in 0u64..200_000, caching: bool) {
            let p = if caching { cached() } else { price() };
            let out = p.affordable_output(usd, next_input);
            // However the input is billed (plain, or all written to the cache).
            let plain = p.cost(Tokens::plain(next_input, out));
            let written = p.cost(Tokens { cache_write: next_input, ..Tokens::plain(0, out) });
            prop_assert!(out == 0 || plain.max(written) <= usd + 1e-9);
            let one_more = p.cost(Tokens { cache_write: next_input, ..Tokens::plain(0, out + 1) });
            prop_assert!(one_more > usd - 1e-9 || out == 0);
        }
    }
}
