//! Reading a request's SigV4 parameters: the `Authorization` header
//! (`AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…`) or a presigned URL's
//! `X-Amz-*` query parameters, and the credential scope (`AKID/20150830/us-east-1/sqs/aws4_request`).
//!
//! Everything here borrows from the request and allocates nothing; a malformed value is an
//! [`AuthError::Incomplete`] that names what is missing, in AWS's words. This is the part of
//! the verifier that reads untrusted text first, so it has its own fuzz target
//! (`crates/sqs/fuzz/fuzz_targets/sigv4_parse.rs`).

use super::AuthError;

/// The only algorithm SigV4 requests name (SigV4A's `AWS4-ECDSA-P256-SHA256` is not served).
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The longest access key id accepted (AWS's are 16–128 characters).
pub const ACCESS_KEY_ID_LENGTH_MAX: usize = 128;

/// The signed headers of one request at most; more is not a SigV4 request but an attack on our
/// time.
pub const SIGNED_HEADERS_MAX: usize = 64;

/// The longest presigned lifetime, `X-Amz-Expires` (AWS's seven days).
pub const PRESIGNED_EXPIRES_MAX_SECONDS: u64 = 7 * 24 * 3600;

/// The credential scope: who signed, for which day, region and service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope<'a> {
    /// The access key id.
    pub access_key_id: &'a str,
    /// `YYYYMMDD`.
    pub date: &'a str,
    /// The region the request was signed for.
    pub region: &'a str,
    /// The service (`sqs`).
    pub service: &'a str,
}

impl Scope<'_> {
    /// Everything after the access key id: `20150830/us-east-1/sqs/aws4_request`.
    pub fn write_tail(&self, out: &mut String) {
        out.push_str(self.date);
        out.push('/');
        out.push_str(self.region);
        out.push('/');
        out.push_str(self.service);
        out.push_str("/aws4_request");
    }
}

/// Where the signature came from, and what it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signed<'a> {
    /// The credential as sent (`AKID/20150830/us-east-1/sqs/aws4_request`, decoded).
    pub credential: &'a str,
    /// The credential scope.
    pub scope: Scope<'a>,
    /// The signed header names, `;`-separated, lowercase, as the client listed them.
    pub signed_headers: &'a str,
    /// The signature, 64 lowercase hex digits (checked by the verifier).
    pub signature: &'a str,
    /// `X-Amz-Date` of a presigned URL (a header's comes from the header), `YYYYMMDDTHHMMSSZ`.
    pub presigned_date: Option<&'a str>,
    /// `X-Amz-Expires` of a presigned URL, in seconds.
    pub presigned_expires_seconds: Option<u64>,
}

/// Parses a credential scope, `AKID/YYYYMMDD/region/service/aws4_request`.
pub fn scope(credential: &str) -> Result<Scope<'_>, AuthError> {
    let mut parts = credential.split('/');
    let (Some(access_key_id), Some(date), Some(region), Some(service), Some(terminator), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(AuthError::Incomplete(
            "Credential should have exactly 5 slash-separated components.",
        ));
    };
    if access_key_id.is_empty() || access_key_id.len() > ACCESS_KEY_ID_LENGTH_MAX {
        return Err(AuthError::Incomplete(
            "Credential should have a valid access key id.",
        ));
    }
    if terminator != "aws4_request" {
        return Err(AuthError::Incomplete(
            "Credential should be scoped with a valid terminator: 'aws4_request'.",
        ));
    }
    if date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AuthError::Incomplete(
            "Credential should have a date of the form YYYYMMDD.",
        ));
    }
    Ok(Scope {
        access_key_id,
        date,
        region,
        service,
    })
}

/// Parses an `Authorization` header value. `None` if it is not SigV4 at all (then the request
/// is treated as unsigned).
pub fn authorization(header: &str) -> Result<Signed<'_>, AuthError> {
    let Some(rest) = header.strip_prefix(ALGORITHM) else {
        return Err(AuthError::Incomplete(
            "Unsupported authorization type: only AWS4-HMAC-SHA256 is accepted.",
        ));
    };
    if !rest.starts_with(' ') {
        return Err(AuthError::Incomplete(
            "Unsupported authorization type: only AWS4-HMAC-SHA256 is accepted.",
        ));
    }
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim_matches(' ');
        if part.is_empty() {
            continue;
        }
        let Some((name, value)) = part.split_once('=') else {
            return Err(AuthError::Incomplete(
                "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters.",
            ));
        };
        match name {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed_headers = Some(value),
            "Signature" => signature = Some(value),
            // AWS ignores parameters it does not know.
            _ => {}
        }
    }
    let credential = credential.ok_or(AuthError::Incomplete(
        "Authorization header requires 'Credential' parameter.",
    ))?;
    let signed_headers = signed_headers.ok_or(AuthError::Incomplete(
        "Authorization header requires 'SignedHeaders' parameter.",
    ))?;
    let signature = signature.ok_or(AuthError::Incomplete(
        "Authorization header requires 'Signature' parameter.",
    ))?;
    Ok(Signed {
        credential,
        scope: scope(credential)?,
        signed_headers: check_signed_headers(signed_headers)?,
        signature,
        presigned_date: None,
        presigned_expires_seconds: None,
    })
}

/// The presigned parameters, still percent-encoded, as the query string carries them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PresignedParams<'a> {
    /// `X-Amz-Algorithm`.
    pub algorithm: Option<&'a str>,
    /// `X-Amz-Credential`.
    pub credential: Option<&'a str>,
    /// `X-Amz-Date`.
    pub date: Option<&'a str>,
    /// `X-Amz-Expires`.
    pub expires: Option<&'a str>,
    /// `X-Amz-SignedHeaders`.
    pub signed_headers: Option<&'a str>,
    /// `X-Amz-Signature`.
    pub signature: Option<&'a str>,
}

impl PresignedParams<'_> {
    /// Whether the query string carries any SigV4 parameter (a presigned URL, complete or not).
    pub fn any(&self) -> bool {
        self.algorithm.is_some()
            || self.credential.is_some()
            || self.signature.is_some()
            || self.signed_headers.is_some()
    }
}

/// The `X-Amz-*` parameters of a query string (raw, still encoded).
pub fn presigned_params(query: &str) -> PresignedParams<'_> {
    let mut params = PresignedParams::default();
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        // Parameter names are compared as sent: every SDK sends these exact spellings.
        match name {
            "X-Amz-Algorithm" => params.algorithm = Some(value),
            "X-Amz-Credential" => params.credential = Some(value),
            "X-Amz-Date" => params.date = Some(value),
            "X-Amz-Expires" => params.expires = Some(value),
            "X-Amz-SignedHeaders" => params.signed_headers = Some(value),
            "X-Amz-Signature" => params.signature = Some(value),
            _ => {}
        }
    }
    params
}

/// Reads a presigned URL's parameters; `decoded` holds the percent-decoded credential and
/// signed headers (they usually carry `%2F` and `%3B`).
pub fn presigned<'a>(
    params: &PresignedParams<'a>,
    decoded: &'a mut (String, String),
) -> Result<Signed<'a>, AuthError> {
    const MISSING: &str = "AWS query-string parameters must include 'X-Amz-Algorithm', \
        'X-Amz-Credential', 'X-Amz-Signature', 'X-Amz-Date', 'X-Amz-SignedHeaders' and \
        'X-Amz-Expires'.";
    let (
        Some(algorithm),
        Some(credential),
        Some(date),
        Some(expires),
        Some(signed_headers),
        Some(signature),
    ) = (
        params.algorithm,
        params.credential,
        params.date,
        params.expires,
        params.signed_headers,
        params.signature,
    )
    else {
        return Err(AuthError::Incomplete(MISSING));
    };
    if algorithm != ALGORITHM {
        return Err(AuthError::Incomplete(
            "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\".",
        ));
    }
    let expires_seconds = expires
        .parse::<u64>()
        .ok()
        .filter(|seconds| (1..=PRESIGNED_EXPIRES_MAX_SECONDS).contains(seconds))
        .ok_or(AuthError::Incomplete(
            "X-Amz-Expires must be a number of seconds from 1 to 604800.",
        ))?;
    decoded.0 = super::canonical::percent_decode(credential);
    decoded.1 = super::canonical::percent_decode(signed_headers);
    let (credential, signed_headers) = (&decoded.0, &decoded.1);
    Ok(Signed {
        credential,
        scope: scope(credential)?,
        signed_headers: check_signed_headers(signed_headers)?,
        signature,
        presigned_date: Some(date),
        presigned_expires_seconds: Some(expires_seconds),
    })
}

/// Checks a `SignedHeaders` list: lowercase names separated by `;`, `host` among them, at most
/// [`SIGNED_HEADERS_MAX`].
fn check_signed_headers(list: &str) -> Result<&str, AuthError> {
    let mut count = 0;
    let mut host = false;
    for name in list.split(';') {
        count += 1;
        let valid = !name.is_empty()
            && name.bytes().all(|b| {
                matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'!' | b'#' | b'$'
                    | b'%' | b'&' | b'\'' | b'*' | b'+' | b'^' | b'`' | b'|' | b'~')
            });
        if !valid || count > SIGNED_HEADERS_MAX {
            return Err(AuthError::Incomplete(
                "SignedHeaders must be lowercase header names separated by ';'.",
            ));
        }
        host |= name == "host";
    }
    if !host {
        return Err(AuthError::Incomplete(
            "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
        ));
    }
    Ok(list)
}

/// Reads `YYYYMMDDTHHMMSSZ` as milliseconds since the Unix epoch.
pub fn amz_date_ms(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u64> {
        let slice = &bytes[range];
        slice.iter().all(u8::is_ascii_digit).then(|| {
            slice
                .iter()
                .fold(0u64, |value, digit| value * 10 + u64::from(digit - b'0'))
        })
    };
    let (year, month, day) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (hour, minute, second) = (digits(9..11)?, digits(11..13)?, digits(13..15)?);
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000)
}

/// Writes `ms` since the epoch as `YYYYMMDDTHHMMSSZ` (for error messages).
pub fn format_amz_date(ms: u64) -> String {
    let seconds = ms / 1000;
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

fn is_leap(year: u64) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date (Howard Hinnant's `days_from_civil`, for years ≥ 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_authorization_header() {
        let header = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b";
        let signed = authorization(header).unwrap();
        assert_eq!(
            signed.scope,
            Scope {
                access_key_id: "AKIDEXAMPLE",
                date: "20150830",
                region: "us-east-1",
                service: "sqs",
            }
        );
        assert_eq!(signed.signed_headers, "host;x-amz-date");
        assert!(signed.signature.starts_with("5da7"));
        // boto3 writes no spaces after the commas.
        let compact = "AWS4-HMAC-SHA256 Credential=A/20150830/r/sqs/aws4_request,SignedHeaders=host,Signature=00";
        assert_eq!(authorization(compact).unwrap().signed_headers, "host");
    }

    #[test]
    fn names_what_is_missing() {
        let cases = [
            ("Basic dXNlcjpwYXNz", "Unsupported authorization type"),
            ("AWS4-HMAC-SHA256", "Unsupported authorization type"),
            ("AWS4-HMAC-SHA256 SignedHeaders=host, Signature=00", "'Credential'"),
            (
                "AWS4-HMAC-SHA256 Credential=A/20150830/r/sqs/aws4_request, Signature=00",
                "'SignedHeaders'",
            ),
            (
                "AWS4-HMAC-SHA256 Credential=A/20150830/r/sqs/aws4_request, SignedHeaders=host",
                "'Signature'",
            ),
            (
                "AWS4-HMAC-SHA256 Credential=A/20150830/r/sqs, SignedHeaders=host, Signature=00",
                "5 slash-separated",
            ),
            (
                "AWS4-HMAC-SHA256 Credential=A/2015-08-30/r/sqs/aws4_request, SignedHeaders=host, Signature=00",
                "YYYYMMDD",
            ),
            (
                "AWS4-HMAC-SHA256 Credential=A/20150830/r/sqs/aws4_request, SignedHeaders=x-amz-date, Signature=00",
                "'Host'",
            ),
            (
                "AWS4-HMAC-SHA256 Credential=A/20150830/r/sqs/aws4_request, SignedHeaders=Host, Signature=00",
                "lowercase",
            ),
        ];
        for (header, expected) in cases {
            let AuthError::Incomplete(message) = authorization(header).unwrap_err() else {
                panic!("{header}: not IncompleteSignature");
            };
            assert!(message.contains(expected), "{header}: {message}");
        }
    }

    #[test]
    fn reads_presigned_parameters() {
        let query = "Action=ListQueues&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20150830%2Fus-east-1%2Fsqs%2Faws4_request&X-Amz-Date=20150830T123600Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=ab";
        let params = presigned_params(query);
        assert!(params.any());
        let mut decoded = Default::default();
        let signed = presigned(&params, &mut decoded).unwrap();
        assert_eq!(signed.scope.access_key_id, "AKID");
        assert_eq!(signed.presigned_expires_seconds, Some(60));
        assert!(!presigned_params("Action=ListQueues").any());
        let partial = presigned_params("X-Amz-Signature=ab");
        assert!(matches!(
            presigned(&partial, &mut Default::default()),
            Err(AuthError::Incomplete(_))
        ));
        let too_long = query.replace("Expires=60", "Expires=604801");
        assert!(matches!(
            presigned(&presigned_params(&too_long), &mut Default::default()),
            Err(AuthError::Incomplete(_))
        ));
    }

    #[test]
    fn dates_round_trip() {
        // 2015-08-30T12:36:00Z is 1440938160 s after the epoch (`date -u -d @1440938160`).
        assert_eq!(amz_date_ms("20150830T123600Z"), Some(1_440_938_160_000));
        assert_eq!(format_amz_date(1_440_938_160_000), "20150830T123600Z");
        assert_eq!(
            amz_date_ms("20240229T000000Z")
                .map(format_amz_date)
                .as_deref(),
            Some("20240229T000000Z")
        );
        for bad in [
            "20150830T123600",
            "20150230T000000Z",
            "2015083OT123600Z",
            "20151301T000000Z",
            "",
        ] {
            assert_eq!(amz_date_ms(bad), None, "{bad}");
        }
        for ms in [0, 951_782_400_000, 4_102_444_799_000] {
            assert_eq!(amz_date_ms(&format_amz_date(ms)), Some(ms));
        }
    }
}
