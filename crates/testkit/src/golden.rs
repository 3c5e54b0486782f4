//! Golden scripts' shared pieces: the line diff a failing script prints and the script times
//! (`31s`, `500ms`, `11h59m30s`), for the engine's golden scripts and the service's conformance
//! suite alike.

use std::fmt::Write as _;

/// Column (0-based) at which `->` starts.
pub const OUTPUT_COLUMN: usize = 40;

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

/// `31s`, `500ms`, `12h`, `11h59m30s`, `4d` → milliseconds.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let mut total_ms = 0u64;
    let mut rest = text;
    if rest.is_empty() {
        return Err("empty time".into());
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(format!("time {text:?}: expected a number"));
        }
        let value: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("time {text:?}: {} is too large", &rest[..digits]))?;
        rest = &rest[digits..];
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            unit => {
                return Err(format!(
                    "time {text:?}: unknown unit {unit:?} (ms, s, m, h, d)"
                ))
            }
        };
        rest = &rest[unit_len..];
        total_ms += value * unit_ms;
    }
    Ok(total_ms)
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
