//! Reading objects from YAML or JSON text: multi-document YAML, JSON, and `kind: List` (or any
//! `...List` with `items`) expanded into its items.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("cannot read seed file {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{source_name}: document {index} is not valid YAML/JSON: {message}")]
    Parse {
        source_name: String,
        index: usize,
        message: String,
    },
    #[error(
        "{source_name}: document {index} is not an object with apiVersion, kind and metadata.name"
    )]
    NotAnObject { source_name: String, index: usize },
}

/// Parses every object in `text`; `source_name` (a file name) goes into errors.
pub fn parse_documents(text: &str, source_name: &str) -> Result<Vec<Value>, SeedError> {
    let mut out = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_yaml::Value::deserialize(doc).map_err(|e| SeedError::Parse {
            source_name: source_name.to_string(),
            index,
            message: e.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        let value: Value = serde_json::to_value(value).map_err(|e| SeedError::Parse {
            source_name: source_name.to_string(),
            index,
            message: e.to_string(),
        })?;
        let is_list = value
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && value.get("items").is_some_and(Value::is_array);
        let items = if is_list {
            value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            vec![value]
        };
        for item in items {
            let ok = item.get("apiVersion").and_then(Value::as_str).is_some()
                && item.get("kind").and_then(Value::as_str).is_some()
                && item
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some();
            if !ok {
                return Err(SeedError::NotAnObject {
                    source_name: source_name.to_string(),
                    index,
                });
            }
            out.push(item);
        }
    }
    Ok(out)
}

/// Reads a seed file (YAML or JSON, several documents allowed).
pub fn load_file(path: &Path) -> Result<Vec<Value>, SeedError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| SeedError::Read {
        file: file.clone(),
        source,
    })?;
    parse_documents(&text, &file)
}
