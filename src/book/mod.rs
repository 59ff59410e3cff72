//! Order book (pure).
