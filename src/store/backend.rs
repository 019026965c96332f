//! The Store traits, written once for every backend that batches its writes.
//!
//! Both backends write the same way: each write is one [`WriteOp`] sent to the backend's one
//! batching writer and answered once its batch is committed (`queue.rs`). So the write half of
//! [`CallStore`], [`FeedStore`], [`OutboxStore`], [`SessionStore`] and [`Store`] is here, once,
//! for any [`Backend`]; a backend brings only what is its own: how its writer's queue is
//! reached, how it reads, and the few writes it does differently (records written behind, its
//! shutdown). Everything is generic, so a backend's calls cost what they did when each backend
//! spelt them out: no dynamic dispatch, no allocation beyond the Store trait's own future.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, watch};

use super::queue::{Job, Msg, Reply, WriteOp};
use super::standing::{NewStanding, StandingApproval, StandingOp, StandingStore, StandingUse};
use super::{
    Actor, ApprovalPage, ApprovalState, CallFilter, CallPage, CallRecord, CallStore, Delivery,
    DeliveryPage, DeliveryResult, DeliveryStatus, FeedCursor, FeedPage, FeedStore, InboxSession,
    Inserted, LinkKey, LinkKeyStore, NewCall, NewDelivery, OutboxStore, Outcome, QuotaSpend,
    Reconciled, Rerun, Resolution, Resolved, SessionStore, Settlement, SigningKey, SigningKeyStore,
    Store, StoreCounts, StoreError, Timestamp,
};

/// What a backend brings to the Store traits: its writer's queue, its reads, and what it writes
/// its own way. Every read is answered from what is committed; the traits' read-your-writes
/// (`call`, `list_calls`) is built on it here.
pub(crate) trait Backend: Send + Sync + 'static {
    /// The backend's name, as `/readyz` shows it.
    const NAME: &'static str;

    /// What a write fails with once the writer is gone.
    const STOPPED: &'static str;

    /// The writer is gone: its queue is closed, or it dropped a reply.
    fn stopped() -> StoreError {
        StoreError::Backend(Self::STOPPED.into())
    }

    /// Queues `msg` for the writer.
    fn send(&self, msg: Msg) -> Result<(), StoreError>;

    /// The counter the writer bumps after each commit that may have grown the feed (and, on a
    /// shared database, the feed listener when another process says so).
    fn feed_counter(&self) -> &watch::Sender<u64>;

    /// Queues `op` for the writer and waits until it is committed.
    fn write(&self, op: WriteOp) -> impl Future<Output = Result<Reply, StoreError>> + Send {
        async move {
            let (reply, answer) = oneshot::channel();
            let span = crate::telemetry::spans::store_commit(op.name());
            let reply = super::queue::Waiter { reply, span };
            self.send(Msg::Write(Job { op, reply }))?;
            answer.await.map_err(|_| Self::stopped())?
        }
    }

    /// [`CallStore::insert_behind`]: how far the backend lets records written behind run ahead
    /// of its writer is its own.
    fn write_behind(
        &self,
        call: NewCall,
        outcome: &Outcome,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The committed call `call_id` with its events, if it exists.
    fn find_call(
        &self,
        call_id: &str,
    ) -> impl Future<Output = Result<Option<CallRecord>, StoreError>> + Send;

    /// [`CallStore::key_taken`], from what is committed (a keyed call is never written behind).
    fn key_taken(
        &self,
        tool: &str,
        key: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// [`CallStore::list_calls`], from what is committed.
    fn read_calls(
        &self,
        filter: CallFilter,
        after: Option<i64>,
        limit: u32,
    ) -> impl Future<Output = Result<CallPage, StoreError>> + Send;

    /// [`CallStore::pending_approvals_of`].
    fn read_approvals(
        &self,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> impl Future<Output = Result<ApprovalPage, StoreError>> + Send;

    /// [`CallStore::approval`].
    fn read_approval(
        &self,
        token: &str,
    ) -> impl Future<Output = Result<Option<ApprovalState>, StoreError>> + Send;

    /// [`Store::counts`].
    fn read_counts(&self) -> impl Future<Output = Result<StoreCounts, StoreError>> + Send;

    /// [`FeedStore::feed`].
    fn read_feed(
        &self,
        after: Option<&FeedCursor>,
        limit: u32,
    ) -> impl Future<Output = Result<FeedPage, StoreError>> + Send;

    /// [`FeedStore::feed_head`].
    fn read_feed_head(&self) -> impl Future<Output = Result<FeedCursor, StoreError>> + Send;

    /// [`OutboxStore::webhook_cursor`].
    fn read_webhook_cursor(
        &self,
    ) -> impl Future<Output = Result<Option<FeedCursor>, StoreError>> + Send;

    /// [`OutboxStore::list_deliveries`] (or, `channels`, [`OutboxStore::list_notifications`]).
    fn read_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
        channels: bool,
    ) -> impl Future<Output = Result<DeliveryPage, StoreError>> + Send;

    /// [`OutboxStore::call_notifications`].
    fn read_call_notifications(
        &self,
        call_id: &str,
    ) -> impl Future<Output = Result<Vec<Delivery>, StoreError>> + Send;

    /// [`OutboxStore::disabled_webhooks`].
    fn read_disabled_webhooks(
        &self,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// [`SessionStore::session`].
    fn read_session(
        &self,
        id_sha256: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<InboxSession>, StoreError>> + Send;

    /// [`LinkKeyStore::link_keys`].
    fn read_link_keys(
        &self,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<LinkKey>, StoreError>> + Send;

    /// [`SigningKeyStore::signing_keys`].
    fn read_signing_keys(
        &self,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<SigningKey>, StoreError>> + Send;

    /// One trivial read: the readers can reach the database.
    fn read_one(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`Store::ping`]: through the writer too, since a store that can read but no longer
    /// write is not ready.
    fn probe(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move {
            self.write(WriteOp::Ping).await?;
            self.read_one().await
        }
    }

    /// [`Store::replica`].
    fn replica(&self) -> Option<&str> {
        None
    }

    /// [`Store::shares_quotas`]: a backend of one process keeps no buckets.
    fn shares_quotas(&self) -> bool {
        false
    }

    /// [`Store::spend_quota`], on a backend that shares buckets.
    fn spend_bucket(
        &self,
        _principal: &str,
        _scope: &str,
        _interval_us: i64,
        _tolerance_us: i64,
    ) -> impl Future<Output = Result<QuotaSpend, StoreError>> + Send {
        async {
            Err(StoreError::Backend(
                "this store keeps no quota buckets".into(),
            ))
        }
    }

    /// [`Store::refund_quota`], on a backend that shares buckets.
    fn refund_bucket(
        &self,
        _principal: &str,
        _scope: &str,
        _interval_us: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async {
            Err(StoreError::Backend(
                "this store keeps no quota buckets".into(),
            ))
        }
    }

    /// [`Store::close`]: by default, what is queued is committed (a probe waits for it).
    fn close(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.probe()
    }
}

#[async_trait]
impl<B: Backend + super::audit::AuditBackend> Store for B {
    async fn ping(&self) -> Result<(), StoreError> {
        self.probe().await
    }

    async fn counts(&self) -> Result<StoreCounts, StoreError> {
        self.read_counts().await
    }

    fn backend(&self) -> &'static str {
        B::NAME
    }

    fn replica(&self) -> Option<&str> {
        Backend::replica(self)
    }

    async fn close(&self) -> Result<(), StoreError> {
        Backend::close(self).await
    }

    fn shares_quotas(&self) -> bool {
        Backend::shares_quotas(self)
    }

    async fn spend_quota(
        &self,
        principal: &str,
        scope: &str,
        interval_us: i64,
        tolerance_us: i64,
    ) -> Result<QuotaSpend, StoreError> {
        self.spend_bucket(principal, scope, interval_us, tolerance_us)
            .await
    }

    async fn refund_quota(
        &self,
        principal: &str,
        scope: &str,
        interval_us: i64,
    ) -> Result<(), StoreError> {
        self.refund_bucket(principal, scope, interval_us).await
    }
}

#[async_trait]
impl<B: Backend> CallStore for B {
    async fn insert_call(
        &self,
        call: NewCall,
        outcome: Option<Outcome>,
    ) -> Result<Inserted, StoreError> {
        self.write(WriteOp::insert(call, outcome)?)
            .await?
            .inserted()
    }

    async fn insert_behind(&self, call: NewCall, outcome: &Outcome) -> Result<(), StoreError> {
        self.write_behind(call, outcome).await
    }

    async fn finish_call(
        &self,
        call_id: &str,
        run: Option<u32>,
        attempts: u32,
        outcome: &Outcome,
    ) -> Result<(), StoreError> {
        let op = WriteOp::finish(call_id, run, attempts, outcome)?;
        self.write(op).await?.finished()
    }

    async fn rerun_interrupted(&self, call_id: &str) -> Result<Option<Rerun>, StoreError> {
        self.write(WriteOp::Rerun(call_id.to_owned()))
            .await?
            .rerun()
    }

    async fn call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
        if let Some(found) = self.find_call(call_id).await? {
            return Ok(Some(found));
        }
        // Read-your-writes: it may be written behind and still queued. The queue is committed
        // in order, so once a no-op queued after it is committed, so is the record.
        self.write(WriteOp::Ping).await?;
        self.find_call(call_id).await
    }

    async fn key_taken(&self, tool: &str, key: &str) -> Result<bool, StoreError> {
        Backend::key_taken(self, tool, key).await
    }

    async fn list_calls(
        &self,
        filter: CallFilter,
        after: Option<i64>,
        limit: u32,
    ) -> Result<CallPage, StoreError> {
        // Records written behind are committed first, so a list shows every answered call.
        self.write(WriteOp::Ping).await?;
        self.read_calls(filter, after, limit).await
    }

    async fn pending_approvals_of(
        &self,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError> {
        self.read_approvals(tool, after, limit).await
    }

    async fn approval(&self, token: &str) -> Result<Option<ApprovalState>, StoreError> {
        self.read_approval(token).await
    }

    async fn resolve_by(
        &self,
        token: &str,
        resolution: Resolution,
        actor: &Actor,
    ) -> Result<Resolved, StoreError> {
        let op = WriteOp::resolve(token, resolution, actor);
        self.write(op).await?.resolved()
    }

    async fn escalate(&self, tool: &str, created_by: Timestamp) -> Result<Vec<String>, StoreError> {
        let op = WriteOp::Escalate {
            tool: tool.to_owned(),
            created_by: created_by.0,
        };
        self.write(op).await?.escalated()
    }

    async fn reconcile_by(
        &self,
        call_id: &str,
        settlement: Settlement,
        actor: &Actor,
    ) -> Result<Reconciled, StoreError> {
        let op = WriteOp::reconcile(call_id, settlement, actor);
        self.write(op).await?.reconciled()
    }
}

#[async_trait]
impl<B: Backend> FeedStore for B {
    async fn feed(&self, after: Option<&FeedCursor>, limit: u32) -> Result<FeedPage, StoreError> {
        self.read_feed(after, limit).await
    }

    async fn feed_head(&self) -> Result<FeedCursor, StoreError> {
        self.read_feed_head().await
    }

    async fn prune_feed(&self, before: Timestamp) -> Result<u64, StoreError> {
        self.write(WriteOp::PruneFeed(before.0)).await?.pruned()
    }

    fn feed_changes(&self) -> watch::Receiver<u64> {
        self.feed_counter().subscribe()
    }
}

#[async_trait]
impl<B: Backend> OutboxStore for B {
    async fn webhook_cursor(&self) -> Result<Option<FeedCursor>, StoreError> {
        self.read_webhook_cursor().await
    }

    async fn enqueue_deliveries(
        &self,
        from: Option<&FeedCursor>,
        to: &FeedCursor,
        deliveries: Vec<NewDelivery>,
    ) -> Result<bool, StoreError> {
        let op = WriteOp::enqueue_deliveries(from, to, deliveries);
        self.write(op).await?.enqueued()
    }

    async fn claim_deliveries(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<Delivery>, StoreError> {
        let op = WriteOp::claim_deliveries(limit, lease);
        self.write(op).await?.claimed()
    }

    async fn settle_delivery(&self, id: i64, result: DeliveryResult) -> Result<(), StoreError> {
        self.write(WriteOp::SettleDelivery(id, result))
            .await?
            .settled()
    }

    async fn list_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<DeliveryPage, StoreError> {
        self.read_deliveries(status, after, limit, false).await
    }

    async fn list_notifications(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<DeliveryPage, StoreError> {
        self.read_deliveries(status, after, limit, true).await
    }

    async fn call_notifications(&self, call_id: &str) -> Result<Vec<Delivery>, StoreError> {
        self.read_call_notifications(call_id).await
    }

    async fn retry_delivery(&self, id: i64) -> Result<Option<Delivery>, StoreError> {
        self.write(WriteOp::RetryDelivery(id)).await?.delivery()
    }

    async fn disabled_webhooks(&self) -> Result<Vec<String>, StoreError> {
        self.read_disabled_webhooks().await
    }
}

#[async_trait]
impl<B: Backend> SessionStore for B {
    async fn create_session(&self, session: &InboxSession) -> Result<(), StoreError> {
        self.write(WriteOp::CreateSession(Box::new(session.clone())))
            .await?
            .settled()
    }

    async fn session(
        &self,
        id_sha256: &str,
        now: Timestamp,
    ) -> Result<Option<InboxSession>, StoreError> {
        self.read_session(id_sha256, now).await
    }

    async fn delete_session(&self, id_sha256: &str) -> Result<bool, StoreError> {
        let op = WriteOp::DeleteSession(id_sha256.to_owned());
        Ok(self.write(op).await?.pruned()? > 0)
    }

    async fn prune_sessions(&self, now: Timestamp) -> Result<u64, StoreError> {
        self.write(WriteOp::PruneSessions(now.0)).await?.pruned()
    }
}

#[async_trait]
impl<B: Backend> StandingStore for B {
    async fn approve_standing(
        &self,
        token: &str,
        resolution: Resolution,
        actor: &Actor,
        standing: NewStanding,
    ) -> Result<Resolved, StoreError> {
        let op = StandingOp::Approve {
            token: token.to_owned(),
            resolution,
            actor: actor.clone(),
            standing,
        };
        self.write(WriteOp::Standing(Box::new(op)))
            .await?
            .standing()?
            .resolved()
    }

    async fn insert_standing_call(
        &self,
        call: NewCall,
        suspended: Outcome,
        granted_since: Timestamp,
    ) -> Result<(Inserted, Option<StandingUse>), StoreError> {
        let WriteOp::Insert(call, Some(suspended)) = WriteOp::insert(call, Some(suspended))? else {
            unreachable!("an insert with an outcome");
        };
        let op = StandingOp::InsertCall(call, suspended, granted_since.0);
        self.write(WriteOp::Standing(Box::new(op)))
            .await?
            .standing()?
            .inserted()
    }

    async fn standing_approvals(
        &self,
        now: Timestamp,
    ) -> Result<Vec<StandingApproval>, StoreError> {
        let op = StandingOp::List(now.0);
        self.write(WriteOp::Standing(Box::new(op)))
            .await?
            .standing()?
            .listed()
    }

    async fn standing_approval(&self, id: &str) -> Result<Option<StandingApproval>, StoreError> {
        let op = StandingOp::Get(id.to_owned());
        self.write(WriteOp::Standing(Box::new(op)))
            .await?
            .standing()?
            .one()
    }

    async fn revoke_standing(
        &self,
        id: &str,
        by: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<StandingApproval>, StoreError> {
        let op = StandingOp::Revoke {
            id: id.to_owned(),
            by: by.map(str::to_owned),
            at: now.0,
        };
        self.write(WriteOp::Standing(Box::new(op)))
            .await?
            .standing()?
            .one()
    }
}

#[async_trait]
impl<B: Backend> LinkKeyStore for B {
    async fn link_key_for(&self, key: &LinkKey) -> Result<LinkKey, StoreError> {
        self.write(WriteOp::LinkKey(Box::new(key.clone())))
            .await?
            .link_key()
    }

    async fn link_keys(&self, now: Timestamp) -> Result<Vec<LinkKey>, StoreError> {
        self.read_link_keys(now).await
    }

    async fn prune_link_keys(&self, now: Timestamp) -> Result<u64, StoreError> {
        self.write(WriteOp::PruneLinkKeys(now.0)).await?.pruned()
    }
}

#[async_trait]
impl<B: Backend> SigningKeyStore for B {
    async fn signing_key_for(&self, key: &SigningKey) -> Result<SigningKey, StoreError> {
        self.write(WriteOp::SigningKey(Box::new(key.clone())))
            .await?
            .signing_key()
    }

    async fn signing_keys(&self, now: Timestamp) -> Result<Vec<SigningKey>, StoreError> {
        self.read_signing_keys(now).await
    }

    async fn prune_signing_keys(&self, now: Timestamp) -> Result<u64, StoreError> {
        self.write(WriteOp::PruneSigningKeys(now.0)).await?.pruned()
    }
}
