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

/// One target's group in `storm.svg`: its p99s under the cancel storm (µs, the mean of its rounds); `None` where the
/// percentile fell among the missed.
#[derive(Clone, Debug)]
pub struct Bars {
    /// The target's name.
    pub name: String,
    /// The p99 of its cancels.
    pub cancel_p99: Option<f64>,
    /// The p99 of its ordinary requests.
    pub ordinary_p99: Option<f64>,
}

/// Draw `groups` as a grouped bar chart into an SVG file at `path`: for each target, its cancel p99 and its
/// ordinary-request p99 under the storm. Written by hand: plotters has no grouped bars, and the chart is small.
/// The scale is logarithmic when the values span more than 20×; a missed percentile is a hatched bar to the top.
pub fn storm_bars(path: &Path, groups: &[Bars]) -> std::io::Result<()> {
    std::fs::write(path, storm_svg(groups))
}

fn storm_svg(groups: &[Bars]) -> String {
    use std::fmt::Write;
    const SERIES: [(&str, &str); 2] = [
        ("cancel p99", "#3366cc"),
        ("ordinary request p99", "#ee7733"),
    ];
    let (width, height) = (960.0, 600.0);
    let (left, right, top, bottom) = (80.0, 20.0, 70.0, 190.0);
    let plot_height = height - top - bottom;
    let values: Vec<f64> = groups
        .iter()
        .flat_map(|g| [g.cancel_p99, g.ordinary_p99])
        .flatten()
        .filter(|v| *v > 0.0)
        .collect();
    let max = values.iter().copied().fold(1.0, f64::max);
    let min = values.iter().copied().fold(max, f64::min);
    let log = max / min > 20.0;
    // The axis: decades for a log scale, from 0 to a round top otherwise.
    let (low, high) = if log {
        (
            10f64.powf(min.log10().floor()),
            10f64.powf(max.log10().ceil()),
        )
    } else {
        let step = 10f64.powf(max.log10().floor());
        (0.0, (max / step).ceil() * step)
    };
    let y = |v: f64| -> f64 {
        let fraction = if log {
            (v.max(low).log10() - low.log10()) / (high.log10() - low.log10())
        } else {
            v / high
        };
        top + plot_height * (1.0 - fraction.clamp(0.0, 1.0))
    };
    let ticks: Vec<f64> = if log {
        let decades = (high.log10() - low.log10()).round() as i32;
        (0..=decades).map(|d| low * 10f64.powi(d)).collect()
    } else {
        (0..=5).map(|i| high * f64::from(i) / 5.0).collect()
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<defs><pattern id="missed" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8" height="8" fill="#dddddd"/><line x1="0" y1="0" x2="0" y2="8" stroke="#888888" stroke-width="3"/></pattern></defs>
<text x="{}" y="26" text-anchor="middle" font-size="18">Under a cancel storm: cancel p99 and ordinary-request p99 (µs, mean of the rounds; lower is better)</text>
"##,
        width / 2.0
    );
    for tick in &ticks {
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e0e0e0"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            width - right,
            left - 6.0,
            y(*tick) + 4.0,
            tick,
            y = y(*tick),
        );
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{left}" x2="{left}" y1="{top}" y2="{}" stroke="black"/><line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="black"/><text transform="translate(20 {}) rotate(-90)" text-anchor="middle">p99 (µs{})</text>"##,
        top + plot_height,
        width - right,
        top + plot_height,
        top + plot_height,
        top + plot_height / 2.0,
        if log { ", log scale" } else { "" }
    );
    let group_width = (width - left - right) / groups.len().max(1) as f64;
    let bar_width = (group_width * 0.35).min(60.0);
    for (index, group) in groups.iter().enumerate() {
        let centre = left + group_width * (index as f64 + 0.5);
        for (series, value) in [group.cancel_p99, group.ordinary_p99]
            .into_iter()
            .enumerate()
        {
            let x = centre + bar_width * (series as f64 - 1.0);
            let (bar_top, fill, label) = match value {
                Some(v) => (y(v), SERIES[series].1.to_owned(), format!("{v:.0}")),
                None => (top, "url(#missed)".to_owned(), "missed".to_owned()),
            };
            let _ = writeln!(
                svg,
                r##"<rect x="{x:.1}" y="{bar_top:.1}" width="{bar_width:.1}" height="{:.1}" fill="{fill}"/><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{label}</text>"##,
                top + plot_height - bar_top,
                x + bar_width / 2.0,
                bar_top - 4.0,
            );
        }
        let _ = writeln!(
            svg,
            r##"<text transform="translate({centre:.1} {:.1}) rotate(-30)" text-anchor="end">{}</text>"##,
            top + plot_height + 16.0,
            escape(&group.name)
        );
    }
    for (series, (name, colour)) in SERIES.iter().enumerate() {
        let x = left + 20.0 + 220.0 * series as f64;
        let _ = writeln!(
            svg,
            r##"<rect x="{x}" y="40" width="14" height="14" fill="{colour}"/><text x="{}" y="52">{name}</text>"##,
            x + 20.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storm_bars_draw_every_target_and_mark_the_missed() {
        let svg = storm_svg(&[
            Bars {
                name: "ours".to_owned(),
                cancel_p99: Some(20.0),
                ordinary_p99: Some(40.0),
            },
            Bars {
                name: "a <peer>".to_owned(),
                cancel_p99: Some(20_000.0),
                ordinary_p99: None,
            },
        ]);
        assert!(svg.contains(">ours<") && svg.contains("a &lt;peer&gt;"));
        assert!(svg.contains("log scale"), "20 to 20000 µs spans 1000×");
        assert_eq!(svg.matches("url(#missed)").count(), 1);
        assert_eq!(
            svg.matches("<rect x=").count(),
            4 + 2,
            "four bars, two legend keys"
        );
    }
}
