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
