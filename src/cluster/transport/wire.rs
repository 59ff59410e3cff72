//! Frames between members: length u32, the sender's journal day epoch u64, the ITCH messages
//! it has multicast u64, then a raft-rs `Message` in its protobuf encoding. What members never
//! send (snapshots, protobuf groups) is refused by a flat walk before the decoder runs.

use std::io;

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::Message;

use super::{FRAME_HEADER_BYTES, Inbound, invalid};

/// Decode one frame (after its length word) from member `from`.
pub fn decode_frame(frame: &Bytes, from: u64) -> io::Result<Inbound> {
    if frame.len() < FRAME_HEADER_BYTES - 4 {
        return Err(invalid("frame shorter than its header"));
    }
    let day_epoch_unix_ns = u64::from_be_bytes(frame[0..8].try_into().expect("8"));
    let itch_sent = u64::from_be_bytes(frame[8..16].try_into().expect("8"));
    let body = frame.slice(16..);
    check_wire(&body)?;
    let message = Message::parse_from_carllerche_bytes(&body)
        .map_err(|e| invalid(&format!("undecodable message: {e}")))?;
    if message.from != from {
        return Err(invalid("message claims another sender"));
    }
    Ok(Inbound {
        from,
        day_epoch_unix_ns,
        itch_sent,
        message,
    })
}

/// Encode one frame (length word included) into `out` (cleared first).
pub fn encode_frame(
    message: &Message,
    day_epoch_unix_ns: u64,
    itch_sent: u64,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    out.clear();
    append_frame(message, day_epoch_unix_ns, itch_sent, out)
}

/// Refuse what members never send before the decoder sees it: a snapshot (field 9) and
/// protobuf groups (wire types 3 and 4) in `Message` or its entries. A flat walk without
/// recursion or allocation.
pub(super) fn check_wire(body: &[u8]) -> io::Result<()> {
    walk_fields(body, |field, wire_type, value| {
        if field == 9 {
            return Err(invalid("snapshots are not accepted"));
        }
        if field == 7 && wire_type == 2 {
            walk_fields(value, |_, _, _| Ok(()))?;
        }
        Ok(())
    })
}

/// Call `each(field, wire_type, value)` for every field; `value` is the bytes of a
/// length-delimited field (empty otherwise). Group wire types are an error.
fn walk_fields(
    mut bytes: &[u8],
    mut each: impl FnMut(u32, u8, &[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let bound = bytes.len() + 1;
    for _ in 0..bound {
        if bytes.is_empty() {
            return Ok(());
        }
        let key = read_varint(&mut bytes)?;
        let wire_type = (key & 7) as u8;
        let field = u32::try_from(key >> 3).map_err(|_| invalid("field number out of range"))?;
        let value: &[u8] = match wire_type {
            0 => {
                read_varint(&mut bytes)?;
                &[]
            }
            1 => take(&mut bytes, 8)?,
            5 => take(&mut bytes, 4)?,
            2 => {
                let len = read_varint(&mut bytes)?;
                let len = usize::try_from(len).map_err(|_| invalid("length out of range"))?;
                take(&mut bytes, len)?
            }
            _ => return Err(invalid("protobuf group or bad wire type")),
        };
        each(field, wire_type, value)?;
    }
    Err(invalid("field walk did not end"))
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> io::Result<&'a [u8]> {
    if bytes.len() < n {
        return Err(invalid("field runs past the message"));
    }
    let (head, tail) = bytes.split_at(n);
    *bytes = tail;
    Ok(head)
}

fn read_varint(bytes: &mut &[u8]) -> io::Result<u64> {
    let mut value = 0u64;
    for shift in 0..10 {
        let Some((&byte, rest)) = bytes.split_first() else {
            return Err(invalid("truncated varint"));
        };
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << (7 * shift);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(invalid("varint longer than 10 bytes"))
}

/// Append one frame (length word included) to `out`; on error `out` is as it was.
pub fn append_frame(
    message: &Message,
    day_epoch_unix_ns: u64,
    itch_sent: u64,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
    out[start + 4..start + 12].copy_from_slice(&day_epoch_unix_ns.to_be_bytes());
    out[start + 12..start + 20].copy_from_slice(&itch_sent.to_be_bytes());
    let written = message.write_to_vec(out);
    let len = u32::try_from(out.len() - start - 4);
    match (written, len) {
        (Ok(()), Ok(len)) => {
            out[start..start + 4].copy_from_slice(&len.to_be_bytes());
            Ok(())
        }
        (Err(e), _) => {
            out.truncate(start);
            Err(invalid(&format!("cannot encode: {e}")))
        }
        (_, Err(_)) => {
            out.truncate(start);
            Err(invalid("message too large"))
        }
    }
}
