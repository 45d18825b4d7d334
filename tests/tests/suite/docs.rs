//! Statements of the docs that the code can keep true: the README's layout
//! names paths that exist, docs/testing.md names every fuzz target, and the
//! fuzz crate builds the versions the workspace builds.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every path the README's layout names is in the repository.
#[test]
fn the_readmes_layout_names_paths_that_exist() {
    let readme = read("README.md");
    let section = readme
        .split("## Layout")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a layout section");
    // Its blocks: what ships, and what only tests and measures.
    let layout: String = section.split("```").skip(1).step_by(2).collect();
    let mut named = 0;
    for line in layout.lines().filter(|l| !l.starts_with(' ') && !l.trim().is_empty()) {
        let path = line.split_whitespace().next().unwrap();
        assert!(
            root().join(path).exists(),
            "the layout names {path}, which is not there"
        );
        named += 1;
    }
    assert!(named >= 18, "{named} paths in the layout");
}

/// docs/testing.md names each fuzz target of `shared/fuzz`, and no other.
#[test]
fn the_testing_doc_names_every_fuzz_target() {
    let manifest = read("shared/fuzz/Cargo.toml");
    let targets: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|name| *name != "shared-fuzz")
        .collect();
    let testing = read("docs/testing.md");
    let fuzzing = testing.split("## Fuzzing").nth(1).expect("a fuzzing section");
    let intro = fuzzing.split("```").next().unwrap();
    for target in &targets {
        assert!(
            intro.contains(&format!("`{target}`")),
            "docs/testing.md does not name {target}"
        );
    }
    let count = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"][targets.len() - 1];
    assert!(
        fuzzing.contains(&format!("all {count}")),
        "docs/testing.md says how many: {count}"
    );
}

/// docs/benchmarks.md's measured tables are `bench.sh`'s to write: each
/// section's markers stand in order, and what stands between them opens
/// with the stamp of the command, commit and machine that wrote it.
#[test]
fn the_benchmarks_tables_are_the_ones_bench_wrote_with_their_stamps() {
    let doc = read("docs/benchmarks.md");
    let mut after = 0;
    for section in tests::bench::SECTIONS {
        let open = format!("<!-- bench:{section} -->");
        let close = format!("<!-- /bench:{section} -->");
        let start = doc.find(&open).unwrap_or_else(|| panic!("{open} is missing")) + open.len();
        assert!(start > after, "{open} is out of order");
        let end = doc[start..]
            .find(&close)
            .unwrap_or_else(|| panic!("{close} is missing"))
            + start;
        let body = doc[start..end].trim();
        assert!(
            body.starts_with("*Written by `infra/scripts/bench.sh --only "),
            "the {section} section was not written by bench.sh: {body:.80}"
        );
        assert!(
            !body.contains("-dirty`"),
            "the {section} section was measured on changes never committed"
        );
        after = end;
    }
    // The harnesses' tables, each by its own command.
    for (section, script) in [("sim", "sim.sh"), ("year", "year.sh")] {
        let open = format!("<!-- bench:{section} -->");
        let start = doc.find(&open).unwrap_or_else(|| panic!("{open} is missing")) + open.len();
        let body = doc[start..].trim_start();
        assert!(
            body.starts_with(&format!("*Written by `infra/scripts/{script} ")),
            "the {section} section was not written by {script}: {body:.80}"
        );
    }
}

/// ARCHITECTURE's code map names every trait of `shared/src/ports.rs`, and
/// no trait that is not there.
#[test]
fn the_code_map_names_every_port() {
    let ports: std::collections::BTreeSet<String> = read("shared/src/ports.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("pub trait "))
        .map(|rest| rest.chars().take_while(|c| c.is_alphanumeric()).collect())
        .collect();
    assert!(ports.len() >= 10, "the ports are read: {ports:?}");
    let architecture = read("ARCHITECTURE.md");
    let entry = architecture
        .split("- `ports.rs`: ")
        .nth(1)
        .and_then(|rest| rest.split(") and their data").next())
        .expect("the code map's ports entry");
    let named: std::collections::BTreeSet<String> = entry
        .split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|name| name.split('/'))
        .map(str::to_owned)
        .collect();
    assert_eq!(named, ports, "ARCHITECTURE's ports list and shared/src/ports.rs");
}

/// Each package of a `Cargo.lock`, with the versions it is locked at.
fn locked(lock: &str) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut packages: std::collections::BTreeMap<_, std::collections::BTreeSet<_>> = Default::default();
    let mut name = None;
    for line in lock.lines() {
        let quoted = |key: &str| {
            line.strip_prefix(key)
                .and_then(|rest| rest.strip_prefix(" = \""))
                .and_then(|rest| rest.strip_suffix('"'))
                .map(str::to_owned)
        };
        if let Some(n) = quoted("name") {
            name = Some(n);
        } else if let (Some(version), Some(n)) = (quoted("version"), name.take()) {
            packages.entry(n).or_default().insert(version);
        }
    }
    packages
}

/// `shared/fuzz` has a lock of its own (it is outside the workspace); a
/// crate both build is locked at a version the workspace's lock has too, so
/// the fuzz targets run the code the functions run.
#[test]
fn the_fuzz_crate_builds_the_workspaces_versions() {
    let workspace = locked(&read("Cargo.lock"));
    let fuzz = locked(&read("shared/fuzz/Cargo.lock"));
    assert!(
        workspace.len() > 300 && fuzz.len() > 20,
        "{} and {} packages",
        workspace.len(),
        fuzz.len()
    );
    let mut shared = 0;
    for (name, versions) in &fuzz {
        let Some(ours) = workspace.get(name) else { continue };
        shared += 1;
        for version in versions {
            assert!(
                ours.contains(version),
                "shared/fuzz/Cargo.lock has {name} {version}, the workspace {ours:?}: \
                 `cargo update --offline -p {name}@{version} --precise <the workspace's>` in shared/fuzz"
            );
        }
    }
    assert!(shared > 20, "{shared} packages in both locks");
}
