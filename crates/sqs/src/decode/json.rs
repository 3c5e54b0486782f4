//! A strict JSON reader for the fast path (`super::fast`): it reads a request body's members in
//! place, straight into the typed requests, and declines (`None`) anything it does not read
//! exactly as RFC 8259 and `serde_json` do.
//!
//! Why not `serde_json` here, as the reference path does: through serde's visitors, a durable
//! SendMessage's body of 256 bytes took 1,949 instructions to read, and a DeleteMessageBatch of
//! ten 11,518; a prototype of this reader took 939 and 5,856 (callgrind, the same bodies). Most of that is strings: they are scanned 16 bytes at a time for the bytes
//! that end them or need a second look (`"`, `\`, control characters, and bytes of non-ASCII
//! characters), and checked to be UTF-8 only when they hold a non-ASCII byte, instead of the
//! whole body once and every string again.
//!
//! What it declines, so that the reference path decides: `true` and `false` (no member the fast
//! path reads takes them), numbers with a fraction or an exponent, `-0` (a float to serde_json),
//! numbers outside `i64`, and a string with a lone surrogate escape or invalid UTF-8. It never
//! skips a value it does not read: the caller declines an unknown member instead, so every byte
//! of an accepted body has been checked.

use std::borrow::Cow;

use crate::scan::special_byte;

/// A position in a JSON text.
pub(super) struct Json<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Json<'a> {
    pub(super) fn new(text: &'a [u8]) -> Self {
        Json { text, at: 0 }
    }

    /// Reads a whole text: one value, read by `value`, and nothing after it but blanks.
    pub(super) fn whole<T>(
        text: &'a [u8],
        value: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<T> {
        let mut json = Json::new(text);
        let value = value(&mut json)?;
        json.skip_blanks();
        (json.at == json.text.len()).then_some(value)
    }

    fn skip_blanks(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after blanks, not taken.
    fn peek(&mut self) -> Option<u8> {
        self.skip_blanks();
        self.text.get(self.at).copied()
    }

    /// Takes `byte`, after blanks, or declines.
    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// An object: each member's key is handed to `member`, which reads the value (or declines).
    pub(super) fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, &str) -> Option<()>,
    ) -> Option<()> {
        self.items(b'{', b'}', |json| {
            let key = json.text()?;
            json.expect(b':')?;
            member(json, &key)
        })
    }

    /// An array: `element` reads each element (or declines).
    pub(super) fn array(&mut self, element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.items(b'[', b']', element)
    }

    /// Items between `open` and `close`, separated by commas, each read by `item`.
    fn items(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.expect(open)?;
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                byte if byte == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Takes a `null`, if that is what comes next.
    pub(super) fn null(&mut self) -> bool {
        let null = self.peek() == Some(b'n') && self.text[self.at..].starts_with(b"null");
        if null {
            self.at += 4;
        }
        null
    }

    /// An integer that fits `i64`, written without a fraction or an exponent.
    pub(super) fn integer(&mut self) -> Option<i64> {
        self.skip_blanks();
        let negative = self.text.get(self.at) == Some(&b'-');
        self.at += usize::from(negative);
        let digits = self.at;
        // Accumulated negatively, so that i64::MIN fits.
        let mut value: i64 = 0;
        while let Some(&digit @ b'0'..=b'9') = self.text.get(self.at) {
            value = value
                .checked_mul(10)?
                .checked_sub(i64::from(digit - b'0'))?;
            self.at += 1;
        }
        let count = self.at - digits;
        let leading_zero = count > 1 && self.text[digits] == b'0';
        // serde_json reads `-0` as a float.
        let negative_zero = negative && value == 0;
        if count == 0
            || leading_zero
            || negative_zero
            || matches!(self.text.get(self.at), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        if negative {
            Some(value)
        } else {
            value.checked_neg()
        }
    }

    /// A string, owned.
    pub(super) fn string(&mut self) -> Option<String> {
        self.text().map(Cow::into_owned)
    }

    /// A string, borrowed from the text unless it holds escapes.
    pub(super) fn text(&mut self) -> Option<Cow<'a, str>> {
        self.expect(b'"')?;
        let start = self.at;
        // The common string, ASCII without escapes, ends at the first special byte; any other
        // is read on by `text_on`, out of line.
        let at = special_byte(self.text, start, true);
        if self.text.get(at) != Some(&b'"') {
            return self.text_on(start, at);
        }
        self.at = at + 1;
        // SAFETY: `special_byte` stops at every byte from 0x80 up, and stopped at the closing
        // quote: the bytes before it are ASCII, which is UTF-8.
        Some(Cow::Borrowed(unsafe {
            std::str::from_utf8_unchecked(&self.text[start..at])
        }))
    }

    /// [`Self::text`] of a string that starts at `start` and has a special byte at `at` that
    /// is not its closing quote: an escape, a control character (declined), a non-ASCII
    /// character, or the text's end (declined).
    #[cold]
    #[inline(never)]
    fn text_on(&mut self, start: usize, mut at: usize) -> Option<Cow<'a, str>> {
        let text = self.text;
        let mut non_ascii = false;
        // Unescaped text, once the string has an escape.
        let mut unescaped: Option<Vec<u8>> = None;
        let mut run = start;
        loop {
            match *text.get(at)? {
                b'"' => break,
                b'\\' => {
                    let out = unescaped.get_or_insert_with(|| Vec::with_capacity(at - start + 16));
                    out.extend_from_slice(&text[run..at]);
                    at = unescape(text, at + 1, out)?;
                    run = at;
                }
                // A control character must be escaped.
                0x00..=0x1f => return None,
                // The first byte of a non-ASCII character: the string is checked to be UTF-8
                // at its end, and the scan goes on past such bytes.
                _ => {
                    non_ascii = true;
                    at += 1;
                }
            }
            at = special_byte(text, at, !non_ascii);
        }
        self.at = at + 1;
        match unescaped {
            None => {
                let raw = &text[start..at];
                let raw = if non_ascii {
                    std::str::from_utf8(raw).ok()?
                } else {
                    // SAFETY: every byte is below 0x80 (the scan stopped at each byte from
                    // 0x80 up until `non_ascii`), so these bytes are ASCII, which is UTF-8.
                    unsafe { std::str::from_utf8_unchecked(raw) }
                };
                Some(Cow::Borrowed(raw))
            }
            Some(mut out) => {
                out.extend_from_slice(&text[run..at]);
                String::from_utf8(out).ok().map(Cow::Owned)
            }
        }
    }
}

/// Reads the escape after a backslash at `at` into `out`; where the text goes on after it.
fn unescape(text: &[u8], at: usize, out: &mut Vec<u8>) -> Option<usize> {
    let simple = match *text.get(at)? {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'u' => {
            let unit = hex4(text, at + 1)?;
            let (character, next) = match unit {
                0xd800..=0xdbff => {
                    // A high surrogate must be followed by an escaped low one.
                    if text.get(at + 5..at + 7)? != b"\\u" {
                        return None;
                    }
                    let low = hex4(text, at + 7)?;
                    if !(0xdc00..=0xdfff).contains(&low) {
                        return None;
                    }
                    let scalar = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
                    (char::from_u32(scalar)?, at + 11)
                }
                0xdc00..=0xdfff => return None,
                _ => (char::from_u32(unit)?, at + 5),
            };
            out.extend_from_slice(character.encode_utf8(&mut [0; 4]).as_bytes());
            return Some(next);
        }
        _ => return None,
    };
    out.push(simple);
    Some(at + 1)
}

/// Four hexadecimal digits at `at`.
fn hex4(text: &[u8], at: usize) -> Option<u32> {
    text.get(at..at + 4)?.iter().try_fold(0, |value, &digit| {
        Some(value << 4 | char::from(digit).to_digit(16)?)
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A string as `serde_json` reads it, the reference.
    fn reference_text(text: &[u8]) -> Option<String> {
        serde_json::from_slice::<String>(text).ok()
    }

    /// Bytes that look like a JSON string: quotes, escapes (valid, invalid and surrogate ones),
    /// control characters, non-ASCII characters and invalid UTF-8, at any length.
    fn string_like() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            4 => "[a-z0-9 ]{0,20}".prop_map(String::into_bytes),
            1 => prop::sample::select(vec![
                &b"\\\""[..], b"\\\\", b"\\/", b"\\b", b"\\f", b"\\n", b"\\r", b"\\t", b"\\u00e9",
                b"\\u0041", b"\\ud83d\\ude00", b"\\ud83d", b"\\ude00", b"\\ud83dx", b"\\uD83D\\uDE00",
                b"\\u12", b"\\x", b"\\", b"\"", b"\n", b"\x01", b"\x7f", "é".as_bytes(),
                "€😀".as_bytes(), b"\xff", b"\xc3", b"\xed\xa0\x80",
            ]).prop_map(<[u8]>::to_vec),
        ];
        (prop::collection::vec(piece, 0..12), any::<bool>()).prop_map(|(pieces, close)| {
            let mut text = b"\"".to_vec();
            for piece in pieces {
                text.extend_from_slice(&piece);
            }
            if close {
                text.push(b'"');
            }
            text
        })
    }

    proptest! {
        /// A string the reader accepts, serde_json reads the same; a valid string serde_json
        /// reads, the reader accepts unless it holds a lone surrogate (which serde_json refuses
        /// too when reading a Rust string, so both refuse).
        #[test]
        fn text_reads_as_serde_json_does(text in string_like()) {
            let ours = Json::whole(&text, |json| json.text().map(Cow::into_owned));
            prop_assert_eq!(ours, reference_text(&text), "{:?}", String::from_utf8_lossy(&text));
        }

        /// Any string serde_json writes (escaping `"`, `\` and control characters), read back.
        #[test]
        fn text_reads_what_serde_json_writes(value in any::<String>(), prefix in 0usize..40) {
            // Text before the string moves it against the 16-byte blocks of the scan.
            let mut text = b" ".repeat(prefix);
            text.extend_from_slice(serde_json::to_string(&value).unwrap().as_bytes());
            prop_assert_eq!(Json::whole(&text, |json| json.text().map(Cow::into_owned)), Some(value));
        }

        /// An integer the reader accepts, serde_json reads as the same i64; one serde_json reads
        /// as an i64, the reader accepts.
        #[test]
        fn integer_reads_as_serde_json_does(
            text in prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                "-?[0-9]{0,21}(\\.[0-9]{0,2})?([eE][-+]?[0-9]{0,3})?",
                prop::sample::select(vec!["-", "-0", "00", "01", "9223372036854775808",
                    "-9223372036854775808", "-9223372036854775809", "1.0", "1e2", "+1", " 7 "])
                    .prop_map(String::from),
            ]
        ) {
            let ours = Json::whole(text.as_bytes(), Json::integer);
            prop_assert_eq!(ours, serde_json::from_str::<i64>(&text).ok(), "{}", text);
        }
    }

    #[test]
    fn objects_and_arrays_read_every_member_and_element() {
        let text = br#" { "A" : [ "x" , "y" ] , "B":-12,"C":{} ,"D":[]} "#;
        let mut seen = Vec::new();
        let read = Json::whole(text, |json| {
            json.object(|json, key| {
                match key {
                    "A" => json.array(|json| json.string().map(|text| seen.push(text)))?,
                    "B" => seen.push(json.integer()?.to_string()),
                    "C" => json.object(|_, _| None)?,
                    "D" => json.array(|_| None)?,
                    _ => return None,
                }
                seen.push(key.to_owned());
                Some(())
            })
        });
        assert_eq!(read, Some(()));
        assert_eq!(seen, ["x", "y", "A", "-12", "B", "C", "D"]);
    }

    #[test]
    fn malformed_structure_is_declined() {
        let any_member = |json: &mut Json, _: &str| json.integer().map(drop);
        for text in [
            &b"{"[..],
            b"{\"a\":1",
            b"{\"a\":1,}",
            b"{\"a\" 1}",
            b"{\"a\":1}x",
            b"{\"a\":1}{}",
            b"[]",
            b"{a:1}",
            b"{\"a\":1 \"b\":2}",
            b"\x0b{}",
        ] {
            assert_eq!(
                Json::whole(text, |json| json.object(any_member)),
                None,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
        assert_eq!(
            Json::whole(b"\t{ }\r\n", |json| json.object(any_member)),
            Some(())
        );
        let any_element = |json: &mut Json| json.integer().map(drop);
        for text in [&b"[1,]"[..], b"[,1]", b"[1 2]", b"[1", b"{}"] {
            assert_eq!(Json::whole(text, |json| json.array(any_element)), None);
        }
    }
}
