//! The sharded split (front → shards → merge, `bourse::engine`) against the single-threaded
//! reference `Exchange::apply`: identical output lists, stream digests, numbering and GLIMPSE
//! snapshots, with 1, 2 and 3 shards, run at once and in pseudo-random interleavings (shards
//! racing ahead, the merge lagging, verdicts late), over random days and the recorded
//! journals in replay-logs/.
//!
//! `PROPTEST_CASES` sets the number of random days (default 128).

use bourse::exchange::{
    AccountDef, Admin, Command, Exchange, Input, Limits, Output, Recorder, Split, Stp, SymbolDef,
    Venue,
};
use bourse::replay::DigestSink;
use bourse::types::{AccountId, Firm, Locate, Price, Shares, Symbol, Timestamp, Token};
use bourse::wire::ouch;
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::HashMap;

const ACCOUNTS: usize = 6;
const FIRMS: [&str; ACCOUNTS] = ["AAAA", "BBBB", "CC", "", "AAAA", "BOTH"];
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
        accounts: ["ALICE", "BOB", "CAROL", "DAVE", "NEWEST", "BOTH"]
            .iter()
            .zip(FIRMS)
            .enumerate()
            .map(|(i, (u, f))| controls(i, u, f))
            .collect(),
        limits,
    }
}

/// DESIGN.md 4a controls: accounts 2.. have each STP mode; limits small enough to bite, on
/// accounts whose orders spread over symbols on different shards (the front must read the
/// position of every shard). Six accounts, not more: fewer orders per account would make the
/// pending replacement tokens the front waits for rare.
fn controls(i: usize, username: &str, firm: &str) -> AccountDef {
    let plain = AccountDef {
        username: username.to_string(),
        firm: firm.to_string(),
        ..AccountDef::default()
    };
    match i {
        2 => AccountDef {
            stp: Stp::CancelOldest,
            max_open_orders: Some(3),
            ..plain
        },
        3 => AccountDef {
            stp: Stp::Decrement,
            cancel_on_disconnect: true,
            max_day_shares: Some(1_000),
            ..plain
        },
        4 => AccountDef {
            stp: Stp::CancelNewest,
            cancel_on_disconnect: true,
            max_open_shares: Some(900),
            ..plain
        },
        5 => AccountDef {
            stp: Stp::CancelBoth,
            cancel_on_disconnect: true,
            max_open_orders: Some(4),
            max_open_shares: Some(1_200),
            max_day_shares: Some(1_500),
            ..plain
        },
        _ => plain,
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
    /// An order against one of the account's own live orders: its symbol, the other side,
    /// `through` ticks past its price (`None`: a market order).
    SelfCross {
        account: usize,
        target: Index,
        shares: u32,
        through: Option<u8>,
        tif: u32,
    },
    /// Kill switch: symbol 0 = all, else a locate (5 is unknown).
    CancelAll {
        account: usize,
        symbol: u16,
    },
    Block(usize),
    Unblock(usize),
    Disconnect(usize),
}

/// Turns actions into inputs; an `Exchange` follows along to steer targets to live orders.
struct Builder {
    seq: u64,
    now: u64,
    counter: u32,
    tokens: Vec<Vec<(Token, usize)>>,
    /// Side letter and price of every order the builder entered or replaced, by token.
    placed: HashMap<(usize, Token), (u8, Price)>,
    /// Accounts the builder blocked (Unblock is steered to them).
    blocked: Vec<usize>,
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
            placed: HashMap::new(),
            blocked: Vec::new(),
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
                self.placed
                    .insert((o.account, token), (o.side, Self::price(s, o.price)));
                let firm = match o.firm {
                    0 => Firm::SPACES,
                    1 => Firm::from_str_padded(FIRMS[o.account]).unwrap(),
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
                if let Some(&(side, _)) = self.placed.get(&(*account, existing)) {
                    self.placed
                        .insert((*account, replacement), (side, Self::price(s, *price)));
                }
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
            Act::SelfCross {
                account,
                target,
                shares,
                through,
                tif,
            } => self.self_cross(dt, *account, *target, *shares, *through, *tif),
            Act::CancelAll { account, symbol } => {
                let admin = Admin::CancelAll {
                    account: AccountId(*account as u16),
                    symbol: (*symbol > 0).then_some(Locate(*symbol)),
                };
                self.push(dt, Command::Admin(admin))
            }
            Act::Block(a) => {
                self.blocked.push(*a);
                self.push(dt, Command::Admin(Admin::Block(AccountId(*a as u16))))
            }
            Act::Unblock(a) => {
                let a = if self.blocked.is_empty() {
                    *a
                } else {
                    self.blocked.swap_remove(*a % self.blocked.len())
                };
                self.push(dt, Command::Admin(Admin::Unblock(AccountId(a as u16))))
            }
            Act::Disconnect(a) => self.push(
                dt,
                Command::Disconnect {
                    account: AccountId(*a as u16),
                },
            ),
        }
    }

    fn self_cross(
        &mut self,
        dt: u64,
        account: usize,
        target: Index,
        shares: u32,
        through: Option<u8>,
        tif: u32,
    ) {
        let live: Vec<(Token, usize)> = self.tokens[account]
            .iter()
            .copied()
            .filter(|(t, _)| {
                self.placed.contains_key(&(account, *t))
                    && self
                        .shadow
                        .live_order(AccountId(account as u16), t)
                        .is_some()
            })
            .collect();
        let Some(&(own, s)) = live.get(target.index(live.len().max(1))) else {
            return;
        };
        let (side, at) = self.placed[&(account, own)];
        let buy = !matches!(side, b'B');
        let price = match through {
            None => Price::MARKET,
            Some(n) if buy => Price(at.raw() + u32::from(n) * TICK[s]),
            Some(n) => Price(at.raw().saturating_sub(u32::from(n) * TICK[s]).max(TICK[s])),
        };
        let token = self.token(account, &TokSel::Fresh);
        self.tokens[account].push((token, s));
        let side = if buy { b'B' } else { b'S' };
        self.placed.insert((account, token), (side, price));
        let message = ouch::Inbound::Enter(ouch::EnterOrder {
            token,
            side,
            shares: Shares(shares),
            stock: Symbol::from_str_padded(SYMBOLS[s]).unwrap(),
            price,
            tif: if price.is_market() { 0 } else { tif },
            firm: Firm::SPACES,
            display: b'Y',
            capacity: b'A',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
            cross_type: b'N',
            customer_type: b'R',
        });
        self.push(
            dt,
            Command::Ouch {
                account: AccountId(account as u16),
                message,
            },
        );
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

fn account() -> impl Strategy<Value = usize> {
    0..ACCOUNTS
}

fn act() -> impl Strategy<Value = Act> {
    let enter = (
        (
            account(),
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
            account(),
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
        account(),
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
        2 => (account(), any::<Index>(), 1..=400u32, prop_oneof![5 => (0u8..=2).prop_map(Some), 1 => Just(None)], tif())
            .prop_map(|(account, target, shares, through, tif)| Act::SelfCross { account, target, shares, through, tif }),
        1 => (0..=ACCOUNTS, prop_oneof![2 => Just(0u16), 2 => 1u16..=4, 1 => Just(5u16)])
            .prop_map(|(account, symbol)| Act::CancelAll { account, symbol }),
        1 => account().prop_map(Act::Block),
        2 => account().prop_map(Act::Unblock),
        1 => account().prop_map(Act::Disconnect),
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
    let mut d = DigestSink::new(venue.accounts.len());
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

/// The day cut at `at`: the state saved after `inputs[..at]` (by the exchange, or by a split
/// of `save_shards`) and restored into `restore_shards` (0 = an `Exchange`), then the rest
/// of the day. Returns the outputs from `at` on, the final state digest and GLIMPSE body.
fn resumed(
    venue: &Venue,
    inputs: &[Input],
    at: usize,
    save_shards: usize,
    restore_shards: usize,
) -> (Vec<Output>, String, Vec<bourse::wire::itch::Message>) {
    let mut sink = Recorder::default();
    let mut bytes = Vec::new();
    if save_shards == 0 {
        let mut ex = Exchange::new(venue.clone()).unwrap();
        inputs[..at].iter().for_each(|i| {
            ex.apply(i, &mut sink);
        });
        ex.save_state(&mut bytes).unwrap();
    } else {
        let mut p = Split::shuffled(venue, save_shards, at as u64).unwrap();
        inputs[..at].iter().for_each(|i| {
            p.apply(i, &mut sink);
        });
        p.save_state(&mut sink, &mut bytes).unwrap();
    }
    let mut rec = Recorder::default();
    let mut snapshot = Vec::new();
    let digest = if restore_shards == 0 {
        let mut ex = Exchange::from_state(venue.clone(), &bytes).unwrap();
        assert_eq!(ex.last_seq(), inputs[at - 1].seq);
        inputs[at..].iter().for_each(|i| {
            ex.apply(i, &mut rec);
        });
        ex.snapshot(Timestamp(1), |m| snapshot.push(*m));
        ex.state_digest().to_string()
    } else {
        let mut p = Split::from_state(venue, restore_shards, &bytes).unwrap();
        inputs[at..].iter().for_each(|i| {
            p.apply(i, &mut rec);
        });
        p.flush(&mut rec);
        snapshot = p.snapshot(Timestamp(1), &mut rec);
        p.state_digest(&mut rec).to_string()
    };
    (rec.outputs, digest, snapshot)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 2, ..ProptestConfig::default() })]

    /// A state snapshot taken at a random point of a random day and restored (into one shard
    /// or several, from one shard or several) continues the day exactly as the uninterrupted
    /// run: the same outputs after the cut, the same state digest and GLIMPSE body at the end.
    #[test]
    fn a_restored_state_continues_the_day_exactly(
        (limits, steps, eod) in day(),
        cut in any::<Index>(),
        shards in (0usize..=3, 0usize..=3),
    ) {
        let (venue, inputs) = build(limits, &steps, eod);
        let mut ex = Exchange::new(venue.clone()).unwrap();
        let mut rec = Recorder::default();
        let at = 1 + cut.index(inputs.len());
        let mut from = 0;
        for (n, i) in inputs.iter().enumerate() {
            if n == at {
                from = rec.outputs.len();
            }
            ex.apply(i, &mut rec);
        }
        if at == inputs.len() {
            from = rec.outputs.len();
        }
        let mut snapshot = Vec::new();
        ex.snapshot(Timestamp(1), |m| snapshot.push(*m));
        let (outputs, digest, got_snapshot) = resumed(&venue, &inputs, at, shards.0, shards.1);
        let what = format!("cut after {at} of {}, shards {shards:?}", inputs.len());
        prop_assert_eq!(&rec.outputs[from..], &outputs[..], "{}: outputs", what);
        prop_assert_eq!(ex.state_digest().to_string(), digest, "{}: digest", what);
        prop_assert_eq!(snapshot, got_snapshot, "{}: GLIMPSE", what);
    }
}

/// A pending replacement token reused at once by an Enter and by another Replace: the front
/// must wait for the shard's verdict, and both answers (consumed or not) must come out right.
#[test]
fn reused_pending_tokens_wait_for_the_verdict() {
    // Small tables: building default-sized ones for every schedule is slow in a debug build.
    let venue = venue(Limits {
        orders_per_symbol: 1024,
        levels_per_side: 256,
        tokens_per_account: 4096,
    });
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

/// Account limits make the front read an account's position summed over every shard: each
/// Enter below is decided by what the input just before it did on another shard (a fill, a
/// self-trade cancel, a kill switch, a disconnect). Checked at once, in lazy schedules (the
/// shards far behind the front) and on threads, against the inline exchange, and against the
/// rejects DESIGN.md 4a calls for.
#[test]
fn account_limits_read_positions_across_shards() {
    // Small tables: building default-sized ones 16 times is slow in a debug build.
    let venue = venue(Limits {
        orders_per_symbol: 1024,
        levels_per_side: 256,
        tokens_per_account: 4096,
    });
    let mut b = Builder::new(&venue);
    let (aapl, msft, zz, ibm) = (0, 1, 2, 3);
    let enter = |token: &str, side: u8, shares: u32, symbol: usize, ticks: i8, tif: u32| {
        ouch::Inbound::Enter(ouch::EnterOrder {
            token: tok(token),
            side,
            shares: Shares(shares),
            stock: Symbol::from_str_padded(SYMBOLS[symbol]).unwrap(),
            price: Builder::price(symbol, Some(ticks)),
            tif,
            firm: Firm::SPACES,
            display: b'Y',
            capacity: b'A',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
            cross_type: b'N',
            customer_type: b'R',
        })
    };
    // BOTH (5): cancel-both, at most 4 open orders, 1200 open shares, 1500 day shares.
    let (both, bob) = (AccountId(5), AccountId(1));
    let script: Vec<(AccountId, ouch::Inbound)> = vec![
        (both, enter("b1", b'B', 300, aapl, 0, 99_999)),
        (both, enter("b2", b'S', 300, msft, 0, 99_999)),
        (both, enter("b3", b'B', 300, zz, 0, 99_999)),
        (both, enter("b4", b'B', 200, ibm, 0, 99_999)), // 4 orders, 1100 shares
        (both, enter("x1", b'B', 1, zz, -5, 99_999)),   // O: a fifth open order
        (bob, enter("k1", b'B', 300, msft, 0, 0)),      // fills b2 on MSFT's shard: 3, 800
        (both, enter("x2", b'B', 401, zz, -5, 0)),      // m: 1201 open shares (an IOC counts)
        (both, enter("b5", b'B', 300, ibm, -1, 99_999)), // 4 orders, 1100 shares
        (bob, enter("k2", b'S', 300, aapl, 0, 0)),      // fills b1 on AAPL's: 3, 800; day 600
        (both, enter("b6", b'B', 401, zz, -3, 99_999)), // m: 1201 open shares
        (both, enter("x3", b'S', 300, ibm, -1, 0)),     // own b4 first: cancel-both: 2, 600
        (both, enter("b7", b'B', 400, zz, -3, 99_999)), // 3 orders, 1000 shares
        (both, enter("b8", b'B', 200, msft, -2, 99_999)), // 4 orders, 1200 shares
        (both, enter("x4", b'B', 1, aapl, -5, 99_999)), // O
        (bob, enter("k3", b'S', 700, zz, -3, 0)),       // fills b3 and b7 on ZZ: 2; day 1300
        (both, enter("x5", b'B', 201, ibm, -9, 99_999)), // m: 1300 + 201 > 1500 day
        (both, enter("b9", b'B', 100, ibm, -9, 99_999)), // 3 orders
        (both, enter("c0", b'B', 100, zz, -9, 99_999)), // 4 orders
    ];
    for (account, message) in script {
        b.push(1_000, Command::Ouch { account, message });
    }
    // Kill switch on IBM's shard (b5, b9), then disconnect on all, each followed at once by
    // Enters that only fit if the front has seen the cancels.
    b.push(
        1_000,
        Command::Admin(Admin::CancelAll {
            account: both,
            symbol: Some(Locate(4)),
        }),
    );
    for t in ["c1", "c2"] {
        b.push(
            1_000,
            Command::Ouch {
                account: both,
                message: enter(t, b'B', 100, zz, -9, 99_999),
            },
        );
    }
    b.push(1_000, Command::Disconnect { account: both });
    b.push(
        1_000,
        Command::Ouch {
            account: both,
            message: enter("c3", b'B', 1, msft, -9, 99_999),
        },
    );
    let want = reference(&venue, &b.inputs);
    let rejects: Vec<(String, u8)> = want
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Ouch(a, ouch::Outbound::Rejected(r)) if *a == both => Some((
                String::from_utf8_lossy(&r.token.0).trim_end().to_string(),
                r.reason,
            )),
            _ => None,
        })
        .collect();
    let want_rejects: Vec<(String, u8)> = [
        ("x1", b'O'),
        ("x2", b'm'),
        ("b6", b'm'),
        ("x4", b'O'),
        ("x5", b'm'),
    ]
    .iter()
    .map(|(t, r)| (t.to_string(), *r))
    .collect();
    assert_eq!(rejects, want_rejects);
    let stp = want
        .outputs
        .iter()
        .filter(|o| matches!(o, Output::Ouch(_, ouch::Outbound::Canceled(c)) if c.reason == b'Q'))
        .count();
    let killed = |reason: u8| {
        want.outputs
            .iter()
            .filter(
                |o| matches!(o, Output::Ouch(_, ouch::Outbound::Canceled(c)) if c.reason == reason),
            )
            .count()
    };
    // x3 against b4: both canceled; b5 and b9 by the kill switch on IBM; b8, c0, c1, c2 on
    // disconnect; c3 accepted afterwards.
    assert_eq!((stp, killed(b'S'), killed(b'Z')), (2, 2, 4));
    for shards in 1..=3 {
        for seed in [None, Some(3), Some(11), Some(12_345)] {
            let got = split(&venue, &b.inputs, shards, seed);
            compare(&want, &got, &format!("{shards} shards, {seed:?}")).unwrap();
        }
    }
    threaded::same_on_threads(&venue, &b.inputs, &want);
}

/// Every recorded journal gives the same digests through the split pipeline as `bourse replay`.
#[test]
fn replay_logs_through_the_split_pipeline() {
    use bourse::journal::JournalReader;
    use bourse::sequencer::record;
    let logs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("replay-logs");
    for name in ["busy-day", "edge-cases", "torn-tail", "venue-controls"] {
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
                let mut sink = DigestSink::new(venue.accounts.len());
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
    // DESIGN.md 4a: Canceled Q (self-trade), S (kill switch), Z (disconnect); Rejected a
    // (blocked), m (share limits), O from the accounts with max_open_orders (2 and 5; these
    // also count token-table and book-capacity rejects).
    let (mut stp, mut killed, mut dropped, mut blocked, mut over_m, mut limited_o) =
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
                Output::Ouch(a, ouch::Outbound::Rejected(r))
                    if r.reason == b'O' && matches!(a.0, 2 | 5) =>
                {
                    limited_o += 1
                }
                Output::Ouch(_, ouch::Outbound::Rejected(r)) if r.reason == b'a' => blocked += 1,
                Output::Ouch(_, ouch::Outbound::Rejected(r)) if r.reason == b'm' => over_m += 1,
                Output::Ouch(_, ouch::Outbound::Canceled(c)) if c.reason == b'Q' => stp += 1,
                Output::Ouch(_, ouch::Outbound::Canceled(c)) if c.reason == b'S' => killed += 1,
                Output::Ouch(_, ouch::Outbound::Canceled(c)) if c.reason == b'Z' => dropped += 1,
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
    println!(
        "self-trade Q {stp}, kill switch S {killed}, disconnect Z {dropped}, blocked a {blocked}, limits m {over_m}, open orders O {limited_o}"
    );
    assert!(
        waits > 20
            && rejected_o > 20
            && replaced > 100
            && itch_u > 20
            && expired > 20
            && closed > 20
    );
    assert!(
        stp > 50 && killed > 20 && dropped > 20 && blocked > 50 && over_m > 20 && limited_o > 50
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

    /// The inputs on real threads with small rings, for 1 to 3 shards, equal `want`.
    pub(super) fn same_on_threads(venue: &Venue, inputs: &[Input], want: &Run) {
        for shards in 1..=3 {
            let config = ShardedConfig {
                shards,
                wait: WaitStrategy::Park,
                ring_slots: 64,
                pin_cores: false,
            };
            let mut p = Sharded::start(venue, &config, Collect::default()).unwrap();
            for i in inputs {
                p.apply(i);
            }
            let got = p.finish().0;
            assert!(
                got == want.outputs,
                "{shards} shards on threads: outputs differ"
            );
        }
    }

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
