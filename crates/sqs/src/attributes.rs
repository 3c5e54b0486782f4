//! Queue attributes: SQS's attribute strings to a [`QueueConfigPatch`], and a queue's state back
//! to the attribute strings `GetQueueAttributes` returns.
//!
//! Ranges are checked by the engine (against the configured `Limits`); this module checks what
//! only the wire knows: attribute names, number syntax, and the JSON of the redrive policies.

use std::collections::BTreeMap;

use leaseq_core::{
    DeduplicationScope, FifoThroughputLimit, QueueConfigPatch, QueueInfo, RedriveAllowPolicy,
    RedrivePolicy,
};
use serde_json::{json, Value};

use crate::error::{ErrorCode, SqsError};
use crate::outcome::Context;

/// Attributes `CreateQueue` and `SetQueueAttributes` accept (the FIFO ones only on FIFO queues,
/// and `FifoQueue` only on `CreateQueue`: the engine checks both).
pub const SETTABLE: [&str; 15] = [
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "Policy",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

/// Attributes `GetQueueAttributes` returns, in SQS's order for `All` (the FIFO ones only for
/// FIFO queues).
pub const READABLE: [&str; 22] = [
    "Policy",
    "VisibilityTimeout",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
    "ApproximateNumberOfMessagesDelayed",
    "DelaySeconds",
    "ReceiveMessageWaitTimeSeconds",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "All",
];

/// leaseq's own queue attributes (fair queues: `docs/design/fairness.md`, standard queues only;
/// redelivery backoff: `docs/design/leases.md`, any queue). Settable like SQS's; `GetQueueAttributes` returns them only when asked for by name, so `All`
/// answers exactly what SQS answers.
pub const LEASEQ_SETTINGS: [&str; 5] = [
    "LeaseqFairQueue",
    "LeaseqFairInFlightMin",
    "LeaseqFairProcessingWindowSeconds",
    "LeaseqFairComparableFactor",
    "LeaseqRedeliveryBackoff",
];

/// The `byQueue` list of a redrive-allow policy holds at most this many ARNs.
const SOURCE_QUEUE_ARNS_MAX: usize = 10;

fn unknown_attribute(name: &str) -> SqsError {
    SqsError::new(
        ErrorCode::InvalidAttributeName,
        format!("Unknown Attribute {name}."),
    )
}

fn boolean(name: &str, value: &str) -> Result<bool, SqsError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid_attribute_value(name)),
    }
}

fn invalid_attribute_value(name: &str) -> SqsError {
    SqsError::new(
        ErrorCode::InvalidAttributeValue,
        format!("Invalid value for the parameter {name}."),
    )
}

fn seconds(name: &str, value: &str) -> Result<u32, SqsError> {
    value
        .trim()
        .parse::<u32>()
        .map_err(|_| invalid_attribute_value(name))
}

/// Checks the names of `GetQueueAttributes` (`All` or any readable attribute).
pub fn check_readable(names: &[String]) -> Result<(), SqsError> {
    let readable = |name: &str| READABLE.contains(&name) || LEASEQ_SETTINGS.contains(&name);
    match names.iter().find(|name| !readable(name.as_str())) {
        Some(name) => Err(unknown_attribute(name)),
        None => Ok(()),
    }
}

/// SQS's default `KmsDataKeyReusePeriodSeconds` (`API_SetQueueAttributes`: "The default is 300
/// (5 minutes)").
const KMS_DATA_KEY_REUSE_DEFAULT_SECONDS: u32 = 300;

/// Turns the attributes of `CreateQueue` or `SetQueueAttributes` into a patch.
pub fn parse_settings(attributes: &BTreeMap<String, String>) -> Result<QueueConfigPatch, SqsError> {
    // One kind of server-side encryption at a time (recorded from AWS: LocalStack's
    // test_sse_kms_and_sqs_are_mutually_exclusive, SetQueueAttributes with a KMS key and
    // SqsManagedSseEnabled=true).
    let kms_key = attributes
        .get("KmsMasterKeyId")
        .is_some_and(|key| !key.is_empty());
    let sse_sqs = attributes
        .get("SqsManagedSseEnabled")
        .is_some_and(|enabled| enabled.trim().eq_ignore_ascii_case("true"));
    if kms_key && sse_sqs {
        return Err(SqsError::new(
            ErrorCode::InvalidAttributeName,
            "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE.",
        ));
    }
    let mut patch = QueueConfigPatch::default();
    for (name, value) in attributes {
        match name.as_str() {
            "DelaySeconds" => patch.delay_seconds = Some(seconds(name, value)?),
            "MaximumMessageSize" => patch.maximum_message_size_bytes = Some(seconds(name, value)?),
            "MessageRetentionPeriod" => patch.retention_seconds = Some(seconds(name, value)?),
            "ReceiveMessageWaitTimeSeconds" => {
                patch.receive_wait_time_seconds = Some(seconds(name, value)?)
            }
            "VisibilityTimeout" => patch.visibility_timeout_seconds = Some(seconds(name, value)?),
            "Policy" => patch.policy = Some(parse_policy(value)?),
            "RedrivePolicy" => patch.redrive_policy = Some(parse_redrive_policy(value)?),
            "RedriveAllowPolicy" => {
                patch.redrive_allow_policy = Some(parse_redrive_allow_policy(value)?)
            }
            // As AWS keeps them (recorded: LocalStack's test_set_queue_attributes_default_values):
            // choosing a KMS key turns SSE-SQS off, and an attribute set to its default (no key,
            // a reuse period of 300 s) is no longer returned; SSE-SQS stays off.
            "KmsMasterKeyId" => {
                patch.passthrough.insert(name.clone(), value.clone());
                if !value.is_empty() && !attributes.contains_key("SqsManagedSseEnabled") {
                    patch
                        .passthrough
                        .insert("SqsManagedSseEnabled".into(), "false".into());
                }
            }
            "KmsDataKeyReusePeriodSeconds" => {
                let period = seconds(name, value)?;
                if !(60..=86_400).contains(&period) {
                    return Err(invalid_attribute_value(name));
                }
                let stored = if period == KMS_DATA_KEY_REUSE_DEFAULT_SECONDS {
                    String::new()
                } else {
                    period.to_string()
                };
                patch.passthrough.insert(name.clone(), stored);
            }
            "SqsManagedSseEnabled" => {
                let enabled = match value.trim().to_ascii_lowercase().as_str() {
                    "true" => "true",
                    "false" => "false",
                    _ => return Err(invalid_attribute_value(name)),
                };
                patch.passthrough.insert(name.clone(), enabled.into());
            }
            "FifoQueue" => patch.fifo_queue = Some(boolean(name, value)?),
            "ContentBasedDeduplication" => {
                patch.content_based_deduplication = Some(boolean(name, value)?)
            }
            "DeduplicationScope" => {
                patch.deduplication_scope = Some(match value.as_str() {
                    "queue" => DeduplicationScope::Queue,
                    "messageGroup" => DeduplicationScope::MessageGroup,
                    _ => return Err(invalid_attribute_value(name)),
                })
            }
            "FifoThroughputLimit" => {
                patch.fifo_throughput_limit = Some(match value.as_str() {
                    "perQueue" => FifoThroughputLimit::PerQueue,
                    "perMessageGroupId" => FifoThroughputLimit::PerMessageGroupId,
                    _ => return Err(invalid_attribute_value(name)),
                })
            }
            "LeaseqFairQueue" => patch.fair_queue = Some(boolean(name, value)?),
            "LeaseqFairInFlightMin" => patch.fair_in_flight_min = Some(seconds(name, value)?),
            "LeaseqFairProcessingWindowSeconds" => {
                patch.fair_processing_window_seconds = Some(seconds(name, value)?)
            }
            "LeaseqFairComparableFactor" => {
                patch.fair_comparable_factor = Some(seconds(name, value)?)
            }
            "LeaseqRedeliveryBackoff" => {
                let backoff = leaseq_core::RedeliveryBackoff::parse(value).map_err(|reason| {
                    SqsError::new(
                        ErrorCode::InvalidAttributeValue,
                        format!("Invalid value for the parameter {name}. Reason: {reason}."),
                    )
                })?;
                patch.redelivery_backoff = Some(backoff);
            }
            other => return Err(unknown_attribute(other)),
        }
    }
    Ok(patch)
}

fn parse_policy(value: &str) -> Result<Option<String>, SqsError> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    serde_json::from_str::<Value>(value)
        .ok()
        .filter(Value::is_object)
        .map(|_| Some(value.to_string()))
        .ok_or_else(|| invalid_attribute_value("Policy"))
}

fn redrive_error(name: &str, value: &str, reason: &str) -> SqsError {
    SqsError::invalid_parameter(name, value, reason)
}

/// The queue name of an SQS ARN (`arn:aws:sqs:region:account:name`).
pub fn queue_name_of_arn(arn: &str) -> Option<&str> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _partition, "sqs", _region, _account, name] if !name.is_empty() => Some(name),
        _ => None,
    }
}

/// The JSON object of a policy attribute, or SQS's error naming it as `what`.
fn json_map(
    name: &str,
    value: &str,
    what: &str,
) -> Result<serde_json::Map<String, Value>, SqsError> {
    match serde_json::from_str::<Value>(value) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(redrive_error(
            name,
            value,
            &format!("{what} is not a valid JSON map."),
        )),
    }
}

fn parse_redrive_policy(value: &str) -> Result<Option<RedrivePolicy>, SqsError> {
    const NAME: &str = "RedrivePolicy";
    if value.trim().is_empty() {
        return Ok(None);
    }
    let policy = json_map(NAME, value, "Redrive policy")?;
    let missing = |attribute: &str| {
        redrive_error(
            NAME,
            value,
            &format!("Redrive policy does not contain mandatory attribute: {attribute}."),
        )
    };
    let arn = policy
        .get("deadLetterTargetArn")
        .ok_or_else(|| missing("deadLetterTargetArn"))?;
    let count = policy
        .get("maxReceiveCount")
        .ok_or_else(|| missing("maxReceiveCount"))?;
    if let Some(extra) = policy
        .keys()
        .find(|key| !matches!(key.as_str(), "deadLetterTargetArn" | "maxReceiveCount"))
    {
        return Err(redrive_error(
            NAME,
            value,
            &format!("Only following attributes are supported: [deadLetterTargetArn, maxReceiveCount], found {extra}."),
        ));
    }
    let dead_letter_queue = arn
        .as_str()
        .and_then(queue_name_of_arn)
        .ok_or_else(|| redrive_error(NAME, value, "Invalid value for deadLetterTargetArn."))?;
    // SQS accepts the count as a JSON number or as a string of digits.
    let max_receive_count = match count {
        Value::Number(number) => number.as_u64(),
        Value::String(text) => text.trim().parse::<u64>().ok(),
        _ => None,
    }
    .and_then(|count| u32::try_from(count).ok())
    .ok_or_else(|| {
        redrive_error(
            NAME,
            value,
            &format!(
                "Invalid value for maxReceiveCount: {count}, valid values are from 1 to {} both inclusive.",
                leaseq_core::Limits::SQS.max_receive_count_max
            ),
        )
    })?;
    Ok(Some(RedrivePolicy {
        dead_letter_queue: dead_letter_queue.to_string(),
        max_receive_count,
    }))
}

fn parse_redrive_allow_policy(value: &str) -> Result<Option<RedriveAllowPolicy>, SqsError> {
    const NAME: &str = "RedriveAllowPolicy";
    if value.trim().is_empty() {
        return Ok(None);
    }
    let policy = json_map(NAME, value, "Redrive allow policy")?;
    let permission = policy.get("redrivePermission").and_then(Value::as_str);
    let arns = policy.get("sourceQueueArns");
    match (permission, arns) {
        (Some("allowAll"), None) => Ok(Some(RedriveAllowPolicy::AllowAll)),
        (Some("denyAll"), None) => Ok(Some(RedriveAllowPolicy::DenyAll)),
        (Some("allowAll" | "denyAll"), Some(_)) => Err(redrive_error(
            NAME,
            value,
            "sourceQueueArns is only allowed with redrivePermission byQueue.",
        )),
        (Some("byQueue"), Some(Value::Array(arns))) => {
            if arns.is_empty() || arns.len() > SOURCE_QUEUE_ARNS_MAX {
                return Err(redrive_error(
                    NAME,
                    value,
                    &format!("sourceQueueArns must list 1 to {SOURCE_QUEUE_ARNS_MAX} queue ARNs."),
                ));
            }
            let names = arns
                .iter()
                .map(|arn| arn.as_str().and_then(queue_name_of_arn).map(str::to_string))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| redrive_error(NAME, value, "Invalid value for sourceQueueArns."))?;
            Ok(Some(RedriveAllowPolicy::ByQueue(names)))
        }
        (Some("byQueue"), _) => Err(redrive_error(
            NAME,
            value,
            "redrivePermission byQueue requires sourceQueueArns.",
        )),
        _ => Err(redrive_error(
            NAME,
            value,
            "redrivePermission must be one of allowAll, denyAll, byQueue.",
        )),
    }
}

/// The value of one readable attribute, or `None` when the queue has no such setting.
fn attribute_value(name: &str, info: &QueueInfo, ctx: &Context) -> Option<String> {
    let config = &info.config;
    let passthrough = |key: &str| config.passthrough.get(key).cloned();
    Some(match name {
        "Policy" => config.policy.clone()?,
        "VisibilityTimeout" => config.visibility_timeout_seconds.to_string(),
        "MaximumMessageSize" => config.maximum_message_size_bytes.to_string(),
        "MessageRetentionPeriod" => config.retention_seconds.to_string(),
        "ApproximateNumberOfMessages" => info.ready.to_string(),
        "ApproximateNumberOfMessagesNotVisible" => info.in_flight.to_string(),
        "ApproximateNumberOfMessagesDelayed" => info.delayed.to_string(),
        "CreatedTimestamp" => (info.created_at_ms / 1000).to_string(),
        "LastModifiedTimestamp" => (info.last_modified_at_ms / 1000).to_string(),
        "QueueArn" => crate::queue_arn(ctx, &info.name),
        "DelaySeconds" => config.delay_seconds.to_string(),
        "ReceiveMessageWaitTimeSeconds" => config.receive_wait_time_seconds.to_string(),
        "RedrivePolicy" => {
            let policy = config.redrive_policy.as_ref()?;
            json!({
                "deadLetterTargetArn": crate::queue_arn(ctx, &policy.dead_letter_queue),
                "maxReceiveCount": policy.max_receive_count,
            })
            .to_string()
        }
        "RedriveAllowPolicy" => match config.redrive_allow_policy.as_ref()? {
            RedriveAllowPolicy::AllowAll => json!({ "redrivePermission": "allowAll" }),
            RedriveAllowPolicy::DenyAll => json!({ "redrivePermission": "denyAll" }),
            RedriveAllowPolicy::ByQueue(names) => json!({
                "redrivePermission": "byQueue",
                "sourceQueueArns": names
                    .iter()
                    .map(|name| crate::queue_arn(ctx, name))
                    .collect::<Vec<_>>(),
            }),
        }
        .to_string(),
        "KmsMasterKeyId" => passthrough("KmsMasterKeyId")?,
        "KmsDataKeyReusePeriodSeconds" => {
            passthrough("KmsDataKeyReusePeriodSeconds").or_else(|| {
                passthrough("KmsMasterKeyId")
                    .map(|_| KMS_DATA_KEY_REUSE_DEFAULT_SECONDS.to_string())
            })?
        }
        // New SQS queues have SSE-SQS on unless a KMS key was chosen or it was turned off.
        "SqsManagedSseEnabled" => passthrough("SqsManagedSseEnabled").unwrap_or_else(|| {
            if passthrough("KmsMasterKeyId").is_some() {
                "false".into()
            } else {
                "true".into()
            }
        }),
        "FifoQueue" => {
            config.fifo.as_ref()?;
            "true".into()
        }
        "ContentBasedDeduplication" => config
            .fifo
            .as_ref()?
            .content_based_deduplication
            .to_string(),
        "DeduplicationScope" => match config.fifo.as_ref()?.deduplication_scope {
            DeduplicationScope::Queue => "queue".into(),
            DeduplicationScope::MessageGroup => "messageGroup".into(),
        },
        "FifoThroughputLimit" => match config.fifo.as_ref()?.throughput_limit {
            FifoThroughputLimit::PerQueue => "perQueue".into(),
            FifoThroughputLimit::PerMessageGroupId => "perMessageGroupId".into(),
        },
        // Standard queues only, as FIFO settings are FIFO queues' only.
        "LeaseqFairQueue" if config.fifo.is_none() => config.fairness.enabled.to_string(),
        "LeaseqFairInFlightMin" if config.fifo.is_none() => {
            config.fairness.in_flight_min.to_string()
        }
        "LeaseqFairProcessingWindowSeconds" if config.fifo.is_none() => {
            config.fairness.processing_window_seconds.to_string()
        }
        "LeaseqFairComparableFactor" if config.fifo.is_none() => {
            config.fairness.comparable_factor.to_string()
        }
        "LeaseqRedeliveryBackoff" => config
            .redelivery_backoff
            .as_ref()
            .map_or_else(String::new, ToString::to_string),
        _ => return None,
    })
}

/// The attributes `GetQueueAttributes` returns for `names` (which may contain `All`), in SQS's
/// order.
pub fn render(info: &QueueInfo, names: &[String], ctx: &Context) -> Vec<(&'static str, String)> {
    let all = names.iter().any(|name| name == "All");
    let named = |name: &str| names.iter().any(|wanted| wanted == name);
    let leaseq = LEASEQ_SETTINGS.iter().filter(|&&name| named(name));
    READABLE
        .iter()
        .filter(|&&name| name != "All" && (all || named(name)))
        .chain(leaseq)
        .filter_map(|&name| attribute_value(name, info, ctx).map(|value| (name, value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Result<QueueConfigPatch, SqsError> {
        parse_settings(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn numbers_and_names() {
        let patch = settings(&[("VisibilityTimeout", "60"), ("DelaySeconds", "5")]).unwrap();
        assert_eq!(patch.visibility_timeout_seconds, Some(60));
        assert_eq!(patch.delay_seconds, Some(5));
        let error = settings(&[("VisibilityTimeout", "abc")]).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeValue);
        assert_eq!(
            error.message,
            "Invalid value for the parameter VisibilityTimeout."
        );
        let error = settings(&[("VisibilityTimeout", "-1")]).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeValue);
        let error = settings(&[("Colour", "blue")]).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeName);
        assert_eq!(error.message, "Unknown Attribute Colour.");
    }

    #[test]
    fn fifo_settings() {
        let patch = settings(&[
            ("FifoQueue", "true"),
            ("ContentBasedDeduplication", "TRUE"),
            ("DeduplicationScope", "messageGroup"),
            ("FifoThroughputLimit", "perMessageGroupId"),
        ])
        .unwrap();
        assert_eq!(patch.fifo_queue, Some(true));
        assert_eq!(patch.content_based_deduplication, Some(true));
        assert_eq!(
            patch.deduplication_scope,
            Some(DeduplicationScope::MessageGroup)
        );
        assert_eq!(
            patch.fifo_throughput_limit,
            Some(FifoThroughputLimit::PerMessageGroupId)
        );
        for (name, bad) in [
            ("FifoQueue", "yes"),
            ("ContentBasedDeduplication", "1"),
            ("DeduplicationScope", "group"),
            ("FifoThroughputLimit", "perGroup"),
        ] {
            let error = settings(&[(name, bad)]).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidAttributeValue, "{name}");
        }
    }

    #[test]
    fn fair_queue_settings() {
        let patch = settings(&[
            ("LeaseqFairQueue", "false"),
            ("LeaseqFairInFlightMin", "5"),
            ("LeaseqFairProcessingWindowSeconds", "120"),
        ])
        .unwrap();
        assert_eq!(patch.fair_queue, Some(false));
        assert_eq!(patch.fair_in_flight_min, Some(5));
        assert_eq!(patch.fair_processing_window_seconds, Some(120));
        for (name, bad) in [
            ("LeaseqFairQueue", "off"),
            ("LeaseqFairInFlightMin", "-1"),
            ("LeaseqFairProcessingWindowSeconds", "1m"),
        ] {
            let error = settings(&[(name, bad)]).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidAttributeValue, "{name}");
        }
        assert!(check_readable(&["LeaseqFairQueue".into()]).is_ok());
    }

    #[test]
    fn redelivery_backoff_setting() {
        let patch = settings(&[("LeaseqRedeliveryBackoff", "1s,5s,30s,2m releases")]).unwrap();
        let backoff = patch.redelivery_backoff.unwrap().unwrap();
        assert_eq!(backoff.to_string(), "1s,5s,30s,2m releases");
        let off = settings(&[("LeaseqRedeliveryBackoff", "")]).unwrap();
        assert_eq!(off.redelivery_backoff, Some(None));
        let error = settings(&[("LeaseqRedeliveryBackoff", "1s,soon")]).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeValue);
        assert!(
            error.message.starts_with(
                "Invalid value for the parameter LeaseqRedeliveryBackoff. Reason: \"soon\""
            ),
            "{}",
            error.message
        );
    }

    #[test]
    fn redrive_policy() {
        let arn = "arn:aws:sqs:us-east-1:000000000000:dlq";
        for text in [
            format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":5}}"#),
            format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"5"}}"#),
        ] {
            let patch = settings(&[("RedrivePolicy", &text)]).unwrap();
            assert_eq!(
                patch.redrive_policy,
                Some(Some(RedrivePolicy {
                    dead_letter_queue: "dlq".into(),
                    max_receive_count: 5
                }))
            );
        }
        assert_eq!(
            settings(&[("RedrivePolicy", "")]).unwrap().redrive_policy,
            Some(None)
        );
        for bad in [
            "not json",
            r#"{"maxReceiveCount":5}"#,
            r#"{"deadLetterTargetArn":"dlq","maxReceiveCount":5}"#,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:r:a:dlq","maxReceiveCount":"x"}"#,
        ] {
            let error = settings(&[("RedrivePolicy", bad)]).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidParameterValue, "{bad}");
        }
    }

    #[test]
    fn redrive_allow_policy() {
        let parse = |text: &str| settings(&[("RedriveAllowPolicy", text)]);
        assert_eq!(
            parse(r#"{"redrivePermission":"allowAll"}"#)
                .unwrap()
                .redrive_allow_policy,
            Some(Some(RedriveAllowPolicy::AllowAll))
        );
        assert_eq!(
            parse(r#"{"redrivePermission":"denyAll"}"#)
                .unwrap()
                .redrive_allow_policy,
            Some(Some(RedriveAllowPolicy::DenyAll))
        );
        assert_eq!(
            parse(
                r#"{"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:1:a"]}"#
            )
            .unwrap()
            .redrive_allow_policy,
            Some(Some(RedriveAllowPolicy::ByQueue(vec!["a".into()])))
        );
        let eleven: Vec<String> = (0..11)
            .map(|i| format!("\"arn:aws:sqs:r:1:q{i}\""))
            .collect();
        let too_many = format!(
            r#"{{"redrivePermission":"byQueue","sourceQueueArns":[{}]}}"#,
            eleven.join(",")
        );
        assert!(parse(&too_many).is_err());
        assert!(parse(r#"{"redrivePermission":"byQueue"}"#).is_err());
        assert!(parse(r#"{"redrivePermission":"some"}"#).is_err());
    }

    #[test]
    fn sse_and_policy() {
        let patch = settings(&[
            ("SqsManagedSseEnabled", "false"),
            ("KmsDataKeyReusePeriodSeconds", "600"),
            ("Policy", r#"{"Version":"2012-10-17"}"#),
        ])
        .unwrap();
        assert_eq!(patch.passthrough["SqsManagedSseEnabled"], "false");
        assert_eq!(patch.passthrough["KmsDataKeyReusePeriodSeconds"], "600");
        assert!(patch.policy.unwrap().is_some());
        assert!(settings(&[("KmsDataKeyReusePeriodSeconds", "59")]).is_err());
        assert!(settings(&[("SqsManagedSseEnabled", "yes")]).is_err());
        // One kind of SSE at a time (LocalStack's AWS-validated
        // test_sse_kms_and_sqs_are_mutually_exclusive).
        let both = settings(&[("KmsMasterKeyId", "k"), ("SqsManagedSseEnabled", "true")]);
        let error = both.expect_err("KMS and SQS SSE together");
        assert_eq!(error.code, ErrorCode::InvalidAttributeName);
        assert_eq!(
            error.message,
            "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE."
        );
        assert!(settings(&[("KmsMasterKeyId", ""), ("SqsManagedSseEnabled", "true")]).is_ok());
        assert!(settings(&[("Policy", "{")]).is_err());
        assert_eq!(settings(&[("Policy", "")]).unwrap().policy, Some(None));
    }

    #[test]
    fn readable_names() {
        assert!(check_readable(&["All".into(), "QueueArn".into()]).is_ok());
        // Readable by name on any queue; only FIFO queues return them.
        assert!(check_readable(&["FifoQueue".into(), "DeduplicationScope".into()]).is_ok());
        let error = check_readable(&["Nope".into()]).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAttributeName);
    }
}
