//! The login decision (DESIGN.md 6), kept pure so every rule is tested without sockets.
//!
//! Order of checks: credentials first (a bad password always gets `A`), then the requested
//! session, then the one-live-connection-per-account rule (`S`).

use crate::config::AccountConfig;
use crate::types::AccountId;
use crate::wire::ascii::SessionId;
use crate::wire::soupbin::{LoginRequest, reject_reason};

/// A successful login: the account and the first sequence number to send.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Admitted {
    pub account: AccountId,
    pub next_seq: u64,
}

/// Decide a Login Request. `stream_len(account)` is the number of sequenced messages the
/// account has so far; `live(account)` tells whether it already has a logged-in connection.
pub fn decide(
    request: &LoginRequest,
    accounts: &[AccountConfig],
    session: SessionId,
    stream_len: impl Fn(AccountId) -> u64,
    live: impl Fn(AccountId) -> bool,
) -> Result<Admitted, u8> {
    let position = accounts
        .iter()
        .position(|a| request.username_eq(&a.username) && request.password_eq(&a.password));
    let Some(position) = position else {
        return Err(reject_reason::NOT_AUTHORIZED);
    };
    if !request.session.is_blank() && request.session != session {
        return Err(reject_reason::SESSION_NOT_AVAILABLE);
    }
    let account = AccountId(position as u16);
    if live(account) {
        return Err(reject_reason::SESSION_NOT_AVAILABLE);
    }
    let next_new = stream_len(account) + 1;
    // 0 = no replay, start with the next new message; beyond the end = the actual next number.
    let next_seq = match request.sequence {
        0 => next_new,
        n => n.min(next_new),
    };
    Ok(Admitted { account, next_seq })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Alpha;

    fn accounts() -> Vec<AccountConfig> {
        ["BRKR01", "BRKR02"]
            .iter()
            .map(|u| AccountConfig {
                username: u.to_string(),
                password: "secret".into(),
                firm: "F".into(),
                ..AccountConfig::default()
            })
            .collect()
    }

    fn request(user: &str, password: &str, session: &str, sequence: u64) -> LoginRequest {
        LoginRequest {
            username: Alpha::from_str_padded(user).unwrap(),
            password: Alpha::from_str_padded(password).unwrap(),
            session: SessionId::new(session).unwrap(),
            sequence,
            heartbeat_timeout_ms: None,
        }
    }

    fn run(r: &LoginRequest, live: bool) -> Result<Admitted, u8> {
        decide(
            r,
            &accounts(),
            SessionId::new("BOURSE0001").unwrap(),
            |_| 10,
            |_| live,
        )
    }

    #[test]
    fn credentials_then_session_then_one_connection() {
        assert_eq!(run(&request("BRKR01", "wrong", "", 1), false), Err(b'A'));
        assert_eq!(run(&request("NOBODY", "secret", "", 1), false), Err(b'A'));
        assert_eq!(
            run(&request("BRKR01", "wrong", "OTHER", 1), true),
            Err(b'A'),
            "bad password always A"
        );
        assert_eq!(
            run(&request("BRKR01", "secret", "OTHER", 1), false),
            Err(b'S')
        );
        assert_eq!(run(&request("BRKR01", "secret", "", 1), true), Err(b'S'));
    }

    #[test]
    fn case_insensitive_credentials_and_second_account() {
        let ok = run(&request("brkr02", "SECRET", "BOURSE0001", 1), false).unwrap();
        assert_eq!(
            ok,
            Admitted {
                account: AccountId(1),
                next_seq: 1
            }
        );
    }

    #[test]
    fn requested_sequence_rules() {
        let seq = |n| {
            run(&request("BRKR01", "secret", "", n), false)
                .unwrap()
                .next_seq
        };
        assert_eq!(seq(0), 11, "0 = next new message");
        assert_eq!(seq(1), 1);
        assert_eq!(seq(7), 7);
        assert_eq!(seq(11), 11);
        assert_eq!(seq(500), 11, "beyond the end: the actual next number");
    }
}
