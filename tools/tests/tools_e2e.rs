//! End to end: each tool against a real `bourse run` started by the test (see
//! `common/mod.rs` for how the daemon binary is found). Every run is bounded in time.

mod common;

use bourse::client::OuchClient;
use bourse::types::{Alpha, Firm, Price, Shares, Symbol};
use bourse::wire::itch;
use bourse::wire::ouch::{EnterOrder, Inbound};
use common::{Venue, args, run, spawn};
use std::time::Duration;

const LOADGEN: &str = env!("CARGO_BIN_EXE_bourse-loadgen");
const FEED: &str = env!("CARGO_BIN_EXE_bourse-feed");
const CLIENT: &str = env!("CARGO_BIN_EXE_bourse-client");
const LIMIT: Duration = Duration::from_secs(20);

fn login(venue: &Venue, user: &str, password: &str) -> OuchClient {
    OuchClient::login(venue.gateway, user, password, "", 0, Duration::from_secs(5)).unwrap()
}

/// A DAY limit order for AAPL; waits for its Accepted (and any executions).
fn order(client: &mut OuchClient, token: &str, side: u8, shares: u32, dollars: u32) {
    client
        .send(&Inbound::Enter(EnterOrder {
            token: Alpha::from_str_padded(token).unwrap(),
            side,
            shares: Shares(shares),
            stock: Symbol::from_str_padded("AAPL").unwrap(),
            price: Price(dollars * 10_000),
            tif: 99_999,
            firm: Firm::SPACES,
            display: b'Y',
            capacity: b'A',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
            cross_type: b'N',
            customer_type: b' ',
        }))
        .unwrap();
    let got = client.recv_messages(1, Duration::from_secs(5)).unwrap();
    assert_eq!(got.len(), 1, "no answer to {token}");
}

/// The `enter -> Accepted` row of the summary: count and the six percentile columns (us).
fn accepted_row(stdout: &str) -> (u64, Vec<f64>) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("enter -> Accepted"))
        .unwrap_or_else(|| panic!("no Accepted row in\n{stdout}"));
    let fields: Vec<&str> = line["enter -> Accepted".len()..]
        .split_whitespace()
        .collect();
    let count = fields[0].parse().unwrap();
    let values = fields[1..].iter().map(|v| v.parse().unwrap()).collect();
    (count, values)
}

/// Run `bourse-loadgen` against `venue` with `extra` arguments after the connection ones:
/// it must succeed with every Enter answered and no error. Returns its report and the
/// Accepted row (count, percentiles), whose percentiles must not decrease.
fn loadgen_report(venue: &Venue, extra: &[&dyn std::fmt::Display]) -> (String, u64, Vec<f64>) {
    let config = venue.config.display();
    let mut list: Vec<&dyn std::fmt::Display> =
        vec![&"--config", &config, &"--gateway", &venue.gateway];
    list.extend_from_slice(extra);
    let out = run(LOADGEN, &args(&list), None, LIMIT);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("unanswered enters: 0; errors: 0"),
        "{}",
        out.stdout
    );
    let (count, v) = accepted_row(&out.stdout);
    assert!(
        v.windows(2).all(|w| w[0] <= w[1]),
        "percentiles not monotonic: {v:?}"
    );
    (out.stdout, count, v)
}

#[test]
fn loadgen_at_a_small_rate_reports_sane_percentiles_and_no_errors() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let hist = dir.path().join("latency.hgrm");
    let plot = dir.path().join("latency.svg");
    let (stdout, count, v) = loadgen_report(
        &venue,
        &[
            &"--rate",
            &400,
            &"--duration",
            &2,
            &"--resting",
            &300,
            &"--quiet",
            &"--hist",
            &hist.display(),
            &"--plot",
            &plot.display(),
        ],
    );
    // 800 ops, about half of them Enter Orders.
    assert!(count > 200, "{count} Accepted\n{stdout}");
    assert!(v[0] > 0.0, "{stdout}");
    assert!(v[5] < 2_000_000.0, "max latency {} us", v[5]);
    let achieved = stdout
        .split("achieved ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap();
    assert!((300.0..=500.0).contains(&achieved), "achieved {achieved}");
    let text = std::fs::read_to_string(&hist).unwrap();
    assert!(text.contains("# series enter -> Accepted"));
    assert!(
        std::fs::read_to_string(&plot)
            .unwrap()
            .contains("<polyline")
    );
}

/// Closed loop (the sender parks while its window is full): every Enter answered, no error.
#[test]
fn loadgen_closed_loop_answers_every_enter() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let (stdout, count, _) =
        loadgen_report(&venue, &[&"--window", &64, &"--duration", &1, &"--quiet"]);
    assert!(stdout.contains("(closed loop)"), "{stdout}");
    assert!(
        !stdout.contains("sender lag"),
        "no schedule to lag behind: {stdout}"
    );
    assert!(count > 100, "{count} Accepted\n{stdout}");
}

#[test]
fn loadgen_stops_on_ctrl_c_with_the_partial_report() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let loadgen = spawn(
        LOADGEN,
        &args(&[
            &"--config",
            &venue.config.display(),
            &"--gateway",
            &venue.gateway,
            &"--rate",
            &200,
            &"--duration",
            &60,
            &"--resting",
            &100,
            &"--quiet",
        ]),
        None,
    );
    std::thread::sleep(Duration::from_millis(1_500));
    loadgen.signal(libc::SIGINT);
    let out = loadgen.finish(Duration::from_secs(10));
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("INTERRUPTED: partial report."),
        "{}",
        out.stdout
    );
    let (count, _) = accepted_row(&out.stdout);
    assert!(count > 0, "{}", out.stdout);
}

#[test]
fn feed_check_fills_gaps_rebuilds_books_and_records_a_healthy_stream() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let mut alice = login(&venue, "ALICE", "alicepw");
    let mut bob = login(&venue, "BOB", "bobpw");
    // Published before the subscriber joins: it must re-request them.
    order(&mut alice, "A1", b'B', 300, 150);
    order(&mut bob, "B1", b'S', 100, 151);
    let record = dir.path().join("day.itch");
    let feed = spawn(
        FEED,
        &args(&[
            &"--check",
            &"--config",
            &venue.config.display(),
            &"--group",
            &venue.feed,
            &"--rerequest",
            &venue.rerequest,
            &"--record",
            &record.display(),
            &"--duration",
            &15,
        ]),
        None,
    );
    std::thread::sleep(Duration::from_millis(1_000));
    order(&mut bob, "B2", b'S', 100, 150); // executes against A1
    order(&mut alice, "A2", b'B', 50, 149);
    venue.end_of_day();
    let out = feed.finish(LIMIT);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("check ok: messages 1.."),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("End of Session"), "{}", out.stdout);
    assert!(
        !out.stdout.contains(" gaps 0 "),
        "expected a filled gap: {}",
        out.stdout
    );
    // The recording is the whole stream, readable as BinaryFILE.
    let bytes = std::fs::read(&record).unwrap();
    let messages: Vec<itch::Message> = itch::binary_file::Reader::new(&bytes)
        .map(|m| itch::Message::decode(m.unwrap()).unwrap())
        .collect();
    let applied: u64 = out
        .stdout
        .split(" messages ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert_eq!(messages.len() as u64, applied);
    assert!(matches!(
        messages[0].body,
        itch::Body::SystemEvent { event: b'O' }
    ));
    assert!(
        messages
            .iter()
            .any(|m| matches!(m.body, itch::Body::OrderExecuted { .. }))
    );
}

#[test]
fn feed_check_fails_on_a_gap_that_cannot_be_filled() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let mut alice = login(&venue, "ALICE", "alicepw");
    order(&mut alice, "A1", b'B', 100, 150);
    // Joined mid-session, no snapshot: messages 1.. are missing. Nothing answers re-requests
    // at this address (a free UDP port), and in the second run re-requests are off.
    let nobody = format!("127.0.0.1:{}", common::free_udp_port());
    let runs = [
        vec![
            "--rerequest",
            nobody.as_str(),
            "--rerequest-timeout-ms",
            "200",
        ],
        vec!["--no-rerequest"],
    ];
    for extra in runs {
        let mut a = args(&[
            &"--check",
            &"--config",
            &venue.config.display(),
            &"--group",
            &venue.feed,
            &"--duration",
            &10,
        ]);
        a.extend(extra.iter().map(|s| s.to_string()));
        let out = run(FEED, &a, None, LIMIT);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{extra:?}\n{}\n{}",
            out.stdout,
            out.stderr
        );
        assert!(
            out.stdout.contains("check FAILED: gap: messages 1.."),
            "{extra:?}\n{}",
            out.stdout
        );
    }
}

/// Two publishers on one group and session, both numbering from 1 (two venues that each
/// believe they lead): `--check` fails when the same number carries different messages, and
/// passes when a number merely arrives twice with the same message.
#[test]
fn feed_check_fails_on_two_different_messages_with_one_sequence_number() {
    use bourse::marketdata::publisher::{FeedPublisher, PublisherConfig};
    use bourse::types::Timestamp;
    use bourse::wire::ascii::SessionId;
    let group = common::unique_group();
    let event = |code: u8| itch::Message {
        header: itch::Header {
            locate: 0,
            tracking: 0,
            timestamp: Timestamp(1_000),
        },
        body: itch::Body::SystemEvent { event: code },
    };
    let config = PublisherConfig {
        group,
        interface: std::net::Ipv4Addr::LOCALHOST,
        ttl: 0,
        session: SessionId::new("TEST000001").unwrap(),
        max_payload_bytes: 1_400,
        max_hold_us: 0,
        heartbeat_ms: 1_000,
        end_of_session_ms: 1_000,
        backlog_packets: 16,
    };
    // Message 1 from a fresh publisher each time: a packet numbered 1.
    let send_first = |code: u8, end: bool| {
        let mut publisher = FeedPublisher::new(&config, 1, 0).unwrap();
        publisher.publish_itch(&event(code), 0);
        publisher.flush(0);
        if end {
            publisher.end_of_session(0);
        }
    };
    for (second, expect_failure) in [(b'S', true), (b'O', false)] {
        let mut feed = spawn(
            FEED,
            &args(&[
                &"--check",
                &"--no-rerequest",
                &"--group",
                &group,
                &"--interface",
                &"127.0.0.1",
                &"--duration",
                &10,
            ]),
            None,
        );
        // Until the subscriber has joined and decided (bounded by its --duration).
        for _ in 0..200 {
            if feed.exited() {
                break;
            }
            send_first(b'O', false);
            std::thread::sleep(Duration::from_millis(20));
            send_first(second, !expect_failure);
            std::thread::sleep(Duration::from_millis(30));
        }
        let out = feed.finish(LIMIT);
        if expect_failure {
            assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
            assert!(
                out.stdout.contains(
                    "check FAILED: message 1: two different messages with this MoldUDP64 sequence number"
                ),
                "{}",
                out.stdout
            );
        } else {
            assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
            assert!(
                out.stdout.contains("check ok: messages 1..1"),
                "{}",
                out.stdout
            );
        }
    }
}

#[test]
fn feed_starts_from_a_glimpse_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let mut alice = login(&venue, "ALICE", "alicepw");
    let mut bob = login(&venue, "BOB", "bobpw");
    order(&mut alice, "A1", b'B', 300, 150);
    order(&mut bob, "B1", b'S', 100, 152);
    // No re-requests: everything before the snapshot must come from GLIMPSE.
    let feed = spawn(
        FEED,
        &args(&[
            &"--check",
            &"--config",
            &venue.config.display(),
            &"--group",
            &venue.feed,
            &"--no-rerequest",
            &"--glimpse",
            &"--snapshot",
            &venue.snapshot,
            &"--duration",
            &15,
        ]),
        None,
    );
    std::thread::sleep(Duration::from_millis(1_000));
    // Executes against A1, an order the subscriber knows only from the snapshot.
    order(&mut bob, "B2", b'S', 100, 150);
    venue.end_of_day();
    let out = feed.finish(LIMIT);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("check ok"), "{}", out.stdout);
    assert!(out.stdout.contains(" gaps 0 "), "{}", out.stdout);
    assert!(!out.stdout.contains("snapshot 0 "), "{}", out.stdout);
}

/// `bourse-client` as `user` on `venue`, fed `script` on stdin.
fn client_script(venue: &Venue, user: &str, script: &str) -> common::Output {
    let config = venue.config.display();
    let list: [&dyn std::fmt::Display; 6] = [
        &"--config",
        &config,
        &"--gateway",
        &venue.gateway,
        &"--user",
        &user,
    ];
    run(CLIENT, &args(&list), Some(script), LIMIT)
}

#[test]
fn client_script_enters_replaces_and_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let script = "\
        buy 100 AAPL 150.25 token=T1\n\
        wait 1\n\
        replace T1 T2 200 150.30\n\
        wait 1\n\
        cancel T2\n\
        wait 1\n";
    let out = client_script(&venue, "BOB", script);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let find = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in\n{}", out.stdout))
    };
    let accepted = find("Accepted T1 B 100 AAPL @150.2500");
    let replaced = find("Replaced T1 -> T2 200 AAPL @150.3000");
    let canceled = find("Canceled T2 200 reason U");
    assert!(accepted < replaced && replaced < canceled, "{}", out.stdout);
    assert!(
        out.stdout.contains("logged out after 3 replies"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("! "), "{}", out.stdout);
}

/// A second load run on the same accounts and day gets the executions and cancels of what the
/// first left resting: counted on their own line, not errors (the tools audit saw exit 1 and
/// hundreds of "reply for a token this run never sent").
#[test]
fn a_second_loadgen_run_counts_earlier_runs_replies_apart_from_errors() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let run_with = |tag: &str| {
        let tag = tag.to_string();
        let extra: [&dyn std::fmt::Display; 9] = [
            &"--rate",
            &2_000,
            &"--duration",
            &1,
            &"--resting",
            &200,
            &"--run-tag",
            &tag,
            &"--quiet",
        ];
        loadgen_report(&venue, &extra).0
    };
    let first = run_with("RUNA");
    assert!(!first.contains("earlier runs"), "{first}");
    let second = run_with("RUNB");
    assert!(
        second.contains("replies about earlier runs' orders (not errors):"),
        "{second}"
    );
}

/// Two scripted clients started in one second make up different tokens: the second one's
/// order is answered, not ignored as the first one's duplicate.
#[test]
fn client_runs_in_one_second_make_up_different_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path());
    let mut outputs = Vec::new();
    for _ in 0..2 {
        let out = client_script(&venue, "BOB", "buy 100 AAPL 1.00\nwait 1 2000\n");
        assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("Accepted"), "{}", out.stdout);
        outputs.push(out.stdout);
    }
    let token = |out: &str| {
        out.lines()
            .find(|l| l.contains("Enter "))
            .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
            .unwrap_or_else(|| panic!("no Enter line in\n{out}"))
    };
    assert_ne!(token(&outputs[0]), token(&outputs[1]));
}
