//! SVG charts (plotters, SVG backend only): the uncontended latency distribution of each backend,
//! handover latency against the time the waiter was blocked, and throughput against clients.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::model::{Record, Report};
use crate::stats::quantile;

/// A chart written to disk.
#[derive(Clone, Debug)]
pub struct Chart {
    /// File name inside the charts directory.
    pub file: String,
    /// Caption.
    pub title: String,
}

const SIZE: (u32, u32) = (760, 420);

fn backend_color(backend: &str) -> RGBColor {
    match backend {
        "etcd" => RGBColor(31, 119, 180),
        "zk" => RGBColor(44, 160, 44),
        "redis" => RGBColor(214, 39, 40),
        _ => RGBColor(110, 110, 110),
    }
}

fn system_color(system: &str) -> RGBColor {
    match system {
        "locksmith" => RGBColor(31, 119, 180),
        "floor" => RGBColor(90, 90, 90),
        _ => RGBColor(255, 127, 14),
    }
}

/// Writes every chart the report has data for into `dir`.
pub fn write_all(dir: &Path, report: &Report) -> Result<Vec<Chart>> {
    std::fs::create_dir_all(dir)?;
    let mut charts = Vec::new();
    let mut backends: Vec<&str> = report.results.iter().map(|r| r.backend.as_str()).collect();
    backends.dedup();
    for backend in backends {
        let rows: Vec<&Record> = report
            .results
            .iter()
            .filter(|r| r.workload == "uncontended" && r.backend == backend && !r.samples_us.is_empty())
            .collect();
        if rows.is_empty() {
            continue;
        }
        let file = format!("uncontended-{backend}.svg");
        let title = format!("{backend}: uncontended acquire+release latency (CDF)");
        latency_cdf(&dir.join(&file), &title, &rows)?;
        charts.push(Chart { file, title });
    }
    let handover: Vec<&Record> = report
        .results
        .iter()
        .filter(|r| r.workload == "handover" && matches!(r.system.as_str(), "locksmith" | "floor"))
        .collect();
    if !handover.is_empty() {
        let file = "handover.svg".to_string();
        let title =
            "handover p50 against the time the waiter was blocked (solid: locksmith, dashed: raw floor: release, notification, take)"
                .to_string();
        handover_chart(&dir.join(&file), &handover)?;
        charts.push(Chart { file, title });
    }
    let contended: Vec<&Record> = report.results.iter().filter(|r| r.workload == "contended").collect();
    if !contended.is_empty() {
        let file = "contended.svg".to_string();
        let title = "contended: acquisitions per second against clients".to_string();
        contended_chart(&dir.join(&file), &contended)?;
        charts.push(Chart { file, title });
    }
    Ok(charts)
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing a chart: {e}")
}

/// One line per system: latency (log x) against the fraction of operations at most that slow.
fn latency_cdf(path: &Path, title: &str, rows: &[&Record]) -> Result<()> {
    let all = rows.iter().flat_map(|r| r.samples_us.iter().copied());
    let (lo, hi) = all.fold((f64::MAX, 0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (lo, hi) = ((lo * 0.8).max(1.0), (hi * 1.2).max(10.0));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..100f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("latency (µs, log)")
        .y_desc("percentile")
        .draw()
        .map_err(err)?;
    for r in rows {
        let n = r.samples_us.len() as f64;
        let color = system_color(&r.system);
        let points = r
            .samples_us
            .iter()
            .enumerate()
            .map(|(i, &x)| (x, (i + 1) as f64 / n * 100.0));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(format!(
                "{} (p50 {:.0} µs)",
                r.system,
                quantile(&r.samples_us, 0.5).unwrap_or(0.0)
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// p50 (log y) against blocked ms, one line per backend and system.
fn handover_chart(path: &Path, rows: &[&Record]) -> Result<()> {
    let ys = rows.iter().filter_map(|r| r.p50_us);
    let (lo, hi) = ys.fold((f64::MAX, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = ((lo * 0.5).max(1.0), (hi * 2.0).max(10.0));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("handover latency (p50)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((2f64..300f64).log_scale(), (lo..hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("waiter blocked before the release (ms, log)")
        .y_desc("t1 − t0 (µs, log)")
        .draw()
        .map_err(err)?;
    let mut series: Vec<(&str, &str)> = rows.iter().map(|r| (r.backend.as_str(), r.system.as_str())).collect();
    series.sort();
    series.dedup();
    for (backend, system) in series {
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.backend == backend && r.system == system)
            .filter_map(|r| Some((r.param_u64("blocked_ms")? as f64, r.p50_us?)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = backend_color(backend);
        let label = format!("{backend} {system}");
        if system == "floor" {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, color.stroke_width(2)))
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 6, y)], color.stroke_width(2)));
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Acquisitions/s (log y) against clients (log x), one line per backend and system.
fn contended_chart(path: &Path, rows: &[&Record]) -> Result<()> {
    let ys = rows.iter().filter_map(|r| r.throughput_per_s);
    let (lo, hi) = ys.fold((f64::MAX, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = ((lo * 0.5).max(0.1), (hi * 2.0).max(10.0));
    let max_clients = rows.iter().filter_map(|r| r.param_u64("clients")).max().unwrap_or(16) as f64;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("contended throughput", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.8f64..max_clients * 1.25).log_scale(), (lo..hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("clients (separate connections, log)")
        .y_desc("acquisitions/s (log)")
        .draw()
        .map_err(err)?;
    let mut series: Vec<(&str, &str)> = rows.iter().map(|r| (r.backend.as_str(), r.system.as_str())).collect();
    series.sort();
    series.dedup();
    for (backend, system) in series {
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.backend == backend && r.system == system)
            .filter_map(|r| Some((r.param_u64("clients")? as f64, r.throughput_per_s?)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = backend_color(backend);
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(format!("{backend} {system}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
