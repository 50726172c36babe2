//! The output formats: JSON (the `lockbench/1` schema), the markdown comparison document, and the
//! SVG charts it embeds. The target checks live in [`targets`], shared by markdown and the terminal.

pub mod charts;
mod costs;
pub mod markdown;
mod primitives;
pub mod targets;

use std::path::Path;

use anyhow::{Context, Result};

use crate::model::{Record, Report};

/// Every backend, in the order the tables list them.
pub(crate) const BACKENDS: &[&str] = &["mem", "file", "etcd", "zk", "redis", "postgres", "mysql"];

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

/// The first row of `system` on `backend` for `workload` whose params include `key` (if given).
pub(crate) fn find<'a>(
    report: &'a Report,
    system: &str,
    backend: &str,
    workload: &str,
    key: Option<(&str, u64)>,
) -> Option<&'a Record> {
    report.results.iter().find(|r| {
        r.system == system
            && r.backend == backend
            && r.workload == workload
            && key.is_none_or(|(k, v)| r.param_u64(k) == Some(v))
    })
}

/// The p50 of the first `handover` row of `system` on `backend` (its shortest wait).
pub(crate) fn handover_p50(report: &Report, system: &str, backend: &str) -> Option<f64> {
    report
        .results
        .iter()
        .filter(|r| r.system == system && r.backend == backend && r.workload == "handover")
        .find_map(|r| r.p50_us)
}
