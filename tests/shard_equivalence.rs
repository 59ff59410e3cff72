//! The sharded split (front → shards → merge, `bourse::engine`) against the single-threaded
//! reference `Exchange::apply`: identical output lists, stream digests, numbering and GLIMPSE
//! snapshots, with 1, 2 and 3 shards, run at once and in pseudo-random interleavings (shards
//! racing ahead, the merge lagging, verdicts late), over random days and the recorded
//! journals in replay-logs/.
//!
//! `PROPTEST_CASES` sets the number of random days (default 128).

use bourse::exchange::{
    AccountDef, Admin, Command, Exchange, Input, Limits, Output, Recorder, Split, SymbolDef, Venue,
};
use bourse::replay::DigestSink;
use bourse::types::{AccountId, Firm, Locate, Price, Shares, Symbol, Timestamp, Token};
use bourse::wire::ouch;
use proptest::prelude::*;
use proptest::sample::Index;

const ACCOUNTS: usize = 4;
const SYMBOLS: [&str; 4] = ["AAPL", "MSFT", "ZZ", "IBM"];
const BASE: [u32; 4] = [1_500_000, 200_000, 50_000, 1_000_000];
const TICK: [u32; 4] = [100, 50, 1, 100];
const OPEN_NS: u64 = 34_200 * 1_000_000_000;

fn venue(limits: Limits) -> Venue {
    Venue {
        symbols: SYMBOLS
            .iter()
            .enumerate()
            .map(|(i, s)| SymbolDef {
                symbol: s.to_string(),
                tick: TICK[i],
                round_lot: 100,
                max_order_shares: [100_000, 800, 999_999, 5_000][i],
                max_order_notional: [Some(50_000), None, Some(20_000), None][i],
            })
            .collect(),
        accounts: ["ALICE", "BOB", "CAROL", "DAVE"]
            .iter()
            .zip(["AAAA", "BBBB", "CC", ""])
            .map(|(u, f)| AccountDef {
                username: u.to_string(),
                firm: f.to_string(),
                ..AccountDef::default()
            })
            .collect(),
        limits,
    }
}

fn tok(s: &str) -> Token {
    Token::from_str_padded(s).unwrap()
}

#[derive(Clone, Debug)]
enum TokSel {
    Fresh,
    /// One of the account's last three tokens (often a replacement still pending).
    Recent(Index),
    Any(Index),
}

#[derive(Clone, Debug)]
enum Target {
    Live(Index),
    Last,
    Own(Index),
    Other(Index),
    Unknown,
}

#[derive(Clone, Debug)]
struct Order {
    account: usize,
    token: TokSel,
    side: u8,
    shares: u32,
    symbol: usize,
    /// Ticks from the base price; `None` = market.
    price: Option<i8>,
    tif: u32,
    display: u8,
    min_qty: u32,
    firm: u8,
}

#[derive(Clone, Debug)]
enum Act {
    Enter(Order),
    Replace {
        account: usize,
        existing: Target,
        replacement: TokSel,
        shares: u32,
        price: Option<i8>,
        tif: u32,
        display: u8,
        min_qty: u32,
    },
    Cancel {
        account: usize,
        target: Target,
        shares: u32,
    },
    Tick,
    Halt(u16),
    Resume(u16),
    EndOfDay,
}

/// Turns actions into inputs; an `Exchange` follows along to steer targets to live orders.
struct Builder {
    seq: u64,
    now: u64,
    counter: u32,
    tokens: Vec<Vec<(Token, usize)>>,
    inputs: Vec<Input>,
    shadow: Exchange,
}

impl Builder {
    fn new(venue: &Venue) -> Builder {
        let mut b = Builder {
            seq: 0,
            now: OPEN_NS,
            counter: 0,
            tokens: vec![Vec::new(); ACCOUNTS],
            inputs: Vec::new(),
            shadow: Exchange::new(venue.clone()).unwrap(),
        };
        b.push(1, Command::StartOfDay);
        b
    }

    fn push(&mut self, dt: u64, command: Command) {
        self.seq += 1;
        self.now += dt.max(1);
        let input = Input {
            seq: self.seq,
            timestamp: Timestamp(self.now),
            command,
        };
        self.shadow
            .apply(&input, &mut bourse::exchange::Discard::default());
        self.inputs.push(input);
    }

    fn token(&mut self, account: usize, sel: &TokSel) -> Token {
        let own = &self.tokens[account];
        match sel {
            TokSel::Recent(i) if !own.is_empty() => {
                let from = own.len().saturating_sub(3);
                own[from + i.index(own.len() - from)].0
            }
            TokSel::Any(i) if !own.is_empty() => own[i.index(own.len())].0,
            _ => {
                self.counter += 1;
                tok(&format!("t{}", self.counter))
            }
        }
    }

    fn target(&mut self, account: usize, target: &Target) -> (Token, usize) {
        let own = &self.tokens[account];
        if let Target::Live(i) = target {
            let live: Vec<(Token, usize)> = own
                .iter()
                .copied()
                .filter(|(t, _)| {
                    self.shadow
                        .live_order(AccountId(account as u16), t)
                        .is_some()
                })
                .collect();
            if !live.is_empty() {
                return live[i.index(live.len())];
            }
        }
        match target {
            Target::Last if !own.is_empty() => *own.last().unwrap(),
            Target::Own(i) if !own.is_empty() => own[i.index(own.len())],
            Target::Other(i) => {
                let others: Vec<(Token, usize)> = (0..ACCOUNTS)
                    .filter(|&a| a != account)
                    .flat_map(|a| self.tokens[a].iter().copied())
                    .collect();
                if others.is_empty() {
                    (tok("nobody"), 0)
                } else {
                    others[i.index(others.len())]
                }
            }
            _ => (tok("unknown"), 0),
        }
    }

    fn price(symbol: usize, ticks: Option<i8>) -> Price {
        match ticks {
            None => Price::MARKET,
            Some(t) => {
                Price((i64::from(BASE[symbol]) + i64::from(t) * i64::from(TICK[symbol])) as u32)
            }
        }
    }

    fn step(&mut self, dt: u64, act: &Act) {
        let ouch = |account: usize, message| Command::Ouch {
            account: AccountId(account as u16),
            message,
        };
        match act {
            Act::Enter(o) => {
                let token = self.token(o.account, &o.token);
                let s = o.symbol.min(3);
                let stock = if o.symbol < 4 {
                    Symbol::from_str_padded(SYMBOLS[o.symbol]).unwrap()
                } else {
                    Symbol::from_str_padded("GOOG").unwrap()
                };
                self.tokens[o.account].push((token, s));
                let firm = match o.firm {
                    0 => Firm::SPACES,
                    1 => Firm::from_str_padded(["AAAA", "BBBB", "CC", ""][o.account]).unwrap(),
                    _ => Firm::from_str_padded("XXXX").unwrap(),
                };
                let message = ouch::Inbound::Enter(ouch::EnterOrder {
                    token,
                    side: o.side,
                    shares: Shares(o.shares),
                    stock,
                    price: Self::price(s, o.price),
                    tif: if o.price.is_none() { 0 } else { o.tif },
                    firm,
                    display: o.display,
                    capacity: b'A',
                    intermarket_sweep: b'N',
                    min_qty: Shares(o.min_qty),
                    cross_type: b'N',
                    customer_type: b'R',
                });
                self.push(dt, ouch(o.account, message));
            }
            Act::Replace {
                account,
                existing,
                replacement,
                shares,
                price,
                tif,
                display,
                min_qty,
            } => {
                let (existing, s) = self.target(*account, existing);
                let replacement = self.token(*account, replacement);
                self.tokens[*account].push((replacement, s));
                let message = ouch::Inbound::Replace(ouch::ReplaceOrder {
                    existing,
                    replacement,
                    shares: Shares(*shares),
                    price: Self::price(s, *price),
                    tif: if price.is_none() { 0 } else { *tif },
                    display: *display,
                    intermarket_sweep: b'Y',
                    min_qty: Shares(*min_qty),
                });
                self.push(dt, ouch(*account, message));
            }
            Act::Cancel {
                account,
                target,
                shares,
            } => {
                let (token, _) = self.target(*account, target);
                let message = ouch::Inbound::Cancel(ouch::CancelOrder {
                    token,
                    shares: Shares(*shares),
                });
                self.push(dt, ouch(*account, message));
            }
            Act::Tick => self.push(dt, Command::Tick),
            Act::Halt(l) => self.push(dt, Command::Admin(Admin::Halt(Locate(*l)))),
            Act::Resume(l) => self.push(dt, Command::Admin(Admin::Resume(Locate(*l)))),
            Act::EndOfDay => self.push(dt, Command::Admin(Admin::EndOfDay)),
        }
    }
}

fn tok_sel() -> impl Strategy<Value = TokSel> {
    prop_oneof![
        12 => Just(TokSel::Fresh),
        3 => any::<Index>().prop_map(TokSel::Recent),
        1 => any::<Index>().prop_map(TokSel::Any),
    ]
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        10 => any::<Index>().prop_map(Target::Live),
        4 => Just(Target::Last),
        2 => any::<Index>().prop_map(Target::Own),
        1 => any::<Index>().prop_map(Target::Other),
        1 => Just(Target::Unknown),
    ]
}

fn shares() -> impl Strategy<Value = u32> {
    prop_oneof![20 => 1..=300u32, 3 => 300..=2_000u32, 1 => Just(0u32), 1 => Just(1_000_000u32)]
}

fn price() -> impl Strategy<Value = Option<i8>> {
    prop_oneof![12 => (-4i8..=4).prop_map(Some), 1 => Just(None), 1 => Just(Some(-128i8))]
}

fn tif() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(0u32), 5 => Just(99_999u32), 4 => 1..=20u32, 1 => Just(100_000u32)]
}

fn display() -> impl Strategy<Value = u8> {
    prop::sample::select(vec![b'Y', b'Y', b'A', b'N', b'P', b'Q'])
}

fn min_qty() -> impl Strategy<Value = u32> {
    prop_oneof![6 => Just(0u32), 1 => 1..=300u32]
}

fn act() -> impl Strategy<Value = Act> {
    let enter = (
        (
            0..ACCOUNTS,
            tok_sel(),
            prop::sample::select(vec![b'B', b'S', b'T', b'E', b'x']),
        ),
        (
            shares(),
            prop_oneof![20 => 0usize..4, 1 => Just(4usize)],
            price(),
            tif(),
        ),
        (
            display(),
            min_qty(),
            prop_oneof![10 => Just(0u8), 4 => Just(1u8), 1 => Just(2u8)],
        ),
    )
        .prop_map(
            |((account, token, side), (shares, symbol, price, tif), (display, min_qty, firm))| {
                Act::Enter(Order {
                    account,
                    token,
                    side,
                    shares,
                    symbol,
                    price,
                    tif,
                    display,
                    min_qty: if tif == 0 { min_qty } else { 0 },
                    firm,
                })
            },
        );
    let replace = (
        (
            0..ACCOUNTS,
            target(),
            prop_oneof![6 => Just(TokSel::Fresh), 3 => tok_sel()],
        ),
        (shares(), price(), tif(), display(), min_qty()),
    )
        .prop_map(
            |((account, existing, replacement), (shares, price, tif, display, min_qty))| {
                Act::Replace {
                    account,
                    existing,
                    replacement,
                    shares,
                    price,
                    tif,
                    display,
                    min_qty: if tif == 0 { min_qty } else { 0 },
                }
            },
        );
    let cancel = (
        0..ACCOUNTS,
        target(),
        prop_oneof![2 => Just(0u32), 2 => 0..=300u32],
    )
        .prop_map(|(account, target, shares)| Act::Cancel {
            account,
            target,
            shares,
        });
    prop_oneof![
        20 => enter,
        10 => replace,
        6 => cancel,
        3 => Just(Act::Tick),
        1 => (0u16..=5).prop_map(Act::Halt),
        2 => (1u16..=4).prop_map(Act::Resume),
    ]
}

fn dt() -> impl Strategy<Value = u64> {
    prop_oneof![
        10 => 1..=500_000_000u64,
        3 => 1..=5_000u64,
        2 => 1_000_000_000..=15_000_000_000u64,
    ]
}

/// Small tables now and then, so capacity rejects and full token tables happen.
fn limits() -> impl Strategy<Value = Limits> {
    prop_oneof![
        3 => Just(Limits { orders_per_symbol: 1024, levels_per_side: 256, tokens_per_account: 4096 }),
        1 => (2u32..8, 1u32..4, 3u32..30).prop_map(|(o, l, t)| Limits {
            orders_per_symbol: o,
            levels_per_side: l,
            tokens_per_account: t,
        }),
    ]
}

fn day() -> impl Strategy<Value = (Limits, Vec<(u64, Act)>, Option<usize>)> {
    (
        limits(),
        prop::collection::vec((dt(), act()), 1..250),
        prop_oneof![2 => Just(None), 1 => (0usize..20).prop_map(Some)],
    )
}

fn build(limits: Limits, steps: &[(u64, Act)], eod: Option<usize>) -> (Venue, Vec<Input>) {
    let venue = venue(limits);
    let mut b = Builder::new(&venue);
    let eod_at = eod.map(|tail| steps.len().saturating_sub(tail));
    for (i, (dt, act)) in steps.iter().enumerate() {
        if eod_at == Some(i) {
            b.step(1, &Act::EndOfDay);
        }
        b.step(*dt, act);
    }
    (venue, b.inputs)
}

struct Run {
    outputs: Vec<Output>,
    digests: Vec<String>,
    order_refs: u64,
    matches: u64,
    snapshot: Vec<bourse::wire::itch::Message>,
}

fn digests(venue: &Venue, outputs: &[Output]) -> Vec<String> {
    use bourse::exchange::Sink;
    let mut d = DigestSink::new(venue.accounts.len(), None);
    for o in outputs {
        match o {
            Output::Ouch(a, m) => d.ouch(*a, m),
            Output::Itch(m) => d.itch(m),
        }
    }
    let mut v = vec![format!("itch {} {}", d.itch.messages, d.itch.digest())];
    v.extend(
        d.ouch
            .iter()
            .map(|h| format!("ouch {} {}", h.messages, h.digest())),
    );
    v
}

fn reference(venue: &Venue, inputs: &[Input]) -> Run {
    let mut ex = Exchange::new(venue.clone()).unwrap();
    let mut rec = Recorder::default();
    for i in inputs {
        ex.apply(i, &mut rec);
    }
    let mut snapshot = Vec::new();
    ex.snapshot(Timestamp(1), |m| snapshot.push(*m));
    Run {
        digests: digests(venue, &rec.outputs),
        outputs: rec.outputs,
        order_refs: ex.order_refs_used(),
        matches: ex.matches_used(),
        snapshot,
    }
}

fn split(venue: &Venue, inputs: &[Input], shards: usize, seed: Option<u64>) -> Run {
    let mut p = match seed {
        None => Split::new(venue, shards).unwrap(),
        Some(seed) => Split::shuffled(venue, shards, seed).unwrap(),
    };
    let mut rec = Recorder::default();
    for i in inputs {
        p.apply(i, &mut rec);
    }
    p.flush(&mut rec);
    let snapshot = p.snapshot(Timestamp(1), &mut rec);
    Run {
        digests: digests(venue, &rec.outputs),
        outputs: rec.outputs,
        order_refs: p.order_refs_used(),
        matches: p.matches_used(),
        snapshot,
    }
}

fn compare(want: &Run, got: &Run, what: &str) -> Result<(), TestCaseError> {
    if let Some(at) = (0..want.outputs.len().max(got.outputs.len()))
        .find(|&i| want.outputs.get(i) != got.outputs.get(i))
    {
        return Err(TestCaseError::fail(format!(
            "{what}: output {at} differs\n  exchange: {:?}\n  split:    {:?}\n  (exchange {} outputs, split {})",
            want.outputs.get(at),
            got.outputs.get(at),
            want.outputs.len(),
            got.outputs.len()
        )));
    }
    prop_assert_eq!(&want.digests, &got.digests, "{}: digests", what);
    prop_assert_eq!(want.order_refs, got.order_refs, "{}: order refs", what);
    prop_assert_eq!(want.matches, got.matches, "{}: matches", what);
    prop_assert_eq!(&want.snapshot, &got.snapshot, "{}: snapshot", what);
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(128)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn split_equals_exchange_whatever_the_shards_and_timing(
        (limits, steps, eod) in day(),
        seeds in prop::collection::vec(any::<u64>(), 2),
    ) {
        let (venue, inputs) = build(limits, &steps, eod);
        let want = reference(&venue, &inputs);
        for shards in 1..=3 {
            compare(&want, &split(&venue, &inputs, shards, None), &format!("{shards} shards at once"))?;
            for &seed in &seeds {
                compare(
                    &want,
                    &split(&venue, &inputs, shards, Some(seed)),
                    &format!("{shards} shards, schedule {seed}"),
                )?;
            }
        }
    }
}

/// A pending replacement token reused at once by an Enter and by another Replace: the front
/// must wait for the shard's verdict, and both answers (consumed or not) must come out right.
#[test]
fn reused_pending_tokens_wait_for_the_verdict() {
    let venue = venue(Limits::default());
    let mut b = Builder::new(&venue);
    // A enters t1, replaces t1 -> r1 (consumed), enters r1 (ignored: used). Replaces t9
    // (unknown) -> r2 (ignored), enters r2 (accepted). Enters t2, cancels it, replaces t2 -> r3
    // (not live: r3 unused), enters r3 (accepted). Replaces r3 -> r4 with a bad display (r4
    // unused, r3 canceled), enters r4 (accepted); r4 -> r1 (used: ignored); r4 -> r5 -> r6.
    let enter = |token: &str, price: u32| {
        ouch::Inbound::Enter(ouch::EnterOrder {
            token: tok(token),
            side: b'B',
            shares: Shares(100),
            stock: Symbol::from_str_padded("AAPL").unwrap(),
            price: Price(price),
            tif: 99_999,
            firm: Firm::SPACES,
            display: b'Y',
            capacity: b'A',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
            cross_type: b'N',
            customer_type: b'R',
        })
    };
    let replace = |existing: &str, replacement: &str, display: u8| {
        ouch::Inbound::Replace(ouch::ReplaceOrder {
            existing: tok(existing),
            replacement: tok(replacement),
            shares: Shares(200),
            price: Price(1_490_000),
            tif: 99_999,
            display,
            intermarket_sweep: b'N',
            min_qty: Shares(0),
        })
    };
    let cancel = |token: &str| {
        ouch::Inbound::Cancel(ouch::CancelOrder {
            token: tok(token),
            shares: Shares(0),
        })
    };
    let a = AccountId(0);
    for m in [
        enter("t1", 1_500_000),
        replace("t1", "r1", b'Y'),
        enter("r1", 1_500_000),
        replace("t9", "r2", b'Y'),
        enter("r2", 1_500_000),
        cancel("t1"),
        enter("t2", 1_500_000),
        cancel("t2"),
        replace("t2", "r3", b'Y'),
        enter("r3", 1_500_000),
        replace("r3", "r4", b'?'),
        enter("r4", 1_500_000),
        replace("r4", "r1", b'Y'),
        replace("r4", "r5", b'A'),
        replace("r5", "r6", b'N'),
        enter("r6", 1_500_000),
        cancel("r6"),
    ] {
        b.push(
            1_000,
            Command::Ouch {
                account: a,
                message: m,
            },
        );
    }
    let want = reference(&venue, &b.inputs);
    for shards in 1..=3 {
        for seed in [None, Some(1), Some(7), Some(42)] {
            let got = split(&venue, &b.inputs, shards, seed);
            compare(&want, &got, &format!("{shards} shards, {seed:?}")).unwrap();
        }
    }
    // Lazy schedule: the front cannot know r1, r3, r4, r6 without waiting.
    let mut p = Split::shuffled(&venue, 2, 3).unwrap();
    let mut rec = Recorder::default();
    for i in &b.inputs {
        p.apply(i, &mut rec);
    }
    p.flush(&mut rec);
    assert_eq!(rec.outputs, want.outputs);
}

/// Every recorded journal gives the same digests through the split pipeline as `bourse replay`.
#[test]
fn replay_logs_through_the_split_pipeline() {
    use bourse::journal::JournalReader;
    use bourse::sequencer::record;
    let logs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("replay-logs");
    for name in ["busy-day", "edge-cases", "torn-tail"] {
        let dir = logs.join(name);
        // `bourse replay` of the same journal (not expected.txt: the reference is what the
        // single-threaded exchange computes today).
        let report = bourse::replay::replay(&dir.join("journal"), None, |_| {}).unwrap();
        let expected = report.digest_lines().join("\n");
        let verified = bourse::journal::verify(&dir.join("journal")).unwrap();
        let mut reader = JournalReader::open(&dir.join("journal"), 1).unwrap();
        let (header, ts) = bourse::replay::read_header(&mut reader).unwrap();
        let mut inputs = vec![Input {
            seq: 1,
            timestamp: ts,
            command: Command::StartOfDay,
        }];
        while (inputs.len() as u64) < verified.last_seq {
            let Some(r) = reader.next().unwrap() else {
                break;
            };
            inputs.push(Input {
                seq: r.seq,
                timestamp: r.timestamp,
                command: record::decode(r.kind, r.payload).unwrap(),
            });
        }
        let venue = header.venue.clone();
        for shards in 1..=3 {
            for seed in [None, Some(shards as u64 * 1_000_003)] {
                let mut p = match seed {
                    None => Split::new(&venue, shards).unwrap(),
                    Some(s) => Split::shuffled(&venue, shards, s).unwrap(),
                };
                let mut sink = DigestSink::new(venue.accounts.len(), None);
                for i in &inputs {
                    p.apply(i, &mut sink);
                }
                p.flush(&mut sink);
                let mut lines = vec![
                    format!("inputs {} last_seq {}", inputs.len(), p.last_seq()),
                    format!(
                        "order_refs {} matches {}",
                        p.order_refs_used(),
                        p.matches_used()
                    ),
                    format!(
                        "itch {} messages sha256 {}",
                        sink.itch.messages,
                        sink.itch.digest()
                    ),
                ];
                for (a, h) in venue.accounts.iter().zip(&sink.ouch) {
                    lines.push(format!(
                        "ouch {} {} messages sha256 {}",
                        a.username,
                        h.messages,
                        h.digest()
                    ));
                }
                let want: Vec<&str> = expected
                    .lines()
                    .filter(|l| !l.starts_with("state ") && !l.starts_with("torn_tail "))
                    .collect();
                assert_eq!(lines, want, "{name}: {shards} shards, schedule {seed:?}");
            }
        }
        println!("{name}: {} inputs equal with 1, 2, 3 shards", inputs.len());
    }
}

/// The random days do reach the interesting paths: pending tokens the front had to wait
/// for, full token tables, capacity rejects, every replace outcome, expiry, end of day.
#[test]
fn random_days_cover_the_hard_cases() {
    use bourse::wire::itch::Body;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(Config::default().rng_algorithm),
    );
    let (mut waits, mut rejected_o, mut replaced, mut itch_u, mut expired, mut closed) =
        (0, 0, 0, 0, 0, 0);
    for _ in 0..150 {
        let (limits, steps, eod) = day().new_tree(&mut runner).unwrap().current();
        let (venue, inputs) = build(limits, &steps, eod);
        let mut p = Split::shuffled(&venue, 3, 99).unwrap();
        let mut rec = Recorder::default();
        for i in &inputs {
            p.apply(i, &mut rec);
        }
        p.flush(&mut rec);
        waits += p.front_waits();
        for o in &rec.outputs {
            match o {
                Output::Ouch(_, ouch::Outbound::Rejected(r)) if r.reason == b'O' => rejected_o += 1,
                Output::Ouch(_, ouch::Outbound::Replaced(_)) => replaced += 1,
                Output::Ouch(_, ouch::Outbound::Canceled(c)) if c.reason == b'T' => expired += 1,
                Output::Ouch(_, ouch::Outbound::Canceled(c)) if c.reason == b'E' => closed += 1,
                Output::Itch(m) if matches!(m.body, Body::OrderReplace { .. }) => itch_u += 1,
                _ => {}
            }
        }
    }
    println!(
        "front waits {waits}, rejects O {rejected_o}, replaced {replaced}, ITCH U {itch_u}, expired {expired}, closed {closed}"
    );
    assert!(
        waits > 20
            && rejected_o > 20
            && replaced > 100
            && itch_u > 20
            && expired > 20
            && closed > 20
    );
}

mod threaded {
    use super::*;
    use bourse::config::WaitStrategy;
    use bourse::engine::threaded::{OutputStage, Sharded, ShardedConfig};

    #[derive(Default)]
    struct Collect(Vec<Output>);

    impl bourse::exchange::Sink for Collect {
        fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
            self.0.push(Output::Ouch(account, *message));
        }
        fn itch(&mut self, message: &bourse::wire::itch::Message) {
            self.0.push(Output::Itch(*message));
        }
    }

    impl OutputStage for Collect {}

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases() / 4 + 1, ..ProptestConfig::default() })]

        /// The same random days on real threads and small rings (backpressure, late verdicts).
        #[test]
        fn threads_equal_exchange((limits, steps, eod) in day(), shards in 1usize..=3) {
            let (venue, inputs) = build(limits, &steps, eod);
            let want = reference(&venue, &inputs);
            let config = ShardedConfig { shards, wait: WaitStrategy::Park, ring_slots: 64, pin_cores: false };
            let mut p = Sharded::start(&venue, &config, Collect::default()).unwrap();
            for i in &inputs {
                p.apply(i);
            }
            let got = p.finish().0;
            prop_assert_eq!(got.len(), want.outputs.len());
            prop_assert!(got == want.outputs, "{} shards: outputs differ", shards);
        }
    }
}
