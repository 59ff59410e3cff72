use super::*;
use crate::book::{BookConfig, OrderBook, OrderHandle};
use crate::exchange::{Discard, Exchange, Limits, Outcome};
use crate::types::Price;

fn small(workload: Workload, seed: u64) -> Spec {
    let mut spec = Spec::standard(workload, seed);
    spec.ops = spec.ops.min(20_000);
    if workload == Workload::DeepBook {
        spec.target_resting = 5_000;
    }
    if workload == Workload::Sweep {
        spec.target_resting = 4_000;
        spec.ops = 20_000;
    }
    spec
}

const ALL: [Workload; 5] = [
    Workload::QuantCup,
    Workload::ExchangeCore,
    Workload::DeepBook,
    Workload::Sweep,
    Workload::Realistic,
];

#[test]
fn same_seed_same_stream_other_seed_other_stream() {
    for w in ALL {
        let a = generate(small(w, 7));
        let b = generate(small(w, 7));
        let c = generate(small(w, 8));
        assert_eq!(a.ops, b.ops, "{w:?}");
        assert_eq!(a.stats, b.stats, "{w:?}");
        assert_ne!(a.ops, c.ops, "{w:?}");
    }
}

/// Replays a stream on the real book, checking that every id an op names is live there,
/// that new ids are fresh, and that fills agree with the generator's model.
fn replay_on_book(stream: &Stream) {
    let stats = &stream.stats;
    let mut book: OrderBook<u32> = OrderBook::new(BookConfig {
        order_capacity: stats.max_resting + 1,
        level_capacity: stats.max_levels + 1,
    });
    let mut handles: Vec<Option<OrderHandle>> = vec![None; stats.ids as usize];
    let mut seen = vec![false; stats.ids as usize];
    let mut owner = vec![u16::MAX; stats.ids as usize];
    let (mut fills, mut shares_traded) = (0u64, 0u64);
    let px = |t: u32| Price(t * 100);
    let mut filled: Vec<u32> = Vec::new();
    for op in &stream.ops {
        for id in filled.drain(..) {
            handles[id as usize] = None;
        }
        let mut on_fill = |f: &crate::book::Fill, maker: &mut u32| {
            fills += 1;
            shares_traded += u64::from(f.shares);
            if f.maker_leaves == 0 {
                filled.push(*maker);
            }
        };
        let mut fresh = |id: u32, account: u16, owner: &mut [u16]| {
            assert!(!seen[id as usize], "id {id} used twice");
            seen[id as usize] = true;
            owner[id as usize] = account;
        };
        match *op {
            Op::Limit {
                account,
                id,
                side,
                price_ticks,
                shares,
            } => {
                fresh(id, account, &mut owner);
                let left = book.execute(side, px(price_ticks), shares, &mut on_fill);
                if left > 0 {
                    assert!(book.can_rest(side, px(price_ticks)));
                    let h = book.insert(side, px(price_ticks), left, false, 0, id);
                    handles[id as usize] = Some(h);
                }
            }
            Op::Ioc {
                account,
                id,
                side,
                price_ticks,
                shares,
            } => {
                fresh(id, account, &mut owner);
                book.execute(side, px(price_ticks), shares, &mut on_fill);
            }
            Op::Market {
                account,
                id,
                side,
                shares,
            } => {
                fresh(id, account, &mut owner);
                book.execute(side, Price::MARKET, shares, &mut on_fill);
            }
            Op::Cancel { account, id } => {
                assert_eq!(owner[id as usize], account, "cancel by another account");
                let h = handles[id as usize].take().expect("cancel of a dead id");
                book.remove(h);
            }
            Op::Reduce {
                account,
                id,
                shares,
            } => {
                assert_eq!(owner[id as usize], account);
                let h = handles[id as usize].expect("reduce of a dead id");
                assert!(book.get(h).leaves > shares);
                book.reduce_to(h, shares);
            }
            Op::Replace {
                account,
                id,
                new_id,
                side,
                price_ticks,
                shares,
                ..
            } => {
                assert_eq!(owner[id as usize], account);
                let h = handles[id as usize].take().expect("replace of a dead id");
                assert_eq!(book.get(h).side, side);
                book.remove(h);
                fresh(new_id, account, &mut owner);
                let left = book.execute(side, px(price_ticks), shares, &mut on_fill);
                if left > 0 {
                    let h = book.insert(side, px(price_ticks), left, false, 0, new_id);
                    handles[new_id as usize] = Some(h);
                }
            }
        }
    }
    assert_eq!(fills, stats.fills);
    assert_eq!(shares_traded, stats.traded_shares);
    assert_eq!(book.order_count(), stats.final_resting);
}

#[test]
fn every_stream_is_consistent_on_the_real_book() {
    for w in ALL {
        for clamped in [false, true] {
            let spec = small(w, 11);
            let stream = generate(if clamped { spec.clamped() } else { spec });
            assert!(stream.stats.fills > 0, "{w:?} never trades");
            replay_on_book(&stream);
        }
    }
}

#[test]
fn shapes_roughly_match_their_descriptions() {
    let qc = generate(small(Workload::QuantCup, 1));
    let cancels = qc.stats.kinds[3] as f64 / qc.ops.len() as f64;
    assert!((0.4..0.6).contains(&cancels), "QuantCup cancels {cancels}");

    let ec = generate(small(Workload::ExchangeCore, 1));
    let moves = ec.stats.kinds[5] as f64 / ec.ops.len() as f64;
    assert!((0.7..0.9).contains(&moves), "exchange-core moves {moves}");
    assert!((800..1_300).contains(&ec.stats.final_resting));

    let deep = generate(small(Workload::DeepBook, 1));
    assert_eq!(deep.stats.final_resting, 5_000);
    assert!(deep.stats.max_levels <= 14);
}

#[test]
fn clamped_takers_never_rest_after_crossing() {
    // In the clamped variant a crossing limit executes all its shares.
    let stream = generate(small(Workload::QuantCup, 3).clamped());
    let plain = generate(small(Workload::QuantCup, 3));
    assert!(stream.stats.fills > 0);
    assert_ne!(stream.ops, plain.ops);
}

#[test]
fn inputs_drive_the_exchange_without_ignored_messages() {
    for w in [
        Workload::ExchangeCore,
        Workload::Realistic,
        Workload::QuantCup,
    ] {
        let stream = generate(small(w, 5));
        let limits = Limits {
            orders_per_symbol: stream.stats.max_resting + 16,
            levels_per_side: stream.stats.max_levels + 16,
            tokens_per_account: stream.stats.max_tokens_per_account,
        };
        let venue = demo_venue("BNCH", stream.stats.accounts, limits);
        let mut exchange = Exchange::new(venue).expect("venue");
        let mut sink = Discard::default();
        let inputs = to_inputs(&stream.ops, "BNCH", 100);
        for input in &inputs {
            let outcome = exchange.apply(input, &mut sink);
            assert_eq!(outcome, Outcome::Applied, "{w:?} {input:?}");
        }
        assert_eq!(exchange.matches_used(), stream.stats.fills, "{w:?}");
        assert_eq!(
            exchange.resting_orders(),
            u64::from(stream.stats.final_resting)
        );
    }
}

#[test]
fn tokens_are_fourteen_digits() {
    assert_eq!(token_of(0).bytes(), b"00000000000000");
    assert_eq!(token_of(1234).bytes(), b"00000000001234");
    assert_eq!(token_of(u32::MAX).bytes(), b"00004294967295");
}
