//! Limits bound one run of a task: turns of the agent loop, tool calls, output
//! tokens and wall time.
//!
//! Invariant: every task carries finite limits, each no wider than the
//! operator's ceilings (`SCHEDULE_CEILINGS`). A reminder's limits are the
//! minimum of its agent's limits and the ceilings, a missing agent limit taking
//! the ceiling (SPEC §4 rule 6). A connector's declared limits above a ceiling
//! make the declaration invalid (SPEC §5). Called by `reminder` at create time
//! and by `config` when it parses the ceilings.

use serde::{Deserialize, Serialize};

/// The four limits of one run. All finite, all enforced by the runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_turns: u32,
    pub max_tool_calls: u32,
    pub max_output_tokens: u32,
    pub timeout_seconds: u32,
}

/// Limits as an agent or a declaration states them: any may be missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestedLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
}

/// The operator's ceilings: no task may have a wider limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ceilings(Limits);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A limit that would make every run fail before it starts.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// A limit wider than the operator's ceiling.
    #[error("{name} is {value}, above the ceiling of {ceiling}")]
    AboveCeiling {
        name: &'static str,
        value: u32,
        ceiling: u32,
    },
}

impl Limits {
    fn named(&self) -> [(&'static str, u32); 4] {
        [
            ("max_turns", self.max_turns),
            ("max_tool_calls", self.max_tool_calls),
            ("max_output_tokens", self.max_output_tokens),
            ("timeout_seconds", self.timeout_seconds),
        ]
    }

    /// Every limit but `max_tool_calls` must be positive: a run with zero
    /// turns, tokens or seconds cannot do anything. Zero tool calls is a real
    /// limit (reminders run with no tools).
    fn check_positive(&self) -> Result<(), LimitError> {
        for (name, value) in self.named() {
            if value == 0 && name != "max_tool_calls" {
                return Err(LimitError::Zero(name));
            }
        }
        Ok(())
    }

    /// Checks these limits against the ceilings, naming the first one above.
    pub fn check_within(&self, ceilings: &Ceilings) -> Result<(), LimitError> {
        self.check_positive()?;
        for ((name, value), (_, ceiling)) in self.named().into_iter().zip(ceilings.0.named()) {
            if value > ceiling {
                return Err(LimitError::AboveCeiling { name, value, ceiling });
            }
        }
        Ok(())
    }
}

impl RequestedLimits {
    /// Rejects a requested zero where zero is meaningless.
    pub fn check(&self) -> Result<(), LimitError> {
        let named = [
            ("max_turns", self.max_turns),
            ("max_output_tokens", self.max_output_tokens),
            ("timeout_seconds", self.timeout_seconds),
        ];
        match named.into_iter().find(|(_, v)| *v == Some(0)) {
            Some((name, _)) => Err(LimitError::Zero(name)),
            None => Ok(()),
        }
    }
}

impl Ceilings {
    /// Ceilings are themselves limits, and must be usable ones.
    pub fn new(limits: Limits) -> Result<Self, LimitError> {
        limits.check_positive()?;
        Ok(Self(limits))
    }

    pub fn limits(&self) -> Limits {
        self.0
    }

    /// Limits as requested, a missing one taking the ceiling; not capped
    /// (a declaration above a ceiling is refused, not trimmed).
    pub fn fill(&self, requested: &RequestedLimits) -> Limits {
        let c = self.0;
        Limits {
            max_turns: requested.max_turns.unwrap_or(c.max_turns),
            max_tool_calls: requested.max_tool_calls.unwrap_or(c.max_tool_calls),
            max_output_tokens: requested.max_output_tokens.unwrap_or(c.max_output_tokens),
            timeout_seconds: requested.timeout_seconds.unwrap_or(c.timeout_seconds),
        }
    }

    /// The limits a run gets (SPEC §7 "Ceilings bind at run time"): each the
    /// minimum of the task's approved limit and the current ceiling, so a
    /// lowered ceiling brakes every task at its next run.
    pub fn bound(&self, approved: Limits) -> Limits {
        let c = self.0;
        Limits {
            max_turns: approved.max_turns.min(c.max_turns),
            max_tool_calls: approved.max_tool_calls.min(c.max_tool_calls),
            max_output_tokens: approved.max_output_tokens.min(c.max_output_tokens),
            timeout_seconds: approved.timeout_seconds.min(c.timeout_seconds),
        }
    }

    /// The limits a task gets from what its agent asked for: each the minimum
    /// of the request and the ceiling; a missing request takes the ceiling.
    pub fn derive(&self, requested: &RequestedLimits) -> Limits {
        let c = self.0;
        let min = |req: Option<u32>, ceiling: u32| req.map_or(ceiling, |r| r.min(ceiling));
        Limits {
            max_turns: min(requested.max_turns, c.max_turns),
            max_tool_calls: min(requested.max_tool_calls, c.max_tool_calls),
            max_output_tokens: min(requested.max_output_tokens, c.max_output_tokens),
            timeout_seconds: min(requested.timeout_seconds, c.timeout_seconds),
        }
    }
}

/// SPEC §9's example `SCHEDULE_CEILINGS`: the one copy the tests, the fuzz
/// targets and the local stack use.
pub const EXAMPLE_CEILINGS: Limits = Limits {
    max_turns: 10,
    max_tool_calls: 20,
    max_output_tokens: 4000,
    timeout_seconds: 300,
};

/// Test data shared by the domain's test modules.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::{Ceilings, EXAMPLE_CEILINGS};

    /// SPEC §9's example `SCHEDULE_CEILINGS`.
    pub fn ceilings() -> Ceilings {
        Ceilings::new(EXAMPLE_CEILINGS).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::ceilings;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn derive_takes_the_minimum_and_fills_missing_from_the_ceiling() {
        let cases = [
            (RequestedLimits::default(), (10, 20, 4000, 300)),
            (
                RequestedLimits {
                    max_turns: Some(6),
                    max_tool_calls: Some(0),
                    max_output_tokens: Some(2000),
                    timeout_seconds: Some(120),
                },
                (6, 0, 2000, 120),
            ),
            (
                RequestedLimits {
                    max_turns: Some(60),
                    max_tool_calls: None,
                    max_output_tokens: Some(9000),
                    timeout_seconds: Some(300),
                },
                (10, 20, 4000, 300),
            ),
        ];
        for (requested, (t, c, o, s)) in cases {
            let got = ceilings().derive(&requested);
            assert_eq!(
                got,
                Limits {
                    max_turns: t,
                    max_tool_calls: c,
                    max_output_tokens: o,
                    timeout_seconds: s
                },
                "{requested:?}"
            );
        }
    }

    #[test]
    fn zero_is_refused_except_for_tool_calls() {
        let zero_turns = RequestedLimits {
            max_turns: Some(0),
            ..Default::default()
        };
        assert_eq!(zero_turns.check(), Err(LimitError::Zero("max_turns")));
        let zero_tools = RequestedLimits {
            max_tool_calls: Some(0),
            ..Default::default()
        };
        assert_eq!(zero_tools.check(), Ok(()));
        let bad_ceiling = Limits {
            timeout_seconds: 0,
            ..ceilings().limits()
        };
        assert_eq!(Ceilings::new(bad_ceiling), Err(LimitError::Zero("timeout_seconds")));
    }

    #[test]
    fn check_within_names_the_first_limit_above_its_ceiling() {
        let above = Limits {
            max_output_tokens: 4001,
            ..ceilings().limits()
        };
        assert_eq!(
            above.check_within(&ceilings()),
            Err(LimitError::AboveCeiling {
                name: "max_output_tokens",
                value: 4001,
                ceiling: 4000
            })
        );
        assert_eq!(ceilings().limits().check_within(&ceilings()), Ok(()));
    }

    fn arb_requested() -> impl Strategy<Value = RequestedLimits> {
        (
            proptest::option::of(1u32..100_000),
            proptest::option::of(0u32..100_000),
            proptest::option::of(1u32..100_000),
            proptest::option::of(1u32..100_000),
        )
            .prop_map(|(t, c, o, s)| RequestedLimits {
                max_turns: t,
                max_tool_calls: c,
                max_output_tokens: o,
                timeout_seconds: s,
            })
    }

    fn arb_ceilings() -> impl Strategy<Value = Ceilings> {
        (1u32..1000, 0u32..1000, 1u32..100_000, 1u32..3600).prop_map(|(t, c, o, s)| {
            Ceilings::new(Limits {
                max_turns: t,
                max_tool_calls: c,
                max_output_tokens: o,
                timeout_seconds: s,
            })
            .unwrap()
        })
    }

    proptest! {
        /// Derived limits are always within the ceilings, never wider than
        /// what the agent asked for, and equal to one of the two.
        #[test]
        fn derived_limits_are_the_pointwise_minimum(req in arb_requested(), ceil in arb_ceilings()) {
            let got = ceil.derive(&req);
            prop_assert!(got.check_within(&ceil).is_ok());
            let c = ceil.limits();
            let pairs = [
                (got.max_turns, req.max_turns, c.max_turns),
                (got.max_tool_calls, req.max_tool_calls, c.max_tool_calls),
                (got.max_output_tokens, req.max_output_tokens, c.max_output_tokens),
                (got.timeout_seconds, req.timeout_seconds, c.timeout_seconds),
            ];
            for (value, asked, ceiling) in pairs {
                prop_assert!(value <= ceiling);
                match asked {
                    Some(a) => prop_assert_eq!(value, a.min(ceiling)),
                    None => prop_assert_eq!(value, ceiling),
                }
            }
        }
    }
}
