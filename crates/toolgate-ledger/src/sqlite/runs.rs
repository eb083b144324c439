//! Agent runs on SQLite: a run's count and the calls that brought each leg
//! of the trifecta in. Each function runs inside the writer's transaction
//! (or alone, for a read), so a count and its read-back are one step.

use rusqlite::{Connection, OptionalExtension, params};
use toolgate_core::trifecta::{Leg, LegCall};

use super::SqliteLedger;
use crate::{MAX_LEGS, Result, RunKey, RunState, RunStore};

/// Begins the run (or begins it anew once expired) and counts `calls` in it;
/// what it holds after.
fn begin(
    conn: &Connection,
    k: &RunKey,
    calls: i64,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<(i64, i64, i64)> {
    // SET reads the row as it was: an expired run restarts from this call.
    Ok(conn.query_row(
        "INSERT INTO runs (tenant, subject, run, calls, started_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?5 + ?6) \
         ON CONFLICT (tenant, subject, run) DO UPDATE SET \
           calls = CASE WHEN runs.expires_ms <= ?5 THEN ?4 ELSE runs.calls + ?4 END, \
           started_ms = CASE WHEN runs.expires_ms <= ?5 THEN ?5 ELSE runs.started_ms END, \
           expires_ms = CASE WHEN runs.expires_ms <= ?5 THEN ?5 + ?6 ELSE runs.expires_ms END \
         RETURNING calls, started_ms, expires_ms",
        params![k.tenant, k.subject, k.run, calls, now_ms, ttl_ms],
        |r| Ok((r.get("calls")?, r.get("started_ms")?, r.get("expires_ms")?)),
    )?)
}

fn legs(conn: &Connection, k: &RunKey, since_ms: i64) -> Result<Vec<LegCall>> {
    let mut stmt = conn.prepare_cached(
        "SELECT leg, tool, proposal_sha256, at_ms FROM run_legs WHERE tenant = ?1 AND subject = ?2 \
            AND run = ?3 AND at_ms >= ?4 ORDER BY at_ms, rowid",
    )?;
    let rows = stmt.query_map(params![k.tenant, k.subject, k.run, since_ms], |r| {
        Ok((
            r.get::<_, String>("leg")?,
            r.get::<_, String>("tool")?,
            r.get::<_, String>("proposal_sha256")?,
            r.get::<_, i64>("at_ms")?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (leg, tool, proposal_sha256, at_ms) = row?;
        // The table's CHECK admits only the two legs.
        if let Some(leg) = Leg::parse(&leg) {
            out.push(LegCall { leg, tool, proposal_sha256, at_ms });
        }
    }
    Ok(out)
}

pub fn run(
    conn: &Connection,
    k: &RunKey,
    count: bool,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<RunState> {
    let (calls, started_ms, expires_ms) = if count {
        begin(conn, k, 1, now_ms, ttl_ms)?
    } else {
        let found = conn
            .query_row(
                "SELECT calls, started_ms, expires_ms FROM runs WHERE tenant = ?1 AND subject = ?2 AND run = ?3 AND expires_ms > ?4",
                params![k.tenant, k.subject, k.run, now_ms],
                |r| Ok((r.get("calls")?, r.get("started_ms")?, r.get("expires_ms")?)),
            )
            .optional()?;
        match found {
            Some(found) => found,
            None => {
                return Ok(RunState {
                    calls: 0,
                    started_ms: now_ms,
                    expires_ms: now_ms + ttl_ms,
                    legs: Vec::new(),
                });
            }
        }
    };
    Ok(RunState { calls: calls as u64, started_ms, expires_ms, legs: legs(conn, k, started_ms)? })
}

pub fn add_leg(conn: &Connection, k: &RunKey, call: &LegCall, ttl_ms: i64) -> Result<i64> {
    let now_ms = call.at_ms;
    sweep(conn, now_ms, ttl_ms)?;
    let (_, started_ms, expires_ms) = begin(conn, k, 0, now_ms, ttl_ms)?;
    conn.execute(
        "INSERT INTO run_legs (tenant, subject, run, leg, tool, proposal_sha256, at_ms) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 \
         WHERE (SELECT count(*) FROM run_legs WHERE tenant = ?1 AND subject = ?2 AND run = ?3 AND leg = ?4 AND at_ms >= ?8) < ?9",
        params![k.tenant, k.subject, k.run, call.leg.as_str(), call.tool, call.proposal_sha256, now_ms, started_ms, MAX_LEGS],
    )?;
    Ok(expires_ms)
}

/// Expired runs, and legs too old to belong to any run still alive (a live
/// run began less than `ttl_ms` ago, and counts no leg from before it).
fn sweep(conn: &Connection, now_ms: i64, ttl_ms: i64) -> Result<()> {
    conn.execute("DELETE FROM run_legs WHERE at_ms < ?1", [now_ms - ttl_ms])?;
    conn.execute("DELETE FROM runs WHERE expires_ms <= ?1", [now_ms])?;
    Ok(())
}

#[async_trait::async_trait]
impl RunStore for SqliteLedger {
    async fn run(&self, key: &RunKey, count: bool, now_ms: i64, ttl_ms: i64) -> Result<RunState> {
        let key = key.clone();
        // A count writes one row and is on every call's path: it survives a
        // crash of the process but need not wait for an fsync of its own.
        self.queue(move |c| run(c, &key, count, now_ms, ttl_ms), false, false, true).await
    }
    async fn add_run_leg(&self, key: &RunKey, call: LegCall, ttl_ms: i64) -> Result<i64> {
        let key = key.clone();
        self.run(move |c| add_leg(c, &key, &call, ttl_ms)).await
    }
}
