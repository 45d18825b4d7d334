//! The model a run converses with (`MODEL_ID`): a Bedrock foundation model
//! id (`anthropic.claude-haiku-4-5-20251001-v1:0`) or a cross-region
//! inference profile id, which is the foundation model id behind a routing
//! prefix (`global.` for any commercial region, `us.`, `eu.`, `apac.`, ...
//! for one geography). Current Claude models are served on demand only
//! through a profile.
//!
//! Invariant: a profile's foundation model is its id without the prefix;
//! that is the id the runner's IAM grants in every region the profile routes
//! to (docs/deploying.md, "Choosing a model"). Called by the configuration, which
//! refuses an id it cannot read, and by the template tests.

/// The routing prefixes of Bedrock's system-defined inference profiles.
/// `global` routes to any commercial region; the others stay in their
/// geography.
pub const PROFILE_PREFIXES: [&str; 8] = ["global", "us", "us-gov", "eu", "apac", "jp", "au", "ca"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelIdError {
    #[error("`{0}` is not a Bedrock model id (`provider.model`) or inference profile id (`prefix.provider.model`)")]
    Malformed(String),
}

/// A parsed `MODEL_ID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelId {
    id: String,
    /// The profile prefix, when the id names an inference profile.
    prefix: Option<&'static str>,
}

impl ModelId {
    pub fn parse(id: &str) -> Result<Self, ModelIdError> {
        let malformed = || ModelIdError::Malformed(id.to_owned());
        let valid_chars = id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
        if id.is_empty() || id.len() > 256 || !valid_chars || id.split('.').any(str::is_empty) {
            return Err(malformed());
        }
        let (first, rest) = id.split_once('.').ok_or_else(malformed)?;
        let prefix = PROFILE_PREFIXES.into_iter().find(|p| *p == first);
        if prefix.is_some() && !rest.contains('.') {
            // `us.claude-x` names no provider.
            return Err(malformed());
        }
        Ok(Self {
            id: id.to_owned(),
            prefix,
        })
    }

    /// The id as configured: what Converse is called with and what
    /// `MODEL_PRICES` is keyed by.
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// Whether the id names a cross-region inference profile.
    pub fn is_inference_profile(&self) -> bool {
        self.prefix.is_some()
    }

    /// `global`, `us`, `eu`, ... for a profile.
    pub fn profile_prefix(&self) -> Option<&'static str> {
        self.prefix
    }

    /// The foundation model behind the id: the id itself, or a profile's id
    /// without its routing prefix.
    pub fn foundation_model(&self) -> &str {
        match self.prefix {
            Some(prefix) => &self.id[prefix.len() + 1..],
            None => &self.id,
        }
    }
}

/// The most output tokens one Converse request may ask of a model (its
/// `maxTokens` ceiling; Bedrock refuses a request above it), by family,
/// from Anthropic's model overview: 128K for Opus 4.6 and later and Sonnet
/// 4.6; 64K for the 4.5 models, Sonnet 4 and Sonnet 3.7; 32K for Opus 4 and
/// 4.1; 8,192 for the 3.5 models; 4,096 for Claude 3 Haiku and for a model
/// this table does not know (the runner asks no more than that of it).
pub fn max_output_tokens(model_id: &str) -> u32 {
    let id = model_id.to_ascii_lowercase();
    let has = |s: &str| id.contains(s);
    if has("claude-opus-4-6") || has("claude-opus-4-7") || has("claude-opus-4-8") || has("claude-sonnet-4-6") {
        128_000
    } else if has("claude-opus-4-5")
        || has("claude-sonnet-4-5")
        || has("claude-haiku-4-5")
        || has("claude-sonnet-4-2")
        || has("claude-3-7-sonnet")
    {
        64_000
    } else if has("claude-opus-4-1") || has("claude-opus-4-2") {
        32_000
    } else if has("claude-3-5") {
        8_192
    } else {
        4_096
    }
}

/// The shortest prefix, in tokens, that the model's prompt cache takes at a
/// cache point (Bedrock's prompt caching table, by family): 4,096 for
/// Claude Opus 4.5 and later Opus models and for Haiku 4.5; 2,048 for Claude
/// 3.5 Haiku; 1,024 for the other Claude 4 models, Sonnet 4.5 and 4.6, and
/// Claude 3.7 Sonnet; 1,000 for Amazon Nova. `None`: the runner places no
/// cache point for a model this table does not know (Bedrock refuses a
/// cache point where the model has no prompt caching).
pub fn cache_minimum(model_id: &str) -> Option<u64> {
    let id = model_id.to_ascii_lowercase();
    let has = |s: &str| id.contains(s);
    if has("claude-opus-4-5")
        || has("claude-opus-4-6")
        || has("claude-opus-4-7")
        || has("claude-opus-4-8")
        || has("claude-haiku-4-5")
    {
        Some(4_096)
    } else if has("claude-3-5-haiku") {
        Some(2_048)
    } else if has("claude-sonnet-4") || has("claude-opus-4") || has("claude-3-7-sonnet") {
        Some(1_024)
    } else if has("amazon.nova-") {
        Some(1_000)
    } else {
        None
    }
}

/// Whether the model's cache takes a point among the tools (Claude does;
/// Amazon Nova caches the system prompt and messages only).
pub fn caches_tools(model_id: &str) -> bool {
    model_id.to_ascii_lowercase().contains("anthropic.")
}

/// Whether the model family takes a `status` on a tool result: Bedrock
/// documents the field for Anthropic Claude models only, and other
/// families refuse the request that carries it.
pub fn takes_tool_result_status(model_id: &str) -> bool {
    model_id.to_ascii_lowercase().contains("anthropic.")
}

impl std::fmt::Display for ModelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_has_its_output_ceiling_and_only_claude_takes_a_result_status() {
        let cases = [
            ("global.anthropic.claude-opus-4-6-v1", 128_000),
            ("us.anthropic.claude-sonnet-4-6", 128_000),
            ("global.anthropic.claude-haiku-4-5-20251001-v1:0", 64_000),
            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", 64_000),
            ("anthropic.claude-sonnet-4-20250514-v1:0", 64_000),
            ("anthropic.claude-opus-4-1-20250805-v1:0", 32_000),
            ("anthropic.claude-opus-4-20250514-v1:0", 32_000),
            ("anthropic.claude-3-5-haiku-20241022-v1:0", 8_192),
            ("anthropic.claude-3-haiku-20240307-v1:0", 4_096),
            ("amazon.nova-lite-v1:0", 4_096),
        ];
        for (id, max) in cases {
            assert_eq!(max_output_tokens(id), max, "{id}");
        }
        for (id, minimum) in [
            ("global.anthropic.claude-haiku-4-5-20251001-v1:0", Some(4_096)),
            ("global.anthropic.claude-opus-4-5-20251101-v1:0", Some(4_096)),
            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", Some(1_024)),
            ("anthropic.claude-opus-4-1-20250805-v1:0", Some(1_024)),
            ("anthropic.claude-3-7-sonnet-20250219-v1:0", Some(1_024)),
            ("anthropic.claude-3-5-haiku-20241022-v1:0", Some(2_048)),
            ("amazon.nova-pro-v1:0", Some(1_000)),
            ("anthropic.claude-3-haiku-20240307-v1:0", None),
            ("meta.llama3-70b-instruct-v1:0", None),
        ] {
            assert_eq!(cache_minimum(id), minimum, "{id}");
        }
        assert!(takes_tool_result_status(
            "global.anthropic.claude-haiku-4-5-20251001-v1:0"
        ));
        assert!(!takes_tool_result_status("us.amazon.nova-pro-v1:0"));
        assert!(!takes_tool_result_status("meta.llama3-1-70b-instruct-v1:0"));
    }

    #[test]
    fn profiles_and_models_are_told_apart() {
        let cases = [
            (
                "global.anthropic.claude-haiku-4-5-20251001-v1:0",
                Some("global"),
                "anthropic.claude-haiku-4-5-20251001-v1:0",
            ),
            (
                "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                Some("us"),
                "anthropic.claude-sonnet-4-5-20250929-v1:0",
            ),
            ("eu.amazon.nova-lite-v1:0", Some("eu"), "amazon.nova-lite-v1:0"),
            ("apac.anthropic.claude-x-v1:0", Some("apac"), "anthropic.claude-x-v1:0"),
            (
                "us-gov.anthropic.claude-x-v1:0",
                Some("us-gov"),
                "anthropic.claude-x-v1:0",
            ),
            (
                "anthropic.claude-3-haiku-20240307-v1:0",
                None,
                "anthropic.claude-3-haiku-20240307-v1:0",
            ),
            ("amazon.nova-micro-v1:0", None, "amazon.nova-micro-v1:0"),
        ];
        for (id, prefix, foundation) in cases {
            let model = ModelId::parse(id).unwrap();
            assert_eq!(model.profile_prefix(), prefix, "{id}");
            assert_eq!(model.is_inference_profile(), prefix.is_some(), "{id}");
            assert_eq!(model.foundation_model(), foundation, "{id}");
            assert_eq!(model.as_str(), id);
        }
    }

    #[test]
    fn what_is_no_model_id_is_refused() {
        for id in [
            "",
            "claude",
            "us.claude-x",
            "global.",
            ".anthropic.x",
            "anthropic..x",
            "anthropic.claude x",
            "arn:aws:bedrock:us-east-1::foundation-model/anthropic.x",
        ] {
            assert_eq!(
                ModelId::parse(id),
                Err(ModelIdError::Malformed(id.to_owned())),
                "{id:?}"
            );
        }
    }
}
