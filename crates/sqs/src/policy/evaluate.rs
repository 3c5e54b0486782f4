//! Evaluating a queue's access policy for a request of another account (`auth = "sigv4"`).
//!
//! The queue owner's account may do everything; any other account may do what the queue's
//! `Policy` allows it and nothing else. [`evaluate`] follows IAM's evaluation logic for one
//! resource-based policy: an explicit `Deny` that applies wins, else an `Allow` that applies
//! grants, else the request is denied by default. A statement applies when its principal, its
//! action and its resource all match the request:
//! - **Principal**: `"*"`, `{"AWS": "*"}`, or `{"AWS": ...}` naming the caller's account as a
//!   12-digit id or as `arn:aws:iam::ACCOUNT:root` (a string or a list). leaseq's callers are
//!   accounts (a key belongs to an account, not to an IAM user or role), so other principal
//!   types (`Service`, `Federated`, `CanonicalUser`) never match.
//! - **Action**: `sqs:NAME` with IAM's wildcards (`*`, `?`; `sqs:*`, `sqs:Send*`) or `"*"`,
//!   compared without regard to case, as IAM compares action names.
//! - **Resource**: the queue's ARN with IAM's wildcards (`*`, `?`), case-sensitive, or `"*"`.
//! - `NotPrincipal`, `NotAction` and `NotResource` match what their lists do not.
//!
//! What the evaluator cannot decide it never grants: a statement with a `Condition`, an IAM
//! user or role of the caller's account as principal (the caller may or may not be that
//! identity), an unknown element or a malformed one makes the statement's match *unknown*. An
//! `Allow` that is unknown grants nothing; a `Deny` that is unknown denies (as if its condition
//! held), so a policy never lets through a request that AWS might refuse. A document that is not
//! a JSON object of statements allows nothing.
//!
//! Pure functions: the service hands in the document, the caller's account, the action's IAM
//! name ([`iam_action`]) and the queue's ARN.

use serde_json::Value;

use crate::action::Action;

/// What a policy says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// An `Allow` statement applies and no `Deny` does.
    Allow,
    /// A `Deny` statement applies (or may apply: see the module's notes).
    ExplicitDeny,
    /// No statement applies: denied by default.
    ImplicitDeny,
}

/// A request as the evaluator sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The caller's 12-digit account id.
    pub account_id: &'a str,
    /// The IAM action name without its service prefix (`SendMessage`), see [`iam_action`].
    pub action: &'a str,
    /// The queue's ARN.
    pub resource: &'a str,
}

/// The IAM action another account needs the policy to allow for `action`, or `None` for an
/// action only the queue's owner may call.
///
/// These are the actions `AddPermission` can grant (its `ActionName` values in the SQS API
/// reference); a batch needs the permission of its single action ("Specifying SendMessage,
/// DeleteMessage, or ChangeMessageVisibility for ActionName.n also grants permissions for the
/// corresponding batch versions of those actions", AddPermission, SQS API reference). The queue
/// management actions are the owner's ("Cross-account permissions don't apply to this action":
/// AddPermission, RemovePermission, CreateQueue, DeleteQueue, ListQueues, ListQueueTags,
/// SetQueueAttributes, TagQueue, UntagQueue in the SQS API reference), move tasks take queues of
/// one account, and leaseq's own actions are the owner's too.
pub fn iam_action(action: &Action) -> Option<&'static str> {
    Some(match action {
        Action::SendMessage { .. } | Action::SendMessageBatch { .. } => "SendMessage",
        Action::ReceiveMessage { .. } => "ReceiveMessage",
        Action::DeleteMessage { .. } | Action::DeleteMessageBatch { .. } => "DeleteMessage",
        Action::ChangeMessageVisibility { .. } | Action::ChangeMessageVisibilityBatch { .. } => {
            "ChangeMessageVisibility"
        }
        Action::GetQueueAttributes { .. } => "GetQueueAttributes",
        Action::GetQueueUrl { .. } => "GetQueueUrl",
        Action::ListDeadLetterSourceQueues { .. } => "ListDeadLetterSourceQueues",
        Action::PurgeQueue { .. } => "PurgeQueue",
        _ => return None,
    })
}

/// Whether a statement's element matches the request: three-valued, so that what cannot be
/// decided is never taken as a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Match {
    Yes,
    No,
    Unknown,
}

impl Match {
    fn not(self) -> Match {
        match self {
            Match::Yes => Match::No,
            Match::No => Match::Yes,
            Match::Unknown => Match::Unknown,
        }
    }

    /// Both hold: `No` if either is `No`, else `Unknown` if either is.
    fn and(self, other: Match) -> Match {
        match (self, other) {
            (Match::No, _) | (_, Match::No) => Match::No,
            (Match::Unknown, _) | (_, Match::Unknown) => Match::Unknown,
            _ => Match::Yes,
        }
    }

    /// Either holds: `Yes` if either is `Yes`, else `Unknown` if either is.
    fn or(self, other: Match) -> Match {
        match (self, other) {
            (Match::Yes, _) | (_, Match::Yes) => Match::Yes,
            (Match::Unknown, _) | (_, Match::Unknown) => Match::Unknown,
            _ => Match::No,
        }
    }
}

/// The decision of the policy document `policy` about `request` (parsed each time; see
/// [`Policy`] to parse once).
pub fn evaluate(policy: &str, request: &Request) -> Decision {
    Policy::parse(policy).evaluate(request)
}

/// A policy document parsed once, to decide many requests: parsing is most of the cost of a
/// decision (see `benches/policy.rs`).
#[derive(Clone, Debug)]
pub struct Policy {
    /// The document's statements; `None` when it is not a JSON object (it allows nothing).
    document: Option<serde_json::Map<String, Value>>,
}

impl Policy {
    /// The document `text`.
    pub fn parse(text: &str) -> Policy {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(document)) => Policy {
                document: Some(document),
            },
            _ => Policy { document: None },
        }
    }

    /// The decision about `request`.
    pub fn evaluate(&self, request: &Request) -> Decision {
        let statements: &[Value] = match self
            .document
            .as_ref()
            .and_then(|document| document.get("Statement"))
        {
            Some(Value::Array(statements)) => statements,
            Some(statement) => std::slice::from_ref(statement),
            None => &[],
        };
        let mut allowed = false;
        for statement in statements {
            let Value::Object(statement) = statement else {
                continue;
            };
            let applies = statement_applies(statement, request);
            match statement.get("Effect").and_then(Value::as_str) {
                // An unknown match of a Deny denies: never grant what AWS might refuse.
                Some("Deny") if applies != Match::No => return Decision::ExplicitDeny,
                Some("Allow") if applies == Match::Yes => allowed = true,
                // A statement without a valid Effect is not valid grammar: it grants nothing.
                _ => {}
            }
        }
        if allowed {
            Decision::Allow
        } else {
            Decision::ImplicitDeny
        }
    }
}

/// The elements a statement may have; any other makes its match unknown.
const STATEMENT_KEYS: [&str; 9] = [
    "Sid",
    "Effect",
    "Principal",
    "NotPrincipal",
    "Action",
    "NotAction",
    "Resource",
    "NotResource",
    "Condition",
];

fn statement_applies(statement: &serde_json::Map<String, Value>, request: &Request) -> Match {
    let principal = element(statement, "Principal", "NotPrincipal", |value| {
        principal_matches(value, request.account_id)
    });
    let action = element(statement, "Action", "NotAction", |value| {
        any_pattern(value, |pattern| action_matches(pattern, request.action))
    });
    let resource = element(statement, "Resource", "NotResource", |value| {
        any_pattern(value, |pattern| {
            if wildcard_match(pattern.as_bytes(), request.resource.as_bytes(), false) {
                Match::Yes
            } else {
                Match::No
            }
        })
    });
    let condition = match statement.get("Condition") {
        None => Match::Yes,
        Some(Value::Object(conditions)) if conditions.is_empty() => Match::Yes,
        // Condition operators and keys (aws:SourceArn, aws:SecureTransport, ...) are not
        // evaluated: whether they hold is unknown.
        Some(_) => Match::Unknown,
    };
    let grammar = if statement
        .keys()
        .all(|key| STATEMENT_KEYS.contains(&key.as_str()))
    {
        Match::Yes
    } else {
        Match::Unknown
    };
    principal
        .and(action)
        .and(resource)
        .and(condition)
        .and(grammar)
}

/// The match of an element that has a positive (`Action`) and a negated (`NotAction`) form:
/// exactly one of them must be present.
fn element(
    statement: &serde_json::Map<String, Value>,
    positive: &str,
    negated: &str,
    matches: impl Fn(&Value) -> Match,
) -> Match {
    match (statement.get(positive), statement.get(negated)) {
        (Some(value), None) => matches(value),
        (None, Some(value)) => matches(value).not(),
        _ => Match::Unknown,
    }
}

/// Whether any of the patterns of a string-or-list element matches.
fn any_pattern(value: &Value, matches: impl Fn(&str) -> Match) -> Match {
    match value {
        Value::String(pattern) => matches(pattern),
        Value::Array(patterns) if !patterns.is_empty() => {
            patterns.iter().fold(Match::No, |found, pattern| {
                found.or(pattern.as_str().map_or(Match::Unknown, &matches))
            })
        }
        _ => Match::Unknown,
    }
}

/// `*`, `sqs:*`, `sqs:Send*`, `SQS:SendMessage`: the service prefix and the name are compared
/// without regard to case.
fn action_matches(pattern: &str, action: &str) -> Match {
    if pattern == "*" {
        return Match::Yes;
    }
    let Some((service, name)) = pattern.split_once(':') else {
        return Match::Unknown;
    };
    if !wildcard_match(service.as_bytes(), b"sqs", true) {
        return Match::No;
    }
    if wildcard_match(name.as_bytes(), action.as_bytes(), true) {
        Match::Yes
    } else {
        Match::No
    }
}

/// Whether a principal element names the caller's account.
fn principal_matches(value: &Value, account_id: &str) -> Match {
    match value {
        Value::String(star) if star == "*" => Match::Yes,
        Value::Object(principals) if !principals.is_empty() => {
            principals.iter().fold(Match::No, |found, (kind, names)| {
                let this = if kind == "AWS" {
                    any_pattern(names, |name| aws_principal_matches(name, account_id))
                } else {
                    // `Service`, `Federated`, `CanonicalUser`: never one of leaseq's callers.
                    Match::No
                };
                found.or(this)
            })
        }
        _ => Match::Unknown,
    }
}

fn aws_principal_matches(name: &str, account_id: &str) -> Match {
    if name == "*" || name == account_id {
        return Match::Yes;
    }
    let Some(rest) = name.strip_prefix("arn:aws:iam::") else {
        return if name.bytes().all(|b| b.is_ascii_digit()) {
            Match::No
        } else {
            Match::Unknown
        };
    };
    match rest.split_once(':') {
        Some((account, "root")) if account == account_id => Match::Yes,
        // A user or role of the caller's account: the caller's key may or may not be it.
        Some((account, _)) if account == account_id => Match::Unknown,
        Some(_) => Match::No,
        None => Match::Unknown,
    }
}

/// IAM's wildcard match: `*` matches any run of characters (also none), `?` any one.
///
/// The classic linear backtracking over the last `*`: O(pattern × text) at worst, and both are
/// bounded (a policy is at most 20 KiB; a text is an action name or an ARN).
fn wildcard_match(pattern: &[u8], text: &[u8], ignore_case: bool) -> bool {
    let same = |a: u8, b: u8| {
        if ignore_case {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && (pattern[p] == b'?' || same(pattern[p], text[t])) {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            // Let the last `*` take one more character and retry after it.
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests;
