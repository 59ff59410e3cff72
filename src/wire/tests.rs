//! Cross-module wire tests.
