//! The change feed as one principal may see it: the stream `GET /events` and the inbox's live
//! queue both follow, each with one call of [`Dispatcher::events`].
//!
//! The feed itself is followed by `crate::feed::stream`, which knows nothing of principals; the
//! lifecycle keeps of it the entries of the calls the principal may see, by the rule every read
//! applies ([`Dispatcher::may_see`]), so a principal an escalation reached streams the call it
//! reads; the changes of upstreams' tools are shown to admins only. Each entry carries what the rule needs (the call's caller, tool, and whether it was
//! ever escalated), so keeping one costs no store read.

use std::collections::HashSet;

use futures_util::Stream;

use super::visible::sees;
use super::who::Principal;
use super::{DispatchError, Dispatcher};
use crate::feed::stream::{FeedEvent, follow, start_cursor};
use crate::store::{FeedEntry, FeedSubject, StoreError};

/// Where a stream of the change feed starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// With the next new entry.
    Now,
    /// Right after this entry (an event's `id` the client received); a cursor this server did
    /// not hand out is refused (`StoreError::BadCursor`), and so is one older than the feed's
    /// retention (`StoreError::CursorExpired`).
    After(String),
    /// Right after this entry if it is still retained, else with the next new entry: for a
    /// reader that reads again what it shows anyway (the inbox's page).
    AfterOrNow(String),
}

/// Which entries a stream shows, beyond those of the calls its principal may not see.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only these types of entry (`call.suspended`, ...); `None`: every type.
    pub types: Option<HashSet<String>>,
    /// Only calls of this tool.
    pub tool: Option<String>,
    /// Whether suspensions carry their token; only ever to an approver or an admin, who may
    /// decide with it.
    pub tokens: bool,
}

impl EventFilter {
    fn wants(&self, entry: &FeedEntry) -> bool {
        self.types
            .as_ref()
            .is_none_or(|types| types.contains(&entry.kind))
            && self
                .tool
                .as_ref()
                .is_none_or(|tool| Some(tool.as_str()) == entry.tool())
    }
}

impl Dispatcher {
    /// The change feed from `resume` on, as `principal` may see it: the entries of the calls
    /// it may see (see [`Dispatcher::may_see`]) that `filter` wants, each as an SSE event's
    /// `event`, `id` and `data`. The resume point is checked now, so that a bad or expired
    /// cursor is an answer rather than a stream that ends. The stream ends at a graceful stop.
    pub async fn events(
        &self,
        principal: &Principal,
        resume: Resume,
        filter: EventFilter,
    ) -> Result<impl Stream<Item = FeedEvent> + Send + use<>, DispatchError> {
        let store = self.store.as_ref();
        let cursor = match resume {
            Resume::Now => start_cursor(store, None).await?,
            Resume::After(after) => start_cursor(store, Some(after)).await?,
            Resume::AfterOrNow(after) => match start_cursor(store, Some(after)).await {
                Err(StoreError::CursorExpired | StoreError::BadCursor(_)) => {
                    start_cursor(store, None).await?
                }
                started => started?,
            },
        };
        let tokens = filter.tokens && principal.sees_all_calls();
        let principal = principal.clone();
        let live = self.live.clone();
        let show = move |entry: FeedEntry| {
            let seen = match &entry.subject {
                FeedSubject::Call(call) => sees(&live, &principal, call),
                // A change of an upstream's tool is an admin's to review.
                FeedSubject::Upstream { .. } => principal.is_admin(),
            };
            if !seen || !filter.wants(&entry) {
                return None;
            }
            FeedEvent::of(entry, tokens)
        };
        Ok(follow(
            self.store.clone(),
            cursor,
            self.running.released(),
            show,
        ))
    }
}
