//! The front: the part of the state machine that runs on the sequencer's thread and needs no
//! book. It owns the market phase, the halted flags and every account's token set (which
//! tokens were used today, and to which symbol each routes), validates Enter Orders, rejects
//! what needs no book, and routes the rest to the shard of the symbol.
//!
//! The one thing it cannot know alone is whether a Replace consumes its replacement token:
//! that depends on whether the existing order is still live, which only its shard knows. Such a
//! token is *pending* until the shard's [`Verdict`] comes back. The front keeps going; it waits
//! for a verdict only when a later input of the same account touches a pending token (reuses
//! it as an Enter or replacement token, a benign resend) or when the account's token table is
//! so close to full that the pending tokens decide whether it is full. Timing may change,
//! outputs may not.

use super::msg::{Market, Plan, ShardCmd, Verdict, shard_of};
use crate::exchange::validate;
use crate::exchange::venue::{SymbolSpec, Venue, VenueError};
use crate::exchange::{Admin, Command, Input, Outcome};
use crate::types::{AccountId, Firm, Side, Token};
use crate::wire::itch;
use crate::wire::ouch::{self, Inbound, reject_reason as why};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, DefaultHasher};

/// Where the front sends its work and gets its verdicts. The threaded pipeline implements it
/// with rings; the pure pipeline with queues it drains inline.
pub trait FrontLink {
    fn to_shard(&mut self, shard: usize, cmd: ShardCmd);
    fn to_merge(&mut self, plan: Plan);
    /// The next verdict of `shard`, waiting for it (it has a Replace it has not answered).
    fn verdict(&mut self, shard: usize) -> Verdict;
    /// The next verdict of `shard` if there is one already.
    fn try_verdict(&mut self, shard: usize) -> Option<Verdict>;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    PreOpen,
    Open,
    Closed,
}

/// One used (or pending) token of an account.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Used {
    /// Consumed; no order behind it was ever accepted for a book (rejected).
    Unrouted,
    /// Consumed; its order is (or was) on the book of `symbol`.
    Routed(u16),
    /// A Replace's replacement token whose verdict has not come back (sent at `seq`).
    Pending { symbol: u16, seq: u64 },
}

struct Account {
    tokens: HashMap<Token, Used, BuildHasherDefault<DefaultHasher>>,
    pending: u32,
}

/// A pending token, in the order its shard will answer.
#[derive(Clone, Copy, Debug)]
struct Awaited {
    seq: u64,
    account: u16,
    token: Token,
}

pub struct Front {
    specs: Vec<SymbolSpec>,
    firms: Vec<Firm>,
    shards: usize,
    phase: Phase,
    halted: Vec<bool>,
    accounts: Vec<Account>,
    token_limit: usize,
    /// Per shard: Replaces sent that will be answered, oldest first.
    awaited: Vec<VecDeque<Awaited>>,
    last_seq: u64,
    /// Verdicts that had to be waited for (rare: tokens reused while pending).
    pub waits: u64,
}

impl Front {
    pub fn new(venue: &Venue, shards: usize) -> Result<Front, VenueError> {
        assert!(shards >= 1);
        let specs = venue.specs()?;
        let limit = venue.limits.tokens_per_account as usize;
        Ok(Front {
            firms: (0..venue.accounts.len())
                .map(|a| venue.firm(AccountId(a as u16)))
                .collect(),
            shards,
            phase: Phase::PreOpen,
            halted: vec![false; specs.len()],
            accounts: venue
                .accounts
                .iter()
                .map(|_| Account {
                    tokens: HashMap::with_capacity_and_hasher(limit, Default::default()),
                    pending: 0,
                })
                .collect(),
            token_limit: limit,
            awaited: (0..shards).map(|_| VecDeque::with_capacity(1024)).collect(),
            specs,
            last_seq: 0,
            waits: 0,
        })
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Sequence one input: decide what needs no book, route the rest. Returns the outcome
    /// for the caller's bookkeeping; it is exact for admin commands and start of day (what the
    /// daemon reports to the operator), `Applied` for orders a shard decides.
    pub fn apply<L: FrontLink>(&mut self, input: &Input, link: &mut L) -> Outcome {
        assert!(
            input.seq > self.last_seq,
            "inputs must arrive in sequence order"
        );
        self.last_seq = input.seq;
        let seq = input.seq;
        let (outcome, plan) = match input.command {
            Command::StartOfDay => {
                if self.phase != Phase::PreOpen {
                    (
                        Outcome::Ignored("the day has already started"),
                        Plan::Silent { seq },
                    )
                } else {
                    self.phase = Phase::Open;
                    (Outcome::Applied, Plan::StartOfDay { input: *input })
                }
            }
            Command::Ouch { account, message } => {
                if account.0 as usize >= self.accounts.len() {
                    (Outcome::Ignored("unknown account"), Plan::Silent { seq })
                } else {
                    match message {
                        Inbound::Enter(o) => self.enter(input, account, &o, link),
                        Inbound::Cancel(x) => self.cancel(input, account, &x, link),
                        Inbound::Replace(u) => self.replace(input, account, &u, link),
                        Inbound::Modify(_) => (
                            Outcome::Ignored("modify is not offered"),
                            Plan::Silent { seq },
                        ),
                    }
                }
            }
            Command::Admin(admin) => self.admin(input, admin, link),
            Command::Tick => {
                for shard in 0..self.shards {
                    self.send(
                        shard,
                        ShardCmd::Tick {
                            seq,
                            ts: input.timestamp,
                        },
                        link,
                    );
                }
                (Outcome::Applied, Plan::Tick { input: *input })
            }
        };
        link.to_merge(plan);
        outcome
    }

    /// Between two inputs: ask every shard for its displayed orders (GLIMPSE).
    pub fn snapshot<L: FrontLink>(&mut self, ts: crate::types::Timestamp, id: u64, link: &mut L) {
        let after_seq = self.last_seq;
        for shard in 0..self.shards {
            self.send(shard, ShardCmd::Snapshot { after_seq }, link);
        }
        link.to_merge(Plan::Snapshot { after_seq, ts, id });
    }

    /// Take every verdict already answered (nothing stays pending once the shards are idle).
    pub fn settle_all<L: FrontLink>(&mut self, link: &mut L) {
        for shard in 0..self.shards {
            while let Some(v) = link.try_verdict(shard) {
                self.settle(shard, v);
            }
        }
    }

    /// Tell every shard to stop once it has done its work.
    pub fn stop<L: FrontLink>(&mut self, link: &mut L) {
        for shard in 0..self.shards {
            self.send(shard, ShardCmd::Stop, link);
        }
    }

    fn send<L: FrontLink>(&mut self, shard: usize, cmd: ShardCmd, link: &mut L) {
        // Drain what is already answered so the verdict queues stay short (and bounded by the
        // ring: at most the Replaces in flight plus this one).
        while let Some(v) = link.try_verdict(shard) {
            self.settle(shard, v);
        }
        link.to_shard(shard, cmd);
    }

    fn settle(&mut self, shard: usize, v: Verdict) {
        let a = self.awaited[shard]
            .pop_front()
            .expect("a verdict answers a Replace that was sent");
        assert_eq!(a.seq, v.seq, "verdicts come back in order");
        let account = &mut self.accounts[a.account as usize];
        let entry = account.tokens.get_mut(&a.token).expect("pending token");
        let Used::Pending { symbol, seq } = *entry else {
            panic!("token {:?} is not pending", a.token);
        };
        assert_eq!(seq, v.seq);
        account.pending -= 1;
        if v.consumed {
            *entry = Used::Routed(symbol);
        } else {
            account.tokens.remove(&a.token);
        }
    }

    /// Wait for the verdict of the Replace sent at `seq` (on `shard`).
    fn wait_for(&mut self, shard: usize, seq: u64, link: &mut impl FrontLink) {
        self.waits += 1;
        while self.awaited[shard].front().is_some_and(|a| a.seq <= seq) {
            let v = link.verdict(shard);
            self.settle(shard, v);
        }
    }

    /// The token's state, waiting for its verdict if it is pending.
    fn lookup(
        &mut self,
        account: AccountId,
        token: &Token,
        link: &mut impl FrontLink,
    ) -> Option<Used> {
        let used = self.accounts[account.0 as usize].tokens.get(token).copied();
        if let Some(Used::Pending { symbol, seq }) = used {
            self.wait_for(shard_of(symbol, self.shards), seq, link);
            return self.accounts[account.0 as usize].tokens.get(token).copied();
        }
        used
    }

    /// Exactly as the single-threaded token table would say: is it full? Waits for pending
    /// verdicts only when they decide it.
    fn tokens_full(&mut self, account: AccountId, link: &mut impl FrontLink) -> bool {
        loop {
            let a = &self.accounts[account.0 as usize];
            let recorded = a.tokens.len();
            let definite = recorded - a.pending as usize;
            if definite >= self.token_limit {
                return true;
            }
            if recorded < self.token_limit {
                return false;
            }
            // Some pending token of this account decides it: wait for one.
            let (shard, seq) = self
                .awaited
                .iter()
                .enumerate()
                .find_map(|(s, q)| {
                    q.iter()
                        .find(|w| w.account == account.0)
                        .map(|w| (s, w.seq))
                })
                .expect("pending tokens are awaited");
            self.wait_for(shard, seq, link);
        }
    }

    fn record(&mut self, account: AccountId, token: Token, used: Used) {
        let a = &mut self.accounts[account.0 as usize];
        assert!(
            a.tokens.len() < self.token_limit,
            "token table full (caller checks)"
        );
        let previous = a.tokens.insert(token, used);
        assert!(previous.is_none(), "token recorded twice");
        if matches!(used, Used::Pending { .. }) {
            a.pending += 1;
        }
    }

    fn market(&self, symbol: u16) -> Market {
        Market {
            halted: self.halted[symbol as usize],
            closed: self.phase != Phase::Open,
        }
    }

    fn enter<L: FrontLink>(
        &mut self,
        input: &Input,
        account: AccountId,
        o: &ouch::EnterOrder,
        link: &mut L,
    ) -> (Outcome, Plan) {
        let seq = input.seq;
        if self.lookup(account, &o.token, link).is_some() {
            return (Outcome::Ignored("token already used"), Plan::Silent { seq });
        }
        let reject = |reason| Plan::Reject {
            input: *input,
            account,
            token: o.token,
            reason,
        };
        if self.tokens_full(account, link) {
            return (Outcome::Applied, reject(why::OTHER));
        }
        let checked = self.check_enter(account, o);
        let (side, symbol) = match checked {
            Ok(x) => x,
            Err(reason) => {
                self.record(account, o.token, Used::Unrouted);
                return (Outcome::Applied, reject(reason));
            }
        };
        // Accepted, or rejected for capacity by the shard: either way the token is used.
        self.record(account, o.token, Used::Routed(symbol));
        let cmd = ShardCmd::Enter {
            seq,
            ts: input.timestamp,
            account,
            symbol,
            side,
            order: *o,
        };
        self.send(shard_of(symbol, self.shards), cmd, link);
        (
            Outcome::Applied,
            Plan::Order {
                input: *input,
                symbol,
            },
        )
    }

    fn check_enter(&self, account: AccountId, o: &ouch::EnterOrder) -> Result<(Side, u16), u8> {
        let side = Side::from_ouch(o.side).ok_or(why::OTHER)?;
        let symbol = self
            .specs
            .iter()
            .position(|s| s.symbol == o.stock)
            .ok_or(why::STOCK)? as u16;
        let m = self.market(symbol);
        let market = validate::MarketState {
            halted: m.halted,
            closed: m.closed,
        };
        let firm = self.firms[account.0 as usize];
        validate::check_enter(o, side, &self.specs[symbol as usize], market, firm)?;
        Ok((side, symbol))
    }

    fn cancel<L: FrontLink>(
        &mut self,
        input: &Input,
        account: AccountId,
        x: &ouch::CancelOrder,
        link: &mut L,
    ) -> (Outcome, Plan) {
        let seq = input.seq;
        let symbol = match self.accounts[account.0 as usize].tokens.get(&x.token) {
            Some(Used::Routed(symbol)) | Some(Used::Pending { symbol, .. }) => *symbol,
            _ => {
                return (
                    Outcome::Ignored("cancel of an unknown or dead token"),
                    Plan::Silent { seq },
                );
            }
        };
        let cmd = ShardCmd::Cancel {
            seq,
            account,
            symbol,
            token: x.token,
            shares: x.shares.0,
        };
        self.send(shard_of(symbol, self.shards), cmd, link);
        (
            Outcome::Applied,
            Plan::Order {
                input: *input,
                symbol,
            },
        )
    }

    fn replace<L: FrontLink>(
        &mut self,
        input: &Input,
        account: AccountId,
        u: &ouch::ReplaceOrder,
        link: &mut L,
    ) -> (Outcome, Plan) {
        let seq = input.seq;
        let symbol = match self.accounts[account.0 as usize].tokens.get(&u.existing) {
            Some(Used::Routed(symbol)) | Some(Used::Pending { symbol, .. }) => *symbol,
            _ => {
                return (
                    Outcome::Ignored("replace of an order that is not live"),
                    Plan::Silent { seq },
                );
            }
        };
        // If the existing order is not live the exchange ignores the Replace; if it is, a used
        // replacement token is ignored too: either way nothing happens, decided here.
        if self.lookup(account, &u.replacement, link).is_some() {
            return (
                Outcome::Ignored("replacement token already used"),
                Plan::Silent { seq },
            );
        }
        let tokens_full = self.tokens_full(account, link);
        let shard = shard_of(symbol, self.shards);
        if !tokens_full {
            self.record(account, u.replacement, Used::Pending { symbol, seq });
            self.awaited[shard].push_back(Awaited {
                seq,
                account: account.0,
                token: u.replacement,
            });
        }
        let cmd = ShardCmd::Replace {
            seq,
            ts: input.timestamp,
            account,
            symbol,
            order: *u,
            market: self.market(symbol),
            tokens_full,
        };
        self.send(shard, cmd, link);
        (
            Outcome::Applied,
            Plan::Order {
                input: *input,
                symbol,
            },
        )
    }

    fn admin<L: FrontLink>(
        &mut self,
        input: &Input,
        admin: Admin,
        link: &mut L,
    ) -> (Outcome, Plan) {
        let seq = input.seq;
        let silent = Plan::Silent { seq };
        if self.phase != Phase::Open {
            return (Outcome::AdminRefused("market is not open"), silent);
        }
        match admin {
            Admin::Halt(locate) | Admin::Resume(locate) => {
                let halt = matches!(admin, Admin::Halt(_));
                let Some(symbol) = locate
                    .0
                    .checked_sub(1)
                    .filter(|&s| (s as usize) < self.specs.len())
                else {
                    return (Outcome::AdminRefused("unknown symbol"), silent);
                };
                if self.halted[symbol as usize] == halt {
                    let why = if halt { "already halted" } else { "not halted" };
                    return (Outcome::AdminRefused(why), silent);
                }
                self.halted[symbol as usize] = halt;
                let state = if halt {
                    itch::trading_state::HALTED
                } else {
                    itch::trading_state::TRADING
                };
                (
                    Outcome::Applied,
                    Plan::TradingAction {
                        input: *input,
                        symbol,
                        state,
                    },
                )
            }
            Admin::EndOfDay => {
                self.phase = Phase::Closed;
                for shard in 0..self.shards {
                    self.send(shard, ShardCmd::EndOfDay { seq }, link);
                }
                (Outcome::Applied, Plan::EndOfDay { input: *input })
            }
        }
    }
}
