//! A replica's sequencer for the receipts that attest no change of state
//! (reads, refusals, replays): whatever its callers queued while the last
//! batch was being written goes as one batch — one transaction, one take of
//! the log's advisory lock, one INSERT — so replicas contend for the lock
//! once per batch, not once per receipt. Alone, a call's receipt is a batch
//! of one and waits for nothing else. It runs in a task of its own, so a
//! caller that goes away mid-batch cannot cut the others' appends short.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::pool::Pool;
use super::receipts;
use crate::digests::Dictionary;
use crate::{Draft, LedgerError, Result};

/// The most receipts one batch takes: bounds what one transaction holds.
const MAX_BATCH: usize = 512;

type Request = (Vec<Draft>, oneshot::Sender<Result<Vec<u64>>>);

pub struct Sequencer {
    requests: mpsc::UnboundedSender<Request>,
}

impl Sequencer {
    /// Starts the sequencer's task on the current runtime; it ends with the ledger.
    pub fn start(pool: Arc<Pool>, digests: Arc<Dictionary>) -> Self {
        let (requests, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(pool, digests, queue));
        Self { requests }
    }

    /// Appends `drafts` at the next indexes, in the next batch; their
    /// indexes once that batch committed.
    pub async fn append(&self, drafts: Vec<Draft>) -> Result<Vec<u64>> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send((drafts, tx))
            .map_err(|_| LedgerError::Store("the ledger's sequencer stopped".into()))?;
        rx.await
            .map_err(|_| LedgerError::Store("the ledger's sequencer stopped mid-batch".into()))?
    }
}

async fn run(
    pool: Arc<Pool>,
    digests: Arc<Dictionary>,
    mut queue: mpsc::UnboundedReceiver<Request>,
) {
    while let Some(first) = queue.recv().await {
        let mut size = first.0.len();
        let mut batch = vec![first];
        while size < MAX_BATCH {
            let Ok(more) = queue.try_recv() else { break };
            size += more.0.len();
            batch.push(more);
        }
        let (drafts, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        // Numbers committed since a batch met new digests (this replica's or
        // another's), read outside the batch's transaction: committed ones only.
        if digests.stale()
            && let Err(e) = receipts::learn_digests(&*pool, &digests).await
        {
            tracing::debug!(target: "toolgate::ledger", error = %e, "cannot read the dictionary of digests; rows keep them whole");
        }
        let digests = digests.clone();
        let written = pool
            .transaction(move |tx| {
                Box::pin(async move {
                    // No state attested: the WAL flush of the next durable commit covers it.
                    use super::pool::Db as _;
                    tx.execute("SET LOCAL synchronous_commit = off", &[]).await?;
                    receipts::append_each(tx, &digests, drafts).await
                })
            })
            .await;
        match written {
            Ok(each) => answers.into_iter().zip(each).for_each(|(a, r)| drop(a.send(r))),
            Err(e) => answers
                .into_iter()
                .for_each(|a| drop(a.send(Err(LedgerError::Store(e.to_string()))))),
        }
    }
}
