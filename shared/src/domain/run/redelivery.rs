//! When a run message the runner returns comes back. SQS shows a returned
//! message again only after its visibility timeout: the runs queue's is
//! 2160 s (six times the runner's timeout), so without more a busy or
//! throttled occurrence would come back 36 minutes late. The runner shortens
//! the visibility of every record it returns in the partial batch response
//! (`ChangeMessageVisibility`) to [`return_delay`]: short, growing with the
//! receive count, jittered so that returned copies do not come back together.
//! A run the model pace had no slot for ([`paced_return`]) goes back instead
//! for the time until the pace has room for it (`domain::run::pace`), spread, and
//! never shorter than a floor that grows with the receive count
//! ([`paced_floor`]).
//!
//! Invariants: no return takes longer than [`LONGEST_RETURN_SECONDS`], and
//! the catch-up window is never shorter (the configuration refuses one that
//! is; the template's `CatchUpSeconds` starts at the queue's visibility
//! timeout, which bounds a return nobody could shorten: a crash, a timeout).
//! Throttling is not a fault (SPEC §13): an occurrence returned for load
//! reaches the runs DLQ only after its catch-up window has passed, however
//! often it came back. The queue's `maxReceiveCount` is set with the return
//! policy: it is more than [`receives_within`] the longest catch-up window
//! (`MAX_CATCH_UP_SECONDS`), every return at its shortest of either kind
//! ([`shortest_return`]), so the window
//! runs out first; the receive after it is a `missed` skip, recorded and
//! acknowledged at the first door (tested against the template).
//! Called by the runner's handler; the ARN helper by its queue adapter.

/// The first return's visibility, before jitter.
pub const FIRST_RETURN_SECONDS: i32 = 60;

/// No return waits longer than this.
pub const LONGEST_RETURN_SECONDS: i32 = 600;

/// The visibility timeout for a record returned on its `receive_count`-th
/// receive (`ApproximateReceiveCount`, from 1): the first return waits about
/// a minute, each next one twice as long, up to [`LONGEST_RETURN_SECONDS`].
/// `jitter` in `[0, 1)` picks a point in the upper half ("equal jitter"):
/// at least half the step, never more than it.
pub fn return_delay(receive_count: u32, jitter: f64) -> i32 {
    let doublings = receive_count.saturating_sub(1).min(16);
    let step = FIRST_RETURN_SECONDS
        .saturating_mul(1 << doublings)
        .min(LONGEST_RETURN_SECONDS);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let half = step / 2;
    // `half + jitter * (step - half)`, rounded down, stays within `[half, step]`.
    half + ((f64::from(step - half)) * jitter) as i32
}

/// A paced return on the `receive_count`-th receive waits at least this
/// many times the receive count, up to [`PACED_FLOOR_CAP_SECONDS`]: short
/// while the pace is about to have room, yet bounding how often one message
/// can come back (the DLQ arithmetic above).
pub const PACED_FLOOR_STEP_SECONDS: i32 = 10;
pub const PACED_FLOOR_CAP_SECONDS: i32 = 300;
/// Paced returns of one moment are spread over this much more.
pub const PACED_SPREAD_SECONDS: i32 = 30;

/// The shortest a paced return waits on its `receive_count`-th receive.
pub fn paced_floor(receive_count: u32) -> i32 {
    let n = i32::try_from(receive_count.max(1)).unwrap_or(i32::MAX);
    PACED_FLOOR_STEP_SECONDS.saturating_mul(n).min(PACED_FLOOR_CAP_SECONDS)
}

/// The visibility timeout for a record returned on its `receive_count`-th
/// receive because the model pace had no slot for it: `room_in_seconds`
/// until the pace has room (`pace::Refusal::Full`), plus a `jitter` in
/// `[0, 1)` of [`PACED_SPREAD_SECONDS`] so the runs turned away together
/// come back apart; never shorter than [`paced_floor`] nor longer than
/// [`LONGEST_RETURN_SECONDS`].
pub fn paced_return(receive_count: u32, room_in_seconds: i64, jitter: f64) -> i32 {
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let room = i32::try_from(room_in_seconds.clamp(0, i64::from(LONGEST_RETURN_SECONDS))).unwrap_or(0);
    let spread = (f64::from(PACED_SPREAD_SECONDS) * jitter) as i32;
    room.saturating_add(spread)
        .max(paced_floor(receive_count))
        .min(LONGEST_RETURN_SECONDS)
}

/// The shortest any return waits on the `receive_count`-th receive,
/// whatever sent it back: [`return_delay`] at no jitter, or [`paced_floor`].
pub fn shortest_return(receive_count: u32) -> i32 {
    return_delay(receive_count, 0.0).min(paced_floor(receive_count))
}

/// The most receives one message can have within `window_seconds` of its
/// first, each return at its shortest ([`shortest_return`]): the first
/// receive, then one per return that still fits in the window.
pub fn receives_within(window_seconds: i64) -> u32 {
    let mut elapsed = 0i64;
    let mut receives = 1u32;
    loop {
        let shortest = i64::from(shortest_return(receives));
        if elapsed + shortest > window_seconds {
            return receives;
        }
        elapsed += shortest;
        receives += 1;
    }
}

/// The queue URL of an SQS queue ARN (`arn:<partition>:sqs:<region>:<account>:<name>`),
/// as SQS documents it: `https://sqs.<region>.<domain>/<account>/<name>`.
/// The SDK sends the request to its configured endpoint and names the queue
/// by this URL. `None` for anything that is not an SQS queue ARN.
pub fn queue_url_of_arn(arn: &str) -> Option<String> {
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some("sqs"), Some(region), Some(account), Some(name)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    };
    if !(plain(partition) && plain(region) && account.chars().all(|c| c.is_ascii_digit()) && plain(name)) {
        return None;
    }
    let domain = match partition {
        "aws-cn" => "amazonaws.com.cn",
        _ => "amazonaws.com",
    };
    Some(format!("https://sqs.{region}.{domain}/{account}/{name}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn receives_within_a_window_count_every_return_at_its_shortest() {
        // Paced returns at their floor, 10 + 20 + ... + 300 s: thirty
        // returns in 4,650 s, then one per 300 s.
        assert_eq!(super::receives_within(9), 1);
        assert_eq!(super::receives_within(10), 2);
        assert_eq!(super::receives_within(30), 3);
        assert_eq!(super::receives_within(4_649), 30);
        assert_eq!(super::receives_within(4_650), 31);
        assert_eq!(super::receives_within(3600), 27);
        assert_eq!(super::receives_within(21_600), 87);
    }

    #[test]
    fn a_paced_return_waits_for_room_spread_within_its_floor_and_the_longest() {
        assert_eq!(paced_return(1, 45, 0.0), 45, "until the pace has room");
        assert_eq!(paced_return(1, 45, 0.5), 60, "spread by up to 30 s");
        assert_eq!(paced_return(1, 2, 0.0), 10, "the first floor");
        assert_eq!(paced_return(7, 2, 0.0), 70);
        assert_eq!(paced_return(1, -5, 0.0), 10, "room already");
        assert_eq!(paced_return(40, 0, 0.0), 300, "the floor stops growing");
        assert_eq!(paced_return(1, 10_000, 0.9), LONGEST_RETURN_SECONDS);
        assert_eq!(paced_return(1, 45, f64::NAN), 45);
        assert_eq!(
            (1..=4).map(shortest_return).collect::<Vec<_>>(),
            vec![10, 20, 30, 40],
            "the paced floor is the shorter at first"
        );
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn returns_grow_and_stop_at_the_longest() {
        let shortest: Vec<i32> = (1..=6).map(|n| return_delay(n, 0.0)).collect();
        let longest: Vec<i32> = (1..=6).map(|n| return_delay(n, 0.999_999)).collect();
        assert_eq!(shortest, vec![30, 60, 120, 240, 300, 300]);
        assert_eq!(longest, vec![59, 119, 239, 479, 599, 599]);
        assert_eq!(return_delay(0, 0.0), 30, "a missing count reads as the first");
        assert_eq!(return_delay(u32::MAX, 0.5), 450);
        assert_eq!(return_delay(1, f64::NAN), 30);
    }

    proptest! {
        #[test]
        fn a_return_is_never_longer_than_the_longest_nor_shorter_than_half_a_step(count in 0u32..100, jitter in 0.0f64..1.0) {
            let delay = return_delay(count, jitter);
            prop_assert!(delay <= LONGEST_RETURN_SECONDS);
            prop_assert!(delay >= FIRST_RETURN_SECONDS / 2);
            prop_assert!(delay >= return_delay(count, 0.0));
            prop_assert!(delay >= shortest_return(count));
        }

        #[test]
        fn a_paced_return_is_never_longer_than_the_longest_nor_shorter_than_its_floor(count in 0u32..200, room in -1_000i64..100_000, jitter in 0.0f64..1.0) {
            let delay = paced_return(count, room, jitter);
            prop_assert!(delay <= LONGEST_RETURN_SECONDS);
            prop_assert!(delay >= paced_floor(count));
            prop_assert!(delay >= shortest_return(count));
        }
    }

    #[test]
    fn queue_urls_follow_the_documented_form() {
        assert_eq!(
            queue_url_of_arn("arn:aws:sqs:us-east-1:123456789012:stack-RunsQueue-AbC12"),
            Some("https://sqs.us-east-1.amazonaws.com/123456789012/stack-RunsQueue-AbC12".to_owned())
        );
        assert_eq!(
            queue_url_of_arn("arn:aws-cn:sqs:cn-north-1:123456789012:runs"),
            Some("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/runs".to_owned())
        );
        for bad in [
            "",
            "arn:aws:sns:us-east-1:123456789012:topic",
            "arn:aws:sqs:us-east-1:acct:runs",
            "arn:aws:sqs:us-east-1:123456789012:",
            "arn:aws:sqs:us-east-1:123456789012:a/b",
            "arn:aws:sqs:us-east-1:123456789012",
        ] {
            assert_eq!(queue_url_of_arn(bad), None, "{bad}");
        }
    }
}
