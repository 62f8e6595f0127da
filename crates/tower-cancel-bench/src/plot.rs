//! The plot of cancel latency against requests in flight, as SVG.

use std::path::Path;

use plotters::prelude::*;

/// One line of the plot: a target's p99 cancel latency (µs, the mean of its rounds) at each count of requests in flight.
#[derive(Clone, Debug)]
pub struct Series {
    /// The target's name.
    pub name: String,
    /// (requests in flight, p99 µs)
    pub points: Vec<(f64, f64)>,
}

/// Draw `series` into an SVG file at `path`.
pub fn cancel_latency(path: &Path, series: &[Series]) -> Result<(), Box<dyn std::error::Error>> {
    let max_x = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(10.0, f64::max);
    let max_y = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(10.0, f64::max);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Cancel latency p99 (mean of the rounds) against requests in flight (lower is better)",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (1.0..max_x * 2.0).log_scale(),
            (1.0..max_y * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("requests in flight")
        .y_desc("p99 cancel latency (µs)")
        .draw()?;
    for (index, line) in series.iter().enumerate() {
        let color = Palette99::pick(index).mix(0.9);
        chart
            .draw_series(LineSeries::new(line.points.clone(), color.stroke_width(2)))?
            .label(line.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(
            line.points
                .iter()
                .map(|&p| Circle::new(p, 3, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
