//! Order validation, in the order of DESIGN.md section 4: the first failure wins.

use super::msg::AccountRisk;
use super::venue::{AccountDef, Stp, SymbolSpec};
use crate::types::{Firm, Price, Shares, Side};
use crate::wire::ouch::{EnterOrder, ReplaceOrder, reject_reason as why};

/// TIF special values (PROTOCOLS.md 2.1).
pub(crate) const TIF_IOC: u32 = 0;
pub(crate) const TIF_MARKET_HOURS: u32 = 99_998;
pub(crate) const TIF_SYSTEM_HOURS: u32 = 99_999;

/// Is this display letter one bourse offers?
fn valid_display(display: u8) -> bool {
    matches!(display, b'Y' | b'A' | b'N' | b'P')
}

/// The price rule shared by Enter and Replace (reject `X`).
fn price_ok(price: Price, tif: u32, spec: &SymbolSpec) -> bool {
    if price.is_market() {
        return tif == TIF_IOC;
    }
    price.0 != 0 && price <= Price::MAX_LIMIT && price.0.is_multiple_of(spec.tick)
}

/// Minimum quantity only on IOC orders and never above the shares (reject `N`).
fn min_qty_ok(min_qty: Shares, tif: u32, shares: Shares) -> bool {
    min_qty.0 == 0 || (tif == TIF_IOC && min_qty <= shares)
}

/// Price x shares within the symbol's notional limit; not applied to market orders.
fn notional_ok(price: Price, shares: Shares, spec: &SymbolSpec) -> bool {
    match spec.max_order_notional {
        Some(limit_dollars) if !price.is_market() => {
            u64::from(price.0) * u64::from(shares.0) <= limit_dollars.saturating_mul(10_000)
        }
        _ => true,
    }
}

fn shares_in_range(shares: Shares) -> bool {
    shares.0 >= 1 && shares <= Shares::MAX_ORDER
}

/// Market state the checks depend on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MarketState {
    pub halted: bool,
    pub closed: bool,
    /// The account is blocked by the kill switch.
    pub blocked: bool,
}

/// The account limits of DESIGN.md 4a, checked last (after `n`): would the order take the
/// account's open orders or open or day shares over a limit? `risk` is the position before
/// the input; `shares` the order's shares (a Replace: its chain total), `replaced_leaves` the
/// leaves of the order a Replace takes off (0 for an Enter, which adds an open order).
pub(crate) fn check_limits(
    account: &AccountDef,
    risk: AccountRisk,
    shares: u32,
    replaced_leaves: u32,
) -> Result<(), u8> {
    let adds_order = u32::from(replaced_leaves == 0);
    if account
        .max_open_orders
        .is_some_and(|max| risk.open_orders + adds_order > max)
    {
        return Err(why::OTHER);
    }
    let open = risk.open_shares - u64::from(replaced_leaves) + u64::from(shares);
    if account.max_open_shares.is_some_and(|max| open > max) {
        return Err(why::SHARES_LIMIT);
    }
    if account
        .max_day_shares
        .is_some_and(|max| risk.executed + u64::from(shares) > max)
    {
        return Err(why::SHARES_LIMIT);
    }
    Ok(())
}

/// Checks of an Enter Order after the symbol lookup. Returns the side or the reject code.
pub(crate) fn check_enter(
    o: &EnterOrder,
    side: Side,
    spec: &SymbolSpec,
    market: MarketState,
    account_firm: Firm,
) -> Result<Side, u8> {
    if market.halted {
        return Err(why::HALTED);
    }
    if market.closed {
        return Err(why::CLOSED);
    }
    if market.blocked {
        return Err(why::BLOCKED);
    }
    if !shares_in_range(o.shares) {
        return Err(why::SHARES);
    }
    if !price_ok(o.price, o.tif, spec) {
        return Err(why::PRICE);
    }
    if o.tif > TIF_SYSTEM_HOURS {
        return Err(why::OTHER);
    }
    if !valid_display(o.display) {
        return Err(why::DISPLAY);
    }
    if o.cross_type != b'N' {
        return Err(why::CROSS);
    }
    if !min_qty_ok(o.min_qty, o.tif, o.shares) {
        return Err(why::MIN_QTY);
    }
    if !o.firm.is_spaces() && o.firm != account_firm {
        return Err(why::FIRM);
    }
    if o.shares.0 > spec.max_order_shares {
        return Err(why::SHARES);
    }
    if !notional_ok(o.price, o.shares, spec) {
        return Err(why::NOTIONAL);
    }
    Ok(side)
}

/// How a Replace fails validation (PROTOCOLS.md 2.6).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ReplaceFault {
    /// Outcome 3: the original cannot be replaced now; reject the replacement token.
    Rejected(u8),
    /// Outcome 2: invalid replace; the original is canceled.
    Invalid,
}

/// Checks of a Replace: its Shares (the chain total) in place of the entered shares, its own
/// price, TIF, display and minimum quantity; side, symbol, firm and cross type are inherited.
pub(crate) fn check_replace(
    u: &ReplaceOrder,
    spec: &SymbolSpec,
    market: MarketState,
) -> Result<(), ReplaceFault> {
    if market.halted {
        return Err(ReplaceFault::Rejected(why::HALTED));
    }
    if market.closed {
        return Err(ReplaceFault::Rejected(why::CLOSED));
    }
    if market.blocked {
        return Err(ReplaceFault::Rejected(why::BLOCKED));
    }
    let valid = shares_in_range(u.shares)
        && price_ok(u.price, u.tif, spec)
        && u.tif <= TIF_SYSTEM_HOURS
        && valid_display(u.display)
        && min_qty_ok(u.min_qty, u.tif, u.shares)
        && u.shares.0 <= spec.max_order_shares
        && notional_ok(u.price, u.shares, spec);
    if valid {
        Ok(())
    } else {
        Err(ReplaceFault::Invalid)
    }
}

/// Capacity letters other than A/P/R/O are taken as O (DESIGN.md 4).
pub(crate) fn normalize_capacity(capacity: u8) -> u8 {
    if matches!(capacity, b'A' | b'P' | b'R' | b'O') {
        capacity
    } else {
        b'O'
    }
}

/// Intermarket sweep other than Y is taken as N.
pub(crate) fn normalize_sweep(sweep: u8) -> u8 {
    if sweep == b'Y' { b'Y' } else { b'N' }
}

/// Deadline in ms since the day epoch for a TIF in seconds, or 0 when the order does not
/// expire by itself (IOC never rests; DAY orders end at end of day).
pub(crate) fn deadline_ms(timestamp_ns: u64, tif: u32) -> u32 {
    if tif == TIF_IOC || tif >= TIF_MARKET_HOURS {
        return 0;
    }
    let deadline_ns = timestamp_ns + u64::from(tif) * 1_000_000_000;
    let ms = deadline_ns.div_ceil(1_000_000);
    // A journal lives a day; past 49.7 days of timestamps the deadline saturates (the order
    // then expires at the first tick after that point) rather than panicking.
    u32::try_from(ms).unwrap_or(u32::MAX)
}

/// The order's parameters that decide whether it is dead on arrival.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    pub side: Side,
    pub price: Price,
    /// Shares it may execute (a replacement: its exposure).
    pub shares: u32,
    pub tif: u32,
    pub min_qty: u32,
    pub post_only: bool,
}

/// Accepted/Replaced with state `D` (DESIGN.md 4): nothing would execute and nothing would
/// rest — no exposure; a post-only order that would execute against any resting order; an IOC
/// that can execute nothing, or less than its minimum (it can execute at most its own shares,
/// so a replacement whose exposure is below its minimum is dead too).
#[inline]
pub(crate) fn dead_on_arrival<T: Copy + Default>(
    book: &crate::book::OrderBook<T>,
    a: &Arrival,
) -> bool {
    if a.shares == 0 {
        return true;
    }
    if a.post_only && book.crosses(a.side, a.price) {
        return true;
    }
    if a.tif != TIF_IOC {
        return false;
    }
    let want = u64::from(a.min_qty.max(1));
    u64::from(a.shares) < want || book.executable_shares(a.side, a.price, want) < want
}

/// A live order that would have shares left to rest when its book has no room for them (no
/// free slot, or no room for a new price level). `replacing` is the order a replace removes
/// first (its slot, and maybe its level, come free). Orders that execute in full or are IOC
/// never need room. `stp` is the taker's self-trade prevention and `own` tells its account's
/// resting orders: they decide how much of the book fills it (see [`would_rest`]).
#[inline]
pub(crate) fn would_not_fit<T: Copy + Default>(
    book: &crate::book::OrderBook<T>,
    a: &Arrival,
    replacing: Option<crate::book::OrderHandle>,
    stp: Stp,
    own: impl Fn(&T) -> bool,
) -> bool {
    if a.tif == TIF_IOC {
        return false;
    }
    let fits = match replacing {
        None => book.can_rest(a.side, a.price),
        Some(old) => book.can_rest_replacing(old, a.side, a.price),
    };
    !fits && would_rest(book, a, stp, own)
}

/// Would the taker have shares left to rest once matching is done? Its own account's
/// resting orders do what its self-trade prevention says (DESIGN.md 4a): `decrement` takes
/// shares off it as a trade would; `cancel-oldest` removes them without filling it (so
/// they count for nothing); `cancel-newest` and `cancel-both` stop it at the first one, and
/// then nothing rests. Only asked when the book has no room, so the walk is off the hot path
/// (and kept out of line: inlined, it would weigh on every caller's common path).
#[cold]
fn would_rest<T: Copy + Default>(
    book: &crate::book::OrderBook<T>,
    a: &Arrival,
    stp: Stp,
    own: impl Fn(&T) -> bool,
) -> bool {
    let want = u64::from(a.shares);
    if matches!(stp, Stp::None | Stp::Decrement) {
        return book.executable_shares(a.side, a.price, want) < want;
    }
    let (mut others, mut own_crossing) = (0u64, false);
    book.for_each_order_while(a.side.opposite(), |o| {
        if !crate::book::acceptable(a.side, a.price, o.price) {
            return false; // priority order: no later order crosses either
        }
        if own(o.payload) {
            own_crossing = true;
        } else {
            others += u64::from(o.leaves);
        }
        true
    });
    match stp {
        Stp::CancelOldest => others < want,
        // With an own order crossing, either the others fill it first or it reaches its own
        // order and stops: nothing rests either way.
        _ => !own_crossing && others < want,
    }
}

/// Does a live taker that crosses the book rest without executing anything? Only when every
/// resting order it reaches belongs to its own account and its self-trade prevention takes
/// them away without stopping it (DESIGN.md 4a): `cancel-oldest` removes each; `decrement`
/// takes the smaller leaves off both, and shares must remain (so each own order it crossed
/// was removed whole: one larger than what remains would leave the taker nothing). A
/// replacement that does so "rests without executing" and is published as ITCH `U`
/// (DESIGN.md 4). Asked only when a displayed replacement crosses the book, so the walk is
/// off the hot path.
#[cold]
pub(crate) fn rests_after_preventing_only<T: Copy + Default>(
    book: &crate::book::OrderBook<T>,
    a: &Arrival,
    stp: Stp,
    own: impl Fn(&T) -> bool,
) -> bool {
    if a.tif == TIF_IOC || !matches!(stp, Stp::CancelOldest | Stp::Decrement) {
        return false;
    }
    let (mut left, mut executes) = (a.shares, false);
    book.for_each_order_while(a.side.opposite(), |o| {
        if !crate::book::acceptable(a.side, a.price, o.price) {
            return false;
        }
        if !own(o.payload) {
            executes = true;
            return false;
        }
        if stp == Stp::Decrement {
            left -= left.min(o.leaves);
        }
        left > 0
    });
    !executes && left > 0
}
