//! End-to-end: the metrics endpoint and the log formats of the real daemon. The endpoint is
//! scraped with a plain HTTP GET over a real socket and parsed with a Prometheus text parser.

mod common;

use bourse::client::OuchClient;
use bourse::types::{Alpha, Shares};
use bourse::wire::ouch::{CancelOrder, Inbound};
use common::{TIMEOUT, Venue, config_text};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn enter(token: &str, side: u8, shares: u32, symbol: &str, price: u32) -> Inbound {
    common::day_order(token, side, shares, symbol, price)
}

fn with_metrics(text: String) -> String {
    text.replace("[admin]\n", "[admin]\nmetrics_listen = \"127.0.0.1:0\"\n")
}

/// `GET path` over a plain socket: (status line, body).
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: bourse\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

fn scrape(addr: SocketAddr) -> prometheus_parse::Scrape {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// Every histogram is what Prometheus requires: `le` buckets that never decrease, ending with
/// `+Inf` equal to the histogram's `_count` (a scraper computes quantiles from them).
fn assert_histograms_are_cumulative(scrape: &prometheus_parse::Scrape) -> usize {
    let mut seen = 0;
    for sample in &scrape.samples {
        let prometheus_parse::Value::Histogram(buckets) = &sample.value else {
            continue;
        };
        seen += 1;
        let what = format!("{} {:?}", sample.metric, sample.labels);
        assert!(
            buckets.windows(2).all(|w| w[0].count <= w[1].count),
            "{what}: {buckets:?}"
        );
        let last = buckets
            .last()
            .unwrap_or_else(|| panic!("{what}: no bucket"));
        assert_eq!(
            last.less_than,
            f64::INFINITY,
            "{what}: the last bucket is +Inf"
        );
        let labels: Vec<(&str, &str)> = sample
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let count = value(scrape, &format!("{}_count", sample.metric), &labels);
        assert_eq!(last.count, count, "{what}: +Inf bucket against _count");
    }
    seen
}

/// The value of `metric` with exactly these labels (0 when absent: a counter not counted yet).
fn value(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            ref other => panic!("{metric}: {other:?}"),
        })
        .next()
        .unwrap_or(0.0)
}

/// Scrape until `check` holds (the metrics thread reads the streams within moments, gauges
/// and histograms arrive every 250 ms); panics with the last scrape otherwise.
fn scrape_until(addr: SocketAddr, check: impl Fn(&prometheus_parse::Scrape) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = scrape(addr);
        if check(&s) {
            return;
        }
        if Instant::now() > deadline {
            let (_, body) = get(addr, "/metrics");
            panic!("the metrics never showed it:\n{body}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_follow_inputs_rejects_depth_sessions_and_latency() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &with_metrics(config_text(dir.path(), "")));
    let addr = venue.metrics.expect("metrics= on the listening line");
    assert_eq!(get(addr, "/other").0, "HTTP/1.1 404 Not Found");
    let before = scrape(addr);
    assert_eq!(
        value(&before, "bourse_inputs_total", &[("kind", "ouch")]),
        0.0
    );
    assert_eq!(
        value(&before, "bourse_inputs_total", &[("kind", "start_of_day")]),
        1.0
    );

    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice
        .send(&enter("B1", b'B', 100, "AAPL", 1_000_000))
        .unwrap();
    alice
        .send(&enter("B2", b'B', 100, "AAPL", 1_000_000))
        .unwrap();
    alice
        .send(&enter("B3", b'B', 100, "AAPL", 990_000))
        .unwrap();
    alice
        .send(&enter("S1", b'S', 100, "AAPL", 1_100_000))
        .unwrap();
    alice
        .send(&enter("Z1", b'B', 100, "ZZZZ", 1_000_000))
        .unwrap();
    alice
        .send(&enter("Z2", b'B', 0, "AAPL", 1_000_000))
        .unwrap();
    assert_eq!(alice.recv_messages(7, TIMEOUT).unwrap().len(), 7);
    let aapl = |side: &'static str| [("symbol", "AAPL"), ("side", side)];
    scrape_until(addr, |s| {
        value(s, "bourse_inputs_total", &[("kind", "ouch")]) == 6.0
            && value(s, "bourse_ouch_rejects_total", &[("reason", "S")]) == 1.0
            && value(s, "bourse_ouch_rejects_total", &[("reason", "Z")]) == 1.0
            && value(s, "bourse_ouch_messages_total", &[("type", "A")]) == 4.0
            && value(s, "bourse_book_orders", &aapl("buy")) == 3.0
            && value(s, "bourse_book_levels", &aapl("buy")) == 2.0
            && value(s, "bourse_book_orders", &aapl("sell")) == 1.0
            && value(
                s,
                "bourse_book_orders",
                &[("symbol", "MSFT"), ("side", "buy")],
            ) == 0.0
            && value(s, "bourse_itch_messages_total", &[("type", "A")]) == 4.0
            && value(s, "bourse_sessions_logged_in", &[]) == 1.0
            && value(s, "bourse_gateway_connections", &[]) == 1.0
            && value(s, "bourse_resting_orders", &[]) == 4.0
            && value(s, "bourse_latency_seconds_count", &[("stage", "journaled")]) >= 6.0
            && value(s, "bourse_latency_seconds_count", &[("stage", "written")]) >= 6.0
            && value(s, "bourse_journal_flush_seconds_count", &[]) >= 1.0
            && value(s, "bourse_journal_bytes", &[]) > 0.0
    });
    let histograms = assert_histograms_are_cumulative(&scrape(addr));
    assert!(
        histograms >= 5,
        "4 stages and the flush latency: {histograms}"
    );

    // A cancel takes an order and its level off the book; a logout ends the session.
    alice
        .send(&Inbound::Cancel(CancelOrder {
            token: Alpha::from_str_padded("B3").unwrap(),
            shares: Shares(0),
        }))
        .unwrap();
    assert_eq!(alice.recv_messages(1, TIMEOUT).unwrap().len(), 1);
    alice.logout().unwrap();
    scrape_until(addr, |s| {
        value(s, "bourse_inputs_total", &[("kind", "ouch")]) == 7.0
            && value(s, "bourse_book_orders", &aapl("buy")) == 2.0
            && value(s, "bourse_book_levels", &aapl("buy")) == 1.0
            && value(s, "bourse_ouch_messages_total", &[("type", "C")]) == 1.0
            && value(s, "bourse_sessions_logged_in", &[]) == 0.0
    });
    assert!(venue.stop().success());
}

/// Start `bourse run` with stderr piped (not a terminal) and return its first `lines` lines.
fn log_lines(extra_args: &[&str], lines: usize) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bourse.toml");
    std::fs::write(&config, config_text(dir.path(), "")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bourse"))
        .args(extra_args)
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let got: Vec<String> = stderr.lines().take(lines).map(Result::unwrap).collect();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(got.len(), lines, "{got:?}");
    got
}

#[test]
fn logs_carry_no_escape_codes_when_piped_and_json_lines_parse() {
    for line in log_lines(&[], 4) {
        assert!(!line.contains('\x1b'), "an escape code in {line:?}");
        assert!(line.contains("INFO"), "{line}");
    }
    for line in log_lines(&["--log-format", "json"], 4) {
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert_eq!(v["level"], "INFO", "{line}");
        assert!(v["fields"]["message"].is_string(), "{line}");
        assert!(v["timestamp"].is_string(), "{line}");
    }
}
