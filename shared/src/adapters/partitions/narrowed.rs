//! Each partition of the SDK's copy (`sdk.json`) alone, its regions
//! without descriptions, beside the regions it lists. Made by
//! `PARTITIONS_WRITE=1 cargo test -p shared --lib partitions`; a test holds
//! it to `sdk.json`.

#[rustfmt::skip]
pub(super) const NARROWED: &[(&[&str], &str)] = &[
    (&["af-south-1", "ap-east-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1", "ap-south-2", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5", "ap-southeast-6", "ap-southeast-7", "aws-global", "ca-central-1", "ca-west-1", "eu-central-1", "eu-central-2", "eu-north-1", "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3", "il-central-1", "me-central-1", "me-south-1", "mx-central-1", "sa-east-1", "us-east-1", "us-east-2", "us-west-1", "us-west-2"],
     r#"{"partitions":[{"id":"aws","outputs":{"dnsSuffix":"amazonaws.com","dualStackDnsSuffix":"api.aws","implicitGlobalRegion":"us-east-1","name":"aws","supportsDualStack":true,"supportsFIPS":true},"regionRegex":"^(us|eu|ap|sa|ca|me|af|il|mx)\\-\\w+\\-\\d+$","regions":{"af-south-1":{},"ap-east-1":{},"ap-east-2":{},"ap-northeast-1":{},"ap-northeast-2":{},"ap-northeast-3":{},"ap-south-1":{},"ap-south-2":{},"ap-southeast-1":{},"ap-southeast-2":{},"ap-southeast-3":{},"ap-southeast-4":{},"ap-southeast-5":{},"ap-southeast-6":{},"ap-southeast-7":{},"aws-global":{},"ca-central-1":{},"ca-west-1":{},"eu-central-1":{},"eu-central-2":{},"eu-north-1":{},"eu-south-1":{},"eu-south-2":{},"eu-west-1":{},"eu-west-2":{},"eu-west-3":{},"il-central-1":{},"me-central-1":{},"me-south-1":{},"mx-central-1":{},"sa-east-1":{},"us-east-1":{},"us-east-2":{},"us-west-1":{},"us-west-2":{}}}],"version":"1.1"}"#),
    (&["aws-cn-global", "cn-north-1", "cn-northwest-1"],
     r#"{"partitions":[{"id":"aws-cn","outputs":{"dnsSuffix":"amazonaws.com.cn","dualStackDnsSuffix":"api.amazonwebservices.com.cn","implicitGlobalRegion":"cn-northwest-1","name":"aws-cn","supportsDualStack":true,"supportsFIPS":true},"regionRegex":"^cn\\-\\w+\\-\\d+$","regions":{"aws-cn-global":{},"cn-north-1":{},"cn-northwest-1":{}}}],"version":"1.1"}"#),
    (&["eusc-de-east-1"],
     r#"{"partitions":[{"id":"aws-eusc","outputs":{"dnsSuffix":"amazonaws.eu","dualStackDnsSuffix":"api.amazonwebservices.eu","implicitGlobalRegion":"eusc-de-east-1","name":"aws-eusc","supportsDualStack":true,"supportsFIPS":true},"regionRegex":"^eusc\\-(de)\\-\\w+\\-\\d+$","regions":{"eusc-de-east-1":{}}}],"version":"1.1"}"#),
    (&["aws-iso-global", "us-iso-east-1", "us-iso-west-1"],
     r#"{"partitions":[{"id":"aws-iso","outputs":{"dnsSuffix":"c2s.ic.gov","dualStackDnsSuffix":"api.aws.ic.gov","implicitGlobalRegion":"us-iso-east-1","name":"aws-iso","supportsDualStack":true,"supportsFIPS":true},"regionRegex":"^us\\-iso\\-\\w+\\-\\d+$","regions":{"aws-iso-global":{},"us-iso-east-1":{},"us-iso-west-1":{}}}],"version":"1.1"}"#),
    (&["aws-iso-b-global", "us-isob-east-1", "us-isob-west-1"],
     r#"{"partitions":[{"id":"aws-iso-b","outputs":{"dnsSuffix":"sc2s.sgov.gov","dualStackDnsSuffix":"api.aws.scloud","implicitGlobalRegion":"us-isob-east-1","name":"aws-iso-b","supportsDualStack":true,"supportsFIPS":true},"regionRegex":"^us\\-isob\\-\\w+\\-\\d+$","regions":{"aws-iso-b-global":{},"us-isob-east-1":{},"us-isob-west-1":{}}}],"version":"1.1"}"#),
    (&["aws-iso-e-global", "eu-isoe-west-1"],
     r#"{"partitions":[{"id":"aws-iso-e","outputs":{"dnsSuffix":"cloud.adc-e.uk","dualStackDnsSuffix":"api.cloud-aws.adc-e.uk","implicitGlobalRegion":"eu-isoe-west-1","name":"aws-iso-e","supportsDualStack":true,"supportsFIPS":true},"regionRegex":"^eu\\-isoe\\-\\w+\\-\\d+$","regions":{"aws-iso-e-global":{},"eu-isoe-west-1":{}}}],"version":"1.1"}"#),
    (&["aws-iso-f-global", "us-isof-east-1", "us-isof-south-1"],
     r#"{"partitions":[{"id":"aws-iso-f","outputs":{"dnsSuffix":"csp.hci.ic.gov","dualStackDnsSuffix":"api.aws.hci.ic.gov","implicitGlobalRegion":"us-isof-south-1","name":"aws-iso-f","supportsDualStack":true,"supportsFIPS":true},"regionRegex":"^us\\-isof\\-\\w+\\-\\d+$","regions":{"aws-iso-f-global":{},"us-isof-east-1":{},"us-isof-south-1":{}}}],"version":"1.1"}"#),
    (&["aws-us-gov-global", "us-gov-east-1", "us-gov-west-1"],
     r#"{"partitions":[{"id":"aws-us-gov","outputs":{"dnsSuffix":"amazonaws.com","dualStackDnsSuffix":"api.aws","implicitGlobalRegion":"us-gov-west-1","name":"aws-us-gov","supportsDualStack":true,"supportsFIPS":true},"regionRegex":"^us\\-gov\\-\\w+\\-\\d+$","regions":{"aws-us-gov-global":{},"us-gov-east-1":{},"us-gov-west-1":{}}}],"version":"1.1"}"#),
];
