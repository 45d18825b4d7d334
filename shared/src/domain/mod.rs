//! The domain: what the spec names, as pure code. No I/O, no AWS SDK, the
//! clock passed in as `now`. `cargo check -p shared --no-default-features`
//! proves it builds without the SDK.
//!
//! Grouped by what each part serves, each folder opening with its
//! invariants; a group names only the groups above it in this list, so
//! there is no circle among them (the graph test below, and
//! `infra/python/module_graph.py` in `test.sh`, for the groups and within
//! each):
//! - [`schedule`]: instants and expressions, Scheduler's rules, a
//!   reminder's recurrence;
//! - [`task`]: the task item and what it carries: limits, budget and its
//!   claims, holds, overrides and their edits, skips, run nows, installs;
//! - [`run`]: an occurrence's delivery: the message, the door, the agent
//!   loop, the settle, the model pace, the schedule a task fires by;
//! - [`operations`]: what operators and people read back: the
//!   missed-occurrence check, run history;
//! - [`reminder`]: the create contract and a reminder's rules;
//! - [`connector`]: declarations, reconcile's plan, approvals, bindings,
//!   webhooks and the connector URL rule;
//! - [`payload`]: invoke payloads decoded strictly, for every surface.

pub mod connector;
pub mod operations;
pub mod payload;
pub mod reminder;
pub mod run;
pub mod schedule;
pub mod task;

/// The module graph of the domain's groups, read from their source: which
/// name which (`use super::x`, `crate::domain::x`, in code and tests alike).
/// It must be acyclic, so a concept the others build on stays below them;
/// `test.sh` checks the modules within each group the same way
/// (`infra/python/module_graph.py`).
#[cfg(test)]
mod graph {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// Every domain module (a file, or a directory with `mod.rs`) and the
    /// domain modules its files name.
    fn graph() -> BTreeMap<String, BTreeSet<String>> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/domain");
        // (module, file, how many `super::` reach the domain from it)
        let mut files: Vec<(String, std::path::PathBuf, usize)> = Vec::new();
        for entry in std::fs::read_dir(&root).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                for inner in std::fs::read_dir(&path).unwrap() {
                    let inner = inner.unwrap().path();
                    let depth = if inner.ends_with("mod.rs") { 1 } else { 2 };
                    files.push((name.clone(), inner, depth));
                }
            } else if name != "mod" {
                files.push((name, path, 1));
            }
        }
        let modules: BTreeSet<String> = files.iter().map(|(m, _, _)| m.clone()).collect();
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, path, depth) in &files {
            let code: String = std::fs::read_to_string(path)
                .unwrap()
                .lines()
                .map(|line| line.split("//").next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            let named = graph.entry(module.clone()).or_default();
            for target in named_modules(&code, *depth) {
                if modules.contains(&target) && target != *module {
                    named.insert(target);
                }
            }
        }
        graph
    }

    /// The first segments after `crate::domain::` and after `super::`
    /// chains at least `depth` long, groups (`super::{a::X, b::Y}`) included.
    fn named_modules(code: &str, depth: usize) -> Vec<String> {
        let mut found = Vec::new();
        let mut rest = code;
        let next = |s: &str| {
            [s.find("crate::domain::"), s.find("super::")]
                .into_iter()
                .flatten()
                .min()
        };
        while let Some(at) = next(rest) {
            let (mut tail, mut supers) = (&rest[at..], 0);
            if let Some(t) = tail.strip_prefix("crate::domain::") {
                tail = t;
                supers = usize::MAX;
            }
            while let Some(t) = tail.strip_prefix("super::") {
                tail = t;
                supers += 1;
            }
            if supers >= depth {
                found.extend(first_segments(tail));
            }
            rest = tail;
        }
        found
    }

    fn first_segments(tail: &str) -> Vec<String> {
        let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
        let Some(group) = tail.strip_prefix('{') else {
            return vec![ident(tail)];
        };
        let (mut level, mut items, mut start) = (0, Vec::new(), 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => level += 1,
                '}' if level == 0 => {
                    items.push(&group[start..i]);
                    break;
                }
                '}' => level -= 1,
                ',' if level == 0 => {
                    items.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.into_iter().map(|item| ident(item.trim())).collect()
    }

    /// A cycle of the graph, if it has one, as the path that closes it.
    fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
        fn visit(
            node: &str,
            graph: &BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<String>,
            done: &mut BTreeSet<String>,
        ) -> Option<Vec<String>> {
            if let Some(at) = path.iter().position(|n| n == node) {
                let mut cycle = path[at..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            if done.contains(node) {
                return None;
            }
            path.push(node.to_owned());
            for next in graph.get(node).into_iter().flatten() {
                if let Some(cycle) = visit(next, graph, path, done) {
                    return Some(cycle);
                }
            }
            path.pop();
            done.insert(node.to_owned());
            None
        }
        let mut done = BTreeSet::new();
        graph
            .keys()
            .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
    }

    #[test]
    fn the_domain_module_graph_has_no_cycle() {
        let graph = graph();
        assert!(graph["run"].contains("task"), "the graph is read: {graph:?}");
        assert!(graph["task"].contains("schedule") && graph["connector"].contains("run"));
        if let Some(cycle) = cycle(&graph) {
            panic!(
                "the domain's modules name each other in a circle: {}",
                cycle.join(" -> ")
            );
        }
    }

    #[test]
    fn the_reader_finds_every_form_of_path_and_the_check_finds_a_cycle() {
        let code = "use super::task::Task;\nuse super::{hold::Hold, limits::{Limits}};\nlet x = crate::domain::budget::period(t);\nuse super::super::schedule::RateUnit;";
        assert_eq!(named_modules(code, 1), ["task", "hold", "limits", "budget", "schedule"]);
        assert_eq!(named_modules(code, 2), ["budget", "schedule"]);
        let circle: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
            .into_iter()
            .map(|(from, to)| (from.to_owned(), BTreeSet::from([to.to_owned()])))
            .collect();
        assert_eq!(
            cycle(&circle).map(|c| c.join(" -> ")),
            Some("a -> b -> c -> a".to_owned())
        );
    }
}
