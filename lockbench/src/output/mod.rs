//! The output formats: JSON (the `lockbench/1` schema), the markdown comparison document, and the
//! SVG charts it embeds. The target checks live in [`targets`], shared by markdown and the terminal.

pub mod charts;
pub mod markdown;
pub mod targets;

use std::path::Path;

use anyhow::{Context, Result};

use crate::model::Report;

/// Writes the report as pretty-printed JSON.
pub fn write_json(path: &Path, report: &Report) -> Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    create_parent(path)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Formats an optional number for a table cell (`—` when absent).
pub fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.decimals$}"))
}

/// Creates the directory `path` will be written into.
pub fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
        }
        _ => Ok(()),
    }
}
