//! `AddPermission` and `RemovePermission` as edits of the queue's `Policy` document.
//!
//! SQS implements both actions by writing statements into the queue's access policy, one
//! statement per label, and returns the result as the `Policy` attribute. leaseq stores the
//! policy and returns it; with `auth = "sigv4"` the service enforces it for requests of other
//! accounts ([`evaluate`]).

pub mod evaluate;

use serde_json::{json, Map, Value};

use crate::error::SqsError;

/// The actions a permission may grant (SQS refuses the owner-only ones such as `CreateQueue`).
const SHAREABLE_ACTIONS: [&str; 9] = [
    "*",
    "ChangeMessageVisibility",
    "DeleteMessage",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "PurgeQueue",
    "ReceiveMessage",
    "SendMessage",
];

/// The most actions one `AddPermission` may name.
const ACTIONS_MAX: usize = 7;

fn one_or_many(values: Vec<String>) -> Value {
    // SQS writes a single principal or action as a string and several as an array.
    if values.len() == 1 {
        Value::String(values.into_iter().next().expect("one value"))
    } else {
        Value::Array(values.into_iter().map(Value::String).collect())
    }
}

fn parse(existing: Option<&str>) -> Result<Option<Map<String, Value>>, SqsError> {
    let Some(text) = existing.filter(|text| !text.trim().is_empty()) else {
        return Ok(None);
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(document)) => Ok(Some(document)),
        _ => Err(SqsError::invalid_parameter_value(
            "The queue's existing Policy is not a JSON object; replace it with SetQueueAttributes.",
        )),
    }
}

fn statements(document: &mut Map<String, Value>) -> &mut Vec<Value> {
    let entry = document
        .entry("Statement")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !entry.is_array() {
        // A single statement object is valid IAM policy grammar; normalise it to a list.
        let single = entry.take();
        *entry = Value::Array(vec![single]);
    }
    entry.as_array_mut().expect("made an array above")
}

fn has_label(statement: &Value, label: &str) -> bool {
    statement.get("Sid").and_then(Value::as_str) == Some(label)
}

fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 80
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The policy after adding a statement labelled `label` that lets `account_ids` call `actions`
/// on the queue `queue_arn`.
pub fn add_permission(
    existing: Option<&str>,
    queue_arn: &str,
    label: &str,
    account_ids: &[String],
    actions: &[String],
) -> Result<String, SqsError> {
    if !valid_label(label) {
        return Err(SqsError::invalid_parameter(
            "Label",
            label,
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length.",
        ));
    }
    if account_ids.is_empty() {
        return Err(SqsError::missing_parameter("AWSAccountId.1"));
    }
    if actions.is_empty() {
        return Err(SqsError::missing_parameter("ActionName.1"));
    }
    if actions.len() > ACTIONS_MAX {
        return Err(SqsError::new(
            crate::error::ErrorCode::OverLimit,
            format!(
                "{} Actions were found, maximum allowed is {ACTIONS_MAX}.",
                actions.len()
            ),
        ));
    }
    if let Some(action) = actions
        .iter()
        .find(|action| !SHAREABLE_ACTIONS.contains(&action.as_str()))
    {
        return Err(SqsError::invalid_parameter(
            "ActionName",
            format!("SQS:{action}"),
            "Please refer to the appropriate WSDL for a list of valid actions.",
        ));
    }
    let mut document = parse(existing)?.unwrap_or_else(|| {
        let mut document = Map::new();
        // The document SQS writes (recorded from AWS: LocalStack's
        // test_sqs_permission_lifecycle): version 2008-10-17, id `<queue ARN>/SQSDefaultPolicy`.
        document.insert("Version".into(), json!("2008-10-17"));
        document.insert("Id".into(), json!(format!("{queue_arn}/SQSDefaultPolicy")));
        document
    });
    let statements = statements(&mut document);
    if statements
        .iter()
        .any(|statement| has_label(statement, label))
    {
        return Err(SqsError::invalid_parameter(
            "Label",
            label,
            "Already exists.",
        ));
    }
    let principals = account_ids
        .iter()
        .map(|account| format!("arn:aws:iam::{account}:root"))
        .collect();
    let actions = actions
        .iter()
        .map(|action| format!("SQS:{action}"))
        .collect();
    statements.push(json!({
        "Sid": label,
        "Effect": "Allow",
        "Principal": { "AWS": one_or_many(principals) },
        "Action": one_or_many(actions),
        "Resource": queue_arn,
    }));
    Ok(Value::Object(document).to_string())
}

/// The policy after removing the statement labelled `label`; `None` when no statement is left.
pub fn remove_permission(existing: Option<&str>, label: &str) -> Result<Option<String>, SqsError> {
    let not_found = || SqsError::invalid_parameter("Label", label, "can't find label.");
    let mut document = parse(existing)?.ok_or_else(not_found)?;
    let statements = statements(&mut document);
    let before = statements.len();
    statements.retain(|statement| !has_label(statement, label));
    if statements.len() == before {
        return Err(not_found());
    }
    if statements.is_empty() {
        return Ok(None);
    }
    Ok(Some(Value::Object(document).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:jobs";

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn add_then_remove() {
        let one = add_permission(
            None,
            ARN,
            "send",
            &strings(&["111122223333"]),
            &strings(&["SendMessage"]),
        )
        .unwrap();
        let document: Value = serde_json::from_str(&one).unwrap();
        assert_eq!(document["Version"], "2008-10-17");
        assert_eq!(document["Id"], format!("{ARN}/SQSDefaultPolicy"));
        assert_eq!(document["Statement"][0]["Sid"], "send");
        assert_eq!(
            document["Statement"][0]["Principal"]["AWS"],
            "arn:aws:iam::111122223333:root"
        );
        assert_eq!(document["Statement"][0]["Action"], "SQS:SendMessage");
        assert_eq!(document["Statement"][0]["Resource"], ARN);

        let two = add_permission(
            Some(&one),
            ARN,
            "both",
            &strings(&["1", "2"]),
            &strings(&["ReceiveMessage", "DeleteMessage"]),
        )
        .unwrap();
        let document: Value = serde_json::from_str(&two).unwrap();
        assert_eq!(document["Statement"].as_array().unwrap().len(), 2);
        assert_eq!(
            document["Statement"][1]["Principal"]["AWS"],
            json!(["arn:aws:iam::1:root", "arn:aws:iam::2:root"])
        );
        assert_eq!(
            document["Statement"][1]["Action"],
            json!(["SQS:ReceiveMessage", "SQS:DeleteMessage"])
        );

        let after = remove_permission(Some(&two), "send").unwrap().unwrap();
        let document: Value = serde_json::from_str(&after).unwrap();
        assert_eq!(document["Statement"].as_array().unwrap().len(), 1);
        assert_eq!(remove_permission(Some(&after), "both").unwrap(), None);
    }

    #[test]
    fn refusals() {
        let one = add_permission(None, ARN, "x", &strings(&["1"]), &strings(&["*"])).unwrap();
        let duplicate =
            add_permission(Some(&one), ARN, "x", &strings(&["1"]), &strings(&["*"])).unwrap_err();
        assert_eq!(duplicate.code, ErrorCode::InvalidParameterValue);
        let unknown = add_permission(None, ARN, "y", &strings(&["1"]), &strings(&["CreateQueue"]))
            .unwrap_err();
        assert_eq!(unknown.code, ErrorCode::InvalidParameterValue);
        let bad_label =
            add_permission(None, ARN, "a b", &strings(&["1"]), &strings(&["*"])).unwrap_err();
        assert_eq!(bad_label.code, ErrorCode::InvalidParameterValue);
        let too_many =
            add_permission(None, ARN, "z", &strings(&["1"]), &strings(&["*"; 8])).unwrap_err();
        assert_eq!(too_many.code, ErrorCode::OverLimit);
        let missing = remove_permission(Some(&one), "nope").unwrap_err();
        assert_eq!(
            (missing.code, missing.message.as_str()),
            (
                ErrorCode::InvalidParameterValue,
                "Value nope for parameter Label is invalid. Reason: can't find label."
            )
        );
        assert_eq!(
            duplicate.message,
            "Value x for parameter Label is invalid. Reason: Already exists."
        );
        assert_eq!(
            remove_permission(None, "x").unwrap_err().code,
            ErrorCode::InvalidParameterValue
        );
    }

    #[test]
    fn keeps_statements_of_a_user_policy() {
        let user = r#"{"Version":"2012-10-17","Statement":{"Sid":"mine","Effect":"Deny"}}"#;
        let edited =
            add_permission(Some(user), ARN, "x", &strings(&["1"]), &strings(&["*"])).unwrap();
        let document: Value = serde_json::from_str(&edited).unwrap();
        assert_eq!(document["Statement"][0]["Sid"], "mine");
        assert_eq!(document["Statement"][1]["Sid"], "x");
    }
}
