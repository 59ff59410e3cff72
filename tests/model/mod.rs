//! A deliberately naive reference model of the exchange contract (DESIGN.md sections 3-5,
//! PROTOCOLS.md sections 2 and 4, plus the lead's documented choices for what the spec leaves
//! open). It is written from the specification, not from `src/exchange`: every resting order
//! lives in one `Vec` per symbol that is scanned linearly, tokens are a `BTreeSet` per account,
//! and each rule is a straight transcription of the sentence it implements (quoted in the
//! comments). Slow and obviously correct is the goal; the property tests compare it with the
//! engine input by input.
//!
//! Capacity limits (`Limits`) are not modelled: the property tests size them so they are never
//! reached.
//!
//! The venue controls of DESIGN.md 4a (self-trade prevention, kill switch, cancel on
//! disconnect, account limits) are written from that section alone: positions for the account
//! limits are recomputed by scanning every book, executed shares are one counter per account.

#![allow(dead_code)]

use bourse::exchange::{AccountDef, Admin, Command, Input, Output, Stp, Venue};
use bourse::types::{
    AccountId, Firm, MatchNumber, OrderRef, Price, Shares, Side, Symbol, Timestamp, Token,
};
use bourse::wire::{itch, ouch};
use std::collections::{BTreeMap, BTreeSet};

/// What one input did, in the model's terms (compared loosely with the engine's `Outcome`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ModelOutcome {
    Applied,
    /// Silently ignored by the rules (no output).
    Ignored,
    /// Admin command refused (no output).
    Refused,
}

/// One resting order.
#[derive(Clone, Debug)]
pub struct Order {
    pub account: u16,
    pub token: Token,
    pub symbol: usize,
    /// The entered Buy/Sell letter (`B`, `S`, `T`, `E`), echoed by replacements.
    pub side_byte: u8,
    pub side: Side,
    pub price: Price,
    pub tif: u32,
    pub display: u8,
    pub leaves: u32,
    pub order_ref: u64,
    /// Time of insertion into the book (a global counter): "oldest first".
    pub arrival: u64,
    /// Expiry deadline in ms for TIF 1..=99997.
    pub deadline_ms: Option<u64>,
    /// Normalized capacity and cross type of the original order (inherited by replacements).
    pub capacity: u8,
    pub cross_type: u8,
    /// "Shares of a replace is the total liability of the chain including shares already
    /// executed": the chain's total and what the whole chain has executed so far.
    pub chain_total: u32,
    pub chain_executed: u32,
}

impl Order {
    pub fn displayed(&self) -> bool {
        displayed(self.display)
    }
}

/// "displayed orders (display `Y`, `A`, `P`) ... hidden ones (`N`)"
fn displayed(display: u8) -> bool {
    display != b'N'
}

/// Attribution class for the ITCH `U` rule: "`Y`/`P` vs `A`".
fn attribution_class(display: u8) -> u8 {
    if display == b'A' { b'A' } else { b'Y' }
}

/// What self-trade prevention leaves of the taker's matching.
enum Matching {
    Continues,
    /// Nothing more happens to the taker: no executions, no Canceled I, nothing rests.
    Stops,
}

/// An order about to be matched and possibly rested (from an Enter or a Replace).
#[derive(Clone, Debug)]
struct Incoming {
    account: u16,
    token: Token,
    symbol: usize,
    side_byte: u8,
    side: Side,
    price: Price,
    tif: u32,
    display: u8,
    /// Shares it may still execute (Enter: the shares; Replace: the exposure).
    qty: u32,
    min_qty: u32,
    capacity: u8,
    cross_type: u8,
    chain_total: u32,
    chain_executed: u32,
    order_ref: u64,
}

struct SymbolState {
    def_symbol: Symbol,
    tick: u32,
    round_lot: u32,
    max_order_shares: u32,
    max_order_notional: Option<u64>,
    halted: bool,
    /// Resting orders, in no particular order (scanned linearly).
    orders: Vec<Order>,
}

pub struct Model {
    symbols: Vec<SymbolState>,
    firms: Vec<Firm>,
    /// Each account's venue controls (stp, cancel_on_disconnect, limits), from the venue.
    controls: Vec<AccountDef>,
    /// "bourse admin block ACCOUNT: from then on its Enter and Replace are rejected a"
    blocked: Vec<bool>,
    /// "executed shares today, both sides": every Executed sent to the account adds its shares.
    executed_today: Vec<u64>,
    /// Per account: every token used today ("accepted, rejected or replaced").
    used: Vec<BTreeSet<Token>>,
    /// Per account: the tokens that carry a side and a symbol (an accepted Enter; a Replace's
    /// replacement, Replaced or Rejected with the original intact) and that symbol: after end
    /// of day a Replace naming one is rejected like an Enter (DESIGN.md 4).
    ordered: Vec<BTreeMap<Token, usize>>,
    next_ref: u64,
    next_match: u64,
    next_arrival: u64,
    closed: bool,
}

const MAX_SHARES: u32 = 999_999;

impl Model {
    pub fn new(venue: &Venue) -> Model {
        Model {
            symbols: venue
                .symbols
                .iter()
                .map(|s| SymbolState {
                    def_symbol: Symbol::from_str_padded(&s.symbol).unwrap(),
                    tick: s.tick,
                    round_lot: s.round_lot,
                    max_order_shares: s.max_order_shares,
                    max_order_notional: s.max_order_notional,
                    halted: false,
                    orders: Vec::new(),
                })
                .collect(),
            firms: venue
                .accounts
                .iter()
                .map(|a| Firm::from_str_padded(&a.firm).unwrap_or(Firm::SPACES))
                .collect(),
            controls: venue.accounts.clone(),
            blocked: vec![false; venue.accounts.len()],
            executed_today: vec![0; venue.accounts.len()],
            used: vec![BTreeSet::new(); venue.accounts.len()],
            ordered: vec![BTreeMap::new(); venue.accounts.len()],
            next_ref: 1,
            next_match: 1,
            next_arrival: 1,
            closed: false,
        }
    }

    // ----- state inspection for the tests -----

    pub fn order_refs_used(&self) -> u64 {
        self.next_ref - 1
    }

    pub fn matches_used(&self) -> u64 {
        self.next_match - 1
    }

    pub fn resting_orders(&self) -> u64 {
        self.symbols.iter().map(|s| s.orders.len() as u64).sum()
    }

    /// The live order of `account` with `token`, if any.
    pub fn live(&self, account: u16, token: &Token) -> Option<&Order> {
        self.symbols
            .iter()
            .flat_map(|s| s.orders.iter())
            .find(|o| o.account == account && o.token == *token)
    }

    /// (account, token) of every live order.
    pub fn live_set(&self) -> BTreeSet<(u16, Token)> {
        self.symbols
            .iter()
            .flat_map(|s| s.orders.iter())
            .map(|o| (o.account, o.token))
            .collect()
    }

    /// Tokens of `account`'s live orders, oldest reference number first.
    pub fn live_tokens(&self, account: u16) -> Vec<Token> {
        let mut v: Vec<&Order> = self
            .symbols
            .iter()
            .flat_map(|s| s.orders.iter())
            .filter(|o| o.account == account)
            .collect();
        v.sort_by_key(|o| o.order_ref);
        v.into_iter().map(|o| o.token).collect()
    }

    /// Best price resting on `side` of symbol index `s` (hidden orders included).
    pub fn best_price(&self, s: usize, side: Side) -> Option<Price> {
        self.in_priority(s, side).first().map(|o| o.price)
    }

    /// Locates of the halted symbols.
    pub fn halted(&self) -> Vec<u16> {
        (0..self.symbols.len())
            .filter(|&s| self.symbols[s].halted)
            .map(Self::locate)
            .collect()
    }

    /// Accounts currently blocked by `bourse admin block`.
    pub fn blocked(&self) -> Vec<u16> {
        (0..self.blocked.len())
            .filter(|&a| self.blocked[a])
            .map(|a| a as u16)
            .collect()
    }

    /// Shares the account has executed today (both sides).
    pub fn executed_today(&self, account: u16) -> u64 {
        self.executed_today[account as usize]
    }

    /// Resting orders of the account and the sum of their leaves (all symbols and sides).
    pub fn open_position(&self, account: u16) -> (u64, u64) {
        let mine = self
            .symbols
            .iter()
            .flat_map(|s| s.orders.iter())
            .filter(|o| o.account == account);
        mine.fold((0, 0), |(n, shares), o| {
            (n + 1, shares + u64::from(o.leaves))
        })
    }

    /// Every resting order, sorted by (symbol, side, priority), for debugging output.
    pub fn all_orders(&self) -> Vec<Order> {
        let mut v = Vec::new();
        for s in 0..self.symbols.len() {
            for side in [Side::Buy, Side::Sell] {
                v.extend(self.in_priority(s, side).into_iter().cloned());
            }
        }
        v
    }

    // ----- helpers -----

    fn itch(&self, out: &mut Vec<Output>, locate: u16, ts: Timestamp, body: itch::Body) {
        out.push(Output::Itch(itch::Message {
            header: itch::Header {
                locate,
                tracking: 0,
                timestamp: ts,
            },
            body,
        }));
    }

    fn ouch(out: &mut Vec<Output>, account: u16, msg: ouch::Outbound) {
        out.push(Output::Ouch(AccountId(account), msg));
    }

    fn locate(symbol: usize) -> u16 {
        symbol as u16 + 1
    }

    /// Does a resting order at `maker_price` cross an incoming `taker_side` order at `limit`?
    /// "market price always crosses if anything rests".
    fn crosses(taker_side: Side, limit: Price, maker_price: Price) -> bool {
        if limit.is_market() {
            return true;
        }
        match taker_side {
            Side::Buy => maker_price <= limit,
            Side::Sell => maker_price >= limit,
        }
    }

    /// Orders of `side` of symbol `s` sorted in priority order: best price first; "within a
    /// price, displayed orders ... trade before hidden ones, each class oldest first".
    fn in_priority(&self, s: usize, side: Side) -> Vec<&Order> {
        let mut v: Vec<&Order> = self.symbols[s]
            .orders
            .iter()
            .filter(|o| o.side == side)
            .collect();
        v.sort_by(|a, b| {
            let price = match side {
                Side::Buy => b.price.cmp(&a.price),
                Side::Sell => a.price.cmp(&b.price),
            };
            price
                .then(b.displayed().cmp(&a.displayed()))
                .then(a.arrival.cmp(&b.arrival))
        });
        v
    }

    /// Index (in `orders`) of the best contra order that crosses `limit`, if any.
    fn best_contra(&self, s: usize, taker_side: Side, limit: Price) -> Option<usize> {
        let best = self
            .in_priority(s, taker_side.opposite())
            .into_iter()
            .find(|o| Self::crosses(taker_side, limit, o.price))?;
        let (account, token) = (best.account, best.token);
        self.symbols[s]
            .orders
            .iter()
            .position(|o| o.account == account && o.token == token)
    }

    /// Shares resting on the contra side that an order at `limit` could execute against
    /// (hidden included).
    fn executable(&self, s: usize, taker_side: Side, limit: Price) -> u64 {
        self.symbols[s]
            .orders
            .iter()
            .filter(|o| o.side == taker_side.opposite())
            .filter(|o| Self::crosses(taker_side, limit, o.price))
            .map(|o| u64::from(o.leaves))
            .sum()
    }

    /// "Dead on arrival (state `D`)": exposure 0; a post-only whose price crosses the best
    /// contra price (any resting order, hidden included); an IOC when the shares executable at
    /// its limit are 0 or below its nonzero minimum quantity.
    fn dead_on_arrival(&self, n: &Incoming) -> bool {
        if n.qty == 0 {
            return true;
        }
        if n.display == b'P' && self.executable(n.symbol, n.side, n.price) > 0 {
            return true;
        }
        if n.tif == 0 {
            let can = self
                .executable(n.symbol, n.side, n.price)
                .min(u64::from(n.qty));
            if can == 0 || can < u64::from(n.min_qty) {
                return true;
            }
        }
        false
    }

    /// "price 0, above 199 999.9900 and not 0x7FFFFFFF, not a multiple of the symbol's tick, or
    /// a market order — price 0x7FFFFFFF — that is not IOC"
    fn price_ok(price: Price, tif: u32, tick: u32) -> bool {
        if price.raw() == 0 {
            return false;
        }
        if price.is_market() {
            return tif == 0;
        }
        if price > Price::MAX_LIMIT {
            return false;
        }
        price.raw().is_multiple_of(tick)
    }

    /// "price x shares above the symbol's max_order_notional (whole dollars; not applied to
    /// market orders)"
    fn notional_exceeded(sym: &SymbolState, price: Price, shares: u32) -> bool {
        match sym.max_order_notional {
            Some(limit) if !price.is_market() => {
                u64::from(price.raw()) * u64::from(shares) > limit * 10_000
            }
            _ => false,
        }
    }

    fn deadline_ms(ts: Timestamp, tif: u32) -> Option<u64> {
        // "TIF 1..=99997 seconds; deadline_ms = ceil((timestamp_ns + tif*1e9)/1e6)"
        if (1..=99_997).contains(&tif) {
            Some((ts.0 + u64::from(tif) * 1_000_000_000).div_ceil(1_000_000))
        } else {
            None
        }
    }

    // ----- the state machine -----

    pub fn apply(&mut self, input: &Input, out: &mut Vec<Output>) -> ModelOutcome {
        let ts = input.timestamp;
        match input.command {
            Command::StartOfDay => {
                self.start_of_day(ts, out);
                ModelOutcome::Applied
            }
            Command::Ouch { account, message } => {
                let a = account.0;
                match message {
                    ouch::Inbound::Enter(e) => self.enter(a, &e, ts, out),
                    ouch::Inbound::Replace(r) => self.replace(a, &r, ts, out),
                    ouch::Inbound::Cancel(c) => self.cancel(a, &c, ts, out),
                    // "Modify `M`: not offered (ignored)."
                    ouch::Inbound::Modify(_) => ModelOutcome::Ignored,
                }
            }
            Command::Admin(admin) => {
                if self.closed {
                    // "After it ... admin commands are refused."
                    return ModelOutcome::Refused;
                }
                match admin {
                    Admin::Halt(l) => self.trading_action(l.0, true, ts, out),
                    Admin::Resume(l) => self.trading_action(l.0, false, ts, out),
                    Admin::EndOfDay => {
                        self.end_of_day(ts, out);
                        ModelOutcome::Applied
                    }
                    Admin::CancelAll { account, symbol } => {
                        self.kill_switch(account.0, symbol.map(|l| l.0), ts, out)
                    }
                    Admin::Block(account) => self.set_blocked(account.0, true),
                    Admin::Unblock(account) => self.set_blocked(account.0, false),
                }
            }
            Command::Tick => {
                self.tick(ts, out);
                ModelOutcome::Applied
            }
            Command::Disconnect { account } => self.disconnect(account.0, ts, out),
        }
    }

    // ----- DESIGN.md 4a: kill switch, block, cancel on disconnect -----

    /// "bourse admin cancel-all ACCOUNT [SYMBOL] cancels that account's resting orders (all
    /// symbols in config order, or one), bids then asks in priority order, each Canceled reason
    /// S and ITCH D if displayed." An unknown account or symbol cannot be carried out (refused,
    /// like a halt of an unknown symbol); an account with nothing resting is a valid no-op.
    fn kill_switch(
        &mut self,
        account: u16,
        locate: Option<u16>,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) -> ModelOutcome {
        if account as usize >= self.controls.len() {
            return ModelOutcome::Refused;
        }
        if let Some(l) = locate
            && (l == 0 || l as usize > self.symbols.len())
        {
            return ModelOutcome::Refused;
        }
        let symbols: Vec<usize> = match locate {
            Some(l) => vec![l as usize - 1],
            None => (0..self.symbols.len()).collect(),
        };
        self.cancel_account(account, &symbols, b'S', ts, out);
        ModelOutcome::Applied
    }

    /// Cancel every resting order of `account` in `symbols` (in that order), bids then asks,
    /// each side in priority order, with `reason`.
    fn cancel_account(
        &mut self,
        account: u16,
        symbols: &[usize],
        reason: u8,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) {
        for &s in symbols {
            for side in [Side::Buy, Side::Sell] {
                let mine: Vec<Order> = self
                    .in_priority(s, side)
                    .into_iter()
                    .filter(|o| o.account == account)
                    .cloned()
                    .collect();
                for o in &mine {
                    self.system_cancel(s, o, reason, ts, out);
                }
            }
        }
    }

    /// "block ACCOUNT: from then on its Enter and Replace are rejected a ...; unblock ACCOUNT
    /// ends it. Block does not cancel by itself." Nothing is output either way. DESIGN.md is
    /// silent on blocking a blocked account; like a halt of a halted symbol (README) it is
    /// refused, and so is unblocking one that is not blocked.
    fn set_blocked(&mut self, account: u16, blocked: bool) -> ModelOutcome {
        match self.blocked.get_mut(account as usize) {
            Some(b) if *b != blocked => {
                *b = blocked;
                ModelOutcome::Applied
            }
            _ => ModelOutcome::Refused,
        }
    }

    /// "when a logged-in session's connection ends other than by Logout Request, the sequencer
    /// journals a disconnect input for the account; its resting orders are canceled as by
    /// cancel-all, with reason Z" — only with `cancel_on_disconnect = true`.
    fn disconnect(&mut self, account: u16, ts: Timestamp, out: &mut Vec<Output>) -> ModelOutcome {
        match self.controls.get(account as usize) {
            Some(c) if c.cancel_on_disconnect => {
                let all: Vec<usize> = (0..self.symbols.len()).collect();
                self.cancel_account(account, &all, b'Z', ts, out);
                ModelOutcome::Applied
            }
            _ => ModelOutcome::Ignored,
        }
    }

    /// DESIGN.md 4a account limits, "checked last, after n, on Enter and on Replace (a replace
    /// counts its chain total in place of the old order's leaves); open orders over the limit
    /// → O, open or day shares over → m". `shares` is the Enter's shares or the Replace's
    /// chain total; `replacing` the live order a Replace would take the place of. An order
    /// counts as one more open order and its shares as open shares whether or not it would
    /// rest (the check is pre-trade); day shares are what was executed plus these shares.
    fn account_limit(&self, account: u16, shares: u32, replacing: Option<&Order>) -> Option<u8> {
        let c = &self.controls[account as usize];
        let (mut open_orders, mut open_shares) = self.open_position(account);
        if let Some(old) = replacing {
            open_orders -= 1;
            open_shares -= u64::from(old.leaves);
        }
        let shares = u64::from(shares);
        if c.max_open_orders
            .is_some_and(|m| open_orders + 1 > u64::from(m))
        {
            return Some(b'O');
        }
        if c.max_open_shares.is_some_and(|m| open_shares + shares > m) {
            return Some(b'm');
        }
        if c.max_day_shares
            .is_some_and(|m| self.executed_today[account as usize] + shares > m)
        {
            return Some(b'm');
        }
        None
    }

    fn start_of_day(&mut self, ts: Timestamp, out: &mut Vec<Output>) {
        // "System Event `O`; one Stock Directory `R` per symbol in config order ...; one Stock
        // Trading Action `H` state `T` per symbol in config order; System Events `S` then `Q`."
        self.itch(out, 0, ts, itch::Body::SystemEvent { event: b'O' });
        for (i, s) in self.symbols.iter().enumerate() {
            let body = itch::Body::StockDirectory(itch::StockDirectory {
                stock: s.def_symbol,
                market_category: b'Q',
                financial_status: b'N',
                round_lot_size: s.round_lot,
                round_lots_only: b'N',
                issue_classification: b'C',
                issue_sub_type: *b"C ",
                authenticity: b'P',
                short_sale_threshold: b'N',
                ipo_flag: b'N',
                luld_tier: b'1',
                etp_flag: b'N',
                etp_leverage: 0,
                inverse: b'N',
            });
            self.itch(out, Self::locate(i), ts, body);
        }
        for (i, s) in self.symbols.iter().enumerate() {
            let body = itch::Body::TradingAction {
                stock: s.def_symbol,
                state: b'T',
                reserved: b' ',
                reason: *b"    ",
            };
            self.itch(out, Self::locate(i), ts, body);
        }
        self.itch(out, 0, ts, itch::Body::SystemEvent { event: b'S' });
        self.itch(out, 0, ts, itch::Body::SystemEvent { event: b'Q' });
        // "An account's OUCH stream starts with System Event `S`"
        for a in 0..self.firms.len() {
            Self::ouch(
                out,
                a as u16,
                ouch::Outbound::SystemEvent(ouch::SystemEvent {
                    timestamp: ts,
                    event: b'S',
                }),
            );
        }
    }

    fn reject(
        &mut self,
        account: u16,
        token: Token,
        reason: u8,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) {
        // "A rejected token cannot be reused."
        self.used[account as usize].insert(token);
        Self::ouch(
            out,
            account,
            ouch::Outbound::Rejected(ouch::Rejected {
                timestamp: ts,
                token,
                reason,
            }),
        );
    }

    fn enter(
        &mut self,
        a: u16,
        e: &ouch::EnterOrder,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) -> ModelOutcome {
        // "a token already used on that account ... makes Enter Order silently ignored"
        if self.used[a as usize].contains(&e.token) {
            return ModelOutcome::Ignored;
        }
        // Checks "in this order, the first failure wins".
        let side = Side::from_ouch(e.side);
        let symbol = self.symbols.iter().position(|s| s.def_symbol == e.stock);
        let reason = 'check: {
            let Some(_) = side else {
                break 'check Some(b'O');
            };
            let Some(s) = symbol else {
                break 'check Some(b'S');
            };
            let sym = &self.symbols[s];
            if sym.halted {
                break 'check Some(b'H');
            }
            if self.closed {
                break 'check Some(b'C');
            }
            // "rejected a (checked right after C)"
            if self.blocked[a as usize] {
                break 'check Some(b'a');
            }
            if e.shares.0 == 0 || e.shares.0 > MAX_SHARES {
                break 'check Some(b'Z');
            }
            if !Self::price_ok(e.price, e.tif, sym.tick) {
                break 'check Some(b'X');
            }
            if e.tif > 99_999 {
                break 'check Some(b'O');
            }
            if !matches!(e.display, b'Y' | b'A' | b'N' | b'P') {
                break 'check Some(b'D');
            }
            if e.cross_type != b'N' {
                break 'check Some(b'R');
            }
            if (e.min_qty.0 > 0 && e.tif != 0) || e.min_qty.0 > e.shares.0 {
                break 'check Some(b'N');
            }
            if !e.firm.is_spaces() && e.firm != self.firms[a as usize] {
                break 'check Some(b'L');
            }
            if e.shares.0 > sym.max_order_shares {
                break 'check Some(b'Z');
            }
            if Self::notional_exceeded(sym, e.price, e.shares.0) {
                break 'check Some(b'n');
            }
            // "Account limits ... checked last, after n"
            if let Some(reason) = self.account_limit(a, e.shares.0, None) {
                break 'check Some(reason);
            }
            None
        };
        if let Some(reason) = reason {
            self.reject(a, e.token, reason, ts, out);
            return ModelOutcome::Applied;
        }
        let (side, s) = (side.unwrap(), symbol.unwrap());
        self.used[a as usize].insert(e.token);
        self.ordered[a as usize].insert(e.token, s);
        // "Every Accepted, dead or live, consumes an order reference number."
        let order_ref = self.next_ref;
        self.next_ref += 1;
        let n = Incoming {
            account: a,
            token: e.token,
            symbol: s,
            side_byte: e.side,
            side,
            price: e.price,
            tif: e.tif,
            display: e.display,
            qty: e.shares.0,
            min_qty: e.min_qty.0,
            // "Capacity outside A/P/R/O is taken as O"
            capacity: if matches!(e.capacity, b'A' | b'P' | b'R' | b'O') {
                e.capacity
            } else {
                b'O'
            },
            cross_type: e.cross_type,
            chain_total: e.shares.0,
            chain_executed: 0,
            order_ref,
        };
        let dead = self.dead_on_arrival(&n);
        Self::ouch(
            out,
            a,
            ouch::Outbound::Accepted(ouch::Accepted {
                timestamp: ts,
                token: e.token,
                side: e.side,
                shares: e.shares,
                stock: e.stock,
                price: e.price,
                tif: e.tif,
                firm: self.firms[a as usize],
                display: e.display,
                order_ref: OrderRef(order_ref),
                capacity: n.capacity,
                // "intermarket sweep other than Y as N"
                intermarket_sweep: if e.intermarket_sweep == b'Y' {
                    b'Y'
                } else {
                    b'N'
                },
                min_qty: e.min_qty,
                cross_type: e.cross_type,
                order_state: if dead { b'D' } else { b'L' },
                bbo_weight: b' ',
            }),
        );
        if !dead {
            self.match_and_rest(n, ts, out);
        }
        ModelOutcome::Applied
    }

    /// Executions in matching order, then "for what is left of an IOC or market order — one
    /// Canceled reason `I`", or `A`/`F` for a displayed resting remainder.
    fn match_and_rest(&mut self, mut n: Incoming, ts: Timestamp, out: &mut Vec<Output>) {
        let s = n.symbol;
        let stock = self.symbols[s].def_symbol;
        while n.qty > 0 {
            let Some(i) = self.best_contra(s, n.side, n.price) else {
                break;
            };
            // DESIGN.md 4a: "judged per account (same username) when the taker is about to
            // execute against a resting order of its own account"
            let own = self.symbols[s].orders[i].account == n.account;
            let stp = self.controls[n.account as usize].stp;
            if own && stp != Stp::None {
                match self.prevent_self_trade(stp, &mut n, i, ts, out) {
                    Matching::Continues => continue,
                    Matching::Stops => return,
                }
            }
            let maker = &mut self.symbols[s].orders[i];
            let fill = n.qty.min(maker.leaves);
            let price = maker.price;
            let m = self.next_match;
            self.next_match += 1;
            maker.leaves -= fill;
            maker.chain_executed += fill;
            let maker = maker.clone();
            if maker.leaves == 0 {
                // "a fully executed order gets no D"
                self.symbols[s].orders.remove(i);
            }
            n.qty -= fill;
            n.chain_executed += fill;
            // "executed shares today, both sides"
            self.executed_today[n.account as usize] += u64::from(fill);
            self.executed_today[maker.account as usize] += u64::from(fill);
            // "for each fill the taker's Executed comes before the maker's"
            Self::ouch(
                out,
                n.account,
                ouch::Outbound::Executed(ouch::Executed {
                    timestamp: ts,
                    token: n.token,
                    shares: Shares(fill),
                    price,
                    liquidity: b'R',
                    match_number: MatchNumber(m),
                }),
            );
            Self::ouch(
                out,
                maker.account,
                ouch::Outbound::Executed(ouch::Executed {
                    timestamp: ts,
                    token: maker.token,
                    shares: Shares(fill),
                    price,
                    liquidity: if maker.displayed() { b'A' } else { b'J' },
                    match_number: MatchNumber(m),
                }),
            );
            let body = if maker.displayed() {
                itch::Body::OrderExecuted {
                    order_ref: OrderRef(maker.order_ref),
                    shares: Shares(fill),
                    match_number: MatchNumber(m),
                }
            } else {
                // "Hidden executions: P with order reference 0 and side B."
                itch::Body::Trade {
                    order_ref: OrderRef(0),
                    side: b'B',
                    shares: Shares(fill),
                    stock,
                    price,
                    match_number: MatchNumber(m),
                }
            };
            self.itch(out, Self::locate(s), ts, body);
        }
        if n.qty == 0 {
            return;
        }
        if n.tif == 0 {
            // IOC / market remainder: "one Canceled reason I"; "Nothing is published for IOC
            // remainders that never rest."
            Self::ouch(
                out,
                n.account,
                ouch::Outbound::Canceled(ouch::Canceled {
                    timestamp: ts,
                    token: n.token,
                    decrement: Shares(n.qty),
                    reason: b'I',
                }),
            );
            return;
        }
        let order = self.rest(&n, ts);
        if order.displayed() {
            let (order_ref, side, shares, price) = (
                OrderRef(order.order_ref),
                order.side.itch_byte(),
                Shares(order.leaves),
                order.price,
            );
            let body = if order.display == b'A' {
                itch::Body::AddOrderMpid {
                    order_ref,
                    side,
                    shares,
                    stock,
                    price,
                    attribution: self.firms[n.account as usize],
                }
            } else {
                itch::Body::AddOrder {
                    order_ref,
                    side,
                    shares,
                    stock,
                    price,
                }
            };
            self.itch(out, Self::locate(s), ts, body);
        }
    }

    /// Self-trade prevention of DESIGN.md 4a for taker `n` about to execute against its own
    /// resting order `orders[i]`: "no Executed and no match number for a prevented trade; every
    /// removal or reduction is OUCH Canceled reason Q to its owner".
    fn prevent_self_trade(
        &mut self,
        stp: Stp,
        n: &mut Incoming,
        i: usize,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) -> Matching {
        let s = n.symbol;
        let maker = self.symbols[s].orders[i].clone();
        match stp {
            Stp::None => unreachable!("a self-trade without prevention is a trade"),
            // "the taker's remaining shares are canceled (one Canceled Q); matching stops;
            // executions before it stand; nothing rests."
            Stp::CancelNewest => {
                Self::ouch(out, n.account, Self::canceled(ts, n.token, n.qty, b'Q'));
                n.qty = 0;
                Matching::Stops
            }
            // "the resting order is canceled (Canceled Q, ITCH D if displayed) and matching
            // continues with the next resting order."
            Stp::CancelOldest => {
                self.system_cancel(s, &maker, b'Q', ts, out);
                Matching::Continues
            }
            // "both, the resting order's Canceled first; matching stops."
            Stp::CancelBoth => {
                self.system_cancel(s, &maker, b'Q', ts, out);
                Self::ouch(out, n.account, Self::canceled(ts, n.token, n.qty, b'Q'));
                n.qty = 0;
                Matching::Stops
            }
            // "with q = the smaller of the two leaves, both are reduced by q: the resting one
            // by Canceled Q of q (ITCH X, or D when it reaches 0), the taker by Canceled Q of
            // q after the resting one's; matching continues while the taker has shares."
            Stp::Decrement => {
                let q = n.qty.min(maker.leaves);
                let resting = &mut self.symbols[s].orders[i];
                resting.leaves -= q;
                let gone = resting.leaves == 0;
                if gone {
                    self.symbols[s].orders.remove(i);
                }
                Self::ouch(out, maker.account, Self::canceled(ts, maker.token, q, b'Q'));
                if maker.displayed() {
                    let order_ref = OrderRef(maker.order_ref);
                    let body = if gone {
                        itch::Body::OrderDelete { order_ref }
                    } else {
                        itch::Body::OrderCancel {
                            order_ref,
                            shares: Shares(q),
                        }
                    };
                    self.itch(out, Self::locate(s), ts, body);
                }
                Self::ouch(out, n.account, Self::canceled(ts, n.token, q, b'Q'));
                n.qty -= q;
                if n.qty == 0 {
                    Matching::Stops
                } else {
                    Matching::Continues
                }
            }
        }
    }

    fn canceled(ts: Timestamp, token: Token, shares: u32, reason: u8) -> ouch::Outbound {
        ouch::Outbound::Canceled(ouch::Canceled {
            timestamp: ts,
            token,
            decrement: Shares(shares),
            reason,
        })
    }

    /// Insert the remainder of `n` into its book (new time priority).
    fn rest(&mut self, n: &Incoming, ts: Timestamp) -> Order {
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        let order = Order {
            account: n.account,
            token: n.token,
            symbol: n.symbol,
            side_byte: n.side_byte,
            side: n.side,
            price: n.price,
            tif: n.tif,
            display: n.display,
            leaves: n.qty,
            order_ref: n.order_ref,
            arrival,
            deadline_ms: Self::deadline_ms(ts, n.tif),
            capacity: n.capacity,
            cross_type: n.cross_type,
            chain_total: n.chain_total,
            chain_executed: n.chain_executed,
        };
        self.symbols[n.symbol].orders.push(order.clone());
        order
    }

    fn position_of(&self, a: u16, token: &Token) -> Option<(usize, usize)> {
        for (s, sym) in self.symbols.iter().enumerate() {
            if let Some(i) = sym
                .orders
                .iter()
                .position(|o| o.account == a && o.token == *token)
            {
                return Some((s, i));
            }
        }
        None
    }

    fn cancel(
        &mut self,
        a: u16,
        c: &ouch::CancelOrder,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) -> ModelOutcome {
        // "a cancel that reduces nothing, or names an unknown or dead token, sends nothing"
        let Some((s, i)) = self.position_of(a, &c.token) else {
            return ModelOutcome::Ignored;
        };
        let order = &mut self.symbols[s].orders[i];
        // "leaves become min(leaves, shares)"
        let new_leaves = order.leaves.min(c.shares.0);
        let decrement = order.leaves - new_leaves;
        if decrement == 0 {
            return ModelOutcome::Ignored;
        }
        order.leaves = new_leaves;
        let order = order.clone();
        if new_leaves == 0 {
            self.symbols[s].orders.remove(i);
        }
        Self::ouch(
            out,
            a,
            ouch::Outbound::Canceled(ouch::Canceled {
                timestamp: ts,
                token: c.token,
                decrement: Shares(decrement),
                reason: b'U',
            }),
        );
        if order.displayed() {
            // "ITCH X (or ITCH D when leaves reach 0)"
            let body = if new_leaves > 0 {
                itch::Body::OrderCancel {
                    order_ref: OrderRef(order.order_ref),
                    shares: Shares(decrement),
                }
            } else {
                itch::Body::OrderDelete {
                    order_ref: OrderRef(order.order_ref),
                }
            };
            self.itch(out, Self::locate(s), ts, body);
        }
        ModelOutcome::Applied
    }

    fn replace(
        &mut self,
        a: u16,
        r: &ouch::ReplaceOrder,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) -> ModelOutcome {
        // Outcome 1: "Existing order no longer live, or replacement token already used →
        // replace silently ignored; the replacement token is not consumed."
        let Some((s, i)) = self.position_of(a, &r.existing) else {
            // "After end of day ... Enter and Replace get their rejects (C once side, symbol
            // and halt checks pass)": every order is gone then, so a Replace naming one of the
            // account's orders (its side and symbol known) is rejected, not ignored.
            let known = self.ordered[a as usize].get(&r.existing).copied();
            if self.closed
                && let Some(s) = known
                && !self.used[a as usize].contains(&r.replacement)
            {
                let reason = if self.symbols[s].halted { b'H' } else { b'C' };
                self.reject(a, r.replacement, reason, ts, out);
                self.ordered[a as usize].insert(r.replacement, s);
                return ModelOutcome::Applied;
            }
            return ModelOutcome::Ignored;
        };
        if self.used[a as usize].contains(&r.replacement) {
            return ModelOutcome::Ignored;
        }
        let sym = &self.symbols[s];
        // Outcome 3: "a halted symbol gives outcome 3 (Rejected H for the replacement token,
        // original intact)"; "the token is consumed".
        let outcome_3 = if sym.halted {
            Some(b'H')
        } else if self.closed {
            Some(b'C')
        } else if self.blocked[a as usize] {
            // "its Enter and Replace are rejected a (checked right after C)": a reject for
            // the replacement token with the original intact, like the halt's outcome 3.
            Some(b'a')
        } else {
            None
        };
        if let Some(reason) = outcome_3 {
            self.reject(a, r.replacement, reason, ts, out);
            self.ordered[a as usize].insert(r.replacement, s);
            return ModelOutcome::Applied;
        }
        // Outcome 2: "Shares 0 or above 999 999, a bad price, an invalid display or minimum
        // quantity, or a chain total over max_order_shares / max_order_notional make it
        // invalid (outcome 2), which cancels the live order with reason U".
        let shares = r.shares.0;
        let invalid = shares == 0
            || shares > MAX_SHARES
            || !Self::price_ok(r.price, r.tif, sym.tick)
            || r.tif > 99_999
            || !matches!(r.display, b'Y' | b'A' | b'N' | b'P')
            || (r.min_qty.0 > 0 && r.tif != 0)
            || r.min_qty.0 > shares
            || shares > sym.max_order_shares
            || Self::notional_exceeded(sym, r.price, shares)
            // "A Replace failing them [the account limits] is outcome 2"
            || self
                .account_limit(a, shares, Some(&self.symbols[s].orders[i]))
                .is_some();
        let old = self.symbols[s].orders.remove(i);
        if invalid {
            Self::ouch(
                out,
                a,
                ouch::Outbound::Canceled(ouch::Canceled {
                    timestamp: ts,
                    token: r.existing,
                    decrement: Shares(old.leaves),
                    reason: b'U',
                }),
            );
            if old.displayed() {
                self.itch(
                    out,
                    Self::locate(s),
                    ts,
                    itch::Body::OrderDelete {
                        order_ref: OrderRef(old.order_ref),
                    },
                );
            }
            return ModelOutcome::Applied;
        }
        // Outcome 4: one Replaced, a new token and a new order reference number.
        self.used[a as usize].insert(r.replacement);
        self.ordered[a as usize].insert(r.replacement, s);
        let order_ref = self.next_ref;
        self.next_ref += 1;
        // "Replaced reports the exposure before the replacement's own executions (chain total
        // minus executed so far)"
        let exposure = shares.saturating_sub(old.chain_executed);
        let n = Incoming {
            account: a,
            token: r.replacement,
            symbol: s,
            side_byte: old.side_byte,
            side: old.side,
            price: r.price,
            tif: r.tif,
            display: r.display,
            qty: exposure,
            min_qty: r.min_qty.0,
            capacity: old.capacity,
            cross_type: old.cross_type,
            chain_total: shares,
            chain_executed: old.chain_executed,
            order_ref,
        };
        let dead = self.dead_on_arrival(&n);
        Self::ouch(
            out,
            a,
            ouch::Outbound::Replaced(ouch::Replaced {
                timestamp: ts,
                token: r.replacement,
                side: old.side_byte,
                shares: Shares(exposure),
                stock: self.symbols[s].def_symbol,
                price: r.price,
                tif: r.tif,
                firm: self.firms[a as usize],
                display: r.display,
                order_ref: OrderRef(order_ref),
                capacity: old.capacity,
                intermarket_sweep: if r.intermarket_sweep == b'Y' {
                    b'Y'
                } else {
                    b'N'
                },
                min_qty: r.min_qty,
                cross_type: old.cross_type,
                order_state: if dead { b'D' } else { b'L' },
                previous_token: r.existing,
                bbo_weight: b' ',
            }),
        );
        // "ITCH U (old ref → new ref, leaves, price) when old and new are both displayed with
        // the same attribution (Y/P vs A) and the replacement rests without executing;
        // otherwise ITCH D for the old order if it was displayed, then the executions, then
        // A/F for a displayed resting remainder". Whether it executes and rests is known once
        // it has matched (self-trade prevention may clear its way without a trade), so its
        // outputs are gathered first and the feed decided from what happened.
        let shown_alike = old.displayed()
            && displayed(n.display)
            && attribution_class(old.display) == attribution_class(n.display);
        let mut after = Vec::new();
        let match_before = self.next_match;
        if !dead {
            self.match_and_rest(n, ts, &mut after);
        }
        let executed = self.next_match != match_before;
        let rested = self.position_of(a, &r.replacement).is_some();
        if shown_alike && rested && !executed {
            // Its own A/F comes last (a resting order's add ends its matching): it becomes
            // the U, with the leaves it rests with.
            let Some(Output::Itch(add)) = after.pop() else {
                panic!("a displayed replacement that rests ends with its add");
            };
            let shares = match add.body {
                itch::Body::AddOrder { shares, .. } | itch::Body::AddOrderMpid { shares, .. } => {
                    shares
                }
                other => panic!("a displayed replacement that rests ends with {other:?}"),
            };
            out.extend(after);
            self.itch(
                out,
                Self::locate(s),
                ts,
                itch::Body::OrderReplace {
                    old_ref: OrderRef(old.order_ref),
                    new_ref: OrderRef(order_ref),
                    shares,
                    price: r.price,
                },
            );
            return ModelOutcome::Applied;
        }
        if old.displayed() {
            self.itch(
                out,
                Self::locate(s),
                ts,
                itch::Body::OrderDelete {
                    order_ref: OrderRef(old.order_ref),
                },
            );
        }
        out.extend(after);
        ModelOutcome::Applied
    }

    fn trading_action(
        &mut self,
        locate: u16,
        halt: bool,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) -> ModelOutcome {
        if locate == 0 || locate as usize > self.symbols.len() {
            return ModelOutcome::Refused;
        }
        let s = locate as usize - 1;
        // "halting a halted symbol or resuming a trading one is refused with no output"
        if self.symbols[s].halted == halt {
            return ModelOutcome::Refused;
        }
        self.symbols[s].halted = halt;
        let body = itch::Body::TradingAction {
            stock: self.symbols[s].def_symbol,
            state: if halt { b'H' } else { b'T' },
            reserved: b' ',
            reason: *b"    ",
        };
        self.itch(out, locate, ts, body);
        ModelOutcome::Applied
    }

    /// Remove a resting order for a system reason: OUCH Canceled `reason` with decrement =
    /// leaves to the owner, then ITCH D if displayed.
    fn system_cancel(
        &mut self,
        s: usize,
        order: &Order,
        reason: u8,
        ts: Timestamp,
        out: &mut Vec<Output>,
    ) {
        let i = self.symbols[s]
            .orders
            .iter()
            .position(|o| o.account == order.account && o.token == order.token)
            .unwrap();
        self.symbols[s].orders.remove(i);
        Self::ouch(
            out,
            order.account,
            ouch::Outbound::Canceled(ouch::Canceled {
                timestamp: ts,
                token: order.token,
                decrement: Shares(order.leaves),
                reason,
            }),
        );
        if order.displayed() {
            self.itch(
                out,
                Self::locate(s),
                ts,
                itch::Body::OrderDelete {
                    order_ref: OrderRef(order.order_ref),
                },
            );
        }
    }

    fn tick(&mut self, ts: Timestamp, out: &mut Vec<Output>) {
        // "every resting order with deadline_ms <= floor(ts/1e6) is canceled ... symbol by
        // symbol in config order; within a symbol in order of (floor(deadline_ms/1000) second,
        // then time of insertion into the book)"
        let now_ms = ts.0 / 1_000_000;
        for s in 0..self.symbols.len() {
            let mut due: Vec<Order> = self.symbols[s]
                .orders
                .iter()
                .filter(|o| o.deadline_ms.is_some_and(|d| d <= now_ms))
                .cloned()
                .collect();
            due.sort_by_key(|o| (o.deadline_ms.unwrap() / 1000, o.arrival));
            for o in &due {
                self.system_cancel(s, o, b'T', ts, out);
            }
        }
    }

    fn end_of_day(&mut self, ts: Timestamp, out: &mut Vec<Output>) {
        // "End-of-day cancels go symbol by symbol in config order, bids then asks, in priority
        // order (the feed's D messages in the same order)"
        for s in 0..self.symbols.len() {
            for side in [Side::Buy, Side::Sell] {
                let orders: Vec<Order> = self.in_priority(s, side).into_iter().cloned().collect();
                for o in &orders {
                    self.system_cancel(s, o, b'E', ts, out);
                }
            }
        }
        // "then System Event E to each account in config order"
        for a in 0..self.firms.len() {
            Self::ouch(
                out,
                a as u16,
                ouch::Outbound::SystemEvent(ouch::SystemEvent {
                    timestamp: ts,
                    event: b'E',
                }),
            );
        }
        // "End of day: after the cancels, System Events M, E, C"
        for event in [b'M', b'E', b'C'] {
            self.itch(out, 0, ts, itch::Body::SystemEvent { event });
        }
        self.closed = true;
    }
}
