//! `xml_escape`, which copies runs of characters that need no escape at once, against the
//! character-by-character escaper it replaced.

use proptest::prelude::*;

use super::*;

/// The escaper as it was: one character at a time.
fn escaped_char_by_char(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\r' => out.push_str("&#xD;"),
            c if !xml_allowed(c) => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn escaped(text: &str) -> String {
    let mut out = String::from("prefix ");
    xml_escape(text, &mut out);
    out.split_off("prefix ".len())
}

#[test]
fn awkward_text() {
    for text in [
        "",
        "plain",
        AWKWARD_BODY,
        "&<>\"'\r\n\t\u{0}\u{8}\u{1f}\u{7f}",
        "\u{fffe}\u{ffff}\u{fffd}\u{d7ff}\u{e000}\u{10000}😀",
        "<<&&>>",
        "end with <",
    ] {
        assert_eq!(escaped(text), escaped_char_by_char(text), "{text:?}");
    }
    assert_eq!(escaped("a<b\r\u{1}"), "a&lt;b&#xD;\u{fffd}");
}

proptest! {
    #[test]
    fn arbitrary_text_escapes_as_before(text in any::<String>()) {
        prop_assert_eq!(escaped(&text), escaped_char_by_char(&text));
    }
}
