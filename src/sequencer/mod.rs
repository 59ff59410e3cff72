//! The sequencer: the only clock reader. It stamps every input with a gapless journal
//! sequence number and a timestamp, appends it to the journal and hands it on.

pub mod record;
