//! Tests of the price index: edges by hand, and random operations against a `BTreeMap`.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The index and a model of it: price -> level.
struct Checked {
    index: SideIndex,
    model: BTreeMap<u32, u32>,
    side: Side,
    limit: u32,
    next_level: u32,
}

impl Checked {
    fn new(side: Side, limit: u32, width: u32) -> Self {
        Checked {
            index: SideIndex::new(side, limit, width),
            model: BTreeMap::new(),
            side,
            limit,
            next_level: 0,
        }
    }

    /// Prices best first, by the model.
    fn model_order(&self) -> Vec<u32> {
        match self.side {
            Side::Buy => self.model.keys().rev().copied().collect(),
            Side::Sell => self.model.keys().copied().collect(),
        }
    }

    fn insert(&mut self, price: u32) -> bool {
        if self.model.contains_key(&price) {
            assert!(self.index.find(Price(price)).is_some());
            return false;
        }
        assert_eq!(
            self.index.is_full(),
            self.model.len() == self.limit as usize
        );
        if self.index.is_full() {
            return false;
        }
        let level = self.next_level;
        self.next_level += 1;
        self.index.insert(Price(price), level);
        self.model.insert(price, level);
        true
    }

    fn remove(&mut self, price: u32) {
        let level = self.model.remove(&price).expect("model holds the price");
        assert_eq!(self.index.remove(Price(price)), level);
    }

    fn pop_best(&mut self) {
        let expected = self.model_order().first().copied();
        let got = self.index.pop_best();
        assert_eq!(got.map(|r| self.index.price(r.key).0), expected);
        if let Some(price) = expected {
            assert_eq!(got.unwrap().level, self.model.remove(&price).unwrap());
        }
    }

    /// Everything the index answers, against the model.
    fn check(&self, probes: &[u32]) {
        self.index.assert_consistent();
        assert_eq!(self.index.len(), self.model.len());
        assert_eq!(
            self.index.is_full(),
            self.model.len() == self.limit as usize
        );
        let order: Vec<u32> = self
            .index
            .best_first()
            .map(|r| self.index.price(r.key).0)
            .collect();
        assert_eq!(order, self.model_order());
        let levels: Vec<u32> = self.index.best_first().map(|r| r.level).collect();
        let model_levels: Vec<u32> = order.iter().map(|p| self.model[p]).collect();
        assert_eq!(levels, model_levels);
        let best = self.index.best().map(|r| self.index.price(r.key).0);
        assert_eq!(best, order.first().copied());
        for &price in probes.iter().chain(self.model.keys()) {
            assert_eq!(
                self.index.find(Price(price)),
                self.model.get(&price).copied(),
                "find({price})"
            );
        }
    }
}

const EDGES: [u32; 6] = [
    0,
    1,
    Price::MAX_LIMIT.0,
    Price::MARKET.0 - 1,
    u32::MAX - 1,
    u32::MAX,
];

#[test]
fn divisor_matches_hardware_division() {
    let divisors = [
        2,
        3,
        5,
        7,
        10,
        100,
        127,
        1_000,
        65_535,
        1 << 31,
        (1 << 31) + 1,
        u32::MAX - 1,
        u32::MAX,
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for d in divisors {
        let div = Divisor::new(d);
        let check = |n: u32| assert_eq!(div.divide(n), n / d, "{n} / {d}");
        for n in [0, 1, d - 1, d, d.saturating_add(1), u32::MAX - 1, u32::MAX] {
            check(n);
        }
        for k in 1..64u32 {
            check(d.wrapping_mul(k));
            check(d.wrapping_mul(k).wrapping_sub(1));
        }
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            check(x as u32);
        }
    }
    assert_eq!(Divisor::new(1).divide(u32::MAX), u32::MAX);
}

#[test]
fn band_width_follows_the_level_limit() {
    assert_eq!(band_slots_for(1), BAND_SLOTS_MIN);
    assert_eq!(band_slots_for(64), 256);
    assert_eq!(band_slots_for(357), 2_048);
    assert_eq!(band_slots_for(8_192), 32_768);
    assert_eq!(band_slots_for(1 << 20), BAND_SLOTS_MAX);
    assert_eq!(band_slots_for(u32::MAX), BAND_SLOTS_MAX);
}

#[test]
fn extreme_prices_on_both_sides() {
    for side in [Side::Buy, Side::Sell] {
        let mut c = Checked::new(side, 16, 64);
        for price in EDGES {
            assert!(c.insert(price));
            c.check(&EDGES);
        }
        // A price in the middle of nowhere, then the edges leave one by one.
        assert!(c.insert(1_000_000));
        c.check(&[999_999, 1_000_001]);
        for price in EDGES {
            c.remove(price);
            c.check(&EDGES);
        }
        c.remove(1_000_000);
        c.check(&EDGES);
        assert_eq!(c.index.best(), None);
    }
}

#[test]
fn tick_is_learned_and_an_off_tick_price_relays_the_band() {
    let mut c = Checked::new(Side::Buy, 64, 64);
    // $10.39, $10.38, ... in 1/10000 units: the step becomes 100; three quarters of the
    // band lie below the best bid.
    for cents in (0..40).rev() {
        c.insert(100_000 + 100 * cents);
    }
    assert_eq!(c.index.unit, 100);
    assert_eq!(
        c.index.band_len, 40,
        "40 cents fit a 64-slot band at a 100 step"
    );
    c.check(&[100_050, 103_901]);
    // A sub-penny price: the step shrinks to 1 and everything is laid out again.
    c.insert(100_051);
    assert_eq!(c.index.unit, 1);
    c.check(&[100_050, 100_052, 103_900]);
    // Only 64 keys fit now: most levels moved to the overflow, none was lost.
    assert!(c.index.overflow.len() >= 40 - 64 / 4);
    for cents in (0..40).step_by(3) {
        c.remove(100_000 + 100 * cents);
        c.check(&[]);
    }
}

#[test]
fn minimum_tick_neighbours_and_a_step_of_one() {
    for side in [Side::Buy, Side::Sell] {
        let mut c = Checked::new(side, 200, 64);
        for price in 1..=150 {
            c.insert(price);
        }
        c.check(&[0, 151]);
        for price in (1..=150).rev().step_by(2) {
            c.remove(price);
            c.check(&[price]);
        }
    }
}

#[test]
fn far_apart_prices_live_in_the_overflow() {
    let mut c = Checked::new(Side::Sell, 8, 64);
    for price in [5_000, 1, 1_999_999_900, 700_000_000, 5_001, 4_999] {
        c.insert(price);
        c.check(&[5_002, 2]);
    }
    // Asks: best is the lowest; the band sits around it, the rest is overflow.
    assert_eq!(c.index.best().map(|r| c.index.price(r.key)), Some(Price(1)));
    c.pop_best();
    c.check(&[1]);
    assert_eq!(
        c.index.best().map(|r| c.index.price(r.key)),
        Some(Price(4_999))
    );
}

#[test]
fn full_capacity_is_the_level_limit_in_or_out_of_the_band() {
    let mut c = Checked::new(Side::Buy, 3, 64);
    assert!(c.insert(100));
    assert!(c.insert(1_000_000));
    assert!(c.insert(101));
    assert!(c.index.is_full());
    assert!(!c.insert(102), "full: refused, not grown");
    c.check(&[102]);
    c.remove(1_000_000);
    assert!(c.insert(5));
    c.check(&[1_000_000]);
}

#[test]
fn the_band_follows_a_market_that_drifts_far() {
    let mut c = Checked::new(Side::Buy, 32, 64);
    // A window of 20 levels walks up 100 windows' worth of prices.
    for price in 0..20u32 {
        c.insert(1_000 + price);
    }
    for step in 0..6_400u32 {
        c.insert(1_020 + step);
        c.remove(1_000 + step);
        if step % 97 == 0 {
            c.check(&[]);
        }
    }
    c.check(&[]);
    // After the drift the levels are back in the band, and the band was laid out again
    // about once per 64 overflow operations (amortised), not on every one.
    assert_eq!(c.index.band_len, 20);
    assert!(c.index.overflow.is_empty());
    assert!(
        (6_400 / 64 / 4..=6_400 / 64 * 2).contains(&c.index.relayouts),
        "{} relayouts",
        c.index.relayouts
    );
}

#[test]
fn an_order_far_through_the_band_and_back_does_not_lose_levels() {
    for side in [Side::Buy, Side::Sell] {
        let mut c = Checked::new(side, 64, 64);
        for price in 0..30u32 {
            c.insert(50_000 + 3 * price);
        }
        let far = match side {
            Side::Buy => 90_000_000,
            Side::Sell => 3,
        };
        for round in 0..300u32 {
            c.insert(far);
            c.insert(50_001 + 3 * (round % 30));
            c.check(&[]);
            c.remove(far);
            c.remove(50_001 + 3 * (round % 30));
            c.check(&[]);
        }
    }
}

/// One random operation (interpreted by `run`).
#[derive(Clone, Debug)]
enum Op {
    Near { offset: i32 },
    Far { price: u32 },
    Edge { which: usize },
    Remove { nth: usize },
    PopBest,
    Drift { ticks: i32 },
    Tick { which: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (-96i32..96).prop_map(|offset| Op::Near { offset }),
        1 => any::<u32>().prop_map(|price| Op::Far { price }),
        1 => (0..EDGES.len()).prop_map(|which| Op::Edge { which }),
        6 => any::<usize>().prop_map(|nth| Op::Remove { nth }),
        1 => Just(Op::PopBest),
        1 => (-400i32..400).prop_map(|ticks| Op::Drift { ticks }),
        1 => (0..6usize).prop_map(|which| Op::Tick { which }),
    ]
}

fn run(side: Side, limit: u32, width: u32, ops: &[Op]) {
    const TICKS: [u32; 6] = [100, 1, 50, 7, 100, 3];
    let mut c = Checked::new(side, limit, width);
    let mut centre: i64 = 10_000_000;
    let mut tick = 100u32;
    for op in ops {
        let mut probe = 0u32;
        match *op {
            Op::Near { offset } => {
                let price = (centre + i64::from(offset) * i64::from(tick)).max(0) as u32;
                probe = price.wrapping_add(tick);
                c.insert(price);
            }
            Op::Far { price } => {
                c.insert(price);
                probe = price.wrapping_sub(1);
            }
            Op::Edge { which } => {
                c.insert(EDGES[which]);
            }
            Op::Remove { nth } => {
                if let Some(&price) = c.model.keys().nth(nth % c.model.len().max(1)) {
                    c.remove(price);
                    probe = price;
                }
            }
            Op::PopBest => c.pop_best(),
            Op::Drift { ticks } => centre += i64::from(ticks) * i64::from(tick),
            Op::Tick { which } => tick = TICKS[which],
        }
        c.check(&[probe]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn index_matches_a_btreemap(
        buy in any::<bool>(),
        limit in 1u32..80,
        log_width in 6u32..=8,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let side = if buy { Side::Buy } else { Side::Sell };
        run(side, limit, 1 << log_width, &ops);
    }
}
