//! The evaluator against policies as AddPermission writes them and as users write them. The
//! grammar and the evaluation order are IAM's (IAM User Guide, "IAM JSON policy elements
//! reference" and "Policy evaluation logic": an explicit deny overrides any allow, and a request
//! no statement allows is implicitly denied); the examples are those of the SQS Developer
//! Guide's "Custom Amazon SQS Access Policy Language examples".

use super::*;
use crate::policy::add_permission;
use serde_json::json;

const QUEUE: &str = "arn:aws:sqs:us-east-1:111111111111:jobs";
const GRANTED: &str = "222222222222";
const OTHER: &str = "333333333333";

fn decide(policy: &Value, account_id: &str, action: &str) -> Decision {
    evaluate(
        &policy.to_string(),
        &Request {
            account_id,
            action,
            resource: QUEUE,
        },
    )
}

fn allow(statement: Value) -> Value {
    let mut statement = statement;
    statement["Effect"] = json!("Allow");
    json!({"Version": "2012-10-17", "Statement": [statement]})
}

#[test]
fn add_permission_grants_what_it_names_to_whom_it_names() {
    let policy = add_permission(
        None,
        QUEUE,
        "send",
        &[GRANTED.to_string()],
        &["SendMessage".to_string(), "GetQueueUrl".to_string()],
    )
    .unwrap();
    let request = |account_id, action| {
        evaluate(
            &policy,
            &Request {
                account_id,
                action,
                resource: QUEUE,
            },
        )
    };
    assert_eq!(request(GRANTED, "SendMessage"), Decision::Allow);
    assert_eq!(request(GRANTED, "GetQueueUrl"), Decision::Allow);
    assert_eq!(request(GRANTED, "ReceiveMessage"), Decision::ImplicitDeny);
    assert_eq!(request(OTHER, "SendMessage"), Decision::ImplicitDeny);
    // The same statement on another queue grants nothing there.
    let elsewhere = evaluate(
        &policy,
        &Request {
            account_id: GRANTED,
            action: "SendMessage",
            resource: "arn:aws:sqs:us-east-1:111111111111:other",
        },
    );
    assert_eq!(elsewhere, Decision::ImplicitDeny);
}

#[test]
fn principals_by_id_by_root_arn_by_list_and_by_star() {
    for principal in [
        json!({"AWS": GRANTED}),
        json!({"AWS": format!("arn:aws:iam::{GRANTED}:root")}),
        json!({"AWS": [OTHER, format!("arn:aws:iam::{GRANTED}:root")]}),
        json!({"AWS": "*"}),
        json!("*"),
    ] {
        let policy =
            allow(json!({"Principal": principal, "Action": "sqs:SendMessage", "Resource": QUEUE}));
        assert_eq!(
            decide(&policy, GRANTED, "SendMessage"),
            Decision::Allow,
            "{principal}"
        );
    }
    for principal in [
        json!({"AWS": OTHER}),
        json!({"AWS": [OTHER]}),
        json!({"AWS": format!("arn:aws:iam::{OTHER}:root")}),
        json!({"Service": "sns.amazonaws.com"}),
    ] {
        let policy =
            allow(json!({"Principal": principal, "Action": "sqs:SendMessage", "Resource": QUEUE}));
        assert_eq!(
            decide(&policy, GRANTED, "SendMessage"),
            Decision::ImplicitDeny,
            "{principal}"
        );
    }
}

#[test]
fn action_wildcards_and_case() {
    let cases = [
        ("*", "PurgeQueue", true),
        ("sqs:*", "ReceiveMessage", true),
        ("SQS:*", "ReceiveMessage", true),
        ("sqs:Send*", "SendMessage", true),
        ("sqs:send*", "SendMessage", true),
        ("sqs:sendmessage", "SendMessage", true),
        ("sqs:*Message", "DeleteMessage", true),
        ("sqs:?endMessage", "SendMessage", true),
        ("sqs:Send*", "ReceiveMessage", false),
        ("sqs:SendMessageBatch", "SendMessage", false),
        ("sns:*", "SendMessage", false),
        ("sqs:Get*", "GetQueueAttributes", true),
        ("sqs:Get*", "PurgeQueue", false),
    ];
    for (pattern, action, allowed) in cases {
        let policy =
            allow(json!({"Principal": {"AWS": GRANTED}, "Action": pattern, "Resource": QUEUE}));
        let expected = if allowed {
            Decision::Allow
        } else {
            Decision::ImplicitDeny
        };
        assert_eq!(
            decide(&policy, GRANTED, action),
            expected,
            "{pattern} {action}"
        );
    }
    let listed = allow(
        json!({"Principal": "*", "Action": ["sqs:ReceiveMessage", "sqs:Delete*"], "Resource": QUEUE}),
    );
    assert_eq!(decide(&listed, GRANTED, "DeleteMessage"), Decision::Allow);
    assert_eq!(
        decide(&listed, GRANTED, "SendMessage"),
        Decision::ImplicitDeny
    );
}

#[test]
fn resources_with_wildcards_are_case_sensitive() {
    let cases = [
        ("*", true),
        (QUEUE, true),
        ("arn:aws:sqs:*:111111111111:*", true),
        ("arn:aws:sqs:us-east-1:111111111111:jo?s", true),
        ("arn:aws:sqs:us-east-1:111111111111:job", false),
        ("arn:aws:sqs:us-east-1:111111111111:JOBS", false),
        ("arn:aws:sqs:us-east-1:999999999999:*", false),
    ];
    for (resource, allowed) in cases {
        let policy = allow(json!({"Principal": "*", "Action": "sqs:*", "Resource": resource}));
        let expected = if allowed {
            Decision::Allow
        } else {
            Decision::ImplicitDeny
        };
        assert_eq!(
            decide(&policy, GRANTED, "SendMessage"),
            expected,
            "{resource}"
        );
    }
}

#[test]
fn explicit_deny_wins_over_allow() {
    let policy = json!({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE},
        {"Effect": "Deny", "Principal": {"AWS": OTHER}, "Action": "sqs:*", "Resource": QUEUE},
        {"Effect": "Deny", "Principal": "*", "Action": "sqs:PurgeQueue", "Resource": "*"},
    ]});
    assert_eq!(decide(&policy, GRANTED, "SendMessage"), Decision::Allow);
    assert_eq!(
        decide(&policy, OTHER, "SendMessage"),
        Decision::ExplicitDeny
    );
    assert_eq!(
        decide(&policy, GRANTED, "PurgeQueue"),
        Decision::ExplicitDeny
    );
    // A Deny alone denies explicitly; no statement at all denies by default.
    let deny_only =
        json!({"Statement": {"Effect": "Deny", "Principal": "*", "Action": "*", "Resource": "*"}});
    assert_eq!(
        decide(&deny_only, GRANTED, "SendMessage"),
        Decision::ExplicitDeny
    );
    assert_eq!(
        decide(&json!({"Statement": []}), GRANTED, "SendMessage"),
        Decision::ImplicitDeny
    );
}

#[test]
fn negated_elements() {
    let policy = json!({"Statement": [
        {"Effect": "Allow", "Principal": "*", "NotAction": "sqs:PurgeQueue", "Resource": QUEUE},
        {"Effect": "Deny", "NotPrincipal": {"AWS": GRANTED}, "Action": "sqs:*", "Resource": QUEUE},
    ]});
    assert_eq!(decide(&policy, GRANTED, "SendMessage"), Decision::Allow);
    assert_eq!(
        decide(&policy, GRANTED, "PurgeQueue"),
        Decision::ImplicitDeny
    );
    assert_eq!(
        decide(&policy, OTHER, "SendMessage"),
        Decision::ExplicitDeny
    );
    let not_here = allow(json!({"Principal": "*", "Action": "sqs:*", "NotResource": QUEUE}));
    assert_eq!(
        decide(&not_here, GRANTED, "SendMessage"),
        Decision::ImplicitDeny
    );
}

#[test]
fn what_cannot_be_evaluated_never_grants_and_always_denies() {
    // The Developer Guide's condition examples (aws:SourceArn, aws:SecureTransport, a time
    // window): not evaluated here.
    let condition = json!({"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:111111111111:t"}});
    let allow_with_condition = allow(json!({
        "Principal": "*", "Action": "sqs:SendMessage", "Resource": QUEUE, "Condition": condition,
    }));
    assert_eq!(
        decide(&allow_with_condition, GRANTED, "SendMessage"),
        Decision::ImplicitDeny
    );
    let deny_with_condition = json!({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE},
        {"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE,
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
    ]});
    assert_eq!(
        decide(&deny_with_condition, GRANTED, "SendMessage"),
        Decision::ExplicitDeny
    );
    // A conditional Deny that cannot apply (another principal) denies nothing.
    let deny_someone_else = json!({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE},
        {"Effect": "Deny", "Principal": {"AWS": OTHER}, "Action": "sqs:*", "Resource": QUEUE,
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
    ]});
    assert_eq!(
        decide(&deny_someone_else, GRANTED, "SendMessage"),
        Decision::Allow
    );
    // An IAM user of the caller's account: the caller may or may not be that user.
    let user = format!("arn:aws:iam::{GRANTED}:user/alice");
    let allow_user =
        allow(json!({"Principal": {"AWS": user}, "Action": "sqs:*", "Resource": QUEUE}));
    assert_eq!(
        decide(&allow_user, GRANTED, "SendMessage"),
        Decision::ImplicitDeny
    );
    let deny_user = json!({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE},
        {"Effect": "Deny", "Principal": {"AWS": user}, "Action": "sqs:*", "Resource": QUEUE},
    ]});
    assert_eq!(
        decide(&deny_user, GRANTED, "SendMessage"),
        Decision::ExplicitDeny
    );
    // Unknown elements, missing elements, both forms of one element, a bad Effect.
    for statement in [
        json!({"Principal": "*", "Action": "sqs:*", "Resource": QUEUE, "Future": 1}),
        json!({"Principal": "*", "Action": "sqs:*"}),
        json!({"Action": "sqs:*", "Resource": QUEUE}),
        json!({"Principal": "*", "Action": "sqs:*", "NotAction": "sqs:PurgeQueue", "Resource": QUEUE}),
        json!({"Principal": "*", "Action": 7, "Resource": QUEUE}),
        json!({"Principal": "*", "Action": "SendMessage", "Resource": QUEUE}),
    ] {
        assert_eq!(
            decide(&allow(statement.clone()), GRANTED, "SendMessage"),
            Decision::ImplicitDeny,
            "{statement}"
        );
        let mut deny = statement.clone();
        deny["Effect"] = json!("Deny");
        let both = json!({"Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE}, deny,
        ]});
        assert_eq!(
            decide(&both, GRANTED, "SendMessage"),
            Decision::ExplicitDeny,
            "{statement}"
        );
    }
    let bad_effect = json!({"Statement": [{"Effect": "allow", "Principal": "*", "Action": "*", "Resource": "*"}]});
    assert_eq!(
        decide(&bad_effect, GRANTED, "SendMessage"),
        Decision::ImplicitDeny
    );
    for document in ["", "not json", "[]", "{\"Statement\": 3}"] {
        let request = Request {
            account_id: GRANTED,
            action: "SendMessage",
            resource: QUEUE,
        };
        assert_eq!(
            evaluate(document, &request),
            Decision::ImplicitDeny,
            "{document}"
        );
    }
}

#[test]
fn wildcards() {
    let cases: [(&str, &str, bool); 11] = [
        ("", "", true),
        ("*", "", true),
        ("*", "anything", true),
        ("a*c", "abbbc", true),
        ("a*c", "ab", false),
        ("a?c", "abc", true),
        ("a?c", "ac", false),
        ("*a*a*", "banana", true),
        ("*x*", "banana", false),
        ("ab", "abc", false),
        ("abc", "ab", false),
    ];
    for (pattern, text, expected) in cases {
        assert_eq!(
            wildcard_match(pattern.as_bytes(), text.as_bytes(), false),
            expected,
            "{pattern} {text}"
        );
    }
}

#[test]
fn owner_only_actions_have_no_iam_action() {
    use crate::action::QueueRef;
    let queue = QueueRef::new("jobs");
    assert_eq!(
        iam_action(&Action::PurgeQueue {
            queue: queue.clone()
        }),
        Some("PurgeQueue")
    );
    for owner_only in [
        Action::DeleteQueue {
            queue: queue.clone(),
        },
        Action::ListQueueTags {
            queue: queue.clone(),
        },
        Action::RemovePermission {
            queue: queue.clone(),
            label: "x".into(),
        },
        Action::ListQueues {
            prefix: String::new(),
            max_results: None,
            next_token: None,
        },
    ] {
        assert_eq!(iam_action(&owner_only), None, "{owner_only:?}");
    }
}
