//! Latency histograms shared by the load generator and the echo client: recording (ns), the
//! summary table, the full percentile distribution file (HdrHistogram "hgrm" text, one block
//! per series) and an SVG percentile plot (written by hand: no plotting dependency).

use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// Highest latency recorded (60 s); larger values are clamped to it.
pub const MAX_NS: u64 = 60_000_000_000;

/// A histogram of nanoseconds, 3 significant digits, 1 ns .. 60 s. Allocates once.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds")
}

/// Record `ns` (clamped into the histogram's range). Never allocates.
#[inline]
pub fn record(h: &mut Histogram<u64>, ns: u64) {
    let v = ns.clamp(1, MAX_NS);
    h.record(v).expect("value inside the histogram's bounds");
}

/// One named latency series.
pub struct Series<'a> {
    pub name: &'a str,
    pub hist: &'a Histogram<u64>,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

/// The percentiles of the summary table (100 = max).
pub const TABLE_PERCENTILES: [f64; 6] = [50.0, 90.0, 99.0, 99.9, 99.99, 100.0];

/// The summary table: one row per series with its count and p50/p90/p99/p99.9/p99.99/max in
/// microseconds. Empty series show dashes.
pub fn table(series: &[Series<'_>]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "latency (us)", "count", "p50", "p90", "p99", "p99.9", "p99.99", "max"
    );
    for s in series {
        let _ = write!(out, "{:<24} {:>9}", s.name, s.hist.len());
        for p in TABLE_PERCENTILES {
            if s.hist.is_empty() {
                let _ = write!(out, " {:>9}", "-");
            } else {
                let v = if p >= 100.0 {
                    s.hist.max()
                } else {
                    s.hist.value_at_percentile(p)
                };
                let _ = write!(out, " {:>9.1}", us(v));
            }
        }
        out.push('\n');
    }
    out
}

/// The full distribution of every series as HdrHistogram percentile text (the `.hgrm`
/// layout that HdrHistogram's plotter reads), values in microseconds, one block per series
/// headed by `# series NAME`.
pub fn distribution_text(series: &[Series<'_>]) -> String {
    let mut out = String::new();
    for s in series {
        let _ = writeln!(out, "# series {}", s.name);
        let _ = writeln!(
            out,
            "{:>12} {:>14} {:>10} {:>14}\n",
            "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
        );
        let mut total = 0u64;
        if !s.hist.is_empty() {
            for v in s.hist.iter_quantiles(5) {
                total += v.count_since_last_iteration();
                let q = v.quantile_iterated_to();
                let inverse = if q < 1.0 {
                    format!("{:>14.2}", 1.0 / (1.0 - q))
                } else {
                    format!("{:>14}", "inf")
                };
                let _ = writeln!(
                    out,
                    "{:>12.3} {:>14.12} {:>10} {}",
                    us(v.value_iterated_to()),
                    q,
                    total,
                    inverse
                );
            }
        }
        let _ = writeln!(
            out,
            "#[Mean = {:.3}, StdDeviation = {:.3}]\n#[Max = {:.3}, Total count = {}]\n",
            s.hist.mean() / 1_000.0,
            s.hist.stdev() / 1_000.0,
            us(s.hist.max()),
            s.hist.len()
        );
    }
    out
}

pub fn write_distribution(path: &Path, series: &[Series<'_>]) -> io::Result<()> {
    std::fs::write(path, distribution_text(series))
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// An SVG percentile plot: x is the percentile on HdrHistogram's scale (log of
/// 1/(1 - p): 0, 90, 99, 99.9 ... evenly spaced), y the latency in microseconds on a log scale.
pub fn svg_plot(title: &str, series: &[Series<'_>]) -> String {
    const W: f64 = 900.0;
    const H: f64 = 540.0;
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 180.0;
    const TOP: f64 = 50.0;
    const BOTTOM: f64 = 60.0;
    let plotted: Vec<&Series<'_>> = series.iter().filter(|s| !s.hist.is_empty()).collect();
    // x range: up to the nines the largest series supports (at least 99.99).
    let most = plotted.iter().map(|s| s.hist.len()).max().unwrap_or(1) as f64;
    let x_decades = most.log10().ceil().clamp(4.0, 7.0);
    // y range in decades of microseconds.
    let lo = plotted
        .iter()
        .map(|s| us(s.hist.min().max(1)))
        .fold(f64::INFINITY, f64::min);
    let hi = plotted
        .iter()
        .map(|s| us(s.hist.max().max(1)))
        .fold(0.0f64, f64::max);
    let (y0, y1) = if plotted.is_empty() {
        (0.0, 3.0)
    } else {
        (
            lo.log10().floor(),
            hi.log10().ceil().max(lo.log10().floor() + 1.0),
        )
    };
    let px = |decades: f64| LEFT + (W - LEFT - RIGHT) * decades / x_decades;
    let py = |v_us: f64| {
        let d = v_us.max(1e-3).log10().clamp(y0, y1);
        H - BOTTOM - (H - TOP - BOTTOM) * (d - y0) / (y1 - y0)
    };
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="28" font-size="16" text-anchor="middle">{}</text>"#,
        W / 2.0,
        xml_escape(title)
    );
    for d in 0..=(x_decades as u32) {
        let x = px(f64::from(d));
        let label = match d {
            0 => "0%".to_string(),
            1 => "90%".to_string(),
            d => format!("99.{}%", "9".repeat(d as usize - 2)).replace("99.%", "99%"),
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{x}" y1="{TOP}" x2="{x}" y2="{}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle">{label}</text>"##,
            H - BOTTOM,
            H - BOTTOM + 18.0
        );
    }
    for d in (y0 as i32)..=(y1 as i32) {
        let v = 10f64.powi(d);
        let y = py(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            if v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v}")
            }
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">percentile</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 16.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">latency (us, log scale)</text>"#,
        H / 2.0,
        H / 2.0
    );
    for (i, s) in plotted.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut points = String::new();
        for v in s.hist.iter_quantiles(5) {
            let q = v.quantile_iterated_to();
            let decades = if q >= 1.0 {
                x_decades
            } else {
                (1.0 / (1.0 - q)).log10().min(x_decades)
            };
            let _ = write!(
                points,
                "{:.1},{:.1} ",
                px(decades),
                py(us(v.value_iterated_to()))
            );
        }
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>"#
        );
        let ly = TOP + 20.0 * i as f64 + 10.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            W - RIGHT + 10.0,
            W - RIGHT + 30.0,
            W - RIGHT + 36.0,
            ly + 4.0,
            xml_escape(s.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub fn write_plot(path: &Path, title: &str, series: &[Series<'_>]) -> io::Result<()> {
    std::fs::write(path, svg_plot(title, series))
}

/// Monotonic nanoseconds since a fixed start, for timestamps exchanged between threads.
#[derive(Clone, Copy)]
pub struct Clock {
    start: std::time::Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            start: std::time::Instant::now(),
        }
    }

    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    pub fn start(&self) -> std::time::Instant {
        self.start
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// Ask the kernel for 1 ns timer slack on this thread, so that short sleeps of a pacing
/// thread wake close to their deadline instead of up to 50 us late (Linux default slack).
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// How a pacing thread waits for an intended send time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pace {
    /// Sleep until the deadline (1 ns timer slack); leaves the core to others.
    Sleep,
    /// Busy-wait: the most accurate, burns a core.
    Spin,
}

/// Wait until `clock` reads at least `deadline_ns` (or `stop` is set; checked each ms).
pub fn wait_until(
    clock: &Clock,
    deadline_ns: u64,
    pace: Pace,
    stop: &std::sync::atomic::AtomicBool,
) {
    loop {
        let now = clock.now_ns();
        if now >= deadline_ns || stop.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let left = deadline_ns - now;
        match pace {
            Pace::Spin => std::hint::spin_loop(),
            Pace::Sleep => std::thread::sleep(std::time::Duration::from_nanos(left.min(1_000_000))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_distribution_and_plot_render() {
        let mut h = histogram();
        for i in 1..=10_000u64 {
            record(&mut h, i * 100);
        }
        let empty = histogram();
        let series = [
            Series {
                name: "accepted",
                hist: &h,
            },
            Series {
                name: "executed",
                hist: &empty,
            },
        ];
        let t = table(&series);
        assert!(t.contains("accepted"), "{t}");
        assert!(t.contains("500.0") || t.contains("500.2"), "{t}");
        let d = distribution_text(&series);
        assert!(d.contains("# series accepted") && d.contains("Total count = 10000"));
        let svg = svg_plot("t <1>", &series);
        assert!(svg.starts_with("<svg") && svg.contains("polyline") && svg.contains("t &lt;1&gt;"));
    }
}
