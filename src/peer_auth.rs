//! Mutual authentication of a TCP connection between two processes of one venue that share a
//! secret: cluster members (`[cluster] secret`) and a legacy primary and its standbys
//! (`[replication] secret`). Both directions are proven with HMAC-SHA256 over fresh 32-byte
//! nonces from the kernel:
//!
//! | step | bytes |
//! |---|---|
//! | client → server | `BRSC`, version u16, client id u64, server id u64, client nonce (32 bytes) |
//! | server → client | `BRSS`, server nonce (32 bytes), HMAC(secret, server label · client nonce · server nonce · client id · server id) |
//! | client → server | HMAC(secret, client label · server nonce · client nonce · client id · server id) |
//!
//! (integers big-endian; the labels name the protocol, so a proof made for one is worth
//! nothing to the other). The client sends nothing after its hello until the server proved it
//! knows the secret, and the server reads nothing more until the client did: an
//! unauthenticated peer gets a nonce and a MAC over nonces, never a byte of journal. The MACs
//! are compared in constant time. Connections are not encrypted and later bytes are not
//! MACed: this keeps impostors out, not an attacker on the path (that needs TLS).

use std::io::{self, Read, Write};
use std::net::TcpStream;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub const CLIENT_MAGIC: &[u8; 4] = b"BRSC";
pub const SERVER_MAGIC: &[u8; 4] = b"BRSS";
pub const NONCE_BYTES: usize = 32;
pub const MAC_BYTES: usize = 32;
pub const HELLO_BYTES: usize = 4 + 2 + 8 + 8 + NONCE_BYTES;
pub const CHALLENGE_BYTES: usize = 4 + NONCE_BYTES + MAC_BYTES;
/// A shared secret shorter than this is refused by the configs that name one.
pub const SECRET_BYTES_MIN: usize = 16;

/// Which protocol a handshake opens: its name (for errors), version and MAC labels.
#[derive(Clone, Copy, Debug)]
pub struct Protocol {
    pub name: &'static str,
    pub version: u16,
    server_label: &'static [u8],
    client_label: &'static [u8],
}

impl Protocol {
    pub const fn new(
        name: &'static str,
        version: u16,
        server_label: &'static [u8],
        client_label: &'static [u8],
    ) -> Protocol {
        Protocol {
            name,
            version,
            server_label,
            client_label,
        }
    }
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// A proof that does not verify: the peer answered in this protocol with another secret
/// (`PermissionDenied`, so callers can tell it from bytes of another protocol).
fn not_proven(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, what)
}

fn random_nonce() -> io::Result<[u8; NONCE_BYTES]> {
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce).map_err(|e| io::Error::other(format!("random bytes: {e}")))?;
    Ok(nonce)
}

fn mac(
    secret: &[u8],
    label: &[u8],
    nonces: (&[u8; NONCE_BYTES], &[u8; NONCE_BYTES]),
    client_id: u64,
    server_id: u64,
) -> HmacSha256 {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(label);
    mac.update(nonces.0);
    mac.update(nonces.1);
    mac.update(&client_id.to_be_bytes());
    mac.update(&server_id.to_be_bytes());
    mac
}

/// Client side: prove the server knows the secret, then prove we do.
pub fn client(
    stream: &mut TcpStream,
    secret: &[u8],
    protocol: Protocol,
    client_id: u64,
    server_id: u64,
) -> io::Result<()> {
    let client_nonce = random_nonce()?;
    let mut hello = [0u8; HELLO_BYTES];
    hello[0..4].copy_from_slice(CLIENT_MAGIC);
    hello[4..6].copy_from_slice(&protocol.version.to_be_bytes());
    hello[6..14].copy_from_slice(&client_id.to_be_bytes());
    hello[14..22].copy_from_slice(&server_id.to_be_bytes());
    hello[22..].copy_from_slice(&client_nonce);
    stream.write_all(&hello)?;
    let mut challenge = [0u8; CHALLENGE_BYTES];
    stream.read_exact(&mut challenge)?;
    if &challenge[0..4] != SERVER_MAGIC {
        return Err(invalid(format!("not a {} server's answer", protocol.name)));
    }
    let server_nonce: [u8; NONCE_BYTES] = challenge[4..4 + NONCE_BYTES].try_into().expect("32");
    let nonces = (&client_nonce, &server_nonce);
    mac(secret, protocol.server_label, nonces, client_id, server_id)
        .verify_slice(&challenge[4 + NONCE_BYTES..])
        .map_err(|_| {
            not_proven(format!(
                "the server does not know the {} secret",
                protocol.name
            ))
        })?;
    let nonces = (&server_nonce, &client_nonce);
    let proof = mac(secret, protocol.client_label, nonces, client_id, server_id)
        .finalize()
        .into_bytes();
    stream.write_all(&proof)
}

/// Server side: answer the client's hello if `ids_ok(client_id, server_id)`, then check its
/// proof. Returns the client's id.
pub fn server(
    stream: &mut TcpStream,
    secret: &[u8],
    protocol: Protocol,
    ids_ok: impl FnOnce(u64, u64) -> bool,
) -> io::Result<u64> {
    let mut hello = [0u8; HELLO_BYTES];
    stream.read_exact(&mut hello)?;
    if &hello[0..4] != CLIENT_MAGIC {
        return Err(invalid(format!("not a {} hello", protocol.name)));
    }
    let version = u16::from_be_bytes([hello[4], hello[5]]);
    if version != protocol.version {
        return Err(invalid(format!(
            "{} protocol version {version}, not {}",
            protocol.name, protocol.version
        )));
    }
    let client_id = u64::from_be_bytes(hello[6..14].try_into().expect("8"));
    let server_id = u64::from_be_bytes(hello[14..22].try_into().expect("8"));
    if !ids_ok(client_id, server_id) {
        return Err(invalid(format!(
            "hello names {} peers that do not match this one",
            protocol.name
        )));
    }
    let client_nonce: [u8; NONCE_BYTES] = hello[22..].try_into().expect("32");
    let server_nonce = random_nonce()?;
    let nonces = (&client_nonce, &server_nonce);
    let answer = mac(secret, protocol.server_label, nonces, client_id, server_id)
        .finalize()
        .into_bytes();
    let mut challenge = [0u8; CHALLENGE_BYTES];
    challenge[0..4].copy_from_slice(SERVER_MAGIC);
    challenge[4..4 + NONCE_BYTES].copy_from_slice(&server_nonce);
    challenge[4 + NONCE_BYTES..].copy_from_slice(&answer);
    stream.write_all(&challenge)?;
    let mut proof = [0u8; MAC_BYTES];
    stream.read_exact(&mut proof)?;
    let nonces = (&server_nonce, &client_nonce);
    mac(secret, protocol.client_label, nonces, client_id, server_id)
        .verify_slice(&proof)
        .map_err(|_| {
            not_proven(format!(
                "the client does not know the {} secret",
                protocol.name
            ))
        })?;
    Ok(client_id)
}

/// What a config's `secret` / `secret_file` pair can be checked for before start (the file
/// is read at start): not both, and a `secret` given inline long enough.
pub fn check_secret_config(
    section: &str,
    secret: Option<&str>,
    has_file: bool,
) -> Result<(), String> {
    if has_file && secret.is_some() {
        return Err(format!(
            "set {section}.secret or {section}.secret_file, not both"
        ));
    }
    read_secret(section, secret, None).map(|_| ())
}

/// A shared secret from a config's `secret` or the file `secret_file` names (trimmed), at
/// least [`SECRET_BYTES_MIN`] bytes. `section` names the config section in errors.
pub fn read_secret(
    section: &str,
    secret: Option<&str>,
    secret_file: Option<&std::path::Path>,
) -> Result<Option<Vec<u8>>, String> {
    let secret = match (secret, secret_file) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "set {section}.secret or {section}.secret_file, not both"
            ));
        }
        (Some(secret), None) => secret.as_bytes().to_vec(),
        (None, Some(path)) => std::fs::read(path)
            .map_err(|e| format!("cannot read {section}.secret_file {}: {e}", path.display()))?
            .trim_ascii()
            .to_vec(),
        (None, None) => return Ok(None),
    };
    if secret.len() < SECRET_BYTES_MIN {
        return Err(format!(
            "the {section} secret must be at least {SECRET_BYTES_MIN} bytes"
        ));
    }
    Ok(Some(secret))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const ONE: Protocol = Protocol::new("one", 1, b"one server", b"one client");
    const OTHER: Protocol = Protocol::new("other", 1, b"other server", b"other client");
    const SECRET: &[u8] = b"sixteen bytes at least";

    /// Runs `server` on an accepted connection and `client` on ours; both results.
    fn pair(
        client_side: impl FnOnce(&mut TcpStream) -> io::Result<()>,
        server_side: impl FnOnce(&mut TcpStream) -> io::Result<u64> + Send + 'static,
    ) -> (io::Result<()>, io::Result<u64>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let result = server_side(&mut stream);
            drop(stream);
            result
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let client = client_side(&mut stream);
        drop(stream);
        (client, server.join().unwrap())
    }

    #[test]
    fn the_same_secret_and_protocol_pass_both_ways() {
        let (c, s) = pair(
            |s| client(s, SECRET, ONE, 7, 9),
            |s| server(s, SECRET, ONE, |c, s| (c, s) == (7, 9)),
        );
        c.unwrap();
        assert_eq!(s.unwrap(), 7);
    }

    #[test]
    fn a_wrong_secret_another_protocol_or_wrong_ids_fail() {
        let wrong = b"another secret, long enough";
        let (c, s) = pair(
            |s| client(s, wrong, ONE, 7, 9),
            |s| server(s, SECRET, ONE, |_, _| true),
        );
        // The client finds out first: the server's MAC is not made with its secret.
        let error = c.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied);
        assert!(error.to_string().contains("does not know the one secret"));
        assert!(s.is_err());
        // A proof made for another protocol (labels) is refused the same way.
        let (c, s) = pair(
            |s| client(s, SECRET, OTHER, 7, 9),
            |s| server(s, SECRET, ONE, |_, _| true),
        );
        assert!(c.is_err() && s.is_err());
        let (c, s) = pair(
            |s| client(s, SECRET, ONE, 7, 9),
            |s| server(s, SECRET, ONE, |c, _| c == 1),
        );
        assert!(s.unwrap_err().to_string().contains("do not match"));
        assert!(c.is_err());
    }

    #[test]
    fn secrets_come_from_the_config_or_a_file_and_are_long_enough() {
        assert_eq!(read_secret("x", None, None), Ok(None));
        assert_eq!(
            read_secret("x", Some("0123456789abcdef"), None),
            Ok(Some(b"0123456789abcdef".to_vec()))
        );
        assert!(
            read_secret("x", Some("short"), None)
                .unwrap_err()
                .contains("16 bytes")
        );
        let file = std::env::temp_dir().join(format!("peer-auth-secret-{}", std::process::id()));
        std::fs::write(&file, "  from a file, long enough\n").unwrap();
        assert_eq!(
            read_secret("x", None, Some(&file)),
            Ok(Some(b"from a file, long enough".to_vec()))
        );
        assert!(
            read_secret("x", Some("0123456789abcdef"), Some(&file))
                .unwrap_err()
                .contains("not both")
        );
        std::fs::remove_file(&file).unwrap();
    }
}
