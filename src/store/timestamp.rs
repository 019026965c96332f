//! The store's clock: a point in time as every record stores it (Unix milliseconds) and shows it
//! (RFC 3339).
//!
//! Its own file because every concern of the store (calls, the feed, the outbox, sessions) keeps
//! time the same way, and none of them owns it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

/// A point in time, in Unix milliseconds; serialized as RFC 3339 (UTC, milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
    }

    fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(u64::try_from(self.0).unwrap_or(0))
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        humantime::format_rfc3339_millis(self.to_system_time()).fmt(f)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    /// From RFC 3339, as it is serialized (what the store keeps in JSON columns).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        let at = humantime::parse_rfc3339(&text).map_err(serde::de::Error::custom)?;
        let ms = at
            .duration_since(UNIX_EPOCH)
            .map_err(serde::de::Error::custom)?
            .as_millis();
        Ok(Timestamp(
            i64::try_from(ms).map_err(serde::de::Error::custom)?,
        ))
    }
}
