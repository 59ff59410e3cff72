//! Human-readable one-line renderings of OUCH messages (inspector, order client).

use bourse::wire::ouch::{Inbound, Outbound};

fn c(b: u8) -> char {
    if b.is_ascii_graphic() || b == b' ' {
        b as char
    } else {
        '?'
    }
}

fn price(p: bourse::types::Price) -> String {
    if p.is_market() {
        "MKT".into()
    } else {
        format!("{p}")
    }
}

pub fn inbound(m: &Inbound) -> String {
    match m {
        Inbound::Enter(o) => format!(
            "Enter {} {} {} {} @{} tif {} firm '{}' display {} capacity {} sweep {} minqty {} cross {} customer {}",
            o.token.trimmed(),
            c(o.side),
            o.shares.0,
            o.stock.trimmed(),
            price(o.price),
            o.tif,
            o.firm.0.iter().map(|&b| c(b)).collect::<String>(),
            c(o.display),
            c(o.capacity),
            c(o.intermarket_sweep),
            o.min_qty.0,
            c(o.cross_type),
            c(o.customer_type)
        ),
        Inbound::Replace(u) => format!(
            "Replace {} -> {} {} @{} tif {} display {} sweep {} minqty {}",
            u.existing.trimmed(),
            u.replacement.trimmed(),
            u.shares.0,
            price(u.price),
            u.tif,
            c(u.display),
            c(u.intermarket_sweep),
            u.min_qty.0
        ),
        Inbound::Cancel(x) => format!("Cancel {} to {}", x.token.trimmed(), x.shares.0),
        Inbound::Modify(m) => format!("Modify {} {} {}", m.token.trimmed(), c(m.side), m.shares.0),
    }
}

pub fn outbound(m: &Outbound) -> String {
    match m {
        Outbound::SystemEvent(e) => format!("SystemEvent {}", c(e.event)),
        Outbound::Accepted(a) => format!(
            "Accepted {} {} {} {} @{} tif {} ref {} display {} state {}",
            a.token.trimmed(),
            c(a.side),
            a.shares.0,
            a.stock.trimmed(),
            price(a.price),
            a.tif,
            a.order_ref.0,
            c(a.display),
            c(a.order_state)
        ),
        Outbound::Replaced(r) => format!(
            "Replaced {} -> {} {} {} @{} ref {} state {}",
            r.previous_token.trimmed(),
            r.token.trimmed(),
            r.shares.0,
            r.stock.trimmed(),
            price(r.price),
            r.order_ref.0,
            c(r.order_state)
        ),
        Outbound::Canceled(x) => format!(
            "Canceled {} {} reason {}",
            x.token.trimmed(),
            x.decrement.0,
            c(x.reason)
        ),
        Outbound::Executed(e) => format!(
            "Executed {} {} @{} liquidity {} match {}",
            e.token.trimmed(),
            e.shares.0,
            price(e.price),
            c(e.liquidity),
            e.match_number.0
        ),
        Outbound::Rejected(j) => format!("Rejected {} reason {}", j.token.trimmed(), c(j.reason)),
        other => format!("{other:?}"),
    }
}
