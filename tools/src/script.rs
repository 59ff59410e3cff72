//! The order client's line language (binary `bourse-client`), one command per line:
//!
//! ```text
//! buy SHARES SYMBOL PRICE [ioc|day|tif=SECS] [token=T] [display=Y|N|A|P] [minqty=N] [firm=F]
//! sell SHARES SYMBOL PRICE [...]        PRICE is dollars (150.25) or mkt (market, IOC only)
//! cancel TOKEN [SHARES]                 SHARES = new intended size (default 0: cancel all)
//! replace OLD NEW SHARES PRICE [tif=SECS] [display=X] [minqty=N]   NEW may be - (generated)
//! wait N [MS]                           wait until N replies arrived since the last message sent
//!                                       (default at most 5000 ms)
//! sleep MS
//! help | quit                           # starts a comment
//! ```

use bourse::types::{Alpha, Firm, Price, Shares, Symbol, Token};
use bourse::wire::ouch::{CancelOrder, EnterOrder, Inbound, ReplaceOrder};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Send(Inbound),
    /// Wait for `count` more replies, at most `timeout_ms`.
    Wait {
        count: u64,
        timeout_ms: u64,
    },
    Sleep(u64),
    Help,
    Quit,
    Nothing,
}

pub const HELP: &str = "\
buy SHARES SYMBOL PRICE [ioc|day|tif=SECS] [token=T] [display=Y|N|A|P] [minqty=N] [firm=F]
sell SHARES SYMBOL PRICE [...]          PRICE in dollars (150.25) or mkt (market, IOC only)
cancel TOKEN [SHARES]                   SHARES = new intended size (default 0: all)
replace OLD NEW SHARES PRICE [tif=SECS] [display=X] [minqty=N]   NEW = - for a generated token
wait N [MS]                             wait until N replies arrived since the last message sent
sleep MS | help | quit                  # comments";

const TIF_DAY: u32 = 99_999;

/// Makes tokens for orders that do not name one: a 5-character prefix unique to this client
/// run, then a counter.
pub struct TokenSource {
    prefix: [u8; 5],
    next: u64,
}

impl TokenSource {
    pub fn new(prefix: [u8; 5]) -> TokenSource {
        TokenSource { prefix, next: 1 }
    }

    /// `C` + the load generator's tag of this second, and a counter starting at this
    /// millisecond times a million: runs on one day differ unless they start in the same
    /// millisecond (two runs in one second, as scripts do, used to reuse each other's tokens,
    /// and the venue ignored the second run's orders as duplicates).
    pub fn from_clock() -> TokenSource {
        TokenSource::at(crate::loadgen::unix_now())
    }

    /// [`Self::from_clock`] at `now` (since the Unix epoch).
    pub fn at(now: std::time::Duration) -> TokenSource {
        let tag = crate::loadgen::run_tag_at(now.as_secs());
        TokenSource {
            prefix: [b'C', tag[0], tag[1], tag[2], tag[3]],
            next: u64::from(now.subsec_millis()) * 1_000_000 + 1,
        }
    }

    pub fn next_token(&mut self) -> Token {
        let mut b = [b'0'; 14];
        b[..5].copy_from_slice(&self.prefix);
        let mut v = self.next;
        for d in b[5..].iter_mut().rev() {
            *d = b'0' + (v % 10) as u8;
            v /= 10;
        }
        self.next += 1;
        Alpha(b)
    }
}

/// `150.25` → 1 502 500; `mkt` → market. At most 4 decimals.
pub fn parse_price(text: &str) -> Result<Price, String> {
    if text.eq_ignore_ascii_case("mkt") || text.eq_ignore_ascii_case("market") {
        return Ok(Price::MARKET);
    }
    let bad = || format!("price {text:?}: dollars with at most 4 decimals, or mkt");
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && frac.is_empty() || frac.len() > 4 {
        return Err(bad());
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) {
        return Err(bad());
    }
    let w: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let f: u64 = format!("{frac:0<4}").parse().map_err(|_| bad())?;
    let raw = w
        .checked_mul(10_000)
        .and_then(|v| v.checked_add(f))
        .ok_or_else(bad)?;
    u32::try_from(raw).map(Price).map_err(|_| bad())
}

fn number<T: std::str::FromStr>(text: &str, what: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{what} {text:?} is not a number"))
}

fn token(text: &str, tokens: &mut TokenSource) -> Result<Token, String> {
    if text == "-" {
        return Ok(tokens.next_token());
    }
    Alpha::from_str_padded(text).ok_or_else(|| format!("token {text:?}: at most 14 characters"))
}

fn one_byte(text: &str, what: &str) -> Result<u8, String> {
    match text.as_bytes() {
        [b] => Ok(*b),
        _ => Err(format!("{what} {text:?}: one character")),
    }
}

/// Options after the positional arguments of buy/sell/replace.
struct Extras {
    tif: u32,
    token: Option<Token>,
    display: u8,
    min_qty: u32,
    firm: Firm,
}

fn extras(words: &[&str]) -> Result<Extras, String> {
    let mut e = Extras {
        tif: TIF_DAY,
        token: None,
        display: b'Y',
        min_qty: 0,
        firm: Firm::SPACES,
    };
    for w in words {
        let lower = w.to_ascii_lowercase();
        match lower.split_once('=') {
            None if lower == "ioc" => e.tif = 0,
            None if lower == "day" => e.tif = TIF_DAY,
            Some(("tif", v)) => e.tif = number(v, "tif")?,
            Some(("token", _)) => {
                let v = &w[6..];
                e.token = Some(
                    Alpha::from_str_padded(v)
                        .ok_or_else(|| format!("token {v:?}: at most 14 characters"))?,
                );
            }
            Some(("display", v)) => e.display = one_byte(&v.to_ascii_uppercase(), "display")?,
            Some(("minqty", v)) => e.min_qty = number(v, "minqty")?,
            Some(("firm", _)) => {
                let v = &w[5..];
                e.firm = Alpha::from_str_padded(v)
                    .ok_or_else(|| format!("firm {v:?}: at most 4 characters"))?;
            }
            _ => return Err(format!("unknown option {w:?}")),
        }
    }
    Ok(e)
}

/// Parse one line. Market orders get TIF 0 (the venue requires IOC).
pub fn parse(line: &str, tokens: &mut TokenSource) -> Result<Command, String> {
    let line = line.split('#').next().unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some(verb) = words.first() else {
        return Ok(Command::Nothing);
    };
    let args = &words[1..];
    match verb.to_ascii_lowercase().as_str() {
        "buy" | "sell" => {
            if args.len() < 3 {
                return Err(format!("{verb} SHARES SYMBOL PRICE [options]"));
            }
            let shares: u32 = number(args[0], "shares")?;
            let stock = Symbol::from_str_padded(args[1])
                .ok_or_else(|| format!("symbol {:?}: at most 8 characters", args[1]))?;
            let price = parse_price(args[2])?;
            let e = extras(&args[3..])?;
            let tif = if price.is_market() { 0 } else { e.tif };
            Ok(Command::Send(Inbound::Enter(EnterOrder {
                token: e.token.unwrap_or_else(|| tokens.next_token()),
                side: if verb.eq_ignore_ascii_case("buy") {
                    b'B'
                } else {
                    b'S'
                },
                shares: Shares(shares),
                stock,
                price,
                tif,
                firm: e.firm,
                display: e.display,
                capacity: b'A',
                intermarket_sweep: b'N',
                min_qty: Shares(e.min_qty),
                cross_type: b'N',
                customer_type: b' ',
            })))
        }
        "cancel" => {
            let (Some(t), rest) = (args.first(), args.get(1)) else {
                return Err("cancel TOKEN [SHARES]".into());
            };
            let shares = rest.map(|s| number(s, "shares")).transpose()?.unwrap_or(0);
            Ok(Command::Send(Inbound::Cancel(CancelOrder {
                token: token(t, tokens)?,
                shares: Shares(shares),
            })))
        }
        "replace" => {
            if args.len() < 4 {
                return Err("replace OLD NEW SHARES PRICE [options]".into());
            }
            let e = extras(&args[4..])?;
            Ok(Command::Send(Inbound::Replace(ReplaceOrder {
                existing: token(args[0], tokens)?,
                replacement: token(args[1], tokens)?,
                shares: Shares(number(args[2], "shares")?),
                price: parse_price(args[3])?,
                tif: e.tif,
                display: e.display,
                intermarket_sweep: b'N',
                min_qty: Shares(e.min_qty),
            })))
        }
        "wait" => {
            let count = args
                .first()
                .map(|s| number(s, "count"))
                .transpose()?
                .unwrap_or(1);
            let timeout_ms = args
                .get(1)
                .map(|s| number(s, "ms"))
                .transpose()?
                .unwrap_or(5_000);
            Ok(Command::Wait { count, timeout_ms })
        }
        "sleep" => Ok(Command::Sleep(number(
            args.first().ok_or("sleep MS")?,
            "ms",
        )?)),
        "help" | "?" => Ok(Command::Help),
        "quit" | "exit" => Ok(Command::Quit),
        other => Err(format!("unknown command {other:?} (try help)")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_started_in_one_second_make_up_different_tokens() {
        use std::time::Duration;
        let second = Duration::from_secs(1_764_800_000);
        let mut first = TokenSource::at(second + Duration::from_millis(100));
        let mut second_run = TokenSource::at(second + Duration::from_millis(900));
        let (a, b) = (first.next_token(), second_run.next_token());
        assert_eq!(a.0[..5], b.0[..5], "one second, one prefix");
        assert_ne!(a, b);
        // A run of 10,000 orders does not reach the next millisecond's first token.
        let mut early = TokenSource::at(second + Duration::from_millis(100));
        let late = TokenSource::at(second + Duration::from_millis(101)).next_token();
        assert!((0..10_000).all(|_| early.next_token() != late));
    }

    use super::*;

    fn tokens() -> TokenSource {
        TokenSource::new(*b"CTEST")
    }

    #[test]
    fn prices() {
        assert_eq!(parse_price("150.25"), Ok(Price(1_502_500)));
        assert_eq!(parse_price("150"), Ok(Price(1_500_000)));
        assert_eq!(parse_price(".5"), Ok(Price(5_000)));
        assert_eq!(parse_price("mkt"), Ok(Price::MARKET));
        assert!(parse_price("1.23456").is_err());
        assert!(parse_price("abc").is_err());
        assert!(parse_price("").is_err());
        assert!(parse_price("999999999").is_err());
    }

    #[test]
    fn commands() {
        let mut t = tokens();
        let Ok(Command::Send(Inbound::Enter(o))) =
            parse("buy 100 AAPL 150.25 ioc token=ABC display=n", &mut t)
        else {
            panic!()
        };
        assert_eq!(
            (o.side, o.shares.0, o.price.0, o.tif, o.display),
            (b'B', 100, 1_502_500, 0, b'N')
        );
        assert_eq!(o.token.trimmed(), "ABC");
        let Ok(Command::Send(Inbound::Enter(o))) = parse("SELL 5 MSFT mkt", &mut t) else {
            panic!()
        };
        assert_eq!(
            (o.side, o.tif, o.token.trimmed().as_ref()),
            (b'S', 0, "CTEST000000001")
        );
        assert!(matches!(
            parse("cancel ABC 40", &mut t),
            Ok(Command::Send(Inbound::Cancel(c))) if c.shares.0 == 40
        ));
        let Ok(Command::Send(Inbound::Replace(r))) = parse("replace ABC - 300 150.30", &mut t)
        else {
            panic!()
        };
        assert_eq!(r.replacement.trimmed(), "CTEST000000002");
        assert_eq!((r.shares.0, r.price.0, r.tif), (300, 1_503_000, 99_999));
        assert_eq!(
            parse("wait 2", &mut t),
            Ok(Command::Wait {
                count: 2,
                timeout_ms: 5_000
            })
        );
        assert_eq!(parse("  # note", &mut t), Ok(Command::Nothing));
        assert!(parse("buy 100 AAPL", &mut t).is_err());
        assert!(parse("buy 100 AAPL 1 bogus", &mut t).is_err());
        assert!(parse("frobnicate", &mut t).is_err());
    }
}
