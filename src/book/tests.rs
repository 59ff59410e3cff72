//! Unit tests of the book's matching rules.

use super::*;
use crate::types::{Price, Side};

fn book() -> OrderBook<u32> {
    OrderBook::new(BookConfig {
        order_capacity: 64,
        level_capacity: 16,
    })
}

fn fills(
    book: &mut OrderBook<u32>,
    side: Side,
    limit: u32,
    shares: u32,
) -> (Vec<(u32, u32, u32)>, u32) {
    let mut out = Vec::new();
    let left = book.execute(side, Price(limit), shares, |f, tag| {
        out.push((*tag, f.shares, f.price.0))
    });
    (out, left)
}

#[test]
fn price_then_time_priority() {
    let mut b = book();
    b.insert(Side::Sell, Price(101), 10, false, 0, 1);
    b.insert(Side::Sell, Price(100), 10, false, 0, 2);
    b.insert(Side::Sell, Price(100), 10, false, 0, 3);
    let (f, left) = fills(&mut b, Side::Buy, 101, 25);
    assert_eq!(f, vec![(2, 10, 100), (3, 10, 100), (1, 5, 101)]);
    assert_eq!(left, 0);
    assert_eq!(b.order_count(), 1);
    assert_eq!(b.best_price(Side::Sell), Some(Price(101)));
}

#[test]
fn limit_stops_at_the_limit_price() {
    let mut b = book();
    b.insert(Side::Sell, Price(100), 10, false, 0, 1);
    b.insert(Side::Sell, Price(105), 10, false, 0, 2);
    let (f, left) = fills(&mut b, Side::Buy, 101, 20);
    assert_eq!(f, vec![(1, 10, 100)]);
    assert_eq!(left, 10);
    assert!(!b.crosses(Side::Buy, Price(101)));
    assert!(b.crosses(Side::Buy, Price::MARKET));
}

#[test]
fn displayed_trade_before_hidden_at_a_price() {
    let mut b = book();
    b.insert(Side::Buy, Price(100), 5, true, 0, 1);
    b.insert(Side::Buy, Price(100), 5, false, 0, 2);
    let (f, _) = fills(&mut b, Side::Sell, 100, 7);
    assert_eq!(f, vec![(2, 5, 100), (1, 2, 100)]);
}

#[test]
fn reduce_keeps_priority_and_remove_frees_the_level() {
    let mut b = book();
    let first = b.insert(Side::Buy, Price(100), 10, false, 0, 1);
    b.insert(Side::Buy, Price(100), 10, false, 0, 2);
    assert_eq!(b.reduce_to(first, 4), 6);
    assert_eq!(b.reduce_to(first, 9), 0, "never raises");
    let (f, _) = fills(&mut b, Side::Sell, 100, 5);
    assert_eq!(f, vec![(1, 4, 100), (2, 1, 100)]);
    let second = b.insert(Side::Buy, Price(99), 3, false, 0, 3);
    let gone = b.remove(second);
    assert_eq!((gone.leaves, gone.payload), (3, 3));
    assert_eq!(b.level_count(Side::Buy), 1);
}

#[test]
fn executable_shares_counts_hidden_and_stops_at_limit() {
    let mut b = book();
    b.insert(Side::Sell, Price(100), 10, true, 0, 1);
    b.insert(Side::Sell, Price(101), 10, false, 0, 2);
    b.insert(Side::Sell, Price(103), 10, false, 0, 3);
    assert_eq!(b.executable_shares(Side::Buy, Price(101), u64::MAX), 20);
    assert_eq!(b.executable_shares(Side::Buy, Price(99), u64::MAX), 0);
    assert_eq!(b.executable_shares(Side::Buy, Price::MARKET, 5), 10);
}

#[test]
fn expiry_is_in_deadline_second_then_insertion_order() {
    let mut b = book();
    b.insert(Side::Buy, Price(100), 1, false, 2_500, 1);
    b.insert(Side::Buy, Price(101), 1, false, 1_200, 2);
    b.insert(Side::Buy, Price(102), 1, false, 1_900, 3);
    b.insert(Side::Buy, Price(103), 1, false, 0, 4);
    assert!(b.expire_next(1_100).is_none());
    assert_eq!(b.expire_next(1_950).map(|r| r.payload), Some(2));
    assert_eq!(b.expire_next(1_950).map(|r| r.payload), Some(3));
    assert!(b.expire_next(1_950).is_none());
    // Far later: a whole revolution passed; still found.
    assert_eq!(b.expire_next(10_000_000).map(|r| r.payload), Some(1));
    assert!(b.expire_next(10_000_000).is_none());
    assert_eq!(b.order_count(), 1);
}

#[test]
fn filled_and_cancelled_orders_leave_the_expiry_wheel() {
    let mut b = book();
    let h = b.insert(Side::Sell, Price(100), 5, false, 5_000, 1);
    b.insert(Side::Sell, Price(100), 5, false, 5_000, 2);
    assert_eq!(b.expiring_count(), 2);
    fills(&mut b, Side::Buy, 100, 5);
    assert_eq!(b.expiring_count(), 1);
    assert!(b.get(OrderHandle(1)).leaves == 5);
    let _ = h;
    b.remove(OrderHandle(1));
    assert_eq!(b.expiring_count(), 0);
    assert!(b.expire_next(9_000).is_none());
}

#[test]
fn capacity_is_checked_not_grown() {
    let mut b: OrderBook<u32> = OrderBook::new(BookConfig {
        order_capacity: 2,
        level_capacity: 1,
    });
    assert!(b.can_rest(Side::Buy, Price(100)));
    b.insert(Side::Buy, Price(100), 1, false, 0, 1);
    assert!(b.can_rest(Side::Buy, Price(100)));
    assert!(!b.can_rest(Side::Buy, Price(99)), "one level per side");
    assert!(b.can_rest(Side::Sell, Price(105)));
    b.insert(Side::Buy, Price(100), 1, false, 0, 2);
    assert!(!b.can_rest(Side::Buy, Price(100)), "pool full");
}

#[test]
fn priority_iteration_order() {
    let mut b = book();
    b.insert(Side::Buy, Price(100), 1, true, 0, 1);
    b.insert(Side::Buy, Price(101), 1, false, 0, 2);
    b.insert(Side::Buy, Price(100), 1, false, 0, 3);
    let mut seen = Vec::new();
    b.for_each_order(Side::Buy, |o| seen.push(*o.payload));
    assert_eq!(seen, vec![2, 3, 1]);
}

#[test]
fn expiry_stays_oldest_first_across_a_gap_longer_than_the_wheel() {
    let mut b = book();
    // Deadline seconds 34 200 and 34 210 share no bucket, but a tick 4 096 s later used to
    // scan from "now" around the wheel and meet the younger one first.
    b.insert(Side::Buy, Price(100), 1, false, 34_200_500, 1);
    b.insert(Side::Buy, Price(101), 1, false, 34_210_500, 2);
    b.insert(Side::Buy, Price(102), 1, false, 34_200_900, 3);
    let now = 38_296_000;
    let order: Vec<u32> = std::iter::from_fn(|| b.expire_next(now).map(|r| r.payload)).collect();
    assert_eq!(order, vec![1, 3, 2]);
}

#[test]
fn expiry_entries_sharing_a_bucket_across_revolutions_wait_for_their_second() {
    let mut b = book();
    let revolution_ms = 4_096_000;
    b.insert(Side::Buy, Price(100), 1, false, 5_000 + revolution_ms, 1);
    b.insert(Side::Buy, Price(101), 1, false, 5_000, 2);
    assert_eq!(b.expire_next(6_000).map(|r| r.payload), Some(2));
    assert!(
        b.expire_next(6_000).is_none(),
        "the later revolution is not due"
    );
    assert_eq!(
        b.expire_next(5_000 + revolution_ms).map(|r| r.payload),
        Some(1)
    );
}

#[test]
fn expiry_due_exactly_now_in_a_bucket_shared_with_an_older_revolution() {
    let mut b = book();
    b.insert(Side::Sell, Price(100), 1, false, 34_200_001, 2);
    b.insert(Side::Sell, Price(100), 1, false, 49_152_000, 4);
    let order: Vec<u32> =
        std::iter::from_fn(|| b.expire_next(49_152_000).map(|r| r.payload)).collect();
    assert_eq!(order, vec![2, 4]);
}

// ---- the whole book against a reference, with a tiny price band -------------------------

mod reference {
    //! Random operations on a book whose price bands are 64 slots wide (so prices fall
    //! outside them and the bands are laid out again often), checked step by step against
    //! an obviously correct book: a `BTreeMap` of price levels, each two FIFO queues.

    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, VecDeque};

    const ORDERS: u32 = 48;
    const LEVELS: u32 = 12;

    /// (maker tag, shares, price, maker hidden, maker leaves after the fill).
    type FillSeen = (u32, u32, u32, bool, u32);

    #[derive(Default)]
    struct Queues {
        displayed: VecDeque<(u32, u32)>,
        hidden: VecDeque<(u32, u32)>,
    }

    #[derive(Default)]
    struct Model {
        /// (side, price) -> queues; bids and asks kept apart by the side.
        levels: BTreeMap<(u8, u32), Queues>,
        handles: BTreeMap<u32, OrderHandle>,
        next_tag: u32,
    }

    fn side_code(side: Side) -> u8 {
        match side {
            Side::Buy => 0,
            Side::Sell => 1,
        }
    }

    impl Model {
        fn prices(&self, side: Side) -> Vec<u32> {
            let code = side_code(side);
            let mut prices: Vec<u32> = self
                .levels
                .keys()
                .filter(|(s, _)| *s == code)
                .map(|&(_, p)| p)
                .collect();
            if side == Side::Buy {
                prices.reverse();
            }
            prices
        }

        fn orders(&self, side: Side) -> Vec<(u32, u32, u32, bool)> {
            let mut out = Vec::new();
            for price in self.prices(side) {
                let q = &self.levels[&(side_code(side), price)];
                out.extend(q.displayed.iter().map(|&(t, l)| (t, price, l, false)));
                out.extend(q.hidden.iter().map(|&(t, l)| (t, price, l, true)));
            }
            out
        }

        fn can_rest(&self, side: Side, price: u32) -> bool {
            let orders = self.handles.len() as u32;
            let exists = self.levels.contains_key(&(side_code(side), price));
            orders < ORDERS && (exists || (self.prices(side).len() as u32) < LEVELS)
        }

        fn acceptable(taker: Side, limit: Option<u32>, price: u32) -> bool {
            match (taker, limit) {
                (_, None) => true,
                (Side::Buy, Some(l)) => price <= l,
                (Side::Sell, Some(l)) => price >= l,
            }
        }

        /// Fills as (maker tag, shares, price, maker hidden, maker leaves), and what is left.
        fn execute(
            &mut self,
            taker: Side,
            limit: Option<u32>,
            mut shares: u32,
        ) -> (Vec<FillSeen>, u32) {
            let contra = taker.opposite();
            let mut fills = Vec::new();
            while shares > 0 {
                let Some(&price) = self.prices(contra).first() else {
                    break;
                };
                if !Self::acceptable(taker, limit, price) {
                    break;
                }
                let key = (side_code(contra), price);
                let q = self.levels.get_mut(&key).unwrap();
                for (queue, hidden) in [(&mut q.displayed, false), (&mut q.hidden, true)] {
                    while shares > 0 {
                        let Some(front) = queue.front_mut() else {
                            break;
                        };
                        let traded = shares.min(front.1);
                        shares -= traded;
                        front.1 -= traded;
                        fills.push((front.0, traded, price, hidden, front.1));
                        if front.1 == 0 {
                            self.handles.remove(&front.0);
                            queue.pop_front();
                        }
                    }
                }
                if q.displayed.is_empty() && q.hidden.is_empty() {
                    self.levels.remove(&key);
                }
            }
            (fills, shares)
        }

        fn find(&self, tag: u32) -> (u8, u32, bool, usize) {
            for (&(s, p), q) in &self.levels {
                if let Some(i) = q.displayed.iter().position(|o| o.0 == tag) {
                    return (s, p, false, i);
                }
                if let Some(i) = q.hidden.iter().position(|o| o.0 == tag) {
                    return (s, p, true, i);
                }
            }
            panic!("tag {tag} not in the model");
        }

        /// Set a live order's leaves (0 removes it); returns its old leaves.
        fn set_leaves(&mut self, tag: u32, leaves: u32) -> u32 {
            let (s, p, hidden, i) = self.find(tag);
            let q = self.levels.get_mut(&(s, p)).unwrap();
            let queue = if hidden {
                &mut q.hidden
            } else {
                &mut q.displayed
            };
            let old = queue[i].1;
            if leaves == 0 {
                queue.remove(i);
                self.handles.remove(&tag);
                if q.displayed.is_empty() && q.hidden.is_empty() {
                    self.levels.remove(&(s, p));
                }
            } else {
                queue[i].1 = leaves;
            }
            old
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Limit {
            buy: bool,
            price: u32,
            shares: u32,
            hidden: bool,
        },
        Take {
            buy: bool,
            price: Option<u32>,
            shares: u32,
        },
        Cancel {
            nth: usize,
        },
        Reduce {
            nth: usize,
            leaves: u32,
        },
        Drift {
            by: i32,
        },
        /// Replace a live order by one on its side at `price` (when it fits and does not
        /// cross), expiring at `deadline_ms` (0: never).
        Replace {
            nth: usize,
            price: u32,
            shares: u32,
            hidden: bool,
            deadline_ms: u32,
        },
    }

    /// Prices: near a drifting centre (in a tick of 100 or 1), or anywhere.
    fn op() -> impl Strategy<Value = Op> {
        let price = prop_oneof![
            6 => (-40i32..40).prop_map(|o| (o * 100) as u32),
            2 => (-40i32..40).prop_map(|o| o as u32),
            1 => (1u32..Price::MAX_LIMIT.0).prop_map(|p| p | 0x8000_0000),
        ];
        prop_oneof![
            6 => (any::<bool>(), price.clone(), 1u32..500, proptest::bool::weighted(0.2))
                .prop_map(|(buy, price, shares, hidden)| Op::Limit { buy, price, shares, hidden }),
            2 => (any::<bool>(), proptest::option::weighted(0.8, price.clone()), 1u32..1500)
                .prop_map(|(buy, price, shares)| Op::Take { buy, price, shares }),
            3 => any::<usize>().prop_map(|nth| Op::Cancel { nth }),
            1 => (any::<usize>(), 0u32..400).prop_map(|(nth, leaves)| Op::Reduce { nth, leaves }),
            1 => (-3_000i32..3_000).prop_map(|by| Op::Drift { by }),
            4 => (
                any::<usize>(),
                price,
                1u32..500,
                proptest::bool::weighted(0.2),
                prop_oneof![Just(0u32), 1_000u32..20_000],
            )
                .prop_map(|(nth, price, shares, hidden, deadline_ms)| Op::Replace {
                    nth,
                    price,
                    shares,
                    hidden,
                    deadline_ms,
                }),
        ]
    }

    /// A price operand: marked ones (bit 31) are absolute, others are offsets to `centre`.
    fn resolve(raw: u32, centre: u32) -> u32 {
        if raw & 0x8000_0000 != 0 {
            (raw & 0x7FFF_FFFF).clamp(1, Price::MAX_LIMIT.0)
        } else {
            centre.wrapping_add(raw).clamp(1, Price::MAX_LIMIT.0)
        }
    }

    fn check(book: &OrderBook<u32>, model: &Model) {
        for side in [Side::Buy, Side::Sell] {
            let mut got = Vec::new();
            book.for_each_order(side, |o| {
                got.push((*o.payload, o.price.0, o.leaves, o.hidden))
            });
            assert_eq!(got, model.orders(side), "{side:?} orders in priority");
            let mut levels = Vec::new();
            book.for_each_level(side, |p, _, _, _| levels.push(p.0));
            assert_eq!(levels, model.prices(side));
            assert_eq!(
                book.best_price(side).map(|p| p.0),
                model.prices(side).first().copied()
            );
            assert_eq!(book.level_count(side), model.prices(side).len());
        }
        book.assert_consistent();
        assert_eq!(book.order_count() as usize, model.handles.len());
    }

    /// What the book shows of its orders after an op: (payload, handle, price, leaves,
    /// hidden, deadline) in priority order, bids then asks.
    type Seen = Vec<(u32, u32, u32, u32, bool, u32)>;

    fn seen(book: &OrderBook<u32>) -> Seen {
        let mut out = Vec::new();
        for side in [Side::Buy, Side::Sell] {
            book.for_each_order(side, |o| {
                out.push((
                    *o.payload,
                    o.handle.0,
                    o.price.0,
                    o.leaves,
                    o.hidden,
                    o.deadline_ms,
                ))
            });
        }
        out
    }

    /// Run `ops` against the book and the reference; a replace is [`OrderBook::replace`]
    /// (`fused`) or a remove then an insert. Returns what the book showed after each op, then
    /// the order its expiring orders expire in.
    fn run(ops: &[Op], fused: bool) -> (Vec<Seen>, Vec<u32>) {
        let mut trace = Vec::new();
        let config = BookConfig {
            order_capacity: ORDERS,
            level_capacity: LEVELS,
        };
        let mut book: OrderBook<u32> = OrderBook::with_band(config, 64);
        let mut model = Model::default();
        let mut centre: u32 = 1_000_000;
        for op in ops {
            match *op {
                Op::Limit {
                    buy,
                    price,
                    shares,
                    hidden,
                } => {
                    let side = if buy { Side::Buy } else { Side::Sell };
                    let price = resolve(price, centre);
                    let tag = model.next_tag;
                    model.next_tag += 1;
                    let mut fills = Vec::new();
                    let left = book.execute(side, Price(price), shares, |f, t| {
                        fills.push((*t, f.shares, f.price.0, f.maker_hidden, f.maker_leaves))
                    });
                    let (want, want_left) = model.execute(side, Some(price), shares);
                    assert_eq!((fills, left), (want, want_left));
                    if left == 0 {
                        continue;
                    }
                    let room = model.can_rest(side, price);
                    assert_eq!(book.can_rest(side, Price(price)), room, "can_rest");
                    if room {
                        let h = book.insert(side, Price(price), left, hidden, 0, tag);
                        model.handles.insert(tag, h);
                        model.levels.entry((side_code(side), price)).or_default();
                        let q = model.levels.get_mut(&(side_code(side), price)).unwrap();
                        let queue = if hidden {
                            &mut q.hidden
                        } else {
                            &mut q.displayed
                        };
                        queue.push_back((tag, left));
                    }
                }
                Op::Take { buy, price, shares } => {
                    let side = if buy { Side::Buy } else { Side::Sell };
                    let limit = price.map(|p| resolve(p, centre));
                    let want_shares =
                        book.executable_shares(side, limit.map_or(Price::MARKET, Price), u64::MAX);
                    let mut fills = Vec::new();
                    let left =
                        book.execute(side, limit.map_or(Price::MARKET, Price), shares, |f, t| {
                            fills.push((*t, f.shares, f.price.0, f.maker_hidden, f.maker_leaves))
                        });
                    let (want, want_left) = model.execute(side, limit, shares);
                    assert_eq!((fills, left), (want, want_left));
                    assert!(want_shares >= u64::from(shares - left));
                }
                Op::Cancel { nth } => {
                    let Some((&tag, &h)) =
                        model.handles.iter().nth(nth % model.handles.len().max(1))
                    else {
                        continue;
                    };
                    let (s, p, hidden, _) = model.find(tag);
                    let side = if s == 0 { Side::Buy } else { Side::Sell };
                    // Room for a replacement at another price, before the order leaves.
                    let other = centre.wrapping_add(300);
                    let fits_after = {
                        let levels_after = model.prices(side).len() as u32
                            - u32::from(
                                model.levels[&(s, p)].displayed.len()
                                    + model.levels[&(s, p)].hidden.len()
                                    == 1,
                            );
                        model.levels.contains_key(&(s, other)) || levels_after < LEVELS
                    };
                    assert_eq!(book.can_rest_replacing(h, side, Price(other)), fits_after);
                    let leaves = model.set_leaves(tag, 0);
                    let removal = book.remove(h);
                    assert_eq!(
                        (
                            removal.payload,
                            removal.price.0,
                            removal.leaves,
                            removal.hidden
                        ),
                        (tag, p, leaves, hidden)
                    );
                }
                Op::Reduce { nth, leaves } => {
                    let Some((&tag, &h)) =
                        model.handles.iter().nth(nth % model.handles.len().max(1))
                    else {
                        continue;
                    };
                    let old = book.get(h).leaves;
                    let taken = book.reduce_to(h, leaves);
                    if leaves < old {
                        assert_eq!(taken, old - leaves);
                        model.set_leaves(tag, leaves);
                    } else {
                        assert_eq!(taken, 0);
                    }
                }
                Op::Drift { by } => {
                    centre = centre
                        .wrapping_add_signed(by * 100)
                        .clamp(10_000, 100_000_000);
                }
                Op::Replace {
                    nth,
                    price,
                    shares,
                    hidden,
                    deadline_ms,
                } => {
                    let Some((&old_tag, &h)) =
                        model.handles.iter().nth(nth % model.handles.len().max(1))
                    else {
                        continue;
                    };
                    let side = book.get(h).side;
                    let price = resolve(price, centre);
                    if book.crosses(side, Price(price))
                        || !book.can_rest_replacing(h, side, Price(price))
                    {
                        continue;
                    }
                    let tag = model.next_tag;
                    model.next_tag += 1;
                    model.set_leaves(old_tag, 0);
                    let new = if fused {
                        book.replace(h, Price(price), shares, hidden, deadline_ms, tag)
                    } else {
                        book.remove(h);
                        book.insert(side, Price(price), shares, hidden, deadline_ms, tag)
                    };
                    assert_eq!(new, h, "the replacement takes the old order's slot");
                    model.handles.insert(tag, new);
                    let q = model.levels.entry((side_code(side), price)).or_default();
                    let queue = if hidden {
                        &mut q.hidden
                    } else {
                        &mut q.displayed
                    };
                    queue.push_back((tag, shares));
                }
            }
            check(&book, &model);
            trace.push(seen(&book));
        }
        let mut expired = Vec::new();
        for _ in 0..ORDERS {
            let Some(removal) = book.expire_next(u32::MAX) else {
                break;
            };
            expired.push(removal.payload);
        }
        (trace, expired)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn book_with_a_tiny_band_matches_the_reference(
            ops in proptest::collection::vec(op(), 1..250),
        ) {
            let fused = run(&ops, true);
            prop_assert_eq!(fused, run(&ops, false));
        }
    }
}
