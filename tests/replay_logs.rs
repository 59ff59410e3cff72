//! Every recorded journal in replay-logs/ replays to exactly its recorded digests.

mod model;

use bourse::exchange::{Command, Exchange, Input, Output, Recorder};
use bourse::journal::JournalReader;
use bourse::replay;
use bourse::wire::ouch::Outbound;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn logs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("replay-logs")
}

fn check(name: &str) -> replay::ReplayReport {
    let dir = logs().join(name);
    let report = replay::replay(&dir.join("journal"), None, |_| {}).unwrap();
    let expected = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let actual = report.digest_lines();
    assert_eq!(
        actual,
        expected.lines().collect::<Vec<_>>(),
        "{name}: replay differs from the recording"
    );
    report
}

#[test]
fn busy_day_replays_to_its_digests_twice() {
    let first = check("busy-day");
    let second = check("busy-day");
    assert_eq!(first.digest_lines(), second.digest_lines());
    assert!(first.inputs > 19_000 && first.matches > 1_000);
}

#[test]
fn edge_cases_replay_to_their_digests() {
    check("edge-cases");
}

#[test]
fn torn_tail_replays_the_valid_prefix() {
    let report = check("torn-tail");
    assert!(report.torn_tail.is_some());
}

/// The edge-case day really touches every reject code and every replace outcome.
#[test]
fn edge_cases_cover_every_reject_code_and_replace_outcome() {
    let dir = logs().join("edge-cases/journal");
    let mut reader = JournalReader::open(&dir, 1).unwrap();
    let (header, ts) = replay::read_header(&mut reader).unwrap();
    let mut exchange = Exchange::new(header.venue).unwrap();
    let mut rec = Recorder::default();
    replay::apply_record(
        &mut exchange,
        1,
        ts,
        bourse::sequencer::record::KIND_START_OF_DAY,
        &[],
        &mut rec,
    )
    .unwrap();
    let (mut rejects, mut cancels, mut replaced_dead, mut replaced_live) =
        (BTreeSet::new(), BTreeSet::new(), 0, 0);
    let mut replace_inputs = 0;
    while let Some(r) = reader.next().unwrap() {
        let before = rec.outputs.len();
        replay::apply_record(
            &mut exchange,
            r.seq,
            r.timestamp,
            r.kind,
            r.payload,
            &mut rec,
        )
        .unwrap();
        if r.kind == 2 && r.payload[2] == b'U' {
            replace_inputs += 1;
            if rec.outputs.len() == before {
                rejects.insert('1'); // outcome 1: silently ignored
            }
        }
    }
    for o in &rec.outputs {
        match o {
            Output::Ouch(_, Outbound::Rejected(j)) => {
                rejects.insert(j.reason as char);
            }
            Output::Ouch(_, Outbound::Canceled(c)) => {
                cancels.insert(c.reason as char);
            }
            Output::Ouch(_, Outbound::Replaced(u)) if u.order_state == b'D' => replaced_dead += 1,
            Output::Ouch(_, Outbound::Replaced(_)) => replaced_live += 1,
            _ => {}
        }
    }
    let want: BTreeSet<char> = "OSHCZXDRNLn1".chars().collect();
    assert!(want.is_subset(&rejects), "reject codes seen: {rejects:?}");
    let want_cancels: BTreeSet<char> = "UITE".chars().collect();
    assert!(
        want_cancels.is_subset(&cancels),
        "cancel reasons seen: {cancels:?}"
    );
    assert!(
        replaced_dead >= 1 && replaced_live >= 2,
        "{replaced_dead} dead, {replaced_live} live replaces"
    );
    assert!(replace_inputs >= 8);
}

#[test]
fn venue_controls_replay_to_their_digests() {
    check("venue-controls");
}

/// The venue-controls day holds every new input kind and outcome of DESIGN.md 4a, and its
/// outputs (whose digests are recorded) are what the reference model computes from the same
/// inputs, input by input: the digests were not simply taken from the engine.
#[test]
fn venue_controls_cover_every_control_and_equal_the_model() {
    use bourse::sequencer::record;
    let dir = logs().join("venue-controls/journal");
    let mut reader = JournalReader::open(&dir, 1).unwrap();
    let (header, ts) = replay::read_header(&mut reader).unwrap();
    let mut exchange = Exchange::new(header.venue.clone()).unwrap();
    let mut model = model::Model::new(&header.venue);
    let mut inputs = vec![Input {
        seq: 1,
        timestamp: ts,
        command: Command::StartOfDay,
    }];
    while let Some(r) = reader.next().unwrap() {
        inputs.push(Input {
            seq: r.seq,
            timestamp: r.timestamp,
            command: record::decode(r.kind, r.payload).unwrap(),
        });
    }
    let (mut kinds, mut rejects, mut cancels) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut refused = 0;
    for input in &inputs {
        let mut rec = Recorder::default();
        let outcome = exchange.apply(input, &mut rec);
        let mut want = Vec::new();
        model.apply(input, &mut want);
        assert!(
            rec.outputs == want,
            "input {input:?}: engine and model differ"
        );
        if matches!(outcome, bourse::exchange::Outcome::AdminRefused(_)) {
            refused += 1;
        }
        kinds.insert(match input.command {
            Command::Admin(a) => format!("{a:?}")
                .split(['(', ' '])
                .next()
                .unwrap()
                .to_string(),
            Command::Disconnect { .. } => "Disconnect".into(),
            Command::Ouch { .. } => "Ouch".into(),
            other => format!("{other:?}"),
        });
        for o in &rec.outputs {
            match o {
                Output::Ouch(_, Outbound::Rejected(j)) => {
                    rejects.insert(j.reason as char);
                }
                Output::Ouch(_, Outbound::Canceled(c)) => {
                    cancels.insert(c.reason as char);
                }
                _ => {}
            }
        }
    }
    let want_kinds = [
        "CancelAll",
        "Block",
        "Unblock",
        "Disconnect",
        "Halt",
        "EndOfDay",
    ];
    for k in want_kinds {
        assert!(kinds.contains(k), "input kinds seen: {kinds:?}");
    }
    assert!(
        "amOHC".chars().all(|c| rejects.contains(&c)),
        "reject codes seen: {rejects:?}"
    );
    assert!(
        "QSZUE".chars().all(|c| cancels.contains(&c)),
        "cancel reasons seen: {cancels:?}"
    );
    assert!(refused >= 3, "{refused} admin commands refused");
}
