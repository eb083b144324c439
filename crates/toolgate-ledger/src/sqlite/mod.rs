//! The embedded store: one SQLite file (WAL) and one connection, held by
//! one writer at a time. Requests queue to the writer thread; it runs
//! whatever has queued as one transaction — each request in its own
//! savepoint, so one failing request does not undo the others — and
//! answers them all only after the single COMMIT is durable: a batch with
//! a durable request is answered by the syncer once the WAL is synced
//! (see `syncer`), while the writer goes on with the next. Under load many
//! calls share one fsync (group commit); alone, a call pays one.
//!
//! A request that needs no fsync (a read's receipt, a lookup) runs on the
//! caller's own thread instead when the connection is free at that instant
//! and SQLite's write lock can be taken without waiting: it then costs one
//! short commit and no thread hand-offs, which on a loaded machine (or a VM,
//! where waking an idle core takes tens of µs) were most of its latency.
//! Otherwise it queues like any other. It also queues when requests come
//! back to back (the previous one arrived less than `BACK_TO_BACK` ago):
//! then a caller's thread committing each alone would do serially what the
//! writer thread does in batches beside it, one commit for many.
//!
//! A ledger that sequences (the gateway's) appends a read's receipts with
//! no transaction at all: see `sequence`. Every transaction, of any
//! process, first integrates what the sequence file holds.
//!
//! Each role of the ledger (`ApprovalStore`, `OperationStore`, `RunStore`,
//! `LogStore`, `FleetStore`, `ConnectionStore`) is implemented in the file of its
//! tables, through the queue here. `README.md` follows one receipt in.

mod approvals;
mod checkpointer;
mod checksum;
mod conn;
mod connections;
mod fleet;
mod operations;
mod receipts;
mod recent;
mod runs;
mod sequence;
mod syncer;

use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};

use rusqlite::Connection;

use crate::digests::Dictionary;
use crate::{Draft, LedgerError, Result, Store};

/// The most requests one transaction takes: bounds the latency a request
/// can add to the others in its batch.
const MAX_BATCH: usize = 512;

/// Requests closer together than this are under load: they go to the
/// writer thread to share a commit rather than each commit on its caller's
/// thread. About two inline commits here (80 µs p50 at 1,000/s); at
/// saturation, committing each inline halved the receipts appended per
/// second (the receipts benchmark: 0.74× seal-only fell to 0.38–0.47×).
const BACK_TO_BACK: std::time::Duration = std::time::Duration::from_micros(200);

/// A request: runs against the connection inside the batch's transaction
/// (or learns why there is none), says whether its writes stand, and hands
/// back how to answer once the batch's fate is known.
type Job = Box<dyn FnOnce(std::result::Result<&Connection, String>) -> Done + Send>;

struct Done {
    keep: bool,
    answer: Answer,
}

/// The embedded store: one SQLite file, written by one writer thread that
/// commits whatever has queued as one transaction (group commit).
pub struct SqliteLedger {
    jobs: mpsc::Sender<Queued>,
    writer: Arc<Mutex<Writer>>,
    /// When the latest short request (one that may run inline) arrived,
    /// in ns since `epoch`: how close together they come decides whether
    /// the next may run inline.
    latest: std::sync::atomic::AtomicU64,
    epoch: std::time::Instant,
    /// Where a read's receipts are appended when the ledger sequences.
    sequence: Arc<Mutex<sequence::Sequence>>,
    /// The numbers its rows name recurring digests by (see `digests`).
    digests: Arc<Dictionary>,
    /// Why the ledger stopped (a sync failed), if it did.
    stopped: syncer::Stopped,
    /// The leaf hashes of what this process sequenced lately.
    recent: Arc<recent::RecentLeaves>,
    /// Dropped with the ledger: stops the WAL checkpointer.
    _checkpointer: mpsc::Sender<()>,
    /// The approvals this process decided (another process's decisions
    /// are seen by polling).
    decided: tokio::sync::broadcast::Sender<String>,
}

/// A request; whether its commit must survive power loss (see
/// `LogStore::append_receipts` for the one kind that need not); and whether
/// it needs a savepoint of its own — not when it writes at most one row,
/// since a failed statement leaves nothing behind.
struct Queued {
    job: Job,
    durable: bool,
    isolated: bool,
}

/// How durable a commit is. `Full` (the default) survives power loss;
/// `Normal` in WAL survives a process crash but not power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// Commits that change state are fsynced before they are answered.
    Full,
    /// No commit is fsynced when answered; the benchmarks compare it with `Full`.
    Normal,
}

impl SqliteLedger {
    /// Opens the SQLite file at `path` (created and migrated as needed) with
    /// `Synchronous::Full` and group commit, and starts its writer and WAL
    /// checkpointer threads.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, Synchronous::Full, true, false)
    }

    /// `open`, for the process that serves calls: a read's receipts are
    /// sequenced (see `sequence`) rather than each committed.
    pub fn open_sequencing(path: &Path) -> Result<Self> {
        Self::open_with(path, Synchronous::Full, true, true)
    }

    /// `group = false` commits every request alone (the baseline the
    /// benchmark compares group commit with); `sequences`: see
    /// `open_sequencing`.
    pub fn open_with(path: &Path, sync: Synchronous, group: bool, sequences: bool) -> Result<Self> {
        let conn = conn::open(path)?;
        let digests = Arc::new(Dictionary::default());
        let recent = Arc::new(recent::RecentLeaves::default());
        let sequence = Arc::new(Mutex::new(sequence::Sequence::open(
            path,
            sequences,
            digests.clone(),
            recent.clone(),
        )?));
        // No commit syncs by itself: the syncer syncs for the durable ones.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let stopped = syncer::Stopped::default();
        let syncs = match sync {
            Synchronous::Full => Some(syncer::spawn(path, stopped.clone())?),
            Synchronous::Normal => None,
        };
        // WAL checkpoints run on their own thread (see `checkpointer`).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        let (checkpointer, stop) = mpsc::channel();
        checkpointer::spawn(path, sync, stop)?;
        let (jobs, queue) = mpsc::channel::<Queued>();
        let writer = Arc::new(Mutex::new(Writer {
            conn,
            stopped: stopped.clone(),
            sequence: sequence.clone(),
            digests: digests.clone(),
        }));
        let held = writer.clone();
        std::thread::Builder::new()
            .name("toolgate-ledger-writer".into())
            .spawn(move || write_queued(&held, queue, if group { MAX_BATCH } else { 1 }, syncs))
            .map_err(|e| LedgerError::Store(format!("cannot start the ledger writer: {e}")))?;
        Ok(Self {
            jobs,
            writer,
            latest: Default::default(),
            epoch: std::time::Instant::now(),
            sequence,
            digests,
            stopped,
            recent,
            _checkpointer: checkpointer,
            decided: tokio::sync::broadcast::channel(1024).0,
        })
    }

    /// Runs `f` on the writer thread; its result once its batch committed.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.queue(f, true, true, false).await
    }

    /// Runs a request that only reads one thing (a row, a count): it makes
    /// no commit need an fsync, needs no savepoint, and may run on the
    /// caller's thread. (What it reads may include receipts not yet
    /// power-safe; a checkpoint signed over them commits durably, which
    /// makes everything before it durable too.)
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.queue(f, false, false, true).await
    }

    /// Runs a write whose loss at power failure is harmless (a heartbeat, an
    /// outbox claim or attempt: at worst a notice is sent again, which
    /// delivery at least once allows): it makes no commit wait for an fsync.
    async fn write_unsynced<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.queue(f, false, true, false).await
    }

    /// Runs a request that reads a range (leaves, receipts, lists): as
    /// `read`, but always on the writer thread, since it may take long
    /// enough to stall the caller's async worker.
    async fn read_many<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.queue(f, false, false, false).await
    }

    /// Runs a read whose answer must not outrun the disk: answered once
    /// what it read is durable (a signed checkpoint handed out must never
    /// be one that power loss takes back; see `syncer`).
    async fn read_synced<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.queue(f, true, false, false).await
    }

    /// `durable = false`: the commit survives a crash of the process but
    /// may not survive power loss until the next durable commit.
    /// `isolated = false` only for a request that writes at most one row
    /// (and nothing before a step that can fail). `inline`: a short request
    /// that may run on the caller's thread if it needs no fsync.
    async fn queue<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
        durable: bool,
        isolated: bool,
        inline: bool,
    ) -> Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let result = conn.map_err(LedgerError::Store).and_then(f);
            let keep = match &result {
                Ok(_) => true,
                Err(e) => e.keeps_writes(),
            };
            Done { keep, answer: Box::new(move |committed| drop(tx.send(committed.and(result)))) }
        });
        let queued = Queued { job, durable, isolated };
        // Runs in this poll, start to commit: no cancellation point inside.
        let queued = if inline
            && !durable
            && self.spaced_out()
            && let Ok(mut writer) = self.writer.try_lock()
        {
            match writer.try_alone(queued) {
                Ok(done) => {
                    drop(writer);
                    answer_all(done);
                    None
                }
                Err(back) => Some(back),
            }
        } else {
            Some(queued)
        };
        if let Some(q) = queued {
            self.jobs
                .send(q)
                .map_err(|_| LedgerError::Store("the ledger writer stopped".into()))?;
        }
        rx.await.map_err(|_| LedgerError::Store("the ledger writer stopped mid-request".into()))?
    }

    /// Appends `drafts` to the sequence on the caller's thread if it is
    /// free now (see `sequence`): their indexes; or the drafts back, when a
    /// transaction holds it, for the writer's batch.
    fn sequenced(&self, drafts: Vec<Draft>) -> Result<std::result::Result<Vec<u64>, Vec<Draft>>> {
        let Ok(mut sequence) = self.sequence.try_lock() else { return Ok(Err(drafts)) };
        match sequence.append(drafts)? {
            (sequence::Appended::At(indexes), ask) => {
                drop(sequence);
                if ask {
                    self.integrate_soon();
                }
                Ok(Ok(indexes))
            }
            (sequence::Appended::Busy(drafts), _) => Ok(Err(drafts)),
        }
    }

    /// Asks the writer to integrate the sequenced receipts without waiting
    /// for its timer (an empty request: every transaction integrates).
    fn integrate_soon(&self) {
        let job: Job = Box::new(|_| Done { keep: true, answer: Box::new(|_| ()) });
        let _ = self.jobs.send(Queued { job, durable: false, isolated: false });
    }

    /// Notes a request's arrival; true when the one before it arrived at
    /// least `BACK_TO_BACK` earlier (the ledger is not under load).
    fn spaced_out(&self) -> bool {
        let now = self.epoch.elapsed().as_nanos() as u64;
        spaced_out(self.latest.swap(now, std::sync::atomic::Ordering::Relaxed), now)
    }
}

/// Whether a request arriving at `now` is spaced out from the one that
/// arrived at `before` (ns on one clock). A `before` after `now` (two
/// threads racing to note their arrivals) counts as back to back.
fn spaced_out(before: u64, now: u64) -> bool {
    now.saturating_sub(before) >= BACK_TO_BACK.as_nanos() as u64
}

/// The writer thread: takes what has queued (up to `max_batch`) as one
/// batch, commits it, and answers it once the connection is free again —
/// a batch with a durable request through `syncs` (when the ledger syncs),
/// which answers it once the WAL is synced.
fn write_queued(
    writer: &Mutex<Writer>,
    queue: mpsc::Receiver<Queued>,
    max_batch: usize,
    syncs: Option<mpsc::Sender<Committed>>,
) {
    loop {
        let first = match queue.recv_timeout(INTEGRATE_AFTER) {
            Ok(first) => Some(first),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The ledger is dropped: what is sequenced goes into the table before the thread ends.
                integrate_held(writer);
                return;
            }
        };
        let Some(first) = first else {
            integrate_held(writer);
            continue;
        };
        let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
        // What queued while the lock was taken joins the batch.
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match queue.try_recv() {
                Ok(q) => batch.push(q),
                Err(_) => break,
            }
        }
        let durable = batch.iter().any(|q| q.durable);
        let done = w.run(batch);
        drop(w);
        match &syncs {
            Some(syncs) if durable && done.0.is_ok() => {
                if let Err(mpsc::SendError(done)) = syncs.send(done) {
                    answer_all((
                        Err("the ledger's syncer stopped; nothing is known durable, retry".into()),
                        done.1,
                    ));
                }
            }
            _ => answer_all(done),
        }
    }
}

/// How long sequenced receipts may wait for their integration when
/// nothing else runs a transaction: bounds how long another process (the
/// CLI) waits for the sequence file, and how stale a reader of the table
/// alone (not of the ledger) may be.
const INTEGRATE_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// Integrates the sequence's frames in a transaction of their own, if this
/// process holds any.
fn integrate_held(writer: &Mutex<Writer>) {
    let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
    if w.sequence.lock().unwrap_or_else(|p| p.into_inner()).held() {
        let (committed, _) = w.run(Vec::new());
        if let Err(why) = committed {
            tracing::warn!(target: "toolgate::ledger", %why, "cannot integrate the sequenced receipts; will retry");
        }
    }
}

/// A batch's commit (or why it failed) and its requests' answers, to be
/// given once the connection is free.
type Committed = (std::result::Result<(), String>, Vec<Answer>);

fn answer_all((committed, answers): Committed) {
    for answer in answers {
        answer(committed.clone().map_err(LedgerError::Store));
    }
}

/// The one connection that writes (every commit `synchronous=NORMAL`: see
/// `syncer`).
struct Writer {
    conn: Connection,
    /// Set once a sync failed: no request runs after it.
    stopped: syncer::Stopped,
    /// Held by each transaction from before it begins until it is settled.
    sequence: Arc<Mutex<sequence::Sequence>>,
    digests: Arc<Dictionary>,
}

impl Writer {
    /// Runs `batch` as one transaction and commits it (not synced: the
    /// caller hands a durable batch to the syncer). A commit written and not
    /// yet synced survives a crash of the process; the next sync makes it
    /// and everything before it durable (the WAL is a prefix).
    fn run(&mut self, batch: Vec<Queued>) -> Committed {
        if let Some(why) = self.stopped.get() {
            return (
                Err(why.clone()),
                batch.into_iter().map(|q| (q.job)(Err(why.clone())).answer).collect(),
            );
        }
        let sequence = self.sequence.clone();
        let mut sequence = sequence.lock().unwrap_or_else(|p| p.into_inner());
        // The sequence file's lock before SQLite's (see `sequence`), each
        // waited for as long as a busy SQLite connection waits. IMMEDIATE:
        // take SQLite's write lock now (waiting out the CLI or another
        // gateway by busy_timeout) rather than fail on upgrade mid-batch.
        let begun = match sequence.take(conn::BUSY_TIMEOUT) {
            Ok(true) => cached(&self.conn, "BEGIN IMMEDIATE").map_err(|e| format!("cannot begin a ledger transaction: {e}")),
            Ok(false) => Err("another toolgate process has held the ledger's sequence file for 10 s; nothing was recorded, retry".into()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(why) = begun {
            sequence.settle(false);
            return (
                Err(why.clone()),
                batch.into_iter().map(|q| (q.job)(Err(why.clone())).answer).collect(),
            );
        }
        self.commit(batch, &mut sequence)
    }

    /// Runs one request that needs no fsync now, if SQLite's write lock is
    /// free this instant; if another connection holds it (the CLI, a
    /// checkpoint's rewind), hands the request back to be queued, so a
    /// caller's thread never waits on a lock.
    fn try_alone(&mut self, q: Queued) -> std::result::Result<Committed, Queued> {
        debug_assert!(!q.durable);
        if self.stopped.get().is_some() {
            return Err(q);
        }
        let sequence = self.sequence.clone();
        let mut sequence = sequence.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(sequence.take(std::time::Duration::ZERO), Ok(true)) {
            return Err(q);
        }
        let _ = self.conn.busy_timeout(std::time::Duration::ZERO);
        let begun = cached(&self.conn, "BEGIN IMMEDIATE");
        let _ = self.conn.busy_timeout(conn::BUSY_TIMEOUT);
        if begun.is_err() {
            sequence.settle(false);
            return Err(q);
        }
        Ok(self.commit(vec![q], &mut sequence))
    }

    /// Integrates the sequenced receipts, runs the requests in the open
    /// transaction, then commits (or rolls back what SQLite left open).
    fn commit(&mut self, batch: Vec<Queued>, sequence: &mut sequence::Sequence) -> Committed {
        // The numbers committed so far (this transaction sees no others):
        // what every row this batch writes or reads may name.
        let learned = receipts::learn_digests(&self.conn, &self.digests);
        let (ran, answers) = match learned.and_then(|()| sequence.integrate(&self.conn)) {
            Ok(_) => run_batch(&mut self.conn, batch),
            Err(e) => {
                let why = format!(
                    "cannot integrate the sequenced receipts ({e}); nothing was recorded, retry"
                );
                (
                    Ran::Lost(why.clone()),
                    batch.into_iter().map(|q| (q.job)(Err(why.clone())).answer).collect(),
                )
            }
        };
        // The digests this batch's rows (and the frames before them) met
        // without a number get one, learned by the next transaction.
        if matches!(ran, Ran::Transaction)
            && let Err(e) = receipts::add_digests(&self.conn, &self.digests)
        {
            tracing::warn!(target: "toolgate::ledger", error = %e, "cannot number new digests; their rows keep them whole");
        }
        let committed = match ran {
            Ran::Transaction => cached(&self.conn, "COMMIT")
                .map_err(|e| format!("the ledger could not commit: {e}")),
            Ran::Lost(why) => Err(why),
        };
        if committed.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        sequence.settle(committed.is_ok());
        (committed, answers)
    }
}

type Answer = Box<dyn FnOnce(Result<()>) + Send>;

/// How a batch ran.
enum Ran {
    /// In one open transaction, to be committed.
    Transaction,
    /// SQLite rolled the transaction back by itself (disk full, I/O error):
    /// nothing of the batch is on disk, whatever the requests saw.
    Lost(String),
}

/// Runs a statement kept prepared: parsing `BEGIN`/`COMMIT` on every
/// request showed in profiles.
fn cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql).and_then(|mut s| s.execute([]).map(drop))
}

/// Runs each request of `batch` in the transaction just begun.
fn run_batch(conn: &mut Connection, batch: Vec<Queued>) -> (Ran, Vec<Answer>) {
    let mut answers = Vec::with_capacity(batch.len());
    let mut jobs = batch.into_iter();
    for Queued { job, isolated, .. } in jobs.by_ref() {
        // Cached statements: parsing these three per request cost as much
        // as the request itself (measured with the receipts benchmark).
        let run = |sql: &str| cached(conn, sql);
        if isolated && let Err(e) = run("SAVEPOINT job") {
            answers.push(job(Err(format!("the ledger could not start a request: {e}"))).answer);
            continue;
        }
        // A panicking request loses its own answer, not the writer.
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(Ok(&*conn))));
        let keep = matches!(&done, Ok(d) if d.keep);
        let undone = match (isolated, keep) {
            (false, _) => Ok(()),
            (true, true) => run("RELEASE job"),
            (true, false) => run("ROLLBACK TO job").and_then(|()| run("RELEASE job")),
        };
        if let Ok(done) = done {
            answers.push(done.answer);
        }
        if conn.is_autocommit() || undone.is_err() {
            // The transaction is gone: the rest do not run, and nobody is told "done".
            let why = format!(
                "the ledger transaction was rolled back ({}); nothing was recorded, retry",
                undone.err().map_or("by SQLite".into(), |e| e.to_string())
            );
            answers.extend(jobs.map(|q| (q.job)(Err(why.clone())).answer));
            return (Ran::Lost(why), answers);
        }
    }
    (Ran::Transaction, answers)
}

impl Store for SqliteLedger {
    fn backend(&self) -> &'static str {
        "sqlite"
    }
}

#[cfg(test)]
mod tests {
    use crate::{LogStore, RunKey, RunStore};

    /// After a failed sync the disk's state is unknown: the ledger takes no
    /// request at all (a read's receipt neither), each refused with why and
    /// what to do, and nothing of them reaches the file.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_a_failed_sync_nothing_runs_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite3");
        let ledger = super::SqliteLedger::open_sequencing(&path).unwrap();
        let key = RunKey { tenant: "t".into(), subject: "s".into(), run: "r".into() };
        assert_eq!(RunStore::run(&ledger, &key, true, 1, 60_000).await.unwrap().calls, 1);
        ledger
            .stopped
            .set("the ledger's disk failed to sync its log (EIO); restart toolgate".into())
            .unwrap();
        for refused in [
            RunStore::run(&ledger, &key, true, 2, 60_000).await.map(drop),
            ledger.append_receipts(Vec::new()).await.map(drop),
            ledger.log_size().await.map(drop),
        ] {
            let why = refused.expect_err("refused after the failed sync").to_string();
            assert!(why.contains("failed to sync") && why.contains("restart toolgate"), "{why}");
        }
        drop(ledger);
        let after = super::SqliteLedger::open(&path).unwrap();
        assert_eq!(
            RunStore::run(&after, &key, false, 3, 60_000).await.unwrap().calls,
            1,
            "the count refused was not written"
        );
    }

    /// Inline only when the ledger is not under load: requests that come
    /// back to back go to the writer thread, which batches them.
    #[test]
    fn only_a_spaced_out_request_may_run_inline() {
        let gap = super::BACK_TO_BACK.as_nanos() as u64;
        let at = 5_000_000;
        assert!(super::spaced_out(0, at), "the first request after a quiet spell");
        assert!(super::spaced_out(at, at + gap), "exactly the gap apart");
        assert!(!super::spaced_out(at, at + gap - 1), "closer than the gap");
        assert!(!super::spaced_out(at, at), "at the same instant");
        assert!(!super::spaced_out(at + 10, at), "a racing thread noted a later arrival first");
    }
}
