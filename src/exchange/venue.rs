//! The venue definition the state machine runs with: symbols and accounts in configuration
//! order (locates and account ids are positions), plus the capacities of every table.
//!
//! It is recorded in the journal's first record, so a journal replays without the config file.

use crate::types::{AccountId, Firm, Locate, Symbol};
use serde::{Deserialize, Serialize};

fn default_round_lot() -> u32 {
    100
}

fn default_max_order_shares() -> u32 {
    999_999
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SymbolDef {
    pub symbol: String,
    /// Price increment in 1/10 000 dollars.
    pub tick: u32,
    #[serde(default = "default_round_lot")]
    pub round_lot: u32,
    /// Fat-finger limit on one order's shares.
    #[serde(default = "default_max_order_shares")]
    pub max_order_shares: u32,
    /// Limit on price x shares of a limit order, in whole dollars.
    #[serde(default)]
    pub max_order_notional: Option<u64>,
}

/// Self-trade prevention of an account (DESIGN.md 4a): what happens when its taker is about
/// to execute against its own resting order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stp {
    /// Trade with itself.
    #[default]
    None,
    /// Cancel the taker's remaining shares; matching stops.
    CancelNewest,
    /// Cancel the resting order; matching continues.
    CancelOldest,
    /// Cancel both (the resting order's Canceled first); matching stops.
    CancelBoth,
    /// Reduce both by the smaller leaves; matching continues while the taker has shares.
    Decrement,
}

impl Stp {
    fn is_none(&self) -> bool {
        *self == Stp::None
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// An account and its venue controls (DESIGN.md 4a). Controls left at their defaults are not
/// written into the journal's venue definition, so a journal without them is byte for byte
/// what it was before they existed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountDef {
    /// SoupBinTCP username (at most 6 characters).
    pub username: String,
    /// Default firm / MPID (at most 4 characters).
    pub firm: String,
    #[serde(default, skip_serializing_if = "Stp::is_none")]
    pub stp: Stp,
    /// Cancel the account's resting orders when a logged-in session's connection ends other
    /// than by Logout Request.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancel_on_disconnect: bool,
    /// Resting orders the account may have (an order that would exceed it: reject `O`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_open_orders: Option<u32>,
    /// Leaves of its resting orders, all symbols and sides (reject `m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_open_shares: Option<u64>,
    /// Shares executed today, both sides (reject `m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_day_shares: Option<u64>,
}

impl AccountDef {
    /// Does any account limit apply?
    pub fn has_limits(&self) -> bool {
        self.max_open_orders.is_some()
            || self.max_open_shares.is_some()
            || self.max_day_shares.is_some()
    }
}

/// Sizes of the pre-allocated tables; reaching one rejects with a reason, never grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Resting orders per symbol.
    pub orders_per_symbol: u32,
    /// Distinct prices per side per symbol.
    pub levels_per_side: u32,
    /// Order tokens an account may use in a day (accepted, rejected or replaced).
    pub tokens_per_account: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            orders_per_symbol: 1 << 18,
            levels_per_side: 1 << 13,
            tokens_per_account: 1 << 18,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Venue {
    pub symbols: Vec<SymbolDef>,
    pub accounts: Vec<AccountDef>,
    pub limits: Limits,
}

/// A symbol definition checked and converted to wire types.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SymbolSpec {
    pub symbol: Symbol,
    pub tick: u32,
    pub round_lot: u32,
    pub max_order_shares: u32,
    pub max_order_notional: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VenueError(pub String);

impl std::fmt::Display for VenueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for VenueError {}

/// Can `text` go in a space-padded wire field (username, password, firm, symbol)? A space
/// (or a control character) inside one could not be told from the padding, so only
/// printable ASCII without spaces.
pub(crate) fn paddable(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_graphic())
}

impl Venue {
    /// Check every field and convert symbols to wire form.
    pub(crate) fn specs(&self) -> Result<Vec<SymbolSpec>, VenueError> {
        let err = |m: String| Err(VenueError(m));
        if self.symbols.is_empty() || self.symbols.len() > u16::MAX as usize {
            return err(format!(
                "need 1..=65535 symbols, got {}",
                self.symbols.len()
            ));
        }
        if self.accounts.is_empty() || self.accounts.len() > u16::MAX as usize {
            return err(format!(
                "need 1..=65535 accounts, got {}",
                self.accounts.len()
            ));
        }
        for a in &self.accounts {
            if a.username.is_empty() || a.username.len() > 6 || !paddable(&a.username) {
                return err(format!(
                    "account username {:?} must be 1-6 printable ASCII characters, no spaces",
                    a.username
                ));
            }
            if a.firm.len() > 4 || !paddable(&a.firm) {
                return err(format!(
                    "account firm {:?} must be at most 4 printable ASCII characters, no spaces",
                    a.firm
                ));
            }
        }
        let mut specs = Vec::with_capacity(self.symbols.len());
        for s in &self.symbols {
            let Some(symbol) = Symbol::from_str_padded(&s.symbol)
                .filter(|_| paddable(&s.symbol) && !s.symbol.is_empty())
            else {
                return err(format!(
                    "symbol {:?} must be 1-8 printable ASCII characters, no spaces",
                    s.symbol
                ));
            };
            if specs.iter().any(|x: &SymbolSpec| x.symbol == symbol) {
                return err(format!("symbol {:?} is defined twice", s.symbol));
            }
            if s.tick == 0 {
                return err(format!("symbol {:?}: tick must be positive", s.symbol));
            }
            // Zero would publish a round lot of 0 shares, or reject every order: a typo, not
            // a setting (leave max_order_notional out for no notional limit).
            let zero = [
                ("round_lot", s.round_lot == 0),
                ("max_order_shares", s.max_order_shares == 0),
                ("max_order_notional", s.max_order_notional == Some(0)),
            ];
            if let Some((field, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
                return err(format!("symbol {:?}: {field} must be positive", s.symbol));
            }
            specs.push(SymbolSpec {
                symbol,
                tick: s.tick,
                round_lot: s.round_lot,
                max_order_shares: s.max_order_shares,
                max_order_notional: s.max_order_notional,
            });
        }
        let l = self.limits;
        if l.orders_per_symbol == 0 || l.levels_per_side == 0 || l.tokens_per_account == 0 {
            return err("every limit must be positive".into());
        }
        Ok(specs)
    }

    /// Check every field (what building the exchange would refuse), building nothing.
    pub fn check(&self) -> Result<(), VenueError> {
        self.specs().map(|_| ())
    }

    pub fn locate_of(&self, symbol: &str) -> Option<Locate> {
        let at = self.symbols.iter().position(|s| s.symbol == symbol)?;
        Some(Locate(at as u16 + 1))
    }

    pub fn account_of(&self, username: &str) -> Option<AccountId> {
        let at = self
            .accounts
            .iter()
            .position(|a| a.username.eq_ignore_ascii_case(username))?;
        Some(AccountId(at as u16))
    }

    pub(crate) fn firm(&self, account: AccountId) -> Firm {
        Firm::from_str_padded(&self.accounts[account.0 as usize].firm).unwrap_or(Firm::SPACES)
    }

    /// A small venue for tests, benches and the embedded default config.
    pub fn demo(symbols: &[&str], accounts: &[(&str, &str)], limits: Limits) -> Venue {
        Venue {
            symbols: symbols
                .iter()
                .map(|s| SymbolDef {
                    symbol: s.to_string(),
                    tick: 100,
                    round_lot: 100,
                    max_order_shares: 100_000,
                    max_order_notional: Some(5_000_000),
                })
                .collect(),
            accounts: accounts
                .iter()
                .map(|(u, f)| AccountDef {
                    username: u.to_string(),
                    firm: f.to_string(),
                    ..AccountDef::default()
                })
                .collect(),
            limits,
        }
    }
}
