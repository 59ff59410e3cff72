//! The front: the part of the state machine that needs no book. It owns the market phase,
//! the halted flags and every account's token table (which tokens were used today, and to
//! which symbol each was routed), validates Enter Orders, rejects what needs no book, and
//! routes the rest to the shard of the symbol. It runs on the sequencer's thread.
//!
//! The one thing it cannot know alone is whether a Replace consumes its replacement token:
//! that depends on whether the existing order is still live, which only its shard knows. Such a
//! token is *pending* until the shard's [`Verdict`] comes back. The front keeps going; it waits
//! for a verdict only when a later input of the same account touches a pending token (reuses
//! it as an Enter or replacement token, a benign resend) or when the account's token table is
//! so close to full that the pending tokens decide whether it is full. With the shard run
//! inline ([`super::Exchange`]) the verdict is there before the next input. Timing may change,
//! outputs may not.

use super::input::{Admin, Command, Input, Outcome};
use super::msg::{
    AccountRisk, Marker, Market, Plan, ShardCmd, SweepKind, SweepScope, Verdict, shard_of,
    shards_of_range,
};
use super::tokens::{TokenState, TokenTable, Vacant, new_tables};
use super::validate::{self, MarketState};
use super::venue::{AccountDef, SymbolSpec, Venue, VenueError};
use crate::types::{AccountId, Firm, Locate, Side, Timestamp, Token};
use crate::wire::itch;
use crate::wire::ouch::{self, Inbound, cancel_reason, reject_reason as why};
use std::collections::VecDeque;

/// Where the front sends its work and gets its verdicts: straight into the stages (inline),
/// queues, or rings to threads. For every input the plan goes first, then its commands, so an
/// inline merge is ready for the events the shard pushes.
pub trait FrontLink {
    /// Does the shard answer a Replace before `to_shard` returns (it runs inline)? Then the
    /// front records the replacement token only once it knows it was consumed, and no token
    /// is ever pending.
    const VERDICT_AT_ONCE: bool = false;
    fn to_merge(&mut self, plan: &Plan);
    /// `to_merge` of an order's plan; inline, the merge takes it from `input` (one copy, not
    /// two: the plan's, then the merge's).
    #[inline]
    fn order_to_merge(&mut self, input: &Input, symbol: u16) {
        self.to_merge(&Plan::Order {
            input: *input,
            symbol,
        });
    }
    fn to_shard(&mut self, shard: usize, cmd: &ShardCmd);
    /// The next verdict of `shard`, waiting for it (it has a Replace it has not answered).
    fn verdict(&mut self, shard: usize) -> Verdict;
    /// The next verdict of `shard` if there is one already.
    fn try_verdict(&mut self, shard: usize) -> Option<Verdict>;
    /// The account's exact position after every command sent so far (summed over the
    /// shards, waiting until each has done its commands). Asked only for accounts with limits.
    fn risk(&mut self, account: u16) -> AccountRisk;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Phase {
    /// Before the start-of-day input.
    PreOpen,
    Open,
    /// After end of day: new orders are rejected `C`.
    Closed,
}

/// A pending replacement token, in the order its shard will answer.
#[derive(Clone, Copy, Debug)]
struct Awaited {
    seq: u64,
    account: u16,
    slot: u32,
}

pub struct Front {
    /// Held while this front (its token tables) lives: a thread populating their unresident
    /// memory holds only a weak reference and stops once it is gone (see [`Self::unresident`]).
    /// The first field, so dropped first: the thread stops before the tables go.
    alive: std::sync::Arc<()>,
    specs: Vec<SymbolSpec>,
    firms: Vec<Firm>,
    shards: usize,
    pub(crate) phase: Phase,
    pub(crate) halted: Vec<bool>,
    /// Accounts blocked by the kill switch.
    pub(crate) blocked: Vec<bool>,
    /// Every account's controls (limits, cancel on disconnect).
    accounts: Vec<AccountDef>,
    /// Per account: does any limit apply? Read by every order, so kept apart from the
    /// definitions (two cache lines an account).
    limited: Vec<bool>,
    pub(crate) tokens: Vec<TokenTable>,
    /// Per shard: Replaces sent that will be answered, oldest first.
    awaited: Vec<VecDeque<Awaited>>,
    /// Replaces that may be awaited at once per shard (`in_flight_max` + 1).
    awaited_max: usize,
    last_seq: u64,
    /// Verdicts that had to be waited for (rare: tokens reused while pending).
    pub waits: u64,
}

impl Front {
    /// `in_flight_max`: commands that can be on their way to one shard at once (on threads:
    /// its ring and the batch it drained, `limits::shard_in_flight_max`).
    pub fn new(venue: &Venue, shards: usize, in_flight_max: usize) -> Result<Front, VenueError> {
        assert!(shards >= 1 && in_flight_max >= 1);
        let specs = venue.specs()?;
        let limit = venue.limits.tokens_per_account;
        Ok(Front {
            firms: (0..venue.accounts.len())
                .map(|a| venue.firm(AccountId(a as u16)))
                .collect(),
            shards,
            phase: Phase::PreOpen,
            halted: vec![false; specs.len()],
            blocked: vec![false; venue.accounts.len()],
            accounts: venue.accounts.clone(),
            limited: venue.accounts.iter().map(AccountDef::has_limits).collect(),
            // A pending token is voided at most once per Replace in flight (on every shard).
            tokens: new_tables(
                venue.accounts.len(),
                limit,
                shards.saturating_mul(in_flight_max + 1),
            ),
            awaited: (0..shards)
                .map(|_| VecDeque::with_capacity(in_flight_max + 1))
                .collect(),
            awaited_max: in_flight_max + 1,
            specs,
            last_seq: 0,
            waits: 0,
            alive: std::sync::Arc::new(()),
        })
    }

    /// Per account, the token slots the day writes next: every voided slot and the next
    /// `ahead` fresh ones (the shard's live index makes their entries resident).
    pub(crate) fn slots_written_next(&self, ahead: u32) -> Vec<(u16, std::ops::Range<u32>)> {
        let mut windows = Vec::new();
        for (account, table) in self.tokens.iter().enumerate() {
            let (voided, fresh) = table.slots_next();
            let account = account as u16;
            windows.extend(voided.iter().map(|&slot| (account, slot..slot + 1)));
            let end = fresh.saturating_add(ahead).min(table.limit() as u32);
            windows.push((account, fresh..end));
        }
        windows
    }

    /// The token tables' memory not yet resident (see `TokenTable::unresident`).
    pub(crate) fn unresident(&self) -> Vec<crate::memory::Unresident> {
        self.tokens
            .iter()
            .filter_map(|t| t.unresident(&self.alive))
            .collect()
    }

    /// Replaces whose verdict one shard may owe at once (see [`Self::new`]).
    pub fn awaited_max(&self) -> usize {
        self.awaited_max
    }

    pub fn shards(&self) -> usize {
        self.shards
    }

    pub fn day_ended(&self) -> bool {
        self.phase == Phase::Closed
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Set the phase and the last input after a state was restored into this fresh front.
    pub(crate) fn restore_position(&mut self, phase: Phase, last_seq: u64) {
        assert!(self.last_seq == 0 && self.pending() == 0);
        self.phase = phase;
        self.last_seq = last_seq;
    }

    /// Sequence one input: decide what needs no book, route the rest. The outcome is exact
    /// for what the front decides (admin commands, start of day, ignored inputs) and
    /// `Applied` for orders a shard decides.
    pub fn apply<L: FrontLink>(&mut self, input: &Input, link: &mut L) -> Outcome {
        assert!(
            input.seq > self.last_seq,
            "inputs must arrive in sequence order"
        );
        self.last_seq = input.seq;
        // By reference: a copy of the message on the stack, read back at the tokens' odd
        // offsets, stalled on store forwarding (perf: a quarter of a Replace's front time).
        match &input.command {
            Command::StartOfDay => self.start_of_day(input, link),
            &Command::Ouch {
                account,
                ref message,
            } => {
                if account.0 as usize >= self.tokens.len() {
                    return self.silent(input, "unknown account", link);
                }
                match message {
                    Inbound::Enter(o) => self.enter(input, account, o, link),
                    Inbound::Cancel(x) => self.cancel(input, account, x, link),
                    Inbound::Replace(u) => self.replace(input, account, u, link),
                    Inbound::Modify(_) => self.silent(input, "modify is not offered", link),
                }
            }
            &Command::Admin(admin) => self.admin(input, admin, link),
            Command::Tick => {
                let scope = SweepScope::Expired;
                self.sweep(input, SweepKind::Expiry, scope, None, link)
            }
            &Command::Disconnect { account } => self.disconnect(input, account, link),
        }
    }

    /// Warm the cache for `input`'s token lookups before it is applied (see
    /// `TokenTable::prefetch`); changes nothing.
    #[inline]
    pub fn prefetch(&self, input: &Input) {
        if let Command::Ouch { account, message } = &input.command {
            self.prefetch_message(*account, message);
        }
    }

    /// [`Self::prefetch`] of an OUCH message not sequenced yet.
    #[inline]
    pub fn prefetch_message(&self, account: AccountId, message: &Inbound) {
        let Some(table) = self.tokens.get(account.0 as usize) else {
            return;
        };
        match message {
            Inbound::Enter(o) => table.prefetch(&o.token),
            Inbound::Cancel(x) => table.prefetch(&x.token),
            Inbound::Replace(u) => {
                table.prefetch(&u.existing);
                table.prefetch(&u.replacement);
            }
            Inbound::Modify(_) => {}
        }
    }

    /// The second step after [`Self::prefetch`]: the slot array's line of the order a Cancel
    /// or Replace names; returns its account and (guessed) slot for the shard's next step.
    #[inline]
    pub fn prefetch_slot(&self, input: &Input) -> Option<(u16, u32)> {
        let Command::Ouch { account, message } = &input.command else {
            return None;
        };
        let token = match message {
            Inbound::Cancel(x) => &x.token,
            Inbound::Replace(u) => &u.existing,
            Inbound::Enter(_) | Inbound::Modify(_) => return None,
        };
        let table = self.tokens.get(account.0 as usize)?;
        Some((account.0, table.prefetch_slot(token)?))
    }

    /// A logged-in session was lost without Logout: with cancel on disconnect, its account's
    /// resting orders are canceled (reason `Z`) as by `cancel-all`.
    fn disconnect<L: FrontLink>(
        &mut self,
        input: &Input,
        account: AccountId,
        link: &mut L,
    ) -> Outcome {
        let cancels = self
            .accounts
            .get(account.0 as usize)
            .is_some_and(|a| a.cancel_on_disconnect);
        if !cancels {
            return self.silent(input, "no cancel on disconnect for the account", link);
        }
        let scope = SweepScope::Account {
            account: account.0,
            reason: cancel_reason::SYSTEM,
        };
        self.sweep(input, SweepKind::Account, scope, None, link)
    }

    /// An input that produces nothing.
    fn silent<L: FrontLink>(&mut self, input: &Input, why: &'static str, link: &mut L) -> Outcome {
        link.to_merge(&Plan::Silent { seq: input.seq });
        Outcome::Ignored(why)
    }

    /// An admin command refused: nothing is produced.
    fn refused<L: FrontLink>(&mut self, input: &Input, why: &'static str, link: &mut L) -> Outcome {
        link.to_merge(&Plan::Silent { seq: input.seq });
        Outcome::AdminRefused(why)
    }

    /// Between two inputs: ask every shard for its displayed orders (GLIMPSE).
    pub fn snapshot<L: FrontLink>(&mut self, ts: Timestamp, id: u64, link: &mut L) {
        let after_seq = self.last_seq;
        let last = self.specs.len() as u16 - 1;
        link.to_merge(&Plan::Snapshot { after_seq, ts, id });
        for shard in shards_of_range(0, last, self.shards) {
            self.send(shard, &ShardCmd::Snapshot { after_seq }, link);
        }
    }

    /// Between two inputs: ask the output thread and every shard thread to lend their stage
    /// for a state snapshot (the threaded layout; see `crate::engine::threaded`).
    pub fn lend<L: FrontLink>(&mut self, link: &mut L) {
        link.to_merge(&Plan::Lend);
        for shard in 0..self.shards {
            self.send(shard, &ShardCmd::Lend, link);
        }
    }

    /// Take every verdict already answered (nothing stays pending once the shards are idle).
    pub fn settle_all<L: FrontLink>(&mut self, link: &mut L) {
        for shard in 0..self.shards {
            while let Some(v) = link.try_verdict(shard) {
                self.settle(shard, v);
            }
        }
    }

    /// Replaces still waiting for their verdict.
    pub fn pending(&self) -> usize {
        self.awaited.iter().map(VecDeque::len).sum()
    }

    /// Tell every shard to stop once it has done its work.
    pub fn stop<L: FrontLink>(&mut self, link: &mut L) {
        for shard in 0..self.shards {
            self.send(shard, &ShardCmd::Stop, link);
        }
    }

    #[inline]
    fn send<L: FrontLink>(&mut self, shard: usize, cmd: &ShardCmd, link: &mut L) {
        // Take what is already answered so the verdict queues stay short.
        while let Some(v) = link.try_verdict(shard) {
            self.settle(shard, v);
        }
        link.to_shard(shard, cmd);
    }

    #[inline]
    fn settle(&mut self, shard: usize, v: Verdict) {
        let a = self.awaited[shard]
            .pop_front()
            .expect("a verdict answers a Replace that was sent");
        assert_eq!(a.seq, v.seq, "verdicts come back in order");
        let table = &mut self.tokens[a.account as usize];
        let TokenState::Pending(symbol) = table.state(a.slot) else {
            panic!("slot {} of account {} is not pending", a.slot, a.account);
        };
        if v.consumed {
            table.set(a.slot, TokenState::Routed(symbol));
        } else {
            table.void(a.slot);
        }
    }

    /// Wait for the verdict of the Replace that recorded `slot` of `account` on `shard`.
    fn wait_for(&mut self, shard: usize, account: u16, slot: u32, link: &mut impl FrontLink) {
        self.waits += 1;
        let seq = self.awaited[shard]
            .iter()
            .find(|a| a.account == account && a.slot == slot)
            .expect("a pending token is awaited")
            .seq;
        while self.awaited[shard].front().is_some_and(|a| a.seq <= seq) {
            let v = link.verdict(shard);
            self.settle(shard, v);
        }
    }

    /// The token's slot and state, waiting for its verdict if it is pending; or where to
    /// record it.
    #[inline(always)]
    fn lookup(
        &mut self,
        account: AccountId,
        token: &Token,
        link: &mut impl FrontLink,
    ) -> Result<(u32, TokenState), Vacant> {
        let found = self.tokens[account.0 as usize].lookup(token);
        if let Ok((slot, TokenState::Pending(symbol))) = found {
            return self.lookup_settled(account, token, (slot, symbol), link);
        }
        found
    }

    /// [`Self::lookup`] of a pending token (sharded only): once its verdict is in.
    #[cold]
    #[inline(never)]
    fn lookup_settled(
        &mut self,
        account: AccountId,
        token: &Token,
        (slot, symbol): (u32, u16),
        link: &mut impl FrontLink,
    ) -> Result<(u32, TokenState), Vacant> {
        self.wait_for(shard_of(symbol, self.shards), account.0, slot, link);
        self.tokens[account.0 as usize].lookup(token)
    }

    /// Exactly as a table without pending tokens would say: is it full? Waits for pending
    /// verdicts only when they decide it.
    #[inline]
    fn tokens_full(&mut self, account: AccountId, link: &mut impl FrontLink) -> bool {
        if !self.tokens[account.0 as usize].is_full() {
            return false;
        }
        self.tokens_full_settled(account, link)
    }

    /// The table counts as full with its pending tokens: settle them until it is decided.
    #[cold]
    fn tokens_full_settled(&mut self, account: AccountId, link: &mut impl FrontLink) -> bool {
        // Each round settles at least one pending token of the account: bounded.
        for _ in 0..=self.awaited_max * self.shards {
            let table = &self.tokens[account.0 as usize];
            if !table.is_full() {
                return false;
            }
            let Some((shard, slot)) = self.awaited.iter().enumerate().find_map(|(s, q)| {
                q.iter()
                    .find(|w| w.account == account.0)
                    .map(|w| (s, w.slot))
            }) else {
                return true; // full of tokens that are all consumed
            };
            self.wait_for(shard, account.0, slot, link);
        }
        unreachable!("pending tokens are bounded by the rings")
    }

    fn start_of_day<L: FrontLink>(&mut self, input: &Input, link: &mut L) -> Outcome {
        if self.phase != Phase::PreOpen {
            return self.silent(input, "the day has already started", link);
        }
        self.phase = Phase::Open;
        link.to_merge(&Plan::StartOfDay { input: *input });
        Outcome::Applied
    }

    fn market(&self, symbol: u16, account: AccountId) -> Market {
        Market {
            halted: self.halted[symbol as usize],
            closed: self.phase != Phase::Open,
            blocked: self.blocked[account.0 as usize],
        }
    }

    fn enter<L: FrontLink>(
        &mut self,
        input: &Input,
        account: AccountId,
        o: &ouch::EnterOrder,
        link: &mut L,
    ) -> Outcome {
        let Err(vacant) = self.lookup(account, &o.token, link) else {
            return self.silent(input, "token already used", link);
        };
        let reject = |reason| Plan::Reject {
            input: *input,
            account,
            token: o.token,
            reason,
        };
        if self.tokens_full(account, link) {
            // Cannot record the token, so cannot promise dedupe: reject without recording.
            link.to_merge(&reject(why::OTHER));
            return Outcome::Applied;
        }
        let checked = self
            .check_enter(account, o)
            .and_then(|x| self.within_limits(account, o, link).map(|()| x));
        let (side, symbol) = match checked {
            Ok(x) => x,
            Err(reason) => {
                let table = &mut self.tokens[account.0 as usize];
                table.insert_vacant(vacant, o.token, TokenState::Unrouted);
                link.to_merge(&reject(reason));
                return Outcome::Applied;
            }
        };
        // Accepted, or rejected for room by the shard: either way the token is used.
        let table = &mut self.tokens[account.0 as usize];
        let slot = table.insert_vacant(vacant, o.token, TokenState::Routed(symbol));
        link.order_to_merge(input, symbol);
        let cmd = ShardCmd::Enter {
            seq: input.seq,
            ts: input.timestamp,
            account,
            symbol,
            side,
            slot,
            order: *o,
        };
        self.send(shard_of(symbol, self.shards), &cmd, link);
        Outcome::Applied
    }

    /// Side and symbol index of a valid Enter Order, or its reject code.
    fn check_enter(&self, account: AccountId, o: &ouch::EnterOrder) -> Result<(Side, u16), u8> {
        let side = Side::from_ouch(o.side).ok_or(why::OTHER)?;
        let symbol = self
            .specs
            .iter()
            .position(|s| s.symbol == o.stock)
            .ok_or(why::STOCK)? as u16;
        let m = self.market(symbol, account);
        let market = MarketState {
            halted: m.halted,
            closed: m.closed,
            blocked: m.blocked,
        };
        let firm = self.firms[account.0 as usize];
        validate::check_enter(o, side, &self.specs[symbol as usize], market, firm)?;
        Ok((side, symbol))
    }

    /// The account limits, checked last (DESIGN.md 4a), on the exact position.
    fn within_limits<L: FrontLink>(
        &mut self,
        account: AccountId,
        o: &ouch::EnterOrder,
        link: &mut L,
    ) -> Result<(), u8> {
        if !self.limited[account.0 as usize] {
            return Ok(());
        }
        let def = &self.accounts[account.0 as usize];
        let risk = link.risk(account.0);
        validate::check_limits(def, risk, o.shares.0, 0)
    }

    /// The symbol a Cancel's or Replace's existing token was routed to (pending included: a
    /// replacement still in flight may be live by the time its shard sees this input).
    #[inline(always)]
    fn routed(&self, account: AccountId, token: &Token) -> Option<(u32, u16)> {
        match self.tokens[account.0 as usize].get(token)? {
            (slot, TokenState::Routed(symbol)) | (slot, TokenState::Pending(symbol)) => {
                Some((slot, symbol))
            }
            _ => None,
        }
    }

    /// [`Self::routed`] for a Replace's existing token. After end of day the shard rejects a
    /// Replace of any routed token that is not live (`C`, DESIGN.md 4), so a replacement token
    /// still pending must first be settled: its Replace may turn out not to consume it (an
    /// invalid one, outcome 2), and then it names no order and this Replace is ignored, as
    /// the one-shard composition (which settles at once) decides. Only then does it wait.
    fn routed_settled_if_closed<L: FrontLink>(
        &mut self,
        account: AccountId,
        u: &ouch::ReplaceOrder,
        link: &mut L,
    ) -> Option<(u32, u16)> {
        let (slot, symbol) = self.routed(account, &u.existing)?;
        if self.phase == Phase::Open {
            return Some((slot, symbol)); // the common case: one lookup
        }
        if self.tokens[account.0 as usize].state(slot) == TokenState::Pending(symbol) {
            self.wait_for(shard_of(symbol, self.shards), account.0, slot, link);
            return self.routed(account, &u.existing);
        }
        Some((slot, symbol))
    }

    fn cancel<L: FrontLink>(
        &mut self,
        input: &Input,
        account: AccountId,
        x: &ouch::CancelOrder,
        link: &mut L,
    ) -> Outcome {
        let Some((slot, symbol)) = self.routed(account, &x.token) else {
            return self.silent(input, "cancel of an unknown or dead token", link);
        };
        link.order_to_merge(input, symbol);
        let cmd = ShardCmd::Cancel {
            seq: input.seq,
            account,
            symbol,
            slot,
            token: x.token,
            shares: x.shares.0,
        };
        self.send(shard_of(symbol, self.shards), &cmd, link);
        Outcome::Applied
    }

    fn replace<L: FrontLink>(
        &mut self,
        input: &Input,
        account: AccountId,
        u: &ouch::ReplaceOrder,
        link: &mut L,
    ) -> Outcome {
        let Some((existing_slot, symbol)) = self.routed_settled_if_closed(account, u, link) else {
            return self.silent(input, "replace of an order that is not live", link);
        };
        // If the existing order is not live the Replace is ignored; if it is, a used
        // replacement token is ignored too: either way nothing happens, decided here.
        let Err(vacant) = self.lookup(account, &u.replacement, link) else {
            return self.silent(input, "replacement token already used", link);
        };
        let shard = shard_of(symbol, self.shards);
        let full = self.tokens_full(account, link);
        let table = &mut self.tokens[account.0 as usize];
        let replacement_slot = match (full, L::VERDICT_AT_ONCE) {
            (true, _) => None,
            // Recorded below once the verdict (already there) says it was consumed.
            (false, true) => Some(table.next_slot()),
            (false, false) => {
                let slot = table.insert_vacant(vacant, u.replacement, TokenState::Pending(symbol));
                assert!(self.awaited[shard].len() < self.awaited_max);
                self.awaited[shard].push_back(Awaited {
                    seq: input.seq,
                    account: account.0,
                    slot,
                });
                Some(slot)
            }
        };
        link.order_to_merge(input, symbol);
        let cmd = ShardCmd::Replace {
            seq: input.seq,
            ts: input.timestamp,
            account,
            symbol,
            existing_slot,
            replacement_slot,
            order: *u,
            market: self.market(symbol, account),
            risk: self.limited[account.0 as usize].then(|| link.risk(account.0)),
        };
        self.send(shard, &cmd, link);
        if L::VERDICT_AT_ONCE && !full {
            let verdict = link
                .try_verdict(shard)
                .expect("an inline shard answers at once");
            assert_eq!(verdict.seq, input.seq);
            if verdict.consumed {
                let table = &mut self.tokens[account.0 as usize];
                let slot = table.insert_vacant(vacant, u.replacement, TokenState::Routed(symbol));
                assert_eq!(Some(slot), replacement_slot, "the predicted slot");
            }
        }
        Outcome::Applied
    }

    /// A sweep of symbols `only` (or every symbol): expiry, end of day, an account's orders.
    fn sweep<L: FrontLink>(
        &mut self,
        input: &Input,
        kind: SweepKind,
        scope: SweepScope,
        only: Option<u16>,
        link: &mut L,
    ) -> Outcome {
        let (first, last) = match only {
            Some(symbol) => (symbol, symbol),
            None => (0, self.specs.len() as u16 - 1),
        };
        link.to_merge(&Plan::Sweep {
            input: *input,
            kind,
            first,
            last,
        });
        let cmd = ShardCmd::Sweep {
            seq: input.seq,
            ts: input.timestamp,
            scope,
            first,
            last,
        };
        for shard in shards_of_range(first, last, self.shards) {
            self.send(shard, &cmd, link);
        }
        Outcome::Applied
    }

    fn admin<L: FrontLink>(&mut self, input: &Input, admin: Admin, link: &mut L) -> Outcome {
        if self.phase != Phase::Open {
            return self.refused(input, "market is not open", link);
        }
        match admin {
            Admin::Halt(locate) | Admin::Resume(locate) => {
                let halt = matches!(admin, Admin::Halt(_));
                let Some(symbol) = self.symbol_of(locate) else {
                    return self.refused(input, "unknown symbol", link);
                };
                if self.halted[symbol as usize] == halt {
                    let why = if halt { "already halted" } else { "not halted" };
                    return self.refused(input, why, link);
                }
                self.halted[symbol as usize] = halt;
                let state = if halt {
                    itch::trading_state::HALTED
                } else {
                    itch::trading_state::TRADING
                };
                link.to_merge(&Plan::TradingAction {
                    input: *input,
                    symbol,
                    state,
                });
                Outcome::Applied
            }
            Admin::EndOfDay => {
                self.phase = Phase::Closed;
                self.sweep(input, SweepKind::EndOfDay, SweepScope::All, None, link)
            }
            Admin::CancelAll { account, symbol } => {
                if account.0 as usize >= self.accounts.len() {
                    return self.refused(input, "unknown account", link);
                }
                let only = match symbol {
                    None => None,
                    Some(locate) => match self.symbol_of(locate) {
                        Some(s) => Some(s),
                        None => return self.refused(input, "unknown symbol", link),
                    },
                };
                let scope = SweepScope::Account {
                    account: account.0,
                    reason: cancel_reason::SUPERVISORY,
                };
                self.sweep(input, SweepKind::Account, scope, only, link)
            }
            Admin::Block(account) | Admin::Unblock(account) => {
                let block = matches!(admin, Admin::Block(_));
                let Some(flag) = self.blocked.get_mut(account.0 as usize) else {
                    return self.refused(input, "unknown account", link);
                };
                if *flag == block {
                    let why = if block {
                        "already blocked"
                    } else {
                        "not blocked"
                    };
                    return self.refused(input, why, link);
                }
                *flag = block;
                link.to_merge(&Plan::Silent { seq: input.seq });
                Outcome::Applied
            }
        }
    }

    fn symbol_of(&self, locate: Locate) -> Option<u16> {
        locate
            .0
            .checked_sub(1)
            .filter(|&s| (s as usize) < self.specs.len())
    }

    /// A point between inputs that the output stage must see in order (see [`super::Marker`]).
    pub fn marker<L: FrontLink>(&mut self, marker: Marker, link: &mut L) {
        link.to_merge(&Plan::Marker(marker));
    }
}
