//! The model pace (`MODEL_REQUESTS_PER_MINUTE`): the runner fleet's own
//! limit on model requests, shared by every instance, so that a herd queues
//! at the pace instead of being refused by Bedrock's quota, and a throttle
//! is the exception it should be.
//!
//! The fleet books **slots** on one item of the table ([`Slots`], sent by
//! `adapters::pace`): the instant of the next free slot, the spacing between
//! slots (the gap) and when that spacing last changed. A booking is one
//! conditional write. When the next slot comes between now and the latest
//! instant the run can wait for ([`latest_slot`]: half its time left), the
//! run takes it and moves it on by the gap ([`Slots::book`]), then waits for
//! it; when nothing is booked ahead the pace starts again at now
//! ([`Slots::start`]); when it is booked past what the run can wait for, the
//! run learns when there would be room ([`Refusal::Full`]) and goes back to
//! the queue for that long (`redelivery::paced_return`), before any model
//! call. Slots a gap apart put at most `requests` in any stretch of the
//! window's length, wherever the quota's own windows begin: there is no
//! burst at a window's start, and no window to align with.
//!
//! A throttle says the quota had less room than the pace: it is shared with
//! other workloads, the pace was set above it, or the tokens per minute ran
//! out first (Bedrock's answer does not say which). The throttled request
//! raises the gap by a quarter ([`slowed`]), conditional on the gap it was
//! booked under, so a round of throttles raises it once; never past one
//! request a window. A window without a throttle eases it back by a fifth
//! ([`eased`]), to the configured pace. Additive in neither direction but
//! the same shape as TCP's congestion control and the SDK's adaptive retry:
//! slow down at once, speed up by steps.
//!
//! **Lanes** (SPEC §13, fairness): reminders book in a lane of their own,
//! a reserved share of the pace ([`REMINDER_SHARE`], on an item of their
//! own), and connector tasks in the rest (the pace's original item), so a
//! connector herd cannot hold the pace until people's one-time reminders
//! pass their catch-up window. A reminder whose lane is full borrows the
//! connectors' as far as it can wait; a connector run takes a reminder slot
//! due within one of their gaps first ([`Lane::borrow_reach_ms`]), so an
//! idle reminder lane is not wasted and a reminder that comes finds its
//! lane booked at most about a gap ahead. A pace below two requests a
//! window has one lane.
//!
//! **Workspaces' shares**: within a lane, each workspace books against a
//! credit of its own first, half the lane's requests ([`WORKSPACE_SHARE`],
//! an item per workspace and lane, booked as the lane's slots are). A call
//! with credit books the lane as far as the run can wait; a call past its
//! workspace's share only a slot within half that reach
//! ([`past_share_reach_ms`]). Alone, a workspace fills the lane (its calls
//! past the share keep the slots near now taken); beside another, the
//! other's calls, within their credit, find the lane booked at most half a
//! reach ahead and go first from then on: a herd of one workspace cannot
//! hold the lane against another's.
//!
//! **Tokens** (`MODEL_TOKENS_PER_MINUTE`): Bedrock's quota counts tokens a
//! minute beside requests, an output token of a Claude 4-family model as
//! [`OUTPUT_BURNDOWN`] (`maxTokens` is held at the request's start and given
//! back at its end). After each answered call, what it counted beyond one
//! gap's worth of tokens moves the lane's next free slot on by the time
//! those tokens take at the lane's token pace ([`Pace::token_charge_ms`]):
//! the calls after it wait for the tokens as for the requests.
//!
//! Pure: instants are milliseconds since the Unix epoch, passed in. Called
//! by `app::run` around each model call, and by the configuration.

use crate::domain::task::TaskKind;

/// A window's length, for a pace per minute.
pub const MINUTE_MS: i64 = 60_000;

/// After a throttle, a call is booked again only while the run has at
/// least this much time left; with less, the run goes back (or fails after
/// a tool call) rather than send a call it could not wait for.
pub const MIN_CALL_MS: i64 = 1_000;

/// A throttle raises the gap to this fraction of itself (`SLOWER.0 / SLOWER.1`).
pub const SLOWER: (i64, i64) = (5, 4);
/// A window without a throttle lowers it to this fraction.
pub const FASTER: (i64, i64) = (4, 5);

/// At most `requests` model requests in any window of `window_ms`, the
/// fleet together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    requests: u32,
    window_ms: i64,
    /// Tokens a window (`MODEL_TOKENS_PER_MINUTE`); `None`: not paced.
    tokens: Option<u64>,
}

impl Pace {
    /// `None` for no requests or no window (no pace).
    pub fn new(requests: u32, window: std::time::Duration) -> Option<Self> {
        let window_ms = i64::try_from(window.as_millis()).ok()?;
        (requests > 0 && window_ms > 0).then_some(Self {
            requests,
            window_ms,
            tokens: None,
        })
    }

    /// This pace, counting `tokens` a window too (0: requests only).
    pub fn with_tokens(self, tokens: u64) -> Self {
        Self {
            tokens: (tokens > 0).then_some(tokens),
            ..self
        }
    }

    pub fn tokens(&self) -> Option<u64> {
        self.tokens
    }

    /// How much further than its gap a call that counted `counted` tokens
    /// ([`counted_tokens`]) moves the next free slot: the time those tokens
    /// take at this pace's tokens a window, less the gap already between
    /// slots; `None` when within it or when tokens are not paced.
    pub fn token_charge_ms(&self, counted: u64, gap_ms: i64) -> Option<i64> {
        let tokens = self.tokens?;
        let window = u64::try_from(self.window_ms).ok()?;
        let takes = counted.saturating_mul(window).div_ceil(tokens);
        let takes = i64::try_from(takes).unwrap_or(i64::MAX);
        let charge = takes.saturating_sub(gap_ms.max(0));
        (charge > 0).then_some(charge.min(self.window_ms))
    }

    /// A workspace's credit within this pace ([`WORKSPACE_SHARE`] of its
    /// requests, at least one a window).
    pub fn share(&self) -> Pace {
        let (n, d) = WORKSPACE_SHARE;
        Pace {
            requests: (self.requests * n / d).max(1),
            window_ms: self.window_ms,
            tokens: None,
        }
    }

    /// A pace per minute, as Bedrock's quotas count (`MODEL_REQUESTS_PER_MINUTE`).
    pub fn per_minute(requests: u32) -> Option<Self> {
        Self::new(requests, std::time::Duration::from_millis(MINUTE_MS as u64))
    }

    pub fn requests(&self) -> u32 {
        self.requests
    }

    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// The configured gap between two slots: the window over the requests,
    /// rounded up, so the pace is never faster than configured.
    pub fn gap_ms(&self) -> i64 {
        let requests = i64::from(self.requests);
        ((self.window_ms + requests - 1) / requests).max(1)
    }

    /// The widest gap a throttle can raise it to: one request a window.
    pub fn slowest_gap_ms(&self) -> i64 {
        self.window_ms.max(self.gap_ms())
    }
}

/// Reminders' reserved share of the pace: a fifth of its requests.
pub const REMINDER_SHARE: (u32, u32) = (1, 5);

/// A workspace's credit within a lane: half its requests (module doc).
pub const WORKSPACE_SHARE: (u32, u32) = (1, 2);

/// What an output token counts for against Bedrock's tokens a minute, for
/// the Claude 4-family models (Bedrock's quotas page: their output tokens
/// burn down the quota five times).
pub const OUTPUT_BURNDOWN: u64 = 5;

/// Tokens a call counted against the quota: input, written to the cache,
/// and output at [`OUTPUT_BURNDOWN`] (cache reads are not counted).
pub fn counted_tokens(input: u64, cache_write: u64, output: u64) -> u64 {
    input
        .saturating_add(cache_write)
        .saturating_add(output.saturating_mul(OUTPUT_BURNDOWN))
}

/// How far ahead of `now_ms` a call past its workspace's share books a
/// lane, against `latest_ms`, the most it can wait: half of that.
pub fn past_share_reach_ms(now_ms: i64, latest_ms: i64) -> i64 {
    now_ms.saturating_add(latest_ms.saturating_sub(now_ms).max(0) / 2)
}

/// The id a workspace's credit in a lane is kept under, beside the lane's
/// own (`lane_id`, [`Lane::pace_id`]).
pub fn share_id(lane_id: &str, workspace: &str) -> String {
    format!("{lane_id}@{workspace}")
}

/// A lane of the pace (module doc): one item each, its own share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Reminders,
    Connectors,
}

impl Lane {
    pub fn of(kind: TaskKind) -> Lane {
        match kind {
            TaskKind::Reminder => Lane::Reminders,
            TaskKind::Connector => Lane::Connectors,
        }
    }

    pub fn other(self) -> Lane {
        match self {
            Lane::Reminders => Lane::Connectors,
            Lane::Connectors => Lane::Reminders,
        }
    }

    /// Whether `pace` is split into lanes (two requests a window at least);
    /// otherwise every call books in the connectors' lane, the one item.
    pub fn split(pace: &Pace) -> bool {
        pace.requests >= 2
    }

    /// The lane a call of this lane books in under `pace`.
    pub fn under(self, pace: &Pace) -> Lane {
        if Lane::split(pace) { self } else { Lane::Connectors }
    }

    /// The id its pace item is kept under, for `model`: the connectors'
    /// lane keeps the pace's original item.
    pub fn pace_id(self, model: &str) -> String {
        match self {
            Lane::Connectors => model.to_owned(),
            Lane::Reminders => format!("{model}#reminders"),
        }
    }

    /// This lane's pace: its share of `pace`'s requests in the same window.
    pub fn pace(self, pace: &Pace) -> Pace {
        if !Lane::split(pace) {
            return *pace;
        }
        let (n, d) = REMINDER_SHARE;
        let reminders = (pace.requests * n / d).max(1);
        let requests = match self {
            Lane::Reminders => reminders,
            Lane::Connectors => pace.requests - reminders,
        };
        // Tokens split as the requests do.
        let tokens = pace.tokens.map(|t| {
            let share = t.saturating_mul(u64::from(requests)) / u64::from(pace.requests);
            share.max(1)
        });
        Pace {
            requests,
            window_ms: pace.window_ms,
            tokens,
        }
    }

    /// How far ahead of `now_ms` a call of this lane may book in the
    /// other lane when its own is full, against `latest_ms`, the most it
    /// can wait: a reminder as far as it can wait; a connector run one gap
    /// of the reminders' lane, so it takes only a slot they leave idle.
    pub fn borrow_reach_ms(self, pace: &Pace, now_ms: i64, latest_ms: i64) -> i64 {
        match self {
            Lane::Reminders => latest_ms,
            Lane::Connectors => latest_ms.min(now_ms.saturating_add(Lane::Reminders.pace(pace).gap_ms())),
        }
    }
}

/// The pace item as stored: the next free slot, the gap to the one after,
/// and when the gap last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    pub next_ms: i64,
    pub gap_ms: i64,
    pub changed_ms: i64,
}

impl Slots {
    /// Whether nothing is booked ahead of `now_ms`: the pace starts again.
    pub fn idle(slots: Option<&Slots>, now_ms: i64) -> bool {
        slots.is_none_or(|s| s.next_ms < now_ms)
    }

    /// The pace started again at `now_ms` (when [`Slots::idle`]): the slot
    /// taken is now's, the next one a gap later; the gap and its change are
    /// kept from `before`, or the pace's own when there was no item.
    pub fn start(before: Option<&Slots>, now_ms: i64, pace: &Pace) -> Option<Slots> {
        if !Self::idle(before, now_ms) {
            return None;
        }
        let gap_ms = before.map_or(pace.gap_ms(), |s| s.gap_ms);
        Some(Slots {
            next_ms: now_ms.saturating_add(gap_ms),
            gap_ms,
            changed_ms: before.map_or(now_ms, |s| s.changed_ms),
        })
    }

    /// A booking at `now_ms` by a run that waits until `latest_ms` at most:
    /// the next slot is taken when it comes within that, and the slots after
    /// it are returned.
    pub fn book(&self, now_ms: i64, latest_ms: i64) -> Option<Slots> {
        (now_ms..=latest_ms).contains(&self.next_ms).then_some(Slots {
            next_ms: self.next_ms.saturating_add(self.gap_ms),
            ..*self
        })
    }

    /// The slot taken by the booking (or start) that left these slots.
    pub fn taken_ms(&self) -> i64 {
        self.next_ms.saturating_sub(self.gap_ms)
    }
}

/// The latest slot a run waits for at `now_ms` with `left_ms` of its time
/// left: half of it, so the call and what follows it keep the other half.
pub fn latest_slot(now_ms: i64, left_ms: i64) -> i64 {
    now_ms.saturating_add(left_ms.max(0) / 2)
}

/// Why a booking (or a start) was refused, from the item as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing is booked ahead: start the pace again.
    Idle,
    /// Booked past what the run can wait for: a run with the same wait
    /// would find room at `room_at_ms` if nobody booked before it.
    Full { room_at_ms: i64 },
    /// A slot within reach after all (another write came between): book.
    Moved,
}

/// What a refused write on the pace item says to do next.
pub fn refusal(old: Option<&Slots>, now_ms: i64, latest_ms: i64) -> Refusal {
    match old {
        _ if Slots::idle(old, now_ms) => Refusal::Idle,
        Some(s) if s.next_ms > latest_ms => Refusal::Full {
            room_at_ms: s.next_ms.saturating_sub(latest_ms.saturating_sub(now_ms)),
        },
        _ => Refusal::Moved,
    }
}

/// Whether the next free slot this process last saw (`last_next_ms`) is
/// already past `latest_ms`: the pace is full for this call, with room
/// from the instant [`refusal`] would name, and no write is needed to
/// learn it. Sound because the next free slot only moves later while slots
/// are booked ahead (a start happens only once it has passed), so a herd's
/// refusals cost one write a process, not one a call.
pub fn seen_full(last_next_ms: Option<i64>, now_ms: i64, latest_ms: i64) -> Option<i64> {
    let next = last_next_ms?;
    (next > latest_ms).then(|| next.saturating_sub(latest_ms.saturating_sub(now_ms)))
}

/// Which write a booking tries first: a start when the last slots this
/// process saw were idle by `now_ms` (a quiet fleet), else a booking, so
/// each model call makes one write in either regime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Try {
    Book,
    Start,
}

pub fn first_try(last_next_ms: Option<i64>, now_ms: i64) -> Try {
    match last_next_ms {
        Some(next) if next >= now_ms => Try::Book,
        _ => Try::Start,
    }
}

/// The gap after a throttle of a request booked under `seen`: a quarter
/// wider, at most [`Pace::slowest_gap_ms`]; `None` when it is already there.
pub fn slowed(pace: &Pace, seen: &Slots) -> Option<i64> {
    let slowest = pace.slowest_gap_ms();
    if seen.gap_ms >= slowest {
        return None;
    }
    let wider = seen.gap_ms.saturating_mul(SLOWER.0) / SLOWER.1;
    Some(wider.max(seen.gap_ms + 1).min(slowest))
}

/// The gap to set after a booking that saw `seen` at `now_ms`, if any: the
/// configured one when the configuration is slower than what is stored (it
/// was lowered), a fifth narrower (never below the configured one) once a
/// whole window passed since the gap last changed.
pub fn eased(pace: &Pace, seen: &Slots, now_ms: i64) -> Option<i64> {
    let configured = pace.gap_ms();
    if seen.gap_ms < configured {
        return Some(configured);
    }
    if seen.gap_ms > configured && now_ms.saturating_sub(seen.changed_ms) >= pace.window_ms() {
        return Some((seen.gap_ms.saturating_mul(FASTER.0) / FASTER.1).max(configured));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pace(requests: u32, window_ms: u64) -> Pace {
        Pace::new(requests, std::time::Duration::from_millis(window_ms)).unwrap()
    }

    #[test]
    fn a_pace_needs_requests_and_a_window_and_is_never_faster_than_configured() {
        assert_eq!(Pace::per_minute(0), None);
        assert_eq!(Pace::new(5, std::time::Duration::ZERO), None);
        assert_eq!(pace(200, 60_000).gap_ms(), 300);
        assert_eq!(pace(7, 60_000).gap_ms(), 8572, "rounded up");
        assert_eq!(pace(100_000, 60_000).gap_ms(), 1, "at least a millisecond");
        assert_eq!(pace(200, 60_000).slowest_gap_ms(), 60_000);
        assert_eq!(pace(100_000, 60_000).slowest_gap_ms(), 60_000);
    }

    #[test]
    fn bookings_take_the_next_slot_within_reach_and_refusals_say_why() {
        let p = pace(200, 60_000);
        let started = Slots::start(None, 1_000, &p).unwrap();
        assert_eq!(
            started,
            Slots {
                next_ms: 1_300,
                gap_ms: 300,
                changed_ms: 1_000
            }
        );
        assert_eq!(started.taken_ms(), 1_000);
        assert_eq!(Slots::start(Some(&started), 1_000, &p), None, "not idle");
        let booked = started.book(1_000, 2_000).unwrap();
        assert_eq!((booked.taken_ms(), booked.next_ms), (1_300, 1_600));
        assert_eq!(started.book(1_000, 1_299), None, "past the run's reach");
        assert_eq!(started.book(1_400, 9_000), None, "idle by then: a start");
        assert_eq!(refusal(None, 1_000, 2_000), Refusal::Idle);
        assert_eq!(refusal(Some(&started), 1_301, 2_000), Refusal::Idle);
        assert_eq!(
            refusal(Some(&booked), 1_000, 1_100),
            Refusal::Full { room_at_ms: 1_500 },
            "the next slot, 1,600, is 100 ms of wait away at 1,500"
        );
        assert_eq!(refusal(Some(&booked), 1_000, 2_000), Refusal::Moved);
        // A start after an idle spell keeps a raised gap and when it changed.
        let raised = Slots {
            next_ms: 500,
            gap_ms: 900,
            changed_ms: 10,
        };
        assert_eq!(
            Slots::start(Some(&raised), 1_000, &p),
            Some(Slots {
                next_ms: 1_900,
                gap_ms: 900,
                changed_ms: 10
            })
        );
    }

    #[test]
    fn a_run_waits_at_most_half_its_time_and_tries_first_what_it_last_saw() {
        assert_eq!(latest_slot(1_000, 60_000), 31_000);
        assert_eq!(latest_slot(1_000, -5), 1_000);
        assert_eq!(first_try(None, 1_000), Try::Start);
        assert_eq!(first_try(Some(999), 1_000), Try::Start);
        assert_eq!(first_try(Some(1_000), 1_000), Try::Book);
    }

    #[test]
    fn a_throttle_slows_by_a_quarter_to_one_a_window_and_a_clean_window_eases_back() {
        let p = pace(200, 60_000);
        let at = |gap_ms, changed_ms| Slots {
            next_ms: 0,
            gap_ms,
            changed_ms,
        };
        assert_eq!(slowed(&p, &at(300, 0)), Some(375));
        assert_eq!(slowed(&p, &at(3, 0)), Some(4), "always wider");
        assert_eq!(slowed(&p, &at(59_000, 0)), Some(60_000));
        assert_eq!(slowed(&p, &at(60_000, 0)), None);
        assert_eq!(eased(&p, &at(300, 0), 1_000_000), None, "at the pace");
        assert_eq!(eased(&p, &at(375, 0), 59_999), None, "within the window");
        assert_eq!(eased(&p, &at(375, 0), 60_000), Some(300));
        assert_eq!(eased(&p, &at(1_000, 0), 60_000), Some(800));
        assert_eq!(
            eased(&p, &at(100, 59_999), 60_000),
            Some(300),
            "the configuration slowed"
        );
    }

    /// Runs of the fleet asking for slots at `arrivals` (ms, any order of
    /// instants), each waiting up to `reach` ms; the slots they took.
    fn booked(p: &Pace, arrivals: &[i64], reach: i64) -> Vec<i64> {
        let mut item: Option<Slots> = None;
        let mut taken = Vec::new();
        for &now in arrivals {
            let latest = latest_slot(now, 2 * reach);
            let next = match refusal(item.as_ref(), now, latest) {
                Refusal::Idle => Slots::start(item.as_ref(), now, p),
                Refusal::Moved => item.and_then(|s| s.book(now, latest)),
                Refusal::Full { room_at_ms } => {
                    assert!(room_at_ms > now && room_at_ms <= item.unwrap().next_ms);
                    None
                }
            };
            if let Some(next) = next {
                assert!(next.taken_ms() >= now && next.taken_ms() <= latest);
                taken.push(next.taken_ms());
                item = Some(next);
            }
        }
        taken
    }

    proptest! {
        #[test]
        fn slots_never_put_more_than_the_pace_in_any_window(
            requests in 1u32..50,
            window in 100u64..10_000,
            mut arrivals in proptest::collection::vec(0i64..50_000, 1..300),
            reach in 0i64..20_000,
        ) {
            arrivals.sort_unstable();
            let p = pace(requests, window);
            let taken = booked(&p, &arrivals, reach);
            prop_assert!(taken.windows(2).all(|w| w[1] - w[0] >= p.gap_ms()));
            for (i, &start) in taken.iter().enumerate() {
                let within = taken[i..].iter().take_while(|&&t| t < start + p.window_ms()).count();
                prop_assert!(within <= requests as usize, "{within} slots in a window from {start}");
            }
        }

        #[test]
        fn the_gap_stays_between_the_pace_and_one_a_window(requests in 1u32..100_000, gap in 1i64..200_000, since in 0i64..200_000) {
            let p = pace(requests, 60_000);
            let seen = Slots { next_ms: 0, gap_ms: gap, changed_ms: 0 };
            if let Some(g) = slowed(&p, &seen) {
                prop_assert!(g > gap && g <= p.slowest_gap_ms());
            } else {
                prop_assert!(gap >= p.slowest_gap_ms());
            }
            if let Some(g) = eased(&p, &seen, since) {
                prop_assert!(g >= p.gap_ms());
                prop_assert!(g != gap);
            }
        }
    }

    #[test]
    fn a_visibly_full_pace_is_refused_without_a_write() {
        let now = 1_000_000;
        let latest = latest_slot(now, 60_000);
        assert_eq!(seen_full(None, now, latest), None, "nothing seen: ask the item");
        assert_eq!(
            seen_full(Some(latest), now, latest),
            None,
            "the last slot in reach: book it"
        );
        let next = latest + 5_000;
        assert_eq!(
            seen_full(Some(next), now, latest),
            match refusal(
                Some(&Slots {
                    next_ms: next,
                    gap_ms: 100,
                    changed_ms: 0
                }),
                now,
                latest
            ) {
                Refusal::Full { room_at_ms } => Some(room_at_ms),
                other => panic!("{other:?}"),
            },
            "the same room a refused write would name"
        );
    }

    #[test]
    fn reminders_have_a_fifth_of_the_pace_and_connectors_borrow_only_an_idle_slot() {
        let pace = Pace::per_minute(600).unwrap();
        assert_eq!(Lane::Reminders.pace(&pace).requests(), 120);
        assert_eq!(Lane::Connectors.pace(&pace).requests(), 480);
        assert_eq!(Lane::Reminders.pace(&pace).gap_ms(), 500);
        assert_eq!(Lane::Connectors.pace(&pace).gap_ms(), 125);
        let (now, latest) = (1_000_000, 1_030_000);
        assert_eq!(Lane::Reminders.borrow_reach_ms(&pace, now, latest), latest);
        assert_eq!(Lane::Connectors.borrow_reach_ms(&pace, now, latest), now + 500);
        assert_ne!(Lane::Reminders.pace_id("m"), Lane::Connectors.pace_id("m"));
        assert_eq!(Lane::Connectors.pace_id("m"), "m", "the pace's original item");
        let one = Pace::per_minute(1).unwrap();
        assert!(!Lane::split(&one));
        assert_eq!(
            Lane::Reminders.under(&one),
            Lane::Connectors,
            "one lane below two a window"
        );
        assert_eq!(Lane::Reminders.pace(&one), one);
    }

    #[test]
    fn tokens_split_as_requests_do_and_a_call_past_a_gaps_worth_moves_the_pace_on() {
        let pace = Pace::per_minute(200).unwrap().with_tokens(200_000);
        assert_eq!(Pace::per_minute(200).unwrap().with_tokens(0).tokens(), None);
        assert_eq!(Lane::Reminders.pace(&pace).tokens(), Some(40_000));
        assert_eq!(Lane::Connectors.pace(&pace).tokens(), Some(160_000));
        assert_eq!(
            counted_tokens(1_000, 200, 300),
            2_700,
            "output five times, reads not at all"
        );
        // 200,000 a minute: 1,000 tokens a gap of 300 ms.
        assert_eq!(pace.token_charge_ms(1_000, pace.gap_ms()), None, "within the gap");
        assert_eq!(pace.token_charge_ms(2_700, pace.gap_ms()), Some(810 - 300));
        assert_eq!(
            pace.token_charge_ms(u64::MAX, pace.gap_ms()),
            Some(60_000),
            "at most a window"
        );
        assert_eq!(Pace::per_minute(200).unwrap().token_charge_ms(1_000_000, 300), None);
    }

    #[test]
    fn a_workspace_has_half_a_lane_and_past_it_books_within_half_its_reach() {
        let lane = Lane::Connectors.pace(&Pace::per_minute(600).unwrap());
        assert_eq!(lane.share().requests(), 240);
        assert_eq!(Pace::per_minute(1).unwrap().share().requests(), 1);
        assert_eq!(past_share_reach_ms(1_000, 61_000), 31_000);
        assert_eq!(past_share_reach_ms(1_000, 0), 1_000);
        assert_ne!(share_id("m", "ws-a"), share_id("m", "ws-b"));
        assert_ne!(share_id("m", "ws-a"), "m");
    }
}
