//! The text of scripts: words, `key=value` arguments and relative times (the output column,
//! script times and the diff are the test kit's `golden`, shared with the engine's scripts).

/// A script that does not parse, or a harness problem (not a service answer: those are output).
pub type Problem = String;

pub use leaseq_testkit::golden::{command_part, render};

/// Splits a command into words: whitespace separates, double quotes group (and are removed),
/// and inside quotes `\n`, `\t`, `\"`, `\\` and `\{c*N}` (N times `c`) are expanded.
fn words(command: &str) -> Result<Vec<String>, Problem> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            '\\' if quoted => escape(&mut chars, word.get_or_insert_with(String::new))?,
            c if c.is_whitespace() && !quoted => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    if quoted {
        return Err(format!("unclosed quote in {command:?}"));
    }
    words.extend(word);
    Ok(words)
}

fn escape(chars: &mut std::str::Chars, word: &mut String) -> Result<(), Problem> {
    match chars.next() {
        Some('n') => word.push('\n'),
        Some('t') => word.push('\t'),
        Some('"') => word.push('"'),
        Some('\\') => word.push('\\'),
        Some('{') => {
            let spec: String = chars.by_ref().take_while(|&c| c != '}').collect();
            let (text, count) = spec
                .split_once('*')
                .ok_or_else(|| format!("expected \\{{TEXT*COUNT}}, got \\{{{spec}}}"))?;
            let count: usize = count.parse().map_err(|_| format!("bad count in {spec}"))?;
            word.push_str(&text.repeat(count));
        }
        other => return Err(format!("unknown escape \\{other:?}")),
    }
    Ok(())
}

/// A command's words: positional ones in order, and `key=value` ones in order.
pub struct Args {
    positional: std::collections::VecDeque<String>,
    named: Vec<(String, String)>,
}

impl Args {
    /// The words of `command` after its verb(s), which the caller has already taken.
    pub fn parse(command: &str) -> Result<Args, Problem> {
        let mut args = Args {
            positional: Default::default(),
            named: Vec::new(),
        };
        for word in words(command)? {
            match word.split_once('=') {
                Some((key, value)) if !key.is_empty() => {
                    args.named.push((key.to_string(), value.to_string()))
                }
                _ => args.positional.push_back(word),
            }
        }
        Ok(args)
    }

    /// The next positional word.
    pub fn positional(&mut self, what: &str) -> Result<String, Problem> {
        self.positional
            .pop_front()
            .ok_or_else(|| format!("expected {what}"))
    }

    /// Takes the positional word `word` if it was given (a flag such as `verbose`).
    pub fn flag(&mut self, word: &str) -> bool {
        let at = self.positional.iter().position(|w| w == word);
        at.map(|at| self.positional.remove(at)).is_some()
    }

    /// Every positional word left.
    pub fn rest(&mut self) -> Vec<String> {
        self.positional.drain(..).collect()
    }

    /// Takes the named argument `key`, if given.
    pub fn take(&mut self, key: &str) -> Option<String> {
        let at = self.named.iter().position(|(k, _)| k == key)?;
        Some(self.named.remove(at).1)
    }

    /// Takes a named argument that must be a number.
    pub fn number(&mut self, key: &str) -> Result<Option<i64>, Problem> {
        self.take(key)
            .map(|value| {
                value
                    .trim_end_matches('s')
                    .parse()
                    .map_err(|_| format!("{key}={value} is not a number"))
            })
            .transpose()
    }

    /// Takes every named argument left, in order.
    pub fn take_named(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.named)
    }

    /// Fails if anything was not taken (a typo would otherwise be ignored).
    pub fn finish(self) -> Result<(), Problem> {
        if let Some(word) = self.positional.front() {
            return Err(format!("unexpected argument {word:?}"));
        }
        if let Some((key, _)) = self.named.first() {
            return Err(format!("unknown argument {key}="));
        }
        Ok(())
    }
}

/// A relative time as scripts write it: whole seconds as `30s`, others as `1500ms`.
pub fn format_time_ms(ms: i128) -> String {
    if ms % 1_000 == 0 {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_quotes_and_escapes() {
        let words = words(r#"send q body="two words\n" x=\{a*3} y="\{ab*2}""#).unwrap();
        assert_eq!(
            words,
            ["send", "q", "body=two words\n", r"x=\{a*3}", "y=abab"]
        );
        assert!(super::words(r#"send "open"#).is_err());
    }

    #[test]
    fn times_both_ways() {
        assert_eq!(leaseq_testkit::golden::parse_time("1m30s").unwrap(), 90_000);
        assert_eq!(leaseq_testkit::golden::parse_time("500ms").unwrap(), 500);
        assert!(leaseq_testkit::golden::parse_time("5x").is_err());
        assert_eq!(format_time_ms(90_000), "90s");
        assert_eq!(format_time_ms(1_500), "1500ms");
    }

    #[test]
    fn output_after_an_unquoted_arrow() {
        assert_eq!(
            command_part(r#"send q body="a->b"   -> m1"#),
            r#"send q body="a->b""#
        );
    }
}
