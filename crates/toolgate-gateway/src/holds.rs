//! Where held calls wait for their approval's decision. A call waiting on
//! approval `apr_…` takes a seat in its room and sleeps on the room's bell;
//! nothing else is held (no worker, no ledger connection), so hundreds of
//! held calls cost a future each. The bell rings when the decision is made
//! through this gateway (the admin API rings it at once); when the ledger
//! tells of a decision (on PostgreSQL every replica hears every decision at
//! once, `LISTEN/NOTIFY`); or when the watcher, reading the ledger every
//! `[approvals] poll_ms` as the fallback, sees that an approval someone
//! waits on is no longer pending — decided by the CLI on SQLite, while a
//! listener was reconnecting, or expired.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use toolgate_core::Clock;
use toolgate_core::approval::ApprovalState;
use toolgate_ledger::Ledger;

/// The rooms of the approvals someone waits on, by approval id.
#[derive(Default)]
pub struct Holds {
    rooms: Mutex<HashMap<String, Room>>,
}

struct Room {
    bell: Arc<Notify>,
    seats: usize,
}

/// One held call's place in a room; leaving (drop) empties the room when it
/// was the last.
pub(crate) struct Seat<'a> {
    holds: &'a Holds,
    id: String,
    bell: Arc<Notify>,
}

impl Seat<'_> {
    /// Rings when the approval may have been decided: read it again.
    pub(crate) fn bell(&self) -> &Notify {
        &self.bell
    }
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        let mut rooms = self.holds.rooms.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(room) = rooms.get_mut(&self.id) {
            room.seats -= 1;
            if room.seats == 0 {
                rooms.remove(&self.id);
            }
        }
    }
}

impl Holds {
    /// A seat in the room of approval `id`, unless `max` calls are held
    /// already (counted and taken under one lock).
    pub(crate) fn seat(&self, id: &str, max: usize) -> Option<Seat<'_>> {
        let mut rooms = self.rooms.lock().unwrap_or_else(|p| p.into_inner());
        if rooms.values().map(|r| r.seats).sum::<usize>() >= max {
            return None;
        }
        let room = rooms
            .entry(id.to_string())
            .or_insert_with(|| Room { bell: Arc::new(Notify::new()), seats: 0 });
        room.seats += 1;
        Some(Seat { holds: self, id: id.to_string(), bell: room.bell.clone() })
    }

    /// Wakes every call held on approval `id` (it was just decided).
    pub fn ring(&self, id: &str) {
        if let Some(room) = self.rooms.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
            room.bell.notify_waiters();
        }
    }

    /// Wakes every held call: any of their approvals may have been decided unseen.
    fn ring_all(&self) {
        for room in self.rooms.lock().unwrap_or_else(|p| p.into_inner()).values() {
            room.bell.notify_waiters();
        }
    }

    /// The approvals someone waits on now.
    fn waited_on(&self) -> Vec<String> {
        self.rooms.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    /// How many calls are held now.
    pub fn held(&self) -> usize {
        self.rooms.lock().unwrap_or_else(|p| p.into_inner()).values().map(|r| r.seats).sum()
    }

    /// Reads the ledger every `poll` while anyone is held, and rings every
    /// room whose approval is no longer pending: one read-only lookup by id
    /// per approval waited on, however many calls wait on it.
    /// Meanwhile, rings each room the ledger says was decided, as it is.
    pub(crate) fn watch(
        self: &Arc<Self>,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
        poll: Duration,
        stop: CancellationToken,
    ) {
        let holds = self.clone();
        let mut decided = ledger.decisions();
        tokio::spawn(async move {
            let mut next_poll = tokio::time::Instant::now() + poll;
            loop {
                let heard = async {
                    match decided.as_mut() {
                        Some(rx) => Some(rx.recv().await),
                        None => std::future::pending().await,
                    }
                };
                let heard = tokio::select! {
                    _ = stop.cancelled() => return,
                    heard = heard => heard,
                    _ = tokio::time::sleep_until(next_poll) => None,
                };
                match heard {
                    None => {}
                    Some(Ok(id)) if id != toolgate_ledger::EVERY_APPROVAL => {
                        holds.ring(&id);
                        continue;
                    }
                    // Some were missed (a reconnect, or too many at once).
                    Some(Ok(_)) | Some(Err(RecvError::Lagged(_))) => {
                        holds.ring_all();
                        continue;
                    }
                    Some(Err(RecvError::Closed)) => {
                        decided = None;
                        continue;
                    }
                }
                next_poll = tokio::time::Instant::now() + poll;
                for id in holds.waited_on() {
                    // A store that cannot be read now is read at the next
                    // tick; the held calls read it themselves before they answer.
                    if let Ok(Some(a)) = ledger.approval(&id).await
                        && a.state_at(clock.now_ms()) != ApprovalState::Pending
                    {
                        holds.ring(&id);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ring_wakes_every_seat_of_its_room_and_no_other() {
        let holds = Holds::default();
        let (a1, a2, b) = (
            holds.seat("apr_a", 8).unwrap(),
            holds.seat("apr_a", 8).unwrap(),
            holds.seat("apr_b", 8).unwrap(),
        );
        assert_eq!(holds.held(), 3);
        let (w1, w2, wb) = (a1.bell().notified(), a2.bell().notified(), b.bell().notified());
        tokio::pin!(w1, w2, wb);
        w1.as_mut().enable();
        w2.as_mut().enable();
        wb.as_mut().enable();
        holds.ring("apr_a");
        tokio::time::timeout(Duration::from_millis(100), async {
            w1.await;
            w2.await
        })
        .await
        .expect("both seats of apr_a woke");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), wb).await.is_err(),
            "apr_b was not rung"
        );
    }

    #[test]
    fn seats_are_given_up_to_the_limit_and_not_past_it() {
        let holds = Holds::default();
        let (a, b) = (holds.seat("apr_a", 2), holds.seat("apr_b", 2));
        assert!(a.is_some() && b.is_some(), "just under the limit: seated");
        assert!(holds.seat("apr_c", 2).is_none(), "at the limit: none");
        drop(a);
        assert!(holds.seat("apr_c", 2).is_some(), "a seat left frees one");
    }

    #[test]
    fn a_room_empties_when_its_last_seat_leaves() {
        let holds = Holds::default();
        let first = holds.seat("apr_a", 8).unwrap();
        let second = holds.seat("apr_a", 8).unwrap();
        drop(first);
        assert_eq!(holds.waited_on(), vec!["apr_a".to_string()]);
        drop(second);
        assert!(holds.waited_on().is_empty() && holds.held() == 0);
        holds.ring("apr_a");
    }
}
