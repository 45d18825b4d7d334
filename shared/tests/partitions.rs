//! The narrowed endpoint partitions (`adapters::partitions`) resolve every
//! region they list, in each SDK crate a function builds a client of, to
//! the endpoints the SDK's whole list gives. Each side
//! runs in a process of its own, since the SDK reads its partitions once per
//! process: this test binary runs itself again, once narrowed and once not,
//! for each region, and compares what each prints.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use shared::adapters::partitions;
use std::process::Command;

/// A crate's default endpoint for a region, FIPS and dual stack or not.
macro_rules! resolve {
    ($sdk:ident, $region:expr, $fips:expr, $dual_stack:expr) => {{
        use $sdk::config::endpoint::{DefaultResolver, Params, ResolveEndpoint as _};
        let params = Params::builder()
            .region($region)
            .use_fips($fips)
            .use_dual_stack($dual_stack)
            .build()
            .unwrap();
        let answer = DefaultResolver::new().resolve_endpoint(&params).await;
        answer.map(|e| e.url().to_owned()).map_err(|e| e.to_string())
    }};
}

/// The variable that makes `print_endpoints` print, `narrow` or `whole`.
const CHILD: &str = "PARTITIONS_TEST_CHILD";

#[tokio::test]
async fn print_endpoints() {
    let Ok(order) = std::env::var(CHILD) else {
        return;
    };
    let region = std::env::var("AWS_REGION").unwrap();
    partitions::narrow(std::env::var(partitions::VARIABLE).ok().as_deref(), Some(&region)).unwrap();
    if order == "narrow" {
        let file = std::fs::read_to_string(std::env::var(partitions::VARIABLE).unwrap()).unwrap();
        assert!(
            file.len() < partitions::SDK_PARTITIONS.len(),
            "{region} is listed, so it narrows: {file}"
        );
    }
    let mut endpoints = Vec::new();
    for (fips, dual_stack) in [(false, false), (true, false), (false, true), (true, true)] {
        endpoints.push(resolve!(aws_sdk_dynamodb, &region, fips, dual_stack));
        endpoints.push(resolve!(aws_sdk_bedrockruntime, &region, fips, dual_stack));
        endpoints.push(resolve!(aws_sdk_scheduler, &region, fips, dual_stack));
        endpoints.push(resolve!(aws_sdk_sqs, &region, fips, dual_stack));
        endpoints.push(resolve!(aws_sdk_secretsmanager, &region, fips, dual_stack));
    }
    println!("ENDPOINTS {}", serde_json::to_string(&endpoints).unwrap());
}

fn endpoints(mode: &str, region: &str, folder: &std::path::Path) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", "print_endpoints", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .env("AWS_REGION", region)
        .env_remove(partitions::VARIABLE);
    if mode == "narrow" {
        child.env(partitions::VARIABLE, folder.join(partitions::FILE_NAME));
    }
    let output = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{mode} {region}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = stdout
        .lines()
        .find_map(|line| line.split_once("ENDPOINTS ").map(|(_, endpoints)| endpoints));
    printed
        .unwrap_or_else(|| panic!("{mode} {region} printed no endpoints: {stdout}"))
        .to_owned()
}

#[test]
fn every_listed_region_resolves_as_with_the_sdks_whole_list() {
    let sdk: Value = serde_json::from_str(partitions::SDK_PARTITIONS).unwrap();
    let folder = std::env::temp_dir().join(format!("partitions-test-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let mut regions = 0;
    for partition in sdk["partitions"].as_array().unwrap() {
        for region in partition["regions"].as_object().unwrap().keys() {
            let (narrowed, whole) = (
                endpoints("narrow", region, &folder),
                endpoints("whole", region, &folder),
            );
            assert!(whole.contains("https://"), "{region}: {whole}");
            assert_eq!(narrowed, whole, "{region}");
            regions += 1;
        }
    }
    std::fs::remove_dir_all(&folder).unwrap();
    assert!(regions > 40, "{regions} regions");
}
