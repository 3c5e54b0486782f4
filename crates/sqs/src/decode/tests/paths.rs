//! Where a member is, as error messages name it: `Entries.2.MessageBody` in JSON,
//! `SendMessageBatchRequestEntry.2.MessageBody` in Query, through lists, structures and maps.

use serde_json::json;

use super::*;

fn json_message(action: &str, body: Value) -> String {
    json(action, body).unwrap_err().message
}

fn query_message(action: &str, pairs: &[(&str, &str)]) -> String {
    query(action, pairs).unwrap_err().message
}

#[test]
fn json_paths_name_list_items_structures_and_map_entries() {
    let cases = [
        (
            "SendMessageBatch",
            json!({"QueueUrl": "/1/q", "Entries": [
                {"Id": "a", "MessageBody": "x"},
                {"Id": "b"},
            ]}),
            "The request must contain the parameter Entries.2.MessageBody.",
        ),
        (
            "SendMessageBatch",
            json!({"QueueUrl": "/1/q", "Entries": [
                {"Id": "a", "MessageBody": "x", "MessageAttributes": {"n": 5}},
            ]}),
            "Unexpected value for member Entries.1.MessageAttributes.n: expected a structure.",
        ),
        (
            "SendMessageBatch",
            json!({"QueueUrl": "/1/q", "Entries": [
                {"Id": "a", "MessageBody": "x"},
                {"Id": "b", "MessageBody": "y", "MessageAttributes": {
                    "ok": {"DataType": "String", "StringValue": "v"},
                    "raw": {"DataType": "Binary", "BinaryValue": "!!"},
                }},
            ]}),
            "Member Entries.2.MessageAttributes.raw.BinaryValue is not valid base64.",
        ),
        (
            "SendMessage",
            json!({"QueueUrl": "/1/q", "MessageBody": "x",
                   "MessageAttributes": {"s": {"DataType": "String", "StringValue": 7}}}),
            "Unexpected value for member MessageAttributes.s.StringValue: expected a string.",
        ),
        (
            "ChangeMessageVisibilityBatch",
            json!({"QueueUrl": "/1/q", "Entries": [
                {"Id": "a", "ReceiptHandle": "r"},
            ]}),
            "The request must contain the parameter Entries.1.VisibilityTimeout.",
        ),
        (
            "ChangeMessageVisibilityBatch",
            json!({"QueueUrl": "/1/q", "Entries": [
                {"Id": "a", "ReceiptHandle": "r", "VisibilityTimeout": "x"},
            ]}),
            "Unexpected value for member Entries.1.VisibilityTimeout: expected an integer.",
        ),
    ];
    for (action, body, expected) in cases {
        assert_eq!(json_message(action, body), expected);
    }
}

#[test]
fn query_paths_name_list_items_structures_and_map_entries() {
    let entry = "SendMessageBatchRequestEntry";
    let attribute = "SendMessageBatchRequestEntry.1.MessageAttribute.1";
    let cases: [(Vec<(String, &str)>, String); 2] = [
        (
            vec![
                (format!("{entry}.1.Id"), "a"),
                (format!("{entry}.1.MessageBody"), "x"),
                (format!("{entry}.2.Id"), "b"),
            ],
            format!("The request must contain the parameter {entry}.2.MessageBody."),
        ),
        (
            vec![
                (format!("{entry}.1.Id"), "a"),
                (format!("{entry}.1.MessageBody"), "x"),
                (format!("{attribute}.Name"), "raw"),
                (format!("{attribute}.Value.DataType"), "Binary"),
                (format!("{attribute}.Value.BinaryValue"), "!!"),
            ],
            format!(
                "Value !! for parameter {attribute}.Value.BinaryValue is invalid. Reason: The \
                 binary value is not valid base64."
            ),
        ),
    ];
    for (pairs, expected) in cases {
        let mut request = vec![("QueueUrl", "/1/q")];
        request.extend(pairs.iter().map(|(name, value)| (name.as_str(), *value)));
        assert_eq!(query_message("SendMessageBatch", &request), expected);
    }
}
