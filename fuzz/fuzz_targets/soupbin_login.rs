//! The order-entry gateway's input path on arbitrary client bytes: the SoupBinTCP framer
//! (fed in chunks of the size byte 0 picks), every packet decoded, login requests through
//! the login decision, unsequenced data through the OUCH decoder. Never panics.
#![no_main]

use bourse::config::AccountConfig;
use bourse::gateway::decide;
use bourse::wire::ascii::SessionId;
use bourse::wire::ouch::Inbound;
use bourse::wire::soupbin::{CLIENT_MAX_PACKET_LEN, FrameReader, Packet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, stream)) = data.split_first() else {
        return;
    };
    let chunk_bytes = usize::from(chunk % 64) + 1;
    let accounts = [
        AccountConfig {
            username: "BRKR01".into(),
            password: "secret".into(),
            firm: "FRM1".into(),
            ..AccountConfig::default()
        },
        AccountConfig {
            username: "ALICE".into(),
            password: "alicepw".into(),
            firm: "FRMA".into(),
            ..AccountConfig::default()
        },
    ];
    let session = SessionId::new("BOURSE0001").unwrap();
    let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
    let mut fed = 0;
    // Each round feeds at least one byte or drains a packet: bounded by the input length.
    for _ in 0..=stream.len() * 2 + 2 {
        if fed < stream.len() {
            fed += reader.feed(&stream[fed..(fed + chunk_bytes).min(stream.len())]);
        }
        while let Some(next) = reader.next_packet() {
            match next {
                Err(_) => return,
                Ok(Packet::LoginRequest(request)) => {
                    if let Ok(admitted) = decide(&request, &accounts, session, |_| 10, |_| false) {
                        assert!(admitted.next_seq >= 1 && admitted.next_seq <= 11);
                    }
                }
                Ok(Packet::UnsequencedData(payload)) => {
                    if let Ok(message) = Inbound::decode(payload) {
                        let mut buf = [0u8; 128];
                        let n = message.encode(&mut buf);
                        assert_eq!(Inbound::decode(&buf[..n]), Ok(message));
                    }
                }
                Ok(_) => {}
            }
        }
        if fed == stream.len() {
            break;
        }
    }
});
