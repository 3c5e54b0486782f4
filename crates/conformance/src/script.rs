//! The text of scripts: lines, words, `key=value` arguments, times, the output column, and a
//! line diff for failures.

use std::fmt::Write as _;

/// Column (0-based) at which `->` starts.
const OUTPUT_COLUMN: usize = 40;

/// A script that does not parse, or a harness problem (not a service answer: those are output).
pub type Problem = String;

/// The command of a line: everything before an unquoted `->`, trimmed.
pub fn command_part(line: &str) -> &str {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '-' if !quoted && line[i..].starts_with("->") => return line[..i].trim(),
            _ => {}
        }
    }
    line.trim()
}

/// Appends a command and its output lines, the output at [`OUTPUT_COLUMN`].
pub fn render(out: &mut String, command: &str, output: &[String]) {
    for (i, line) in output.iter().enumerate() {
        let head = if i == 0 { command } else { "" };
        writeln!(out, "{head:<width$} -> {line}", width = OUTPUT_COLUMN).unwrap();
    }
}

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

/// A time written as `30s`, `500ms`, `2m`, `1h`, `1m30s`.
pub fn parse_time_ms(text: &str) -> Result<u64, Problem> {
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("bad time {text:?}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(format!("bad time {text:?} (units: ms, s, m, h, d)")),
        };
        total += number * factor;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// A relative time as scripts write it: whole seconds as `30s`, others as `1500ms`.
pub fn format_time_ms(ms: i128) -> String {
    if ms % 1_000 == 0 {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

/// A line diff of two texts (longest common subsequence; scripts are small), each change with
/// three lines of context.
pub fn diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut common = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i][j] = if a[i] == b[j] {
                common[i + 1][j + 1] + 1
            } else {
                common[i + 1][j].max(common[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut lines: Vec<(char, &str)> = Vec::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            lines.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if j < b.len() && (i == a.len() || common[i][j + 1] >= common[i + 1][j]) {
            lines.push(('+', b[j]));
            j += 1;
        } else {
            lines.push(('-', a[i]));
            i += 1;
        }
    }
    let changed: Vec<bool> = lines.iter().map(|(mark, _)| *mark != ' ').collect();
    let near_change =
        |k: usize| changed[k.saturating_sub(3)..(k + 4).min(lines.len())].contains(&true);
    let mut out = String::new();
    let mut skipped = false;
    for (k, (mark, line)) in lines.iter().enumerate() {
        if near_change(k) {
            if skipped {
                out.push_str("  ...\n");
            }
            writeln!(out, "{mark} {line}").unwrap();
            skipped = false;
        } else {
            skipped = true;
        }
    }
    out
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
        assert_eq!(parse_time_ms("1m30s").unwrap(), 90_000);
        assert_eq!(parse_time_ms("500ms").unwrap(), 500);
        assert!(parse_time_ms("5x").is_err());
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
