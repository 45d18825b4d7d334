//! IAM per action in the local world (`infra/python/local_iam.py`): a
//! request signed with a function's role key is refused, as AWS refuses
//! it, when no statement of that function in `template.yaml` allows its
//! action; a transaction needs each action it holds. Other keys (the
//! tests' own) are not checked.

// A test stops where a set-up step failed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use local::LocalAws;
use local::runtime::role_key;

fn as_function(aws: &LocalAws, function: &str) -> aws_sdk_dynamodb::Client {
    // The role's key, as a probe: refusals this test expects are not the
    // suite's failures (local_iam.py).
    let key = format!("{}~probe", role_key(function).unwrap());
    let credentials = aws_sdk_dynamodb::config::Credentials::new(key, "local", None, None, "local");
    let sdk = aws
        .sdk
        .to_builder()
        .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(credentials))
        .build();
    aws_sdk_dynamodb::Client::new(&sdk)
}

fn key(pk: &str) -> std::collections::HashMap<String, AttributeValue> {
    [("pk", pk), ("sk", "X")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), AttributeValue::S(v.to_owned())))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_role_is_held_to_each_action_a_request_and_its_transaction_need() {
    let (aws, stack) = LocalAws::with_stack("iam").await.unwrap();
    let table = stack.names.table.clone();
    let put = |pk: &str| {
        TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(&table)
                    .set_item(Some(key(pk)))
                    .build()
                    .unwrap(),
            )
            .build()
    };
    // Admin's run now: a Put in a transaction, which its role allows.
    let admin = as_function(&aws, "admin");
    admin
        .transact_write_items()
        .transact_items(put("a"))
        .send()
        .await
        .expect("the admin role may PutItem");
    // A Delete in the same transaction: the admin role has no DeleteItem.
    let delete = TransactWriteItem::builder()
        .delete(
            Delete::builder()
                .table_name(&table)
                .set_key(Some(key("a")))
                .build()
                .unwrap(),
        )
        .build();
    let refused = admin
        .transact_write_items()
        .transact_items(put("b"))
        .transact_items(delete)
        .send()
        .await
        .unwrap_err();
    let text = format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(&refused));
    assert!(text.contains("AccessDenied"), "{text}");
    assert!(text.contains("dynamodb:DeleteItem"), "names the action: {text}");
    // A Scan: no function's role may.
    let scan = as_function(&aws, "runner")
        .scan()
        .table_name(&table)
        .send()
        .await
        .unwrap_err();
    let text = format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(&scan));
    assert!(text.contains("dynamodb:Scan"), "{text}");
    // The tests' own key is not a function's: not checked.
    aws_sdk_dynamodb::Client::new(&aws.sdk)
        .scan()
        .table_name(&table)
        .send()
        .await
        .expect("the harness may do anything");
}
