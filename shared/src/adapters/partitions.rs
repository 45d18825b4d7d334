//! The SDK's endpoint partitions, narrowed to the one the function runs in.
//!
//! Each AWS SDK crate parses its copy of the endpoint partitions (eight
//! partitions, every region, a region pattern each) when its first client is
//! built, whatever endpoint resolver the client is given: about 0.7 M
//! instructions per crate at every cold start, a third of it compiling the
//! patterns (docs/benchmarks.md). The SDK reads them instead from the file
//! that `SMITHY_CLIENT_SDK_CUSTOM_PARTITION` names, when it is set.
//!
//! [`narrow`] writes, for the SDK to read, the one partition that lists the
//! function's region (`AWS_REGION`), as the SDK's own copy states it, less
//! the regions' descriptions, which the resolver never reads. A function
//! only ever resolves endpoints in its own region, and a region a partition
//! lists resolves to that partition before any pattern is tried, so its
//! endpoints are the ones the whole list gives (`shared/tests/partitions.rs`
//! resolves every listed region both ways). The template sets the variable
//! to [`FILE`] for every function; a region this copy does not list gets the
//! whole copy, and a variable naming a file not called [`FILE_NAME`] is the
//! operator's, left alone. `partitions/sdk.json` is the SDK crates' copy,
//! byte for byte, and `partitions/narrowed.rs` each of its partitions alone,
//! made ahead of time so a start parses nothing; tests hold the first to the
//! linked crates' and the second to the first.

mod narrowed;

/// The variable the SDK crates read their partitions' file from.
pub const VARIABLE: &str = "SMITHY_CLIENT_SDK_CUSTOM_PARTITION";

/// The file the template names in [`VARIABLE`], in Lambda's one writable
/// folder.
pub const FILE: &str = "/tmp/endpoint-partitions.json";

/// The name of a file [`narrow`] writes, in whatever folder the variable
/// names (locally, tests name their own).
pub const FILE_NAME: &str = "endpoint-partitions.json";

/// The SDK crates' endpoint partitions, as they embed them.
pub const SDK_PARTITIONS: &str = include_str!("partitions/sdk.json");

/// The partitions document for a function in `region`: the one partition
/// that lists it, its regions without descriptions (`narrowed.rs`, made
/// from the SDK's copy ahead of time, so a start parses nothing). `None`
/// when no partition lists it.
pub fn for_region(region: &str) -> Option<&'static str> {
    narrowed::NARROWED
        .iter()
        .find(|(regions, _)| regions.contains(&region))
        .map(|(_, document)| *document)
}

/// Writes `file`, the file the variable names, when it is called
/// [`FILE_NAME`]: the partition of the process's `region`, or the whole
/// copy. Call it before the first client is built ([`super::sdk_config`]):
/// once the variable is set, an SDK crate that cannot read its file panics
/// at its first client, so a failed write fails the start, said.
pub fn narrow(file: Option<&str>, region: Option<&str>) -> Result<(), PartitionsError> {
    let Some(file) = file.map(std::path::Path::new) else {
        return Ok(());
    };
    if file.file_name().is_none_or(|name| name != FILE_NAME) {
        return Ok(());
    }
    let document = region.and_then(for_region).unwrap_or(SDK_PARTITIONS);
    write_once(file, document.as_bytes()).map_err(|source| PartitionsError {
        file: file.display().to_string(),
        source,
    })
}

/// Writes `file` whole: created new where there is none (a fresh Lambda
/// environment's `/tmp`), else through a draft renamed over it (a restarted
/// runtime's, or one the local processes share), so a process reads the
/// file only once its own write made it whole. A fresh start spares the
/// rename, a journaled metadata write that a create alone does not make.
fn write_once(file: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    match std::fs::OpenOptions::new().write(true).create_new(true).open(file) {
        Ok(mut created) => created.write_all(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            let draft = file.with_extension(format!("json.{}", std::process::id()));
            std::fs::write(&draft, bytes).and_then(|()| std::fs::rename(&draft, file))
        }
        Err(error) => Err(error),
    }
}

/// The endpoint partitions' file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("the SDK's endpoint partitions could not be written to {file} ({VARIABLE}): {source}")]
pub struct PartitionsError {
    pub file: String,
    #[source]
    pub source: std::io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Each partition of the SDK's copy alone, its regions without
    /// descriptions, with the regions it lists.
    fn each_alone() -> Vec<(Vec<String>, String)> {
        let document: Value = serde_json::from_str(SDK_PARTITIONS).unwrap();
        let version = document["version"].clone();
        let mut alone = Vec::new();
        for partition in document["partitions"].as_array().unwrap() {
            let mut partition = partition.clone();
            let regions = partition["regions"].as_object_mut().unwrap();
            // A region's overrides stay; only its description goes.
            regions
                .values_mut()
                .filter_map(Value::as_object_mut)
                .for_each(|region| {
                    region.remove("description");
                });
            let listed = regions.keys().cloned().collect();
            alone.push((
                listed,
                json!({ "partitions": [partition], "version": version }).to_string(),
            ));
        }
        alone
    }

    /// `narrowed.rs` as [`each_alone`] makes it.
    fn narrowed_source() -> String {
        let mut source = String::from(
            "//! Each partition of the SDK's copy (`sdk.json`) alone, its regions\n\
             //! without descriptions, beside the regions it lists. Made by\n\
             //! `PARTITIONS_WRITE=1 cargo test -p shared --lib partitions`; a test holds\n\
             //! it to `sdk.json`.\n\n\
             #[rustfmt::skip]\n\
             pub(super) const NARROWED: &[(&[&str], &str)] = &[\n",
        );
        for (regions, document) in each_alone() {
            let regions: Vec<String> = regions.iter().map(|r| format!("{r:?}")).collect();
            source.push_str(&format!("    (&[{}],\n     r#\"{document}\"#),\n", regions.join(", ")));
        }
        source.push_str("];\n");
        source
    }

    #[test]
    fn the_narrowed_table_is_made_from_the_sdks_copy() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/adapters/partitions/narrowed.rs");
        let (made, kept) = (narrowed_source(), std::fs::read_to_string(&path).unwrap());
        if made != kept && crate::config::Env::process().optional("PARTITIONS_WRITE").is_some() {
            std::fs::write(&path, &made).unwrap();
            return;
        }
        assert!(
            made == kept,
            "partitions/narrowed.rs is stale: PARTITIONS_WRITE=1 cargo test -p shared --lib partitions"
        );
    }

    fn partitions_of(document: &str) -> Vec<Value> {
        let document: Value = serde_json::from_str(document).unwrap();
        document["partitions"].as_array().unwrap().clone()
    }

    #[test]
    fn a_region_gets_the_one_partition_that_lists_it_with_the_sdks_outputs_and_pattern() {
        let sdk = partitions_of(SDK_PARTITIONS);
        for (region, id) in [
            ("us-east-1", "aws"),
            ("eu-west-1", "aws"),
            ("cn-north-1", "aws-cn"),
            ("us-gov-west-1", "aws-us-gov"),
            ("eusc-de-east-1", "aws-eusc"),
        ] {
            let narrowed = partitions_of(for_region(region).unwrap());
            assert_eq!(narrowed.len(), 1, "{region}");
            let (one, whole) = (&narrowed[0], sdk.iter().find(|p| p["id"] == id).unwrap());
            assert_eq!(one["id"], id, "{region}");
            assert_eq!(one["outputs"], whole["outputs"], "{region}");
            assert_eq!(one["regionRegex"], whole["regionRegex"], "{region}");
            // Every region listed, with every override the SDK's copy gives it.
            let mut described = whole["regions"].as_object().unwrap().clone();
            described
                .values_mut()
                .for_each(|r| drop(r.as_object_mut().unwrap().remove("description")));
            assert_eq!(one["regions"].as_object().unwrap(), &described, "{region}");
        }
    }

    /// The byte string an SDK crate's `endpoint_lib.rs` embeds, unescaped.
    fn embedded(source: &str) -> String {
        let start = source.find("new_from_json(b\"").expect("the embedded partitions") + "new_from_json(b\"".len();
        let mut text = String::new();
        let mut chars = source[start..].chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return text,
                '\\' => text.push(chars.next().unwrap()),
                c => text.push(c),
            }
        }
        panic!("an unterminated byte string")
    }

    /// The version `Cargo.lock` pins of each package named, read from the
    /// lock file itself: `cargo metadata` would want every package of the
    /// lock for every platform, which a build on a fresh machine never
    /// downloads.
    fn locked_versions(lock: &str, names: &[&str]) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for package in lock.split("[[package]]").skip(1) {
            let field = |key: &str| {
                package.lines().find_map(|line| {
                    line.strip_prefix(key)
                        .and_then(|rest| rest.trim().strip_prefix('='))
                        .map(|value| value.trim().trim_matches('"').to_owned())
                })
            };
            if let (Some(name), Some(version)) = (field("name "), field("version "))
                && names.contains(&name.as_str())
            {
                found.push((name, version));
            }
        }
        found
    }

    /// Where cargo unpacked a registry package's source: under the cargo
    /// home the build ran with (rustup names it to the compiler), in any
    /// registry's folder.
    fn unpacked(name: &str, version: &str) -> std::path::PathBuf {
        let home = option_env!("CARGO_HOME").map_or_else(
            || std::env::home_dir().expect("a home folder").join(".cargo"),
            std::path::PathBuf::from,
        );
        let registries = home.join("registry").join("src");
        std::fs::read_dir(&registries)
            .unwrap_or_else(|e| panic!("{}: {e}", registries.display()))
            .map(|registry| registry.unwrap().path().join(format!("{name}-{version}")))
            .find(|folder| folder.is_dir())
            .unwrap_or_else(|| panic!("{name} {version} is not unpacked under {}", registries.display()))
    }

    #[test]
    fn the_copy_is_every_linked_sdk_crates_own() {
        let wanted = [
            "aws-sdk-dynamodb",
            "aws-sdk-bedrockruntime",
            "aws-sdk-scheduler",
            "aws-sdk-sqs",
            "aws-sdk-secretsmanager",
        ];
        let lock = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
        let lock = std::fs::read_to_string(lock).unwrap();
        let locked = locked_versions(&lock, &wanted);
        let mut checked = Vec::new();
        for (name, version) in &locked {
            let source = std::fs::read_to_string(unpacked(name, version).join("src/endpoint_lib.rs")).unwrap();
            assert_eq!(
                embedded(&source),
                SDK_PARTITIONS,
                "{name} embeds other partitions: copy its into partitions/sdk.json, then PARTITIONS_WRITE=1"
            );
            assert!(source.contains(VARIABLE), "{name} no longer reads {VARIABLE}");
            checked.push(name.as_str());
        }
        checked.sort_unstable();
        let mut all = wanted.to_vec();
        all.sort_unstable();
        assert_eq!(checked, all, "each linked SDK crate once in the lock");
    }

    #[test]
    fn the_lock_is_read_as_cargo_writes_it() {
        let lock = "version = 4\n\n[[package]]\nname = \"aws-sdk-sqs\"\nversion = \"1.2.3\"\nsource = \"registry+x\"\n\n[[package]]\nname = \"aws-sdk-sqs-extra\"\nversion = \"9\"\n\n[[package]]\nname = \"other\"\nversion = \"0.1.0\"\ndependencies = [\n \"aws-sdk-sqs\",\n]\n";
        assert_eq!(
            locked_versions(lock, &["aws-sdk-sqs"]),
            vec![("aws-sdk-sqs".to_owned(), "1.2.3".to_owned())]
        );
    }

    #[test]
    fn a_region_no_partition_lists_keeps_the_sdks_whole_list() {
        assert_eq!(for_region("xx-mars-1"), None);
        assert_eq!(for_region(""), None);
    }

    #[test]
    fn narrow_writes_only_a_file_of_its_name_the_region_s_partition_or_the_whole_copy() {
        let folder = std::env::temp_dir().join(format!("narrow-test-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        let ours = folder.join(FILE_NAME);
        let ours_text = ours.to_str().unwrap();
        narrow(Some(ours_text), Some("cn-north-1")).unwrap();
        assert_eq!(
            std::fs::read_to_string(&ours).unwrap(),
            for_region("cn-north-1").unwrap()
        );
        narrow(Some(ours_text), Some("xx-mars-1")).unwrap();
        assert_eq!(std::fs::read_to_string(&ours).unwrap(), SDK_PARTITIONS);
        narrow(Some(ours_text), None).unwrap();
        assert_eq!(std::fs::read_to_string(&ours).unwrap(), SDK_PARTITIONS);
        // An operator's own file is never written.
        let theirs = folder.join("partitions.json");
        std::fs::write(&theirs, "theirs").unwrap();
        narrow(Some(theirs.to_str().unwrap()), Some("us-east-1")).unwrap();
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "theirs");
        narrow(None, Some("us-east-1")).unwrap();
        let unwritable = folder.join("missing").join(FILE_NAME);
        let refused = narrow(unwritable.to_str(), Some("us-east-1")).unwrap_err();
        assert!(refused.to_string().contains(VARIABLE), "{refused}");
        let left: Vec<_> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "no draft is left behind: {left:?}");
        std::fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn the_narrowed_file_is_a_fraction_of_the_whole() {
        let narrowed = for_region("us-east-1").unwrap();
        assert!(
            narrowed.len() * 2 < SDK_PARTITIONS.len(),
            "{} of {}",
            narrowed.len(),
            SDK_PARTITIONS.len()
        );
    }
}
