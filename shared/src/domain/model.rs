//! The model a run converses with (`MODEL_ID`): a Bedrock foundation model
//! id (`anthropic.claude-haiku-4-5-20251001-v1:0`) or a cross-region
//! inference profile id, which is the foundation model id behind a routing
//! prefix (`global.` for any commercial region, `us.`, `eu.`, `apac.`, ...
//! for one geography). Current Claude models are served on demand only
//! through a profile.
//!
//! Invariant: a profile's foundation model is its id without the prefix;
//! that is the id the runner's IAM grants in every region the profile routes
//! to (README, "Choosing a model"). Called by the configuration, which
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

impl std::fmt::Display for ModelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
