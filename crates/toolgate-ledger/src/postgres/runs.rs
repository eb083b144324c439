//! Agent runs on PostgreSQL: one conditional statement to count a call
//! (replicas counting the same run add up), and the legs as rows.

use toolgate_core::trifecta::{Leg, LegCall};

use super::PostgresLedger;
use super::pool::Db;
use crate::{MAX_LEGS, Result, RunKey, RunState, RunStore};

/// Begins the run (or begins it anew once expired) and counts `calls` in it;
/// what it holds after.
async fn begin(
    db: &impl Db,
    k: &RunKey,
    calls: i64,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<(i64, i64, i64)> {
    // SET reads the row as it was: an expired run restarts from this call.
    let row = db
        .query_opt(
            "INSERT INTO runs (tenant, subject, run, calls, started_ms, expires_ms) VALUES \
             ($1, $2, $3, $4::bigint, $5::bigint, $5::bigint + $6::bigint) \
             ON CONFLICT (tenant, subject, run) DO UPDATE SET \
               calls = CASE WHEN runs.expires_ms <= $5 THEN $4 ELSE runs.calls + $4 END, \
               started_ms = CASE WHEN runs.expires_ms <= $5 THEN $5 ELSE runs.started_ms END, \
               expires_ms = CASE WHEN runs.expires_ms <= $5 THEN $5 + $6 ELSE runs.expires_ms END \
             RETURNING calls, started_ms, expires_ms",
            &[&k.tenant, &k.subject, &k.run, &calls, &now_ms, &ttl_ms],
        )
        .await?
        .expect("an upsert returns its row");
    Ok((row.get("calls"), row.get("started_ms"), row.get("expires_ms")))
}

async fn legs(db: &impl Db, k: &RunKey, since_ms: i64) -> Result<Vec<LegCall>> {
    let rows = db
        .query(
            "SELECT leg, tool, proposal_sha256, at_ms FROM run_legs WHERE tenant = $1 AND \
                subject = $2 AND run = $3 AND at_ms >= $4 ORDER BY at_ms, seq",
            &[&k.tenant, &k.subject, &k.run, &since_ms],
        )
        .await?;
    // The table's CHECK admits only the two legs.
    Ok(rows
        .iter()
        .filter_map(|r| {
            Leg::parse(r.get::<_, &str>("leg")).map(|leg| LegCall {
                leg,
                tool: r.get("tool"),
                proposal_sha256: r.get("proposal_sha256"),
                at_ms: r.get("at_ms"),
            })
        })
        .collect())
}

pub async fn run(
    db: &impl Db,
    k: &RunKey,
    count: bool,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<RunState> {
    let (calls, started_ms, expires_ms) = if count {
        begin(db, k, 1, now_ms, ttl_ms).await?
    } else {
        let found = db
            .query_opt(
                "SELECT calls, started_ms, expires_ms FROM runs WHERE tenant = $1 AND subject = $2 AND run = $3 AND expires_ms > $4",
                &[&k.tenant, &k.subject, &k.run, &now_ms],
            )
            .await?;
        match found {
            Some(r) => (r.get("calls"), r.get("started_ms"), r.get("expires_ms")),
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
    Ok(RunState {
        calls: calls as u64,
        started_ms,
        expires_ms,
        legs: legs(db, k, started_ms).await?,
    })
}

pub async fn add_leg(db: &impl Db, k: &RunKey, call: &LegCall, ttl_ms: i64) -> Result<i64> {
    let now_ms = call.at_ms;
    // Expired runs, and legs too old to belong to any run still alive.
    db.execute("DELETE FROM run_legs WHERE at_ms < $1", &[&(now_ms - ttl_ms)]).await?;
    db.execute("DELETE FROM runs WHERE expires_ms <= $1", &[&now_ms]).await?;
    let (_, started_ms, expires_ms) = begin(db, k, 0, now_ms, ttl_ms).await?;
    db.execute(
        "INSERT INTO run_legs (tenant, subject, run, leg, tool, proposal_sha256, at_ms) SELECT $1, $2, $3, $4, $5, $6, $7 \
         WHERE (SELECT count(*) FROM run_legs WHERE tenant = $1 AND subject = $2 AND run = $3 AND leg = $4 AND at_ms >= $8) < $9",
        &[&k.tenant, &k.subject, &k.run, &call.leg.as_str(), &call.tool, &call.proposal_sha256, &now_ms, &started_ms, &MAX_LEGS],
    )
    .await?;
    Ok(expires_ms)
}

#[async_trait::async_trait]
impl RunStore for PostgresLedger {
    async fn run(&self, key: &RunKey, count: bool, now_ms: i64, ttl_ms: i64) -> Result<RunState> {
        run(&*self.pool, key, count, now_ms, ttl_ms).await
    }
    async fn add_run_leg(&self, key: &RunKey, call: LegCall, ttl_ms: i64) -> Result<i64> {
        add_leg(&*self.pool, key, &call, ttl_ms).await
    }
}
