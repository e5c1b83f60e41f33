//! Where in a config file's text an error lies ([`Source`]): a byte offset as line:column, a
//! toml error's span as the dotted key it falls in.

use std::path::Path;

use super::{ConfigError, Invalid};

/// The most characters of a toml parser message an error repeats (it may quote the file).
const MESSAGE_LIMIT: usize = 400;

/// The text of a config file and the name to show in errors.
pub struct Source<'a> {
    pub path: &'a Path,
    pub text: &'a str,
}

impl Source<'_> {
    /// 1-based line and column (in characters) of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    pub(super) fn invalid(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        problem: Invalid,
    ) -> ConfigError {
        let (line, column) = self.position(span.start);
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            column,
            key: key.to_string(),
            problem: problem.to_string(),
        }
    }

    /// A toml error: our own refusals and toml's messages about a key's value name the key,
    /// found from the error's span; anything else is a syntax error at its position.
    pub(super) fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let offset = e.span().map_or(0, |s| s.start);
        let (line, column) = self.position(offset);
        let mut message = e.message().trim().to_string();
        if message.chars().count() > MESSAGE_LIMIT {
            message = message.chars().take(MESSAGE_LIMIT).collect::<String>() + "...";
        }
        let path = self.path.to_path_buf();
        if message == "duplicate key"
            && let Some(key) = e.span().and_then(|span| duplicate_key(self.text, span))
        {
            return ConfigError::Invalid {
                path,
                line,
                column,
                key,
                problem: "given twice; allowed: each key once in its table".to_string(),
            };
        }
        match e.span().and_then(|_| key_at(self.text, offset)) {
            Some(key) => ConfigError::Invalid {
                path,
                line,
                column,
                key,
                problem: message,
            },
            None => ConfigError::Syntax {
                path,
                line,
                column,
                message,
            },
        }
    }
}

/// The dotted key (`drain.timeout`, `rules[0].action`) whose value holds byte `offset`, from the
/// document's own spans; `None` outside every value or when the text does not parse. A `[table]`
/// or `[[table]]` spans only its header, so every table is searched.
fn key_at(text: &str, offset: usize) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    fn search(table: &DeTable<'_>, offset: usize, prefix: &str) -> Option<String> {
        table.iter().find_map(|(k, v)| {
            let path = if prefix.is_empty() {
                k.get_ref().to_string()
            } else {
                format!("{prefix}.{}", k.get_ref())
            };
            let inner = match v.get_ref() {
                DeValue::Table(t) => search(t, offset, &path),
                DeValue::Array(items) => items.iter().enumerate().find_map(|(i, item)| match item
                    .get_ref()
                {
                    DeValue::Table(t) => search(t, offset, &format!("{path}[{i}]")),
                    _ => None,
                }),
                _ => None,
            };
            inner.or_else(|| v.span().contains(&offset).then_some(path))
        })
    }
    search(DeTable::parse(text).ok()?.get_ref(), offset, "")
}

/// The dotted key (`drain.timeout`, `rules[1].action`, `drain` for a second `[drain]`) of a
/// duplicate key toml found at `span`. toml gives only the span of the key's second place and the
/// document does not parse, so its spans cannot be searched: the table comes from the closest
/// `[table]` or `[[table]]` header line above (an array's entries counted), a dotted key's
/// prefix from its own line.
fn duplicate_key(text: &str, span: std::ops::Range<usize>) -> Option<String> {
    let line_start = text.get(..span.start)?.rfind('\n').map_or(0, |nl| nl + 1);
    let written = text.get(line_start..span.end)?.trim();
    let unquote = |k: &str| -> String {
        k.split('.')
            .map(|p| p.trim().trim_matches(['"', '\'']))
            .collect::<Vec<_>>()
            .join(".")
    };
    if let Some(header) = written.strip_prefix('[') {
        return Some(unquote(header.trim_start_matches('[')));
    }
    let before = &text[..line_start];
    let header = before
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['));
    let table = match header {
        None => String::new(),
        Some(h) if h.starts_with("[[") => {
            let name = unquote(h.trim_start_matches('[').split(']').next()?);
            let earlier = before
                .lines()
                .filter(|l| l.trim().starts_with("[[") && l.contains(name.as_str()))
                .count();
            format!("{name}[{}].", earlier.saturating_sub(1))
        }
        Some(h) => format!("{}.", unquote(h.trim_start_matches('[').split(']').next()?)),
    };
    Some(format!("{table}{}", unquote(written)))
}
